"""Which places on this machine a profile hides, grants or protects.

These functions build lists and do not consult the world: the environment
is passed in as a mapping, resolved once at the edge, so the same inputs
always give the same profile and the tests need no monkeypatching.
"""

from __future__ import annotations

import os
import sys

from .errors import ConfigError
from .hiddenset import default_hidden

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: What a user writes instead of a path they cannot know. The ssh-agent's
#: socket is per-boot and per-login, so no configuration file can name it;
#: the token stands for whatever SSH_AUTH_SOCK holds at the time.
SSH_AGENT_TOKEN = "ssh-agent"

#: What the person's own tools read or run from a project without asking, by
#: name at the top of every writable root. This is the one list; README's
#: "Protected metadata" section explains each entry.
#:
#: - `.git`: hooks and config run code at the next `git status` or `commit`
#:   (its insides are handled by `gitpolicy.git_protection`).
#: - `.stockade`, `stockade.toml`: stockade's own project settings; a command
#:   that could write them would choose the boundary of the next command.
#: - `.envrc` (direnv), `mise.toml`, `.mise.toml` and their `.local` forms
#:   (mise runs their hooks and env scripts on `cd`).
#: - agents' project settings, read as instructions and able to name MCP
#:   servers and hooks they start: `.claude`, `.codex`, `.agents`, `.gemini`,
#:   `.cursor`, `.windsurf`, `.continue`, `.mcp.json`, `.aider.conf.yml`.
#: - editors' project settings, which name tasks and tools run on opening the
#:   folder: `.vscode`, `.idea`, `.zed`, and `.devcontainer` or
#:   `.devcontainer.json` (whose `initializeCommand` runs on the host).
PROTECTED_NAMES = (".git", ".stockade", "stockade.toml", ".envrc", "mise.toml", ".mise.toml",
                   "mise.local.toml", ".mise.local.toml",
                   ".claude", ".codex", ".agents", ".gemini", ".cursor", ".windsurf",
                   ".continue", ".mcp.json", ".aider.conf.yml", ".vscode", ".idea", ".zed",
                   ".devcontainer", ".devcontainer.json")

#: The names among them that a tool reads in any directory, not only at the
#: workspace's top: an agent or editor started in (or reading files of) a
#: subdirectory loads its `.claude` (skills whose inline commands and hooks
#: run on the host), `.mcp.json`, `.vscode` tasks, `.envrc`. One a command
#: creates anywhere is moved to the quarantine after it (`treewatch.py`).
#: Not `.git` (nested repositories are made inert, not moved) nor stockade's
#: own files (a nested `stockade.toml` is untrusted until the person trusts it).
NESTED_PROTECTED = tuple(n for n in PROTECTED_NAMES
                         if n not in (".git", ".stockade", "stockade.toml"))

