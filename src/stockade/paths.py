"""stockade's own places on disk, and the hashes that name things there.

Computed from the environment the caller injected, never from `os.environ`
behind its back: a library user who passes `env=` (a test, a service
running for another user) must find the state where that env says, and a
rule about where state lives is written once, not four times that can
disagree.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

WINDOWS = "win32"
DARWIN = "darwin"


def home_dir(env: Mapping[str, str], platform: str = "") -> str:
    """The user's home as the platform defines it ("" when the environment names none).

    Windows does not set HOME: a profile that read only HOME hid nothing and
    protected nothing in the home there. Its home is USERPROFILE, else
    HOMEDRIVE + HOMEPATH, both set at every logon.
    """
    if (platform or sys.platform) == WINDOWS:
        profile = env.get("USERPROFILE", "")
        if profile:
            return profile
        drive, path = env.get("HOMEDRIVE", ""), env.get("HOMEPATH", "")
        return drive + path if drive and path else ""
    return env.get("HOME", "")


def with_windows_profile(env: Mapping[str, str], lookup: Callable[[], str]) -> dict[str, str]:
    """`env` with USERPROFILE from Windows' profile API when no logon variable names the home.

    A stockade started without a logon's environment (a service, a scheduled
    task, a stripped `env=`) otherwise refused to run, having no home to hide
    stores in and no place for its state; the profile API is where Windows
    itself resolves the home, never HOME.
    """
    out = dict(env)
    if not home_dir(out, WINDOWS):
        profile = lookup()
        if profile:
            out["USERPROFILE"] = profile
    return out


def windows_profile_directory() -> str:
    """The profile directory from SHGetKnownFolderPath(FOLDERID_Profile); "" off Windows or
    when the call fails, so the caller's refusal names the variables instead."""
    if sys.platform != "win32":
        return ""
    import ctypes
    import uuid

    class GUID(ctypes.Structure):
        _fields_ = [("Data1", ctypes.c_uint32), ("Data2", ctypes.c_uint16),
                    ("Data3", ctypes.c_uint16), ("Data4", ctypes.c_ubyte * 8)]

    u = uuid.UUID("5E6C858F-0E22-4760-9AFE-EA3317B67173")  # FOLDERID_Profile
    guid = GUID(u.fields[0], u.fields[1], u.fields[2], (ctypes.c_ubyte * 8)(*u.bytes[8:]))
    path = ctypes.c_wchar_p()
    shell32, ole32 = ctypes.WinDLL("shell32"), ctypes.WinDLL("ole32")
    try:
        ok = shell32.SHGetKnownFolderPath(ctypes.byref(guid), 0, None, ctypes.byref(path)) == 0
        return (path.value or "") if ok else ""
    finally:
        ole32.CoTaskMemFree(path)


def windows_app_data(env: Mapping[str, str], var: str) -> str:
    """%APPDATA% or %LOCALAPPDATA% when absolute, else their place in the profile; raises when
    neither the variable nor the profile is known.

    No fallback to a shared directory: `\\tmp` on the system drive is one any
    authenticated user can create, and stockade's state there was theirs to plant.
    """
    import ntpath

    from .errors import SandboxUnavailable

    value = env.get(var, "")
    if value and ntpath.isabs(value):  # a relative one would resolve in the workspace
        return value
    home = home_dir(env, WINDOWS)
    if home:
        return os.path.join(home, "AppData", "Roaming" if var == "APPDATA" else "Local")
    raise SandboxUnavailable(
        f"stockade cannot find your Windows profile: {var} and USERPROFILE are both unset, "
        "and it will not keep its state in a directory other users can create. Run it from "
        "a logon session (they set both), or set XDG_STATE_HOME and XDG_DATA_HOME to "
        "directories of your own")


#: Where each XDG base lives on Windows: settings roam, state and data stay local.
_WINDOWS_XDG = {"XDG_CONFIG_HOME": "APPDATA", "XDG_STATE_HOME": "LOCALAPPDATA",
                "XDG_DATA_HOME": "LOCALAPPDATA", "XDG_CACHE_HOME": "LOCALAPPDATA"}


def xdg_home(env: Mapping[str, str], var: str, *default: str, no_home: str = "/tmp",
             platform: str = "") -> str:
    """`$var` when it is an absolute path, else `~/<default...>` (XDG Base Directory).

    The specification says a relative value is invalid and must be ignored:
    used as given, `XDG_STATE_HOME=state` put stockade's state -- which no
    command may read -- inside the project the command works in.
    `no_home` is the home assumed when HOME is unset. On Windows the bases
    are the platform's own (%APPDATA%, %LOCALAPPDATA%), never `no_home`.
    """
    value = env.get(var, "")
    if value and os.path.isabs(value):
        return value
    if (platform or sys.platform) == WINDOWS:
        return windows_app_data(env, _WINDOWS_XDG.get(var, "LOCALAPPDATA"))
    return os.path.join(env.get("HOME") or no_home, *default)


def user_config(env: Mapping[str, str]) -> str:
    """`$XDG_CONFIG_HOME/stockade/config.toml`, else `~/.config/stockade/config.toml`:
    the person's own settings."""
    return os.path.join(xdg_home(env, "XDG_CONFIG_HOME", ".config", no_home="/"),
                        "stockade", "config.toml")


def _own(env: Mapping[str, str], var: str, base: str, what: str, platform: str) -> str:
    # On Windows state and data share %LOCALAPPDATA%, so each has its own name there.
    explicit = env.get(var, "")
    if (platform or sys.platform) == WINDOWS and not (explicit and os.path.isabs(explicit)):
        return os.path.join(base, "stockade", what)
    return os.path.join(base, "stockade")


