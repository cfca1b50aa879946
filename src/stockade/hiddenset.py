"""What a command cannot read when nobody configured `unreadable`: logins, by class.

A list of credential files never ends: every new CLI adds a token file, under
a name no list has yet. So the default hides the *areas* where tools keep
their state -- `~/.config`, `~/.local/share`, `~/.local/state`, `~/.cache`,
`~/.ssh` and the dot-directories of cloud and build tools -- whole, and shows
back only what toolchains read there, each entry with its reason. A store
that appears in an area tomorrow is hidden today. The top-level dotfiles
cannot be an area (the home is the project's parent), so they keep a
curated list.

Pure functions of the environment and a `listdir`, like hostpaths.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: Areas hidden whole, and what comes back inside each, read-only. An entry
#: is here because a build, a test run or an editor a command starts reads it,
#: and by convention it holds settings or artifacts, never a login; a file
#: inside one that does (git's credential store) is hidden by name on top.
AREAS: dict[str, tuple[str, ...]] = {
    ".config": (
        # Version control and its helpers: identity, ignores, attributes.
        "git", "jj", "lazygit", "pre-commit",
        # Python's installers and linters: indexes, settings.
        "pip", "uv", "pypoetry/config.toml", "ruff", "black", "flake8", "pycodestyle",
        "yapf", "pylintrc", "mypy", "matplotlib", "ipython",
        # Other toolchains' settings: `go env -w` values, Yarn, pnpm, ccache, clangd, rustfmt.
        "go", "yarn", "pnpm", "ccache", "clangd", "rustfmt", "containers/registries.conf",
        "containers/storage.conf", "containers/containers.conf", "containers/policy.json",
        # Shells, prompts, editors and pagers a command may start.
        "fish", "nushell", "powershell", "xonsh", "starship.toml", "direnv", "mise",
        "nvim", "vim", "helix", "nano", "micro", "emacs", "bat", "htop", "procps", "tmux",
        "lesskey", "ripgrep", "fd", "gdb", "lldb",
        # Fonts and desktop basics that browsers and plotting libraries read.
        "fontconfig", "gtk-3.0", "gtk-4.0", "user-dirs.dirs", "user-dirs.locale",
        "mimeapps.list",
    ),
    ".local/share": (
        # Interpreters and tools that managers installed: a venv's python may live here.
        "uv", "pipx", "virtualenv", "virtualenvs", "pypoetry", "hatch", "pdm", "mise",
        "rtx", "fnm", "nvm", "pnpm", "coursier", "gem", "aquaproj-aqua",
        # Jupyter's kernel specs (never `runtime`: its connection files drive live kernels).
        "jupyter/kernels", "jupyter/nbextensions", "jupyter/labextensions",
        # Editors' and shells' installed parts (fish's history is hidden by name).
        "nvim", "vim", "fish", "bash-completion", "zsh", "nano", "direnv",
        # What desktop libraries look up.
        "fonts", "icons", "mime", "applications", "man",
    ),
    ".local/state": (
        # mise's record of trusted configs, which `mise exec` checks.
        "mise",
    ),
    ".cache": (
        # Toolchains' caches: downloads and build outputs, read on every build.
        "pip", "uv", "pypoetry", "pdm", "hatch", "virtualenv", "pipenv", "pip-tools",
        "pre-commit", "go-build", "golangci-lint", "yarn", "pnpm", "node", "node-gyp",
        "typescript", "deno", "bun", "ccache", "sccache", "bazel", "bazelisk", "zig",
        "coursier", "JNA", "composer", "rebar3", "R", "vcpkg", "cmake", "clangd",
        "black", "ruff", "pylint", "jedi", "mypy", "nvim", "helix", "starship",
        # Browsers test frameworks download, and what they and plotting libraries cache.
        "ms-playwright", "ms-playwright-go", "puppeteer", "Cypress", "selenium", "electron",
        "matplotlib", "fontconfig", "mesa_shader_cache",
        # Model and dataset caches (never `huggingface/token`, the login beside them).
        "huggingface/hub", "huggingface/datasets", "huggingface/modules", "torch",
    ),
    # Build tools' homes: their caches and wrappers, not their settings files,
    # which hold repository passwords (settings.xml, gradle.properties).
    ".m2": ("repository", "wrapper"),
    ".gradle": ("caches", "wrapper", "native", "jdks", "init.d", "init.gradle",
                "init.gradle.kts", "daemon"),
    ".ivy2": ("cache", "local"),
    ".sbt": ("boot", "launchers", "plugins", "1.0/plugins", "1.0/global.sbt"),
    ".cargo": ("bin", "registry", "git", "config", "config.toml", "env", ".crates.toml",
               ".crates2.json", ".global-cache", ".package-cache", ".package-cache-mutate"),
    ".nuget": ("packages",),
    ".composer": ("vendor", "cache", "composer.json", "composer.lock"),
    ".pub-cache": ("hosted", "git", "bin", "global_packages"),
    ".conan2": ("p", "profiles", "settings.yml", "global.conf", "extensions"),
    ".terraform.d": ("plugins", "plugin-cache"),
    ".docker": ("cli-plugins",),
    ".ollama": ("models",),
    ".android": ("cache", "avd"),
    # Cloud, cluster and deploy CLIs: tokens and keys all through.
    ".aws": (), ".azure": (), ".oci": (), ".kube": (), ".minikube": (), ".talos": (),
    ".bluemix": (), ".ibmcloud": (), ".cf": (), ".fly": (), ".netlify": (), ".vercel": (),
    ".pulumi": (), ".ngrok2": (), ".tsh": (), ".cloudflared": (), ".wrangler": (),
    ".supabase": (), ".railway": (), ".doppler": (), ".infracost": (), ".snowsql": (),
    ".snowflake": (), ".databricks": (), ".dbt": (), ".mc": (), ".gsutil": (),
    ".circleci": (), ".travis": (), ".heroku": (), ".jfrog": (), ".chef": (),
    ".vagrant.d": (), ".expo": (), ".kaggle": (), ".huggingface": (),
    # Keyrings, password managers, certificate stores, wallets, mail.
    ".gnupg": (), ".password-store": (), ".pki": (), ".mozilla": (), ".thunderbird": (),
    ".purple": (), ".electrum": (), ".bitcoin": (), ".ethereum": (), ".subversion": (),
    ".conan": (), ".cert": (),
    # Database and time-series clients' logins (cqlsh, clickhouse-client,
    # influx, go-sqlcmd), as ~/.my.cnf is for mysql.
    ".cassandra": (), ".clickhouse-client": (), ".influxdbv2": (), ".sqlcmd": (),
    # Old EC2 API tools' keys; IRC clients' configs, which hold SASL and NickServ passwords.
    ".ec2": (), ".irssi": (),
    # Other coding agents and editors' homes, which keep API keys in their settings.
    ".continue": (), ".codeium": (), ".aider": (), ".mongodb": (),
}

#: Top-level files and directories hidden by name: logins kept beside the
#: dotfiles (firejail's disable lists are the widest curated set), histories,
#: and the few stores inside a directory that is not an area.
NAMES = (
    # Forges, registries and package managers.
    ".netrc", ".authinfo", ".authinfo.gpg", ".git-credentials", ".npmrc", ".yarnrc.yml",
    ".pypirc", ".gem/credentials", ".bundle/config", ".lein/credentials.clj.gpg",
    ".dockercfg", ".vault-token", ".vault_pass.txt", ".s3cfg", ".boto", ".passwd-s3fs",
    ".rclone.conf", ".databrickscfg", ".sentryclirc", ".env", ".aider.conf.yml",
    ".gitcookies", ".ansible/galaxy_token", ".wakatime.cfg", ".vnc/passwd",
    # Database logins.
    ".pgpass", ".my.cnf", ".mylogin.cnf",
    # Mail and chat logins.
    ".msmtprc", ".esmtprc", ".mbsyncrc", ".fetchmailrc", ".muttrc", ".mutt", ".neomuttrc",
    # Histories: whatever was typed, tokens pasted into `curl -H` or `export` included.
    ".bash_history", ".zsh_history", ".zhistory", ".histfile", ".sh_history",
    ".ksh_history", ".python_history", ".node_repl_history", ".ts_node_repl_history",
    ".irb_history", ".pry_history", ".scala_history", ".psql_history", ".mysql_history",
    ".sqlite_history", ".rediscli_history", ".dbshell", ".influx_history", ".cqlsh_history",
    ".Rhistory", ".octave_hist", ".gdb_history", ".lesshst", ".viminfo",
    ".julia/logs/repl_history.jl", ".ipython/profile_default/history.sqlite",
    # Neovim's shada (history, registers, marks) where versions before 0.8 keep it,
    # inside the shown ~/.local/share/nvim; newer ones keep it in ~/.local/state.
    ".local/share/nvim/shada",
    # Browsers outside the areas (Ubuntu's Firefox is a snap).
    "snap/firefox/common/.mozilla", "snap/chromium/common/chromium",
    # Coding agents' logins: a command that read one acts as the agent's user.
    ".claude/.credentials.json", ".claude.json", ".codex/auth.json",
    ".gemini/oauth_creds.json", ".gemini/.env", ".cursor/mcp.json",
    # Build tools' settings with passwords, for where CARGO_HOME and friends moved the area.
    ".cargo/credentials", ".cargo/credentials.toml", ".gradle/gradle.properties",
    ".m2/settings.xml", ".m2/settings-security.xml", ".docker/config.json",
    # Inside areas, for a login kept beside what is shown back.
    ".config/git/credentials", ".local/share/fish/fish_history", ".local/share/gem/credentials",
    ".local/share/uv/credentials", ".local/share/zsh/history", ".config/fish/fish_variables",
    ".config/nushell/history.txt", ".config/nushell/history.sqlite3",
    ".config/ipython/profile_default/history.sqlite", ".config/micro/buffers/history",
    ".config/emacs/eshell/history", ".cache/nvim/codeium", ".cache/R/httr2",
)

#: macOS keeps what Linux splits across ~/.config, ~/.local/share and ~/.cache
#: in one area, ~/Library: browser profiles (Firefox's logins.json and
#: key4.db decrypt offline, cookies.sqlite is plain text), the login
#: keychains (~/Library/Keychains/*.keychain-db crack offline), mail, messages,
#: and the tokens of tools under Application Support. It is hidden whole, and
#: only what builds and toolchains read comes back, each with its reason.
DARWIN_AREAS: dict[str, tuple[str, ...]] = {
    "Library": (
        # Toolchains' caches (Go's GOCACHE, pip, Homebrew, Yarn, SwiftPM and
        # clang's module cache default here): downloads and build outputs.
        "Caches",
        # Xcode's derived data, simulators, toolchains and SDKs a build reads.
        "Developer",
        # Python's user site (`pip install --user`) and user-installed frameworks.
        "Python", "Frameworks", "Fonts",
        # JDKs IDEs download, the Android SDK, pnpm's home on macOS.
        "Java", "Android/sdk", "pnpm",
        # Toolchain settings whose user config directory is Application Support
        # on macOS: `go env -w`, pip's and ruff's config, Poetry's.
        "Application Support/go", "Application Support/pip", "Application Support/ruff",
        "Application Support/pypoetry",
    ),
}

#: Windows keeps per-user application state in %APPDATA% (roaming) and
#: %LOCALAPPDATA% (local): browser profiles and their saved passwords, the
#: credential caches of cloud CLIs (gcloud, GitHub CLI), editors' and agents'
#: tokens, the host's own TEMP. Both are hidden whole; what comes back is
#: what toolchains read there. Keyed by the variable that names the area.
WINDOWS_AREAS: dict[str, tuple[str, ...]] = {
    "APPDATA": (
        # npm's global packages (on PATH), Python's user site, pip's and uv's
        # settings, nvm-windows' installed Node versions.
        "npm", "Python", "pip", "uv", "nvm", "pypoetry",
    ),
    "LOCALAPPDATA": (
        # Per-user installs: Python from python.org, VS Code, Git, and the app
        # execution aliases (python.exe, winget) Windows puts on PATH.
        "Programs", "Microsoft/WindowsApps", "Microsoft/dotnet",
        # Toolchains' caches: pip, uv, npm, Go, Yarn, pnpm, browsers for tests.
        "pip", "uv", "npm-cache", "go-build", "Yarn", "pnpm", "pnpm-cache",
        "ms-playwright", "Volta", "Android/Sdk",
    ),
    # Written by Low-integrity programs (browser sandboxes, Java's cache).
    "": ("AppData/LocalLow",),
}

#: Top-level logins Windows tools keep under their own names: curl and ftp
#: read `_netrc`, Git for Windows' credential store can be `_git-credentials`.
WINDOWS_NAMES = ("_netrc", "_git-credentials")

#: Names in ~/.ssh known to be public; everything else there counts as a key.
SSH_PUBLIC = ("config", "known_hosts", "known_hosts.old", "authorized_keys", "authorized_keys2")

#: Readable only to root, which a sandbox run as root still is (the user
#: namespace maps uid 0 to itself): the host's password hashes and SSH identity.
ROOT_ONLY = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-",
             "/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key",
             "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_dsa_key")

#: Where the XDG variables move an area: tools that follow them keep their
#: tokens there, and the default name is then an empty one.
_XDG = {".config": "XDG_CONFIG_HOME", ".local/share": "XDG_DATA_HOME",
        ".local/state": "XDG_STATE_HOME", ".cache": "XDG_CACHE_HOME"}


def _relocated(rel: str, env: Mapping[str, str]) -> str:
    """`rel` where an XDG variable moves its area, else ""."""
    for area, var in _XDG.items():
        base = env.get(var, "")
        if base.startswith("/") and (rel == area or rel.startswith(area + "/")):
            return os.path.join(base, rel[len(area) + 1:]) if rel != area else base
    return ""


def _places(home: str, rel: str, env: Mapping[str, str]) -> list[str]:
    moved = _relocated(rel, env)
    return [os.path.join(home, rel)] + ([moved] if moved else [])


def platform_areas(env: Mapping[str, str], home: str, platform: str
                   ) -> list[tuple[str, tuple[str, ...]]]:
    """(area, shown back inside it) for the platform's own per-user state areas."""
    from .paths import DARWIN, WINDOWS

    out: list[tuple[str, tuple[str, ...]]] = []
    if platform == DARWIN and home:
        out += [(os.path.join(home, rel), back) for rel, back in DARWIN_AREAS.items()]
    elif platform == WINDOWS:
        import ntpath

        for var, back in WINDOWS_AREAS.items():
            if var:
                # The variable's place and the profile's own: a redirected
                # %APPDATA% leaves the real Roaming folder's logins where they were.
                given = env.get(var, "")
                places = [given] if ntpath.isabs(given) else []
                if home:
                    places.append(os.path.join(
                        home, "AppData", "Roaming" if var == "APPDATA" else "Local"))
                out += [(place, back) for place in dict.fromkeys(places)]
            elif home:
                out += [(os.path.join(home, rel), ()) for rel in back]
    return out