#: When the home directory itself is writable (a workspace of `~`, as an MCP
#: client started in the home gives), the files a login, a new shell or the
#: desktop runs without asking, and the door for the next ssh login.
#: Beyond the shells' own files: what they source (`.bash_aliases` from
#: Debian's .bashrc, `.bashrc.d`), directories on a login's PATH (`bin`,
#: `.local/bin`, and the toolchains' own: `~/.cargo/env` puts `.cargo/bin`
#: first), hooks run on `cd` (direnv, mise, starship), Python's user site
#: (a `.pth` there runs in every interpreter), editors' start-up files,
#: desktop entries. Then the per-user configs that ordinary tools obey by
#: running a program the config names, with no question asked: a build tool's
#: (`~/.cargo/config.toml`'s `rustc-wrapper`, Gradle's init scripts, the
#: `~/.mavenrc` that mvn's launcher sources, Yarn's `yarnPath`), a debugger's
#: or a REPL's start-up file (gdb, lldb, IPython and Jupyter start-up and
#: kernel specs, irb, pry, psql and sqlite3 shell escapes, R, Julia), a
#: terminal's (WezTerm's Lua, kitty, Alacritty, tmux, screen), the scripts a
#: shell's rc sources (oh-my-zsh, nvm, sdkman, asdf), user-wide agent
#: settings (`~/.claude.json` names MCP servers to start), and Mercurial's
#: and mailcap's hooks. pip's config is here too: an index it names is
#: where the next `pip install` takes its code from. And the code such tools
#: load from the home: Docker's CLI plugins, Neovim's plugin tree, the
#: editor servers VS Code and Cursor run for remote sessions; the start-up
#: files of the other shells (csh, ksh, xonsh, nushell, PowerShell, pdb's,
#: ptpython's, bpython's); window managers' and desktop sessions' configs,
#: which `exec` programs at login.
HOME_PROTECTED = (".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
                  ".bash_aliases", ".bashrc.d", ".zshrc", ".zshenv", ".zprofile", ".zlogin",
                  ".zlogout", ".zshrc.d", ".config/fish", ".inputrc", ".xprofile",
                  ".xsessionrc", ".xsession", ".xinitrc", ".pam_environment",
                  ".config/environment.d", ".config/autostart", ".config/systemd",
                  ".local/share/systemd", ".local/share/applications", ".ssh", ".gitconfig",
                  ".config/git", "bin", ".local/bin", ".local/lib", ".cargo/env",
                  ".cargo/bin", "go/bin", ".npm-global/bin", ".pyenv/shims", ".pyenv/bin",
                  ".deno/bin", ".bun/bin", ".volta/bin", ".local/share/pnpm",
                  ".config/direnv", ".config/mise", ".config/starship.toml", ".tmux.conf",
                  ".config/Code/User", ".vimrc", ".vim", ".config/nvim", ".emacs",
                  ".emacs.d", ".config/emacs", ".config/stockade",
                  ".cargo/config", ".cargo/config.toml", ".gradle/init.d", ".gradle/init.gradle",
                  ".gradle/init.gradle.kts", ".gradle/gradle.properties", ".mavenrc",
                  ".m2/settings.xml", ".yarnrc", ".yarnrc.yml", ".config/pip", ".pip",
                  ".gdbinit", ".config/gdb", ".lldbinit", ".ipython", ".jupyter",
                  ".local/share/jupyter", ".irbrc", ".pryrc", ".psqlrc", ".sqliterc",
                  ".Rprofile", ".julia/config", ".wezterm.lua", ".config/wezterm",
                  ".config/kitty", ".config/alacritty", ".config/tmux", ".screenrc",
                  ".oh-my-zsh", ".nvm/nvm.sh", ".sdkman/bin", ".asdf/asdf.sh", ".claude.json",
                  ".hgrc", ".mailcap", ".docker/cli-plugins", ".pdbrc", ".local/share/nvim",
                  ".exrc", ".tcshrc", ".cshrc", ".login", ".kshrc", ".mkshrc", ".xonshrc",
                  ".config/xonsh", ".config/nushell", ".config/powershell", ".config/ptpython",
                  ".config/bpython", ".vscode-server", ".cursor-server", ".config/i3",
                  ".config/sway", ".config/hypr", ".config/plasma-workspace", ".config/awesome",
                  ".config/qtile", ".config/openbox", ".config/labwc", ".config/niri",
                  ".xmonad", ".config/xmonad", ".fluxbox", ".config/lxsession", ".dmrc")


#: The same for macOS, in ~/Library: launchd loads every plist in LaunchAgents
#: at the next login; VS Code's, Cursor's and Claude Desktop's user settings
#: name tasks, extensions and MCP servers they start; iTerm2 runs the scripts
#: in its AutoLaunch folder; a written preference (Terminal's startup command)
#: runs code later; Services, Scripts, Workflows, QuickLook and Spotlight
#: plug-ins, input methods and preference panes are code the desktop loads.
HOME_PROTECTED_DARWIN = (
    "Library/LaunchAgents", "Library/Preferences", "Library/Application Support/Code/User",
    "Library/Application Support/Cursor/User", "Library/Application Support/VSCodium/User",
    "Library/Application Support/Claude", "Library/Application Support/iTerm2",
    "Library/Application Support/com.apple.backgroundtaskmanagementagent",
    "Library/Services", "Library/Scripts", "Library/Workflows", "Library/Application Scripts",
    "Library/QuickLook", "Library/Spotlight", "Library/Input Methods", "Library/PreferencePanes",
    "Library/Internet Plug-Ins", "Library/Mail/Bundles", "Library/Keyboard Layouts",
    # Shown back out of hidden ~/Library for toolchains to read, and code they run
    # without asking: a `.pth` in the user site runs in every python3, pip.conf
    # and Go's env pick what the next install or build fetches and runs.
    "Library/Python", "Library/Frameworks", "Library/Java", "Library/Android/sdk",
    "Library/pnpm", "Library/Developer", "Library/Application Support/go",
    "Library/Application Support/pip", "Library/Application Support/ruff",
    "Library/Application Support/pypoetry",
)

#: The same for Windows: the Startup folder runs at every logon, PowerShell
#: profiles at every shell, and the editors' and agents' user settings as above.
HOME_PROTECTED_WINDOWS = (
    "AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup",
    "Documents/PowerShell", "Documents/WindowsPowerShell", "AppData/Roaming/Code/User",
    "AppData/Roaming/Cursor/User", "AppData/Roaming/Claude",
    # Shown back out of hidden AppData for toolchains to read, and code they run.
    "AppData/Roaming/npm", "AppData/Roaming/Python", "AppData/Roaming/pip",
    "AppData/Roaming/uv", "AppData/Roaming/nvm", "AppData/Roaming/pypoetry",
    "AppData/Local/Programs", "AppData/Local/Microsoft/WindowsApps",
    "AppData/Local/Microsoft/dotnet", "AppData/Local/Volta", "AppData/Local/Android/Sdk",
)


