"""The directories stockade makes in its state directory for a session or a
command (a session's /tmp and caches, a command's scratch, copies of the
person's git config), and their removal, by their maker or after its death.

A stockade killed with SIGKILL cannot remove what it made. Each directory
is therefore locked (flock) by its maker for as long as the maker lives, and
named for the kernel that holds the lock (its boot id); the first directory
a process makes under a base has what dead processes left removed. A lock,
not a pid: a pid names another process after reuse, none at all in another
PID namespace sharing the state directory (a container), and a zombie's is
still there. A lock only means something to the kernel that took it, so
another boot's directories are removed only from a local filesystem, where
that boot is this machine's past; on a network filesystem they may be a live
process's on another machine.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    import threading

#: Where a directory is made before it is locked; renamed when it is.
_MAKING = ".new-"
#: The prefix of a directory its maker could not lock: never swept.
_UNLOCKED = "nolock"
#: A directory left unfinished (its maker killed between mkdir and lock) is
#: this old at least before it is removed: one being made is microseconds old.
_UNFINISHED_AGE = 60.0
#: Filesystems whose every process runs on this machine's kernel.
_LOCAL_FS = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "bcachefs",
    "jfs", "reiserfs", "overlay", "vfat", "exfat", "ntfs", "ntfs3", "hfsplus"})

#: Each directory this process made and has not removed: its lock's descriptor.
_held: dict[str, int] = {}
#: The bases this process has swept.
_swept: set[str] = set()
_boot_tag: str | None = None


def owned_dir(base: str, tag: str) -> str:
    """A new directory under `base`, mode 0700, locked by this process until
    `remove_owned` (as mkdtemp makes one, without `tempfile`, whose imports
    cost a writing command 6 ms)."""
    os.makedirs(base, mode=0o700, exist_ok=True)
    here = boot()
    if not here:  # no boot id (not Linux): no lock means anything to a later process
        return _make(base, f"{_UNLOCKED}.{tag}")
    if base not in _swept:
        _swept.add(base)
        sweep(base)
    import fcntl

    while True:
        making = _make(base, _MAKING)
        fd = os.open(making, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        prefix = here
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a sweeper took it for a dead one's: never ours now
            continue
        except OSError:
            prefix = _UNLOCKED  # no locks here: a name no sweeper takes
        # Named under its final name only once locked: a sweeper never finds
        # an unlocked directory under that name while its maker lives.
        path = os.path.join(base, f"{prefix}.{tag}{making[-10:]}")
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


def boot() -> str:
    """This kernel's boot, as the names of its directories say ("" if unknown)."""
    global _boot_tag
    if _boot_tag is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                ident = f.read(64).decode("ascii", "replace").strip().replace("-", "")
        except OSError:
            ident = ""
        _boot_tag = ident[:12] if len(ident) >= 12 and ident.isalnum() else ""
    return _boot_tag


def sweep(base: str) -> threading.Thread | None:
    """Remove, in the background, what `owned_dir` made under `base` for
    processes that are gone (the thread doing it, if any).

    What a live process holds (in any PID namespace of this kernel), another
    machine's on a shared filesystem, and any name this module never gives
    are left alone. What a command wrote inside is removed as at a session's
    end, never followed.
    """
    here = boot()
    candidates: list[str] = []
    others: list[str] = []
    for name in os.listdir(base):
        stamp, dot, _ = name.partition(".")
        if name.startswith(_MAKING) or stamp == here:
            candidates.append(name)
        elif dot and len(stamp) == len(here) and stamp.isalnum() and stamp != _UNLOCKED:
            others.append(name)
    if others and _local(base):
        candidates += others
    if not candidates:
        return None
    # Not inline: a dead command's scratch may hold a million files, and the
    # process that happens to come next has its own command to run.
    import threading

    thread = threading.Thread(target=_remove_stale, args=(base, candidates),
                              name="stockade-sweep", daemon=True)
    thread.start()
    return thread


def _remove_stale(base: str, names: list[str]) -> None:
    """Each of `names` whose lock is free, removed holding that lock (one at a
    time: a thousand leftovers must not take a thousand descriptors)."""
    import fcntl
    import time

    for name in names:
        path = os.path.join(base, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if name.startswith(_MAKING) and \
                    time.time() - os.fstat(fd).st_mtime < _UNFINISHED_AGE:
                continue
            _remove(path, fd)
        except Exception:  # what cannot be removed now is the next sweep's
            continue
        finally:
            os.close(fd)


def _local(path: str) -> bool:
    """Whether `path` is on a filesystem only this machine's kernel uses."""
    path = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(" ")
                if " - " not in line or len(fields) < 5:
                    continue
                point = fields[4].replace("\\040", " ")
                if (path == point or path.startswith(point.rstrip("/") + "/")) \
                        and len(point) >= len(best):
                    best, kind = point, line.split(" - ", 1)[1].split(" ", 1)[0]
    except OSError:
        return False
    return kind in _LOCAL_FS


def remove_owned(path: str) -> None:
    """Remove a directory stockade made (a session's /tmp and caches, a command's
    scratch) and let go of its lock.

    What cannot be removed stays unlocked, for the next sweep.
    """
    try:
        _remove(path, _held.get(path))
    finally:
        fd = _held.pop(path, None)
        if fd is not None:
            os.close(fd)


def _remove(path: str, lock: int | None) -> None:
    """Remove `path`, however deep; `lock` goes with every helper started.

    The walk in Python stops at a bounded depth: a tree 1200 directories deep
    raised RecursionError out of `close()`, which then left every other
    session's processes running. coreutils' rm takes what is left; it walks
    without recursing and never follows a link, and holds the lock while it
    runs, so that a sweeper killed midway does not have a second rm start on
    the same tree."""
    try:
        os.rmdir(path)  # most often empty
        return
    except OSError:
        pass
    if os.name != "posix":
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    # Not shutil.rmtree: its imports cost every CLI run 2 ms (a session's
    # cache directory holds a layer for each toolchain cache the host has).
    from .linux.host.fstree import remove_tree

    remove_tree(path)
    if not os.path.lexists(path):
        return
    from ..process import run_plain

    fds = {3: lock} if lock is not None else None
    run_plain(["/bin/rm", "-rf", "--one-file-system", "--", path], timeout=120, extra_fds=fds)
    if os.path.lexists(path):
        # A directory the command made unsearchable (chmod 000) stops rm for
        # anyone but root; the tree is the session's, so its owner may open it.
        # chmod -R changes no link's target and descends through none.
        run_plain(["/bin/chmod", "-R", "u+rwX", "--", path], timeout=120, extra_fds=fds)
        run_plain(["/bin/rm", "-rf", "--one-file-system", "--", path], timeout=120,
                  extra_fds=fds)
