"""stockade's own places on disk, and the hashes that name things there.

Computed from the environment the caller injected, never from `os.environ`
behind its back: a library user who passes `env=` (a test, a service
running for another user) must find the state where that env says, and a
rule about where state lives is written once, not four times that can
disagree.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping


def state_dir(env: Mapping[str, str], *, no_home: str = "/tmp") -> str:
    """`$XDG_STATE_HOME/stockade`, else `~/.local/state/stockade`: locks, probe caches,
    session TMPDIRs, proxy sockets, the guard's copies.

    `no_home` is the home assumed when HOME is unset.
    """
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or no_home, ".local",
                                                     "state")
    return os.path.join(base, "stockade")


def changeable_by_others(path: str) -> str:
    """The first directory at or above `path` that another user could rename or replace
    an entry of, or "": owned by neither this user nor root, or writable by others
    without the sticky bit.

    A session's /tmp is bound into every one of its commands by its path: a
    state directory under one another user controls let them swap that path
    for a link between two commands, and the next command's /tmp was any
    directory root could write.
    """
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


def data_dir(env: Mapping[str, str]) -> str:
    """`$XDG_DATA_HOME/stockade`, else `~/.local/share/stockade`: the ledger, workspaces."""
    base = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or "/tmp", ".local",
                                                    "share")
    return os.path.join(base, "stockade")


def private_paths(env: Mapping[str, str], *, state: str = "", ledger: str | None = None,
                  workspace_root: str = "") -> list[str]:
    """stockade's own files, which no command may read: its state (locks, session
    TMPDIRs, proxy sockets), its data directory (the ledger, workspaces), a ledger
    or workspace root configured elsewhere.

    A command that could read the ledger would read every other session's
    commands; one that could read the workspace root, other sessions' work.
    The data directory goes whole: the ledger's -wal comes and goes with each
    connection, and a mask of the files that existed when a profile was built
    missed the one another command's records were written to a moment later.
    """
    out = [state or state_dir(env), data_dir(env)]
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
    import json

    return sha256_hex(json.dumps(session_id).encode())[:32]