def home_protected(platform: str = "") -> tuple[str, ...]:
    """`HOME_PROTECTED` and the platform's own additions."""
    platform = platform or sys.platform
    extra = (HOME_PROTECTED_DARWIN if platform == "darwin"
             else HOME_PROTECTED_WINDOWS if platform == "win32" else ())
    return HOME_PROTECTED + extra


def home_workspace(workspace: str, env: Mapping[str, str]) -> str:
    """The home directory `workspace` holds (is, or is an ancestor of), else "".

    A writable home is not a project: the files a login, a shell, `less`,
    `git log`, an editor or a build run without asking are in it by the
    hundred (`~/.config/lesskey`, `~/.config/user-tmpfiles.d`, REPL start-up
    files, toolchain shims, install configs), and no list of names ends.
    """
    from .capabilities import within

    # The account's own home too: HOME unset, relative or pointed elsewhere
    # must not turn the person's real home into an ordinary project.
    from .paths import home_dir

    homes = [env.get("HOME", ""), home_dir(env)]
    try:
        import pwd

        homes.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    top = os.path.realpath(workspace)
    for home in homes:
        norm = os.path.normpath(home) if home else ""
        if os.path.isabs(home) and os.path.dirname(norm) != norm:
            real = os.path.realpath(home)
            if within(real, top) is not None:
                return real
    return ""


def expand(path: str, env: Mapping[str, str]) -> str:
    """`~` and `~/x` expanded from env's HOME, here rather than by a shell.

    The value arrives from a config file as often as from an export, and a
    tilde that works in one and not the other is a setting that looks broken.
    """
    if "\x00" in path:
        raise ConfigError(f"path contains a NUL byte: {path!r}")
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or "/"
        path = home + path[1:]
    return path


def paths(spec: str | list[str] | tuple[str, ...], env: Mapping[str, str]) -> list[str]:
    """Parse a configured path list: PATH-style string or list, `~` and the ssh-agent token.

    Shared by the granted-socket, writable and unreadable lists because they
    are the same kind of value said about different things, and two parsers
    would drift into disagreeing about what a tilde means.
    """
    items = spec.split(os.pathsep) if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if item == SSH_AGENT_TOKEN:
            sock = env.get("SSH_AUTH_SOCK", "")
            if sock:
                out.append(sock)
            continue
        out.append(expand(item, env))
    return out


def unreadable(spec: str | list[str] | None, env: Mapping[str, str],
               granted: list[str] | tuple[str, ...],
               listdir: Callable[[str], list[str]] = os.listdir, platform: str = ""
               ) -> tuple[list[str], list[str]]:
    """(hidden, shown): the configured unreadable list, or the default's classes.

    Unset means the defaults (hiddenset.py), not nothing. Setting it
    REPLACES them, so a session that needs one back can say so, unless it
    lists "default"; the literal "none" hides nothing at all -- the only way
    to say that without a magic empty string. Only the default shows
    anything back inside what it hides.
    """
    if spec is None:
        return default_hidden(env, granted, listdir, platform)
    if spec == "none" or spec == ["none"]:
        return [], []
    from .patterns import DEFAULT_TOKEN, PRESETS, is_pattern

    entries = spec.split(os.pathsep) if isinstance(spec, str) else list(spec)
    hidden, shown = (default_hidden(env, granted, listdir, platform) if DEFAULT_TOKEN in entries
                     else ([], []))
    # Workspace patterns (`**/.env`) are the driver's to match (patterns.py).
    host = [e for e in entries if not is_pattern(e) and e not in PRESETS and e != DEFAULT_TOKEN]
    return hidden + paths(host, env), shown