def _homes(env: Mapping[str, str], platform: str) -> list[str]:
    """The homes whose logins are hidden: the platform's, and on Windows also a HOME
    that names somewhere else (Git for Windows, ssh and MSYS tools keep theirs there)."""
    from .paths import WINDOWS, home_dir

    homes = [home_dir(env, platform)]
    if platform == WINDOWS and env.get("HOME", "") not in ("", homes[0]):
        homes.append(env["HOME"])
    return [h for h in homes if h]


def default_hidden(env: Mapping[str, str], granted: list[str] | tuple[str, ...],
                   listdir: Callable[[str], list[str]] = os.listdir, platform: str = ""
                   ) -> tuple[list[str], list[str]]:
    """(hidden, shown): the default hidden set, and the paths inside it shown back.

    With the agent's socket granted, `~/.ssh` is hidden whole: ssh asks the
    agent to sign and never opens a key. Without it ssh keeps its config,
    known_hosts and public keys, and everything else there counts as a key,
    whatever its name. `platform` (default: this one) adds its own areas:
    ~/Library on macOS, %APPDATA% and %LOCALAPPDATA% on Windows.
    """
    from .paths import WINDOWS

    platform = platform or sys.platform
    hidden: list[str] = []
    shown: list[str] = []
    homes = _homes(env, platform)
    for area, back in platform_areas(env, homes[0] if homes else "", platform):
        hidden.append(area)
        shown.extend(os.path.join(area, rel) for rel in back)
    for home in homes:
        if platform == WINDOWS:
            hidden.extend(os.path.join(home, rel) for rel in WINDOWS_NAMES)
        for area, back in AREAS.items():
            for place in _places(home, area, env):
                hidden.append(place)
                shown.extend(os.path.join(place, rel) for rel in back)
        for rel in NAMES:
            hidden.extend(_places(home, rel, env))
        ssh = os.path.join(home, ".ssh")
        hidden.append(ssh)
        sock = env.get("SSH_AUTH_SOCK", "")
        if not (sock and sock in granted):
            shown.extend(os.path.join(ssh, name) for name in ssh_public(ssh, listdir))
    if getattr(os, "geteuid", lambda: -1)() == 0:
        # Another user cannot read them at all; splitting /etc around them costs
        # the Landlock layer two hundred rules on every command.
        hidden.extend(ROOT_ONLY)
    return hidden, shown


