"""The directories stockade makes in its state directory for a session or a
command (a session's /tmp and caches, a command's scratch, copies of the
person's git config), and their removal, by their maker or after its death.

A stockade killed with SIGKILL cannot remove what it made. Each directory
is therefore locked (flock) by its maker for as long as the maker lives, and
the first directory a process makes under a base removes those whose lock
nobody holds. A lock, not a pid: a pid names another process after reuse,
none at all in another PID namespace sharing the state directory (a
container), and a zombie's is still there.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    import threading

#: Where a directory is made before it is locked; renamed when it is.
_MAKING = ".new-"
#: A directory left unfinished (its maker killed between mkdir and lock) is
#: this old at least before it is removed: one being made is microseconds old.
_UNFINISHED_AGE = 60.0

#: Each directory this process made and has not removed: its lock's descriptor.
_held: dict[str, int] = {}
#: The bases this process has swept.
_swept: set[str] = set()
_machine_tag = ""


def owned_dir(base: str, tag: str) -> str:
    """A new directory under `base`, mode 0700, locked by this process until
    `remove_owned` (as mkdtemp makes one, without `tempfile`, whose imports
    cost a writing command 6 ms)."""
    os.makedirs(base, mode=0o700, exist_ok=True)
    if os.name != "posix":  # no flock; what a killed stockade left stays
        return _make(base, tag)
    if base not in _swept:
        _swept.add(base)
        sweep(base)
    import fcntl

    while True:
        making = _make(base, _MAKING)
        fd = os.open(making, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a sweeper took it for a dead one's: never ours now
            continue
        except OSError:
            pass  # no locks here (an NFS mount without them): no sweeper can take it either
        # Named under its final name only once locked: a sweeper never finds
        # an unlocked directory under that name while its maker lives.
        path = os.path.join(base, f"{machine()}.{tag}{making[-10:]}")
        if os.path.lexists(path):
            os.close(fd)
            os.rmdir(making)
            continue
        os.rename(making, path)
        _held[path] = fd
        return path


def _make(base: str, prefix: str) -> str:
    while True:
        path = os.path.join(base, f"{prefix}{os.urandom(5).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


def machine() -> str:
    """This machine, as the names of its directories say: a state directory
    shared by several (a home on NFS) is swept by each for its own only."""
    global _machine_tag
    if not _machine_tag:
        import zlib

        try:
            with open("/etc/machine-id", "rb") as f:
                ident = f.read(64).strip()
        except OSError:
            ident = b""
        if not ident:
            uname = getattr(os, "uname", None)  # not `platform`: its imports cost 11 ms
            ident = (uname().nodename if uname else os.environ.get("COMPUTERNAME", "")).encode()
        _machine_tag = f"{zlib.crc32(ident):08x}{zlib.adler32(ident) & 0xFFFF:04x}"
    return _machine_tag


def sweep(base: str) -> threading.Thread | None:
    """Remove, in the background, what `owned_dir` made under `base` for
    processes that are gone (the thread doing it, if any).

    A directory whose lock is held (a live process's, on any PID namespace of
    this machine), another machine's, or a name this module never gives is
    left alone. What a command wrote inside is removed as at a session's end,
    never followed; the removal holds the lock, so two sweepers never share a
    directory, and one killed midway leaves the rest to the next.
    """
    import fcntl
    import time

    here = machine() + "."
    stale: list[tuple[str, int]] = []
    for name in os.listdir(base):
        unfinished = name.startswith(_MAKING)
        if not unfinished and not name.startswith(here):
            continue
        path = os.path.join(base, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if unfinished and time.time() - os.fstat(fd).st_mtime < _UNFINISHED_AGE:
                raise BlockingIOError
        except OSError:
            os.close(fd)
            continue
        stale.append((path, fd))
    if not stale:
        return None
    # Not inline: a dead command's scratch may hold a million files, and the
    # process that happens to come next has its own command to run.
    import threading

    thread = threading.Thread(target=_remove_stale, args=(stale,), name="stockade-sweep",
                              daemon=True)
    thread.start()
    return thread


def _remove_stale(stale: list[tuple[str, int]]) -> None:
    for path, fd in stale:
        try:
            remove_owned(path)
        finally:
            os.close(fd)


def remove_owned(path: str) -> None:
    """Remove a directory stockade made (a session's /tmp and caches, a command's
    scratch), however deep a command made it, and let go of its lock.

    The walk in Python stops at a bounded depth: a tree 1200 directories deep
    raised RecursionError out of `close()`, which then left every other
    session's processes running. coreutils' rm takes what is left; it walks
    without recursing and never follows a link. What cannot be removed stays
    unlocked, for the next sweep.
    """
    try:
        _remove(path)
    finally:
        fd = _held.pop(path, None)
        if fd is not None:
            os.close(fd)


def _remove(path: str) -> None:
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
