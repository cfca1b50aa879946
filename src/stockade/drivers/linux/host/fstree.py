"""An fd-relative snapshot, restore and removal library for paths a command controls.

Everything stockade does on the host after a command, in a directory the
command could write, goes through descriptors opened one real directory at
a time (`open_parent`) and never follows a symbolic link: a restore written
through a `.git` the command replaced with `-> ~/.ssh` would overwrite the
host's files with the baseline's.
"""

from __future__ import annotations

import os

from ....capabilities import is_under

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Sequence

#: A baseline larger than this is refused rather than half-kept.
GUARD_MAX_BYTES = 64 << 20
GUARD_MAX_ENTRIES = 20000
GUARD_MAX_DEPTH = 64

if TYPE_CHECKING:
    from typing import Any, TypeAlias

    #: ("f", mode, uid, gid, mtime_ns, bytes) | ("d", mode, uid, gid, mtime_ns, {name: tree})
    #: | ("l", target) | ("o", mode) for a fifo, socket or device. Access times are
    #: left out: reading a file must not count as changing it.
    _Tree: TypeAlias = tuple[Any, ...]


def read_tree(dir_fd: int, name: str, budget: list[int] | None = None,
              depth: int = 0) -> _Tree | None:
    """The entry `name` in `dir_fd`, recursively, never following a symlink; None if missing."""
    import stat

    budget = budget if budget is not None else [GUARD_MAX_BYTES, GUARD_MAX_ENTRIES]
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    budget[1] -= 1
    if budget[1] < 0 or depth > GUARD_MAX_DEPTH:
        raise TooLarge
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return ("l", os.readlink(name, dir_fd=dir_fd))
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            children = {child: read_tree(fd, child, budget, depth + 1)
                        for child in sorted(os.listdir(fd))}
        finally:
            os.close(fd)
        return ("d", mode, st.st_uid, st.st_gid, st.st_mtime_ns, children)
    if stat.S_ISREG(st.st_mode):
        if st.st_size > budget[0]:
            raise TooLarge
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=dir_fd)
        try:
            # What was opened, which a rename can have put there since the stat
            # (git's own writes do): its kind and metadata, and no more bytes
            # than the budget, so that a fifo swapped in, or a file growing, is
            # never read whole into the host's memory.
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return ("o", stat.S_IMODE(st.st_mode))
            mode = stat.S_IMODE(st.st_mode)
            left = budget[0] + 1
            chunks = []
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            budget[0] = left - 1
            if budget[0] < 0:
                raise TooLarge
        finally:
            os.close(fd)
        return ("f", mode, st.st_uid, st.st_gid, st.st_mtime_ns, b"".join(chunks))
    # A fifo, socket or device: recorded by kind, restored as nothing.
    return ("o", mode)


def write_tree(dir_fd: int, name: str, tree: _Tree) -> None:
    """Create `name` in `dir_fd` as `tree` describes; `name` must not exist."""
    owner = os.geteuid() == 0
    if tree[0] == "l":
        os.symlink(tree[1], name, dir_fd=dir_fd)
        return
    if tree[0] == "o":
        return
    _kind, mode, uid, gid, mtime, body = tree
    if tree[0] == "d":
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            for child, sub in body.items():
                if sub is not None:
                    write_tree(fd, child, sub)
            _finish(fd, mode, uid, gid, mtime, owner)
        finally:
            os.close(fd)
        return
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        _finish(fd, mode, uid, gid, mtime, owner)
    finally:
        os.close(fd)


def _finish(fd: int, mode: int, uid: int, gid: int, mtime: int, owner: bool) -> None:
    """Mode, owner (root only can give files away) and times, last: writing
    the children of a directory moves its mtime."""
    if owner:
        os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)
    os.utime(fd, ns=(mtime, mtime))


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove `name` from `dir_fd`, whatever it is, without following links.

    A directory is first renamed aside, so the name is free at once even if
    what the command built there is too deep to delete completely; then it
    is removed as far as `rmtree_at` gets.
    """
    import stat

    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    aside = f".stockade-removed-{os.urandom(6).hex()}"
    os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    rmtree_at(dir_fd, aside)


def exchange(dir_fd: int, a: str, b: str) -> None:
    """Swap the entries `a` and `b` in one step (renameat2's RENAME_EXCHANGE).

    Replacing a file the command also writes needs what was displaced in
    hand, to give it back if it was newer than what was read: a rename
    destroys it.
    """
    import ctypes

    if not _renameat2:
        # Loaded once: a swap that waits on ctypes leaves the file it just put
        # in place standing for milliseconds, for the command's git to read.
        _renameat2.append(ctypes.CDLL(None, use_errno=True).renameat2)
    if _renameat2[0](dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), _RENAME_EXCHANGE):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), b)


_RENAME_EXCHANGE = 2
_renameat2: list[Any] = []


def rmtree_at(dir_fd: int, name: str, depth: int = 0) -> bool:
    """Delete `name` in `dir_fd` and everything beneath it, through descriptors only
    (a symlink is removed, never followed); False if some of it had to stay.

    Not shutil.rmtree: importing it pulls `re` and the compression modules
    into every command's start-up, and its recursion has no bound.
    """
    import stat

    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return True
        if depth > GUARD_MAX_DEPTH * 4:
            return False
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            done = all([rmtree_at(fd, child, depth + 1) for child in os.listdir(fd)])
        finally:
            os.close(fd)
        if done:
            os.rmdir(name, dir_fd=dir_fd)
        return done
    except FileNotFoundError:
        return True
    except OSError:
        return False


def remove_tree(path: str) -> None:
    """`rmtree_at` for an absolute path, ignoring what cannot be removed."""
    if not path:
        return
    try:
        parent = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        rmtree_at(parent, os.path.basename(path))
    finally:
        os.close(parent)


class TooLarge(Exception):
    """A tree over the budget `read_tree` was given."""


def open_parent(path: str, roots: Sequence[str]) -> tuple[int, str] | None:
    """(fd of `path`'s parent, its last name), reached from the writable root
    holding it one real directory at a time; None when that chain is broken.

    A component the command replaced by a symlink is never followed: a
    restore written through `.git -> ~/.ssh` would overwrite the host's
    files with the baseline's.
    """
    root = max((r for r in roots if is_under(path, r) and path != r), key=len, default="")
    if not root:
        return None
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = os.path.relpath(path, root).split(os.sep)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