def ssh_public(ssh_dir: str, listdir: Callable[[str], list[str]] = os.listdir) -> list[str]:
    """The names in `ssh_dir` known to be public: a key under any other name stays hidden."""
    try:
        names = listdir(ssh_dir)
    except OSError:
        return []
    return sorted(n for n in names if n in SSH_PUBLIC or n.endswith(".pub"))


#: Why each kind of default entry is hidden, as `stockade doctor` says it.
WHY_AREA = "where tools keep their logins and state; {n} shown back (hiddenset.AREAS)"
WHY_WHOLE = "a cloud, deploy or keyring tool's store: tokens and keys all through"
WHY_NAME = "a login, key or history kept beside the dotfiles"
WHY_SSH = "private keys, whatever their names: only {names} shown back"
WHY_SSH_AGENT = "the agent's socket is granted: ssh asks it to sign and reads no key"
WHY_ROOT = "readable only to root: the host's password hashes or SSH identity"


def explain(env: Mapping[str, str], granted: list[str] | tuple[str, ...],
            listdir: Callable[[str], list[str]] = os.listdir,
            exists: Callable[[str], bool] = os.path.lexists) -> list[tuple[str, str]]:
    """(path, why) for each default entry present on this machine."""
    from .paths import home_dir

    home = home_dir(env)
    out: list[tuple[str, str]] = []
    for area, back in platform_areas(env, home, sys.platform):
        if exists(area):
            n = sum(exists(os.path.join(area, rel)) for rel in back)
            out.append((area, WHY_AREA.format(n=n) if back else WHY_WHOLE))
    if home:
        for area, back in AREAS.items():
            for place in _places(home, area, env):
                if exists(place):
                    n = sum(exists(os.path.join(place, rel)) for rel in back)
                    out.append((place, WHY_AREA.format(n=n) if back else WHY_WHOLE))
        for rel in NAMES:
            out.extend((p, WHY_NAME) for p in _places(home, rel, env) if exists(p))
        ssh = os.path.join(home, ".ssh")
        if exists(ssh):
            sock = env.get("SSH_AUTH_SOCK", "")
            names = ", ".join(ssh_public(ssh, listdir)) or "nothing"
            out.append((ssh, WHY_SSH_AGENT if sock and sock in granted
                        else WHY_SSH.format(names=names)))
    out.extend((p, WHY_ROOT) for p in ROOT_ONLY if exists(p))
    return out