def state_dir(env: Mapping[str, str], *, no_home: str = "/tmp", platform: str = "") -> str:
    """`$XDG_STATE_HOME/stockade`, else `~/.local/state/stockade`: locks, probe caches,
    session TMPDIRs, proxy sockets, the guard's copies. On Windows
    `%LOCALAPPDATA%\\stockade\\state`.

    `no_home` is the home assumed when HOME is unset.
    """
    base = xdg_home(env, "XDG_STATE_HOME", ".local", "state", no_home=no_home,
                    platform=platform)
    return _own(env, "XDG_STATE_HOME", base, "state", platform)


def make_own_dir(path: str, env: Mapping[str, str], var: str, *, writable: bool = True
                 ) -> None:
    """Make stockade's directory `path` (`<$var or its default>/stockade`), mode 0700, or
    raise `SandboxUnavailable` naming it and what to do.

    The directory `$var` names is made (0700, as the specification asks) only
    when its parent exists: a mistyped `XDG_STATE_HOME=/nonexistent/deep` made
    root create that whole tree. The default place (`~/.local/state`) is made
    whole, as before: a fresh home has no `.local`. A directory stockade cannot
    write is refused here, once, rather than as a traceback from whichever
    file it first failed to make; `writable=False` for one that may be read-only
    (the data directory, when the ledger and the workspaces live elsewhere).
    """
    import errno

    from .errors import SandboxUnavailable

    what = "state" if var == "XDG_STATE_HOME" else "data"
    value = env.get(var, "")
    base = os.path.dirname(path)
    explicit = bool(value) and os.path.isabs(value) and (
        os.path.normpath(value) == os.path.normpath(base))
    own = f"set {var} to a writable directory of your own, or unset it"
    problem = fix = ""
    if explicit and os.path.lexists(base) and not os.path.isdir(base):
        problem, fix = f"{var} is {value}, which is not a directory", own
    elif explicit and not os.path.isdir(parent := os.path.dirname(os.path.normpath(value))):
        problem = f"{var} is {value}, and {parent} " + (
            "is not a directory" if os.path.lexists(parent) else
            f"does not exist (stockade makes the directory {var} names, not the ones above it)")
        fix = f"create {parent}, or {own}"
    else:
        try:
            if explicit and not os.path.isdir(base):
                try:
                    os.mkdir(base, 0o700)
                except FileExistsError:
                    pass  # another stockade starting alongside made it (a file: below)
            os.makedirs(path, mode=0o700, exist_ok=True)
            if writable and not os.access(path, os.W_OK | os.X_OK):
                raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        except OSError as exc:
            problem = f"{exc.strerror or exc}"
            fix = f"make it writable, or {own.replace(', or unset it', '')}"
    if problem:
        raise SandboxUnavailable(f"stockade cannot use its {what} directory {path}: "
                                 f"{problem}; {fix}")


def changeable_by_others(path: str) -> str:
    """The first directory at or above `path` that another user could rename or replace
    an entry of, or "": owned by neither this user nor root, or writable by others
    without the sticky bit.

    A session's /tmp is bound into every one of its commands by its path: a
    state directory under one another user controls let them swap that path
    for a link between two commands, and the next command's /tmp was any
    directory root could write.
    """
    if sys.platform == "win32":
        # Windows has no owner bits to read here: the state directory lives in the
        # user's profile, whose ACL admits only the user, SYSTEM and Administrators.
        return ""
    me, group = os.geteuid(), os.getegid()
    current = os.path.realpath(path)
    while True:
        try:
            st = os.lstat(current)
        except OSError:
            st = None  # not made yet: its parent decides
        if st is not None:
            shared = st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != group)
            if st.st_uid not in (me, 0) or (shared and not st.st_mode & 0o1000):
                return current
        parent = os.path.dirname(current)
        if parent == current:
            return ""
        current = parent


def data_dir(env: Mapping[str, str], platform: str = "") -> str:
    """`$XDG_DATA_HOME/stockade`, else `~/.local/share/stockade`: the ledger, workspaces.
    On Windows `%LOCALAPPDATA%\\stockade\\data`."""
    base = xdg_home(env, "XDG_DATA_HOME", ".local", "share", platform=platform)
    return _own(env, "XDG_DATA_HOME", base, "data", platform)


def private_paths(env: Mapping[str, str], *, state: str = "", ledger: str | None = None,
                  workspace_root: str = "", platform: str = "") -> list[str]:
    """stockade's own files, which no command may read: its state (locks, session
    TMPDIRs, proxy sockets), its data directory (the ledger, workspaces), a ledger
    or workspace root configured elsewhere.

    A command that could read the ledger would read every other session's
    commands; one that could read the workspace root, other sessions' work.
    The data directory goes whole: the ledger's -wal comes and goes with each
    connection, and a mask of the files that existed when a profile was built
    missed the one another command's records were written to a moment later.
    """
    out = [state or state_dir(env, platform=platform), data_dir(env, platform)]
    if workspace_root:
        out.append(workspace_root)
    if ledger:
        # SQLite's companions hold the newest records before a checkpoint.
        out += [ledger + suffix for suffix in ("", "-wal", "-shm", "-journal")]
    return [os.path.realpath(p) for p in out]


def sha256_hex(data: bytes) -> str:
    """SHA-256 without `hashlib`, whose OpenSSL binding costs 3 ms to import."""
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:  # pragma: no cover
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return sha256(data).hexdigest()  # type: ignore[no-any-return,unused-ignore]


def session_key(session_id: str) -> str:
    """32 hex chars of SHA-256 over the JSON-encoded id: short, and safe as a file name
    whatever characters the id carries."""
    from .jsontext import to_json  # json.dumps's text, without importing json and re

    return sha256_hex(to_json(session_id).encode())[:32]
