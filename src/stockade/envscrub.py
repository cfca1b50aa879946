"""What of the caller's environment a sandboxed command inherits.

The caller's environment is not the command's: what makes a program load
code it was not asked to run goes, and so does what carries a secret by its
name or by its shape. Pure functions of the environment they are given.
"""

from __future__ import annotations

from .capabilities import FULL_ACCESS
from .drivers.registry import declared

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

# Variables that make a program load code it was not asked to run. The
# caller's environment is not the command's: a host shell's LD_PRELOAD or
# PYTHONSTARTUP would run inside every sandboxed command.
INJECTION_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "PYTHON")
INJECTION_NAMES = ("BASH_ENV", "ENV", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "MallocNanoZone")
PYTHON_HARMLESS = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                    "PYTHONUTF8", "PYTHONHASHSEED")

#: Names that carry secrets by convention; glob with `*` at either end.
#: Each pattern is here because a real variable of that shape is a secret:
#: `*PWD*` MYSQL_PWD (mysql's password variable), `*JWT*` CI_JOB_JWT (GitLab's
#: job identity, exchanged for cloud credentials), `*_DSN` SENTRY_DSN (a
#: project key in a URL), `*_AUTH` npm_config__auth, `*AUTHORIZATION*` a
#: ready-made header, `*SESSION_KEY*`, `*COOKIE*`, `*PASSPHRASE*` (borg,
#: gpg), `*_PAT` a personal access token, `*SIGNING_KEY*`, `*WEBHOOK*` (the
#: URL is the credential), `*CONNECTION_STRING*` (Azure's embed the account
#: key), `*_KEY` STRIPE_KEY and its kind. Not `*AUTH*`: GIT_AUTHOR_NAME would go.
DEFAULT_SECRET_ENV = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*PWD*", "*API_KEY*",
                      "*APIKEY*", "*PRIVATE_KEY*", "*CREDENTIAL*", "*ACCESS_KEY*",
                      "AWS_*", "GITHUB_TOKEN", "GH_TOKEN", "*DATABASE_URL*", "*JWT*",
                      "*_DSN", "*_AUTH", "*AUTHORIZATION*", "*SESSION_KEY*", "*COOKIE*",
                      "*PASSPHRASE*", "*_PAT", "*SIGNING_KEY*", "*WEBHOOK*",
                      "*CONNECTION_STRING*", "*_KEY")

# Never secrets, whatever a pattern says: PWD and OLDPWD are the shell's
# working directories (`*PWD*` matches both, and tools that trust $PWD would
# run in the wrong place); SSH_AUTH_SOCK is a path, and the socket behind it
# is granted or masked separately.
NOT_SECRET = ("PWD", "OLDPWD", "SSH_AUTH_SOCK")



def secret_name(patterns: Sequence[str]) -> Callable[[str], bool]:
    """Whether an upper-cased name matches one of `patterns`, each `*X*`, `X*`, `*X` or
    exact, case-insensitive: all a secret pattern needs, without importing `re`.

    Sorted by shape once per list, not matched pattern by pattern: with some
    forty patterns and a developer's environment, the per-pattern test was
    a tenth of the profile's cost on every command.
    """
    key = tuple(patterns)
    match = _MATCHERS.get(key)
    if match is None:
        inside, ends, starts, exact = [], [], [], set()
        for p in key:
            p = p.upper()
            lead, trail = p.startswith("*"), p.endswith("*") and len(p) > 1
            core = p.strip("*")
            if lead and trail:
                inside.append(core)
            elif lead:
                ends.append(core)
            elif trail:
                starts.append(core)
            else:
                exact.add(core)
        suffixes, prefixes = tuple(ends), tuple(starts)

        def match(name: str) -> bool:
            return (name in exact or name.endswith(suffixes) or name.startswith(prefixes)
                    or any(core in name for core in inside))

        if len(_MATCHERS) > 64:
            _MATCHERS.clear()
        _MATCHERS[key] = match
    return match


_MATCHERS: dict[tuple[str, ...], Callable[[str], bool]] = {}


def has_url_password(value: str) -> bool:
    """A `scheme://user:pass@host` anywhere in value: REDIS_URL, MONGODB_URI, a JDBC option.

    A database URL's name is anything (`REDIS_URL`, `CACHE_BACKEND`), so only
    its shape gives it away. The authority ends at the first `/`, `?`, `#` or
    blank, so `http://localhost:4873/@scope/pkg` is an address, not a login.
    """
    start = value.find("://")
    while start > 0:
        if value[start - 1].isalnum():
            rest = value[start + 3:]
            end = len(rest)
            for stop in "/?# \t\n":
                i = rest.find(stop)
                if 0 <= i < end:
                    end = i
            authority = rest[:end]
            at = authority.rfind("@")
            if at > 0:
                _user, colon, password = authority[:at].partition(":")
                if colon and password:
                    return True
        start = value.find("://", start + 3)
    return False


#: The variables that move pip's cache and that turn it off.
PIP_CACHE, PIP_NO_CACHE = "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"


def sandbox_env(
    host_env: Mapping[str, str],
    explicit: Mapping[str, str],
    secret_patterns: tuple[str, ...] | list[str] = DEFAULT_SECRET_ENV,
    *,
    backend: str,
) -> dict[str, str]:
    """The command's environment: the caller's, scrubbed, then what was passed explicitly.

    A variable passed explicitly is the caller's decision and is kept even
    when its name or value looks secret; inheriting one by accident is what
    the scrub prevents.
    """
    env: dict[str, str] = {}
    secret = secret_name(secret_patterns)
    for name, value in host_env.items():
        upper = name.upper()
        if name.startswith(INJECTION_PREFIXES) and name not in PYTHON_HARMLESS:
            continue
        if name in INJECTION_NAMES:
            continue
        if name not in NOT_SECRET and secret(upper):
            continue
        if "://" in value and has_url_password(value):
            continue
        env[name] = value
    env.update(explicit)
    env["STOCKADE_SANDBOX"] = backend
    if declared(backend).confines:
        env["TMPDIR"] = "/tmp"
    return env


def command_env(host_env: Mapping[str, str], explicit: Mapping[str, str],
                secret_patterns: tuple[str, ...] | list[str], *, backend: str, mode: str,
                caches: Sequence[tuple[str, str, str]], relocated: Mapping[str, str]
                ) -> dict[str, str]:
    """`sandbox_env`, with the toolchains pointed at their private cache layers
    (`relocated`) unless the caller set the variable, and pip told to do
    without a cache where it has no layer.

    No private layer over pip's cache (there is none yet, `scratch = false`,
    read-only mode): root's pip takes a read-only cache it owns for writable
    (it checks the owner, not the mount), and a missing one it would make
    under a read-only ~/.cache, so the wheel it had just built was lost to
    `Read-only file system`.
    """
    env = sandbox_env(host_env, explicit, secret_patterns, backend=backend)
    env.update((k, v) for k, v in relocated.items() if k not in explicit)
    if mode != FULL_ACCESS and not any(var == PIP_CACHE for _c, _l, var in caches) \
            and not {PIP_CACHE, PIP_NO_CACHE} & set(explicit):
        env[PIP_NO_CACHE] = "1"
    return env