def local_sockets(env: Mapping[str, str]) -> list[str]:
    """Unix sockets that lead OUT of the sandbox: container runtimes listening for orders.

    Reaching one is not reaching the network; it is asking an unconfined,
    privileged process to act. `docker run -v /:/host` writes anywhere on the
    machine as root from inside a workspace-write sandbox, so the containment
    stops existing the moment the socket is reachable. The host filesystem is
    bound read-only by design, so these have to be named; a list is weaker
    than a boundary, and naming them is better than handing them over.
    """
    socks = [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/containerd/containerd.sock",
        "/run/containerd/containerd.sock.ttrpc",
        "/run/buildkit/buildkitd.sock",
        "/run/crio/crio.sock",
        "/var/run/crio/crio.sock",
        "/run/k3s/containerd/containerd.sock",
        "/var/lib/docker/docker.sock",
        "/run/incus/unix.socket",
        "/var/lib/lxd/unix.socket",
        "/var/snap/lxd/common/lxd/unix.socket",
    ]
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime:
        socks += [
            os.path.join(runtime, "docker.sock"),
            os.path.join(runtime, "podman", "podman.sock"),
            os.path.join(runtime, "containerd-rootless", "containerd.sock"),
            os.path.join(runtime, "buildkit", "buildkitd.sock"),
        ]
    home = env.get("HOME", "")
    if home:
        socks += [
            os.path.join(home, ".docker", "run", "docker.sock"),
            os.path.join(home, ".colima", "default", "docker.sock"),
            os.path.join(home, ".rd", "docker.sock"),
        ]
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        socks.append(host[len("unix://"):])
    return socks


def caches(env: Mapping[str, str], platform: str = "", *, network: bool = False
           ) -> list[tuple[str, str]]:
    """(directory, the variable that moves it or "") of each toolchain cache a build
    must write to in order to run at all.

    A compiler's cache is shared across projects and too large to keep in one,
    and without it `go test` or `cargo build` cannot run: a sandbox that
    permits editing and forbids checking produces unverified change. But the
    host's own next build reads these without checking them (Go links an
    object its cache index names; pip installs a cached wheel), so a command
    never writes them: it gets a private layer over each (boundary.py). The
    environment is read first, because the machine with GOCACHE somewhere
    unusual is the one most likely to be denied. Never the home itself.
    """
    from .paths import home_dir

    home = home_dir(env, platform)
    # macOS toolchains default to ~/Library/Caches, not the XDG location:
    # Go's build cache there is the path the Go seed saw denied first.
    darwin = (platform or sys.platform) == "darwin"
    default_cache = os.path.join(home, "Library", "Caches") if darwin else os.path.join(
        home, ".cache")
    # A relative XDG_CACHE_HOME is invalid (XDG Base Directory): ignored.
    cache = env.get("XDG_CACHE_HOME", "")
    cache = cache if os.path.isabs(cache) else default_cache if home else ""
    out: list[tuple[str, str]] = []

    def add(var: str, *default: str) -> None:
        value = env.get(var, "") if var else ""
        if value and os.path.isabs(value):
            out.append((value, var))
        elif default and all(default):
            out.append((os.path.join(*default), var))

    # Build caches: written by every build, needed even offline.
    add("GOCACHE", cache, "go-build")
    add("CCACHE_DIR", cache, "ccache")
    add("SCCACHE_DIR", cache, "sccache")
    # pip's and uv's caches hold the wheels they build, offline too: pip puts
    # a wheel built from a local tree whose path looks like `name-version`
    # (`/work/my-proj`) in its persistent cache, and as root takes a
    # read-only cache it owns for writable, so `pip wheel .` failed with
    # `Read-only file system`. uv keeps the wheels it builds the same way.
    add("PIP_CACHE_DIR", cache, "pip")
    add("UV_CACHE_DIR", cache, "uv")
    if network:
        # Caches of sources fetched from the network only when a command may
        # fetch: offline it has nothing to add to them.
        gopath = env.get("GOPATH") or (os.path.join(home, "go") if home else "")
        add("GOMODCACHE", gopath, "pkg", "mod")
        # Caches only, never a directory of executables on PATH: ~/.cargo/bin
        # and PNPM_HOME hold the programs the user runs next.
        cargo = env.get("CARGO_HOME") or (os.path.join(home, ".cargo") if home else "")
        if cargo:
            out += [(os.path.join(cargo, "registry"), ""), (os.path.join(cargo, "git"), "")]
        add("npm_config_cache", home, ".npm")
        add("npm_config_store_dir", home, ".local/share/pnpm/store")
        add("YARN_CACHE_FOLDER", cache, "yarn")
        if darwin and home:
            out.append((os.path.join(home, "Library", "Caches", "Yarn"), ""))
        # Gradle's home also holds init.d/ and gradle.properties, which every
        # later build on the host executes or obeys: only its caches.
        gradle = env.get("GRADLE_USER_HOME") or (os.path.join(home, ".gradle") if home else "")
        if gradle:
            out.append((os.path.join(gradle, "caches"), ""))
        if home:
            out.append((os.path.join(home, ".m2", "repository"), ""))
    # Never the home itself, whatever an environment variable says.
    root = os.path.normpath(home or "/")
    return [(os.path.normpath(p), var) for p, var in out
            if p and os.path.normpath(p) != root]


def scratch(env: Mapping[str, str], platform: str = "", *, network: bool = False) -> list[str]:
    """The directories of `caches`."""
    return [path for path, _var in caches(env, platform, network=network)]
