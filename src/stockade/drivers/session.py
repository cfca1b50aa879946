"""A sandbox session as the drivers see it: one object from its opening to its end.

The core makes a `Session` when a session opens and hands that object to
every driver; a driver keys what it keeps for the session by the object
itself (a parked sandbox, the session's namespaces), so nothing of one
session is found under another's name, and nothing needs a second map of
sessions to be kept in step with the first.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Protocol

    class Closeable(Protocol):
        def close(self) -> None: ...


class Session:
    """One session: its id, its workspace, and its /tmp, made when it opens and
    removed when it ends, so that no /tmp outlives its session or serves two."""

    __slots__ = ("closed", "id", "namespaces", "tmp", "workspace")

    def __init__(self, session_id: str, workspace: str, tmp: str | None) -> None:
        self.id = session_id
        self.workspace = workspace
        #: The host directory that is /tmp in every command of the session, or
        #: None where each command gets a fresh one.
        self.tmp = tmp
        #: Set once the session ends: nothing is made for it any more.
        self.closed = False
        #: What a driver made for the session's commands to share (the Linux
        #: drivers' namespaces), closed by that driver when the session ends.
        self.namespaces: Closeable | None = None

    @classmethod
    def open(cls, session_id: str, workspace: str, *, tmp_base: str | None) -> Session:
        """A new session, with a /tmp of its own under `tmp_base` (None: no /tmp of its own)."""
        tmp = private_dir(tmp_base, session_id) if tmp_base is not None else None
        return cls(session_id, workspace, tmp)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {self.workspace!r})"

    def remove_tmp(self) -> None:
        """Remove the session's /tmp (after every driver let go of the session)."""
        if self.tmp:
            remove_session_tmp(self.tmp)


def private_dir(base: str, session_id: str) -> str:
    """A new directory of the session's under `base` (see `owned_dir`)."""
    from ..paths import session_key

    return owned_dir(base, session_key(session_id)[:12] + "-")


#: The directories under which this process removed what dead processes left.
_swept: set[str] = set()


def owned_dir(base: str, tag: str) -> str:
    """A new directory under `base`, mode 0700, as mkdtemp makes one (without
    `tempfile`, whose imports cost a writing command 6 ms), named for this process.

    A stockade killed before it could remove what it made (a session's /tmp
    and caches, a command's scratch, copies of the person's git config) left
    it there for good; the first directory a process makes under `base`
    removes those of processes that no longer exist.
    """
    os.makedirs(base, mode=0o700, exist_ok=True)
    # Not on Windows, whose os.kill(pid, 0) ends the process it names.
    if base not in _swept and os.name == "posix":
        _swept.add(base)
        sweep_dead(base)
    while True:
        path = os.path.join(base, f"{os.getpid()}.{_host()}.{tag}{os.urandom(4).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


def _host() -> str:
    # A state directory shared by several machines (a home on NFS) holds
    # processes of each: a pid is only looked up on the machine that has it.
    # Short, as every name here is: under Landlock a command's TMPDIR is this
    # path, and a unix socket's path must fit in 108 bytes.
    import zlib

    uname = getattr(os, "uname", None)  # not `platform`, whose imports cost 11 ms
    node = uname().nodename if uname else os.environ.get("COMPUTERNAME", "")
    return f"{zlib.crc32(node.encode()) & 0xFFFF:04x}"


def sweep_dead(base: str) -> None:
    """Remove what `owned_dir` made under `base` for processes that are gone.

    A process that is alive, another user's or another machine's keeps its
    own: a directory may still be bound into a running sandbox. Only names
    this module gives are read, and what a command wrote inside is removed as
    at a session's end, never followed (POSIX only).
    """
    here = _host()
    for name in os.listdir(base):
        pid, _, rest = name.partition(".")
        if not pid.isdigit() or int(pid) == os.getpid() or rest.partition(".")[0] != here:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            remove_session_tmp(os.path.join(base, name))
        except OSError:
            pass  # alive, another user's: theirs to remove


def remove_session_tmp(path: str) -> None:
    """Remove a session's /tmp, however deep the command made it.

    The walk in Python stops at a bounded depth: a tree 1200 directories deep
    raised RecursionError out of `close()`, which then left every other
    session's processes running. coreutils' rm takes what is left; it walks
    without recursing and never follows a link.
    """
    try:
        os.rmdir(path)  # most often empty
    except OSError:
        # Not shutil.rmtree: its imports cost every CLI run 2 ms (a session's
        # cache directory holds a layer for each toolchain cache the host has).
        from .linux.host.fstree import remove_tree

        remove_tree(path)
    if os.path.lexists(path):
        from ..process import run_plain

        run_plain(["/bin/rm", "-rf", "--one-file-system", "--", path], timeout=120)
    if os.path.lexists(path):
        # A directory the command made unsearchable (chmod 000) stops rm for
        # anyone but root; the tree is the session's, so its owner may open it.
        # chmod -R changes no link's target and descends through none.
        from ..process import run_plain

        run_plain(["/bin/chmod", "-R", "u+rwX", "--", path], timeout=120)
        run_plain(["/bin/rm", "-rf", "--one-file-system", "--", path], timeout=120)
