"""A repository's config as a private copy the command writes, merged back inert.

`git remote add`, `git config user.name`, `git submodule add` and `git push -u`
write `.git/config`, which bubblewrap holds read-only (git would run what a
command put there: `core.fsmonitor` on every `git status`). So each
repository's config in a writable root is bound from a private copy; the
init does git's rename onto it in place (renames.py). When the command ends
its changes are merged into the host's config: the keys on
`gitpolicy.INERT_KEYS` it changed, each applied to the file as it is by then,
so what the person or another command wrote meanwhile stays. Every other
change is reported and dropped. The host's file is never open to the
command, so no key of its reaches the host, during the run or after it.
"""

from __future__ import annotations

import os
import time

from .... import gitmeta, gitpolicy
from ....capabilities import is_under
from ....profile import FILE, PIN
from ...owned import owned_dir, remove_owned

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ....fsroot import Root, Roots
    from ....profile import Profile

#: The files of a git directory that are config (the second only with
#: extensions.worktreeConfig, but a private copy of it costs nothing).
NAMES = gitpolicy.CONFIG_NAMES
#: How long a merge waits for a `config.lock` the person's git holds.
LOCK_WAIT_SECONDS = 1.0


def private_paths(profile: Profile) -> list[str]:
    """The protected configs of the git directories in `profile`'s writable roots (pure)."""
    gitdirs = [p.path for p in profile.protected if p.kind == PIN]
    return sorted(p.path for p in profile.protected
                  if p.kind == FILE and is_config_of(p.path, gitdirs))


def is_config_of(path: str, gitdirs: Iterable[str]) -> bool:
    """Whether `path` is the config of one of `gitdirs` or of a git directory in one
    (a submodule's `modules/*`, a linked worktree's `worktrees/*`)."""
    return os.path.basename(path) in NAMES and any(
        is_under(os.path.dirname(path), g) for g in gitdirs)


class Merged:
    """What one merge did: the keys it dropped, or why it could not be done."""

    __slots__ = ("dropped", "error", "path")

    def __init__(self, path: str, dropped: list[str], error: str = "") -> None:
        self.path = path
        self.dropped = dropped
        self.error = error


class PrivateConfigs:
    """The private copies of one launch, in a directory of stockade's state.

    Empty until `refresh` fills them from the host (at the command's start:
    a parked sandbox is bound to them long before). `owner` is set by the
    metadata guard that merges them back, which then also removes them.
    """

    def __init__(self, paths: list[str], state_dir: str) -> None:
        self.dir = owned_dir(os.path.join(state_dir, "gitconfig"), "")
        self.copies = {path: os.path.join(self.dir, str(n)) for n, path in enumerate(paths)}
        for copy in self.copies.values():
            os.close(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        #: What each copy held when the command started; None: nothing to merge.
        self.base: dict[str, bytes | None] = {}
        self.owner: object = None

    def refresh(self, fs: Roots) -> None:
        """Each copy made the host's config as it is now (read beneath its root)."""
        for path, copy in self.copies.items():
            where = fs.locate(path)
            data: bytes | None = None
            if where is not None:
                try:
                    data = where[0].read(where[1], gitmeta.MAX_CONFIG_BYTES)
                except OSError:
                    data = None
            _overwrite(copy, data or b"")
            self.base[path] = data

    def merge(self, fs: Roots) -> list[Merged]:
        """The command's changes to each copy, merged into the host's config."""
        out: list[Merged] = []
        for path, copy in self.copies.items():
            base = self.base.get(path)
            if base is None:
                continue
            try:
                ours = _read_copy(copy)
            except OSError as exc:
                out.append(Merged(path, [], f"its copy cannot be read ({exc.strerror})"))
                continue
            if ours == base:
                continue
            out.append(merge_into(fs, path, base, ours))
        return out

    def close(self) -> None:
        remove_owned(self.dir)


def merge_into(fs: Roots, path: str, base: bytes, ours: bytes) -> Merged:
    """`ours`'s inert changes from `base` applied to the host's config at `path`."""
    theirs = gitmeta.parse_config_bytes(ours)
    if theirs is None:
        return Merged(path, ["everything"], "the command left a config git cannot read")
    where = fs.locate(path)
    if where is None:
        return Merged(path, [], "it is no longer beneath a writable root")
    root, rel = where
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            host = root.read(rel, gitmeta.MAX_CONFIG_BYTES)
            st = root.lstat(rel)
            result = gitpolicy.merge_config(gitmeta.parse_config_bytes(base) or [], theirs,
                                          gitmeta.config_text(host))
            if result is None:
                return Merged(path, [], "the host's config is not one git reads")
            text, kept, dropped = result
            if kept:
                _write_locked(root, rel, text.encode("utf-8", "surrogateescape"), st)
            return Merged(path, dropped)
        except FileExistsError:
            # The person's git holds config.lock: it is writing the file now.
            if time.monotonic() > deadline:
                return Merged(path, [], f"{os.path.basename(path)}.lock was held throughout "
                              "(if no git is running, a killed one left it: remove it)")
            time.sleep(0.02)
        except OSError as exc:
            return Merged(path, [], f"it could not be written ({exc.strerror or exc})")


def clear_left_lock(fs: Roots, path: str, since_ns: int, until_ns: float = float("inf")
                    ) -> str:
    """Remove the `config.lock` beside `path` that a command's git left (killed while
    writing): git refuses every later write of the config while it is there, the
    person's and the merge's alike. What was done, or "" when there is none.

    Only a lock made since `since_ns` (its ctime, which no command can set
    back), and once it is `LOCK_WAIT_SECONDS` old: a git still running holds
    it for milliseconds. An older lock is the person's: left alone. The wait
    is counted from the first look, whatever the lock's ctime does after it:
    a command touching it over and over held every guard of the workspace
    (this runs under their common lock) for as long as it liked.
    """
    where = fs.locate(path + ".lock")
    if where is None:
        return ""
    root, rel = where
    st = root.lstat(rel)
    if st is None:
        return ""
    if st.st_ctime_ns < since_ns:
        return ""
    deadline = min(min(st.st_ctime_ns, time.time_ns()) + LOCK_WAIT_SECONDS * 1e9, until_ns)
    while (left := deadline - time.time_ns()) > 0:
        time.sleep(min(0.05, left / 1e9))
        if root.lstat(rel) is None:
            return ""  # a git that was still writing it is done
    root.remove(rel)
    return ("removed: the command's git left it, and git refuses to change the config "
            "while it is there")


def _write_locked(root: Root, rel: str, data: bytes, st: os.stat_result | None) -> None:
    """`data` into the host's config at `rel`, holding git's `rel.lock` meanwhile.

    In place, so the file keeps its inode: every running sandbox binds its
    copy over this name, and a file renamed over a mount point in another
    namespace detaches that mount -- the command would see, and could write,
    the host's file from then on. A file that is not the one just read, or
    has another link (one outside the root), is replaced by a rename instead.
    """
    fd, name = root.parent(rel)
    lock = name + ".lock"
    try:
        out = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600, dir_fd=fd)
        try:
            try:
                target = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                target = -1
            if target >= 0:
                now = os.fstat(target)
                if (st is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
                        and now.st_nlink == 1 and (now.st_mode & 0o170000) == 0o100000):
                    try:
                        os.ftruncate(target, 0)
                        _write_all(target, data)
                    finally:
                        os.close(target)
                    os.close(out)
                    out = -1
                    os.unlink(lock, dir_fd=fd)
                    return
                os.close(target)
            if st is not None:
                os.fchmod(out, st.st_mode & 0o777)
                if os.geteuid() == 0:
                    os.fchown(out, st.st_uid, st.st_gid)
            _write_all(out, data)
            os.close(out)
            out = -1
            os.rename(lock, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            if out >= 0:
                os.close(out)
            try:
                os.unlink(lock, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _overwrite(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(fd, "wb") as fh:
        fh.write(data)


def _read_copy(path: str) -> bytes:
    from ....fsroot import read_fd

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return read_fd(fd, gitmeta.MAX_CONFIG_BYTES, path)
    finally:
        os.close(fd)
