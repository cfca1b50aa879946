"""Protected names neutralised as they appear, while the command still runs.

The guard's sweep after a command is complete but late: a `.vscode/tasks.json`,
`.mcp.json` or `.git/commondir` the command created was live on the host for
its whole life, hours for a started server. The parents of the protected
names are a small fixed set (the workspace's top, each repository's git
directory, the home when it is writable), so an inotify watch on each, set up
with the guard and dropped at its release, reports a creation at once; the
guard then settles that one name as its sweep would. The command sees its
file vanish (or its next write into a vanished directory fail) instead of
exiting 0 with its work quietly undone later.

Under the Landlock backend, which cannot hold existing names read-only, the
protected directories themselves are watched too, so a hook written into
`.git/hooks` is put back as soon as it is closed.

The window between creation and neutralisation is the event's delivery and
one settle (milliseconds; `bench/watch.py` measures it). A name under a
parent that does not exist when the command starts (`.husky/_` before
`.husky`) is not watched and waits for the sweep. Where no inotify instance
can be had (the per-user limit, which any program of the user's can use up)
the same names are looked at every 50 ms instead, and the audit record says
so.
"""

from __future__ import annotations

import errno
import os
import select
import struct
import threading

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# inotify(7) events: a name made, moved in, closed after writing, or removed.
IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: (inotify_init1, inotify_add_watch, inotify_rm_watch) by seccomp architecture name.
_NR = {"x86_64": (294, 254, 255), "aarch64": (26, 27, 28)}
#: How often one event re-arms and settles a file whose settle replaced it.
REARM_LIMIT = 4
_EVENT = struct.Struct("iIII")


class Watch:
    """A thread that calls `settle(path)` for each watched path that changes.

    `names`: directory -> the entries in it watched for appearing or changing;
    `trees`: directories whose every change settles the directory itself;
    `files`: file -> the path its change settles. A file is watched as an
    inode, so a write through another link to it (a hard link the command
    made in a directory nobody watches) is seen as one by its name. Those in
    `armed` are watched from the start, the rest once their name is settled.
    """

    def __init__(self, names: dict[str, set[str]], trees: set[str],
                 settle: Callable[[str], None], files: dict[str, str] | None = None,
                 armed: set[str] | frozenset[str] = frozenset()) -> None:
        self.failed = ""
        self._settle = settle
        self._names = names
        self._trees = trees
        self._files = files or {}
        self._wd: dict[int, str] = {}
        #: Watched names that another file took the place of (made, moved in or
        #: out, removed), before their settle: one held by a mount is no longer
        #: held then, whatever inode number the new file happens to get.
        self.replaced: set[str] = set()
        #: file -> (watch descriptor, inode) of the inode its name had when armed.
        self._armed: dict[str, tuple[int, int]] = {}
        self._fd = -1
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        loop = self._loop
        try:
            self._fd = inotify_init()
            for path in sorted({*names, *trees}):
                self._add(path)
            for path in sorted(armed):
                self._arm(path)
        except OSError as exc:
            # Another program (another sandbox, even) can use up the user's
            # inotify instances: the names are then looked at on a timer, which
            # holds within its period instead of for the command's life.
            self.failed = (f"inotify unavailable ({exc.strerror or exc}): protected names "
                           f"polled every {POLL_SECONDS * 1000:.0f} ms")
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            # Taken now, not by the thread: a name made before it first looks
            # must still count as made.
            self._before = self._state()
            loop = self._poll
        self._thread = threading.Thread(target=self._run, args=(loop,), name="stockade-watch",
                                        daemon=True)
        self._thread.start()

    def _run(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        finally:
            fds = (self._fd, self._stop_r)
            self._stopped.set()
            # Closing an inotify descriptor waits for the kernel to retire its
            # watches (about 15 ms here): done here, off the command's path.
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def _add(self, path: str) -> None:
        # Each write, not only the close after it: a command that keeps the
        # file open (`exec 3>>.git/config`) left what it wrote live for its run.
        mask = (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_MODIFY
                | IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW)
        try:
            wd = inotify_add_watch(self._fd, path, mask)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return  # gone, not a directory, or not ours to read: the sweep covers it
        self._wd[wd] = path

    def _arm(self, path: str) -> int:
        """Watch the inode `path` names now (its previous one no longer); its inode."""
        try:
            # Not IN_ATTRIB: a rename over the name changes the old inode's link
            # count, and each `git config` would settle the file twice.
            wd = inotify_add_watch(self._fd, path, IN_MODIFY | IN_CLOSE_WRITE | IN_DONT_FOLLOW)
            ino = os.lstat(path).st_ino
        except OSError as exc:
            wd, ino = -1, 0
            if exc.errno == errno.ENOSPC and not self.failed:
                self.failed = ("inotify watches used up: a write through a link to a "
                               "protected file waits for the sweep")
        old = self._armed.pop(path, None)
        if old is not None and old[0] != wd and old[0] not in (
                w for w, _ in self._armed.values()):
            try:
                inotify_rm_watch(self._fd, old[0])
            except OSError:
                pass  # its inode is gone: the kernel dropped the watch
        if wd >= 0:
            self._armed[path] = (wd, ino)
        return ino

    def _loop(self) -> None:
        read_events(self._fd, self._stop_r, self._handle)

    def _handle(self, data: bytes) -> None:
        for path in self._paths(data):
            try:
                self._settle(path)
                self._rearm(path)
            except Exception:  # the sweep after the run reports it
                pass

    def _rearm(self, settled: str) -> None:
        """Arm each file `settled` covers on the inode its name has now, then settle
        again if that changed: what was written to a new inode before it was armed
        raised no event."""
        for path, target in self._files.items():
            if settled not in (path, target):
                continue
            for _ in range(REARM_LIMIT):
                if _inode(path) == self._armed.get(path, (-1, 0))[1]:
                    break
                self._arm(path)
                self._settle(target)

    def _state(self) -> dict[str, tuple[int, ...]]:
        """What the watched paths are now: each name's identity, each tree's entries'."""
        out: dict[str, tuple[int, ...]] = {}
        for parent, names in self._names.items():
            for name in names:
                out[os.path.join(parent, name)] = _identity(os.path.join(parent, name))
        for tree in self._trees:
            ids: list[int] = list(_identity(tree))
            try:
                for entry in sorted(os.listdir(tree)):
                    ids += _identity(os.path.join(tree, entry))
            except OSError:
                pass
            out[tree] = tuple(ids)
        return out

    def _poll(self) -> None:
        before = self._before
        while True:
            ready, _, _ = select.select([self._stop_r], [], [], POLL_SECONDS)
            if ready:
                return
            now = self._state()
            for path, ident in now.items():
                old = before.get(path, ())
                if path not in self._trees and (old[:1] != ident[:1] or old[4:] != ident[4:]):
                    # Another inode, or the same number with a new ctime: no poll
                    # can tell a rewrite in place from a file that reused it.
                    self.replaced.add(path)
                if old != ident:
                    try:
                        self._settle(path)
                    except Exception:  # the sweep after the run reports it
                        pass
            before = self._state()

    def _paths(self, data: bytes) -> list[str]:
        """The watched paths the events in `data` touch, each once, in order."""
        out: list[str] = []
        for wd, mask, name in events(data):
            if mask & IN_Q_OVERFLOW:
                # Events were lost: every watched path, as the sweep would, and
                # each may have been replaced.
                lost = [os.path.join(p, n) for p, names in self._names.items() for n in names]
                self.replaced.update(lost)
                out.extend(lost)
                out.extend(self._trees)
                continue
            parent = self._wd.get(wd)
            if parent is None:
                out.extend(self._files[p] for p, (w, _) in self._armed.items() if w == wd)
                continue
            if parent in self._trees:
                out.append(parent)
            if name in self._names.get(parent, ()):
                out.append(os.path.join(parent, name))
                if mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE):
                    self.replaced.add(out[-1])
        return list(dict.fromkeys(out))

    def close(self) -> None:
        """Stop the thread, after a settle in progress has finished (the thread then
        closes its own descriptors)."""
        if self._stop_w < 0:
            return
        if self._thread is None:
            for fd in (self._fd, self._stop_r):
                if fd >= 0:
                    os.close(fd)
        else:
            os.write(self._stop_w, b"x")
            if self._thread is not threading.current_thread():
                self._stopped.wait()
        os.close(self._stop_w)
        self._fd = self._stop_r = self._stop_w = -1


def events(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(watch descriptor, mask, name) of each inotify event in `data`."""
    pos = 0
    while pos + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
        raw = data[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
        pos += _EVENT.size + length
        yield wd, mask, os.fsdecode(raw)


def read_events(fd: int, stop_r: int, handle: Callable[[bytes], None]) -> None:
    """Hand each batch of inotify events read from `fd` to `handle`, until `stop_r`
    becomes readable or `fd` fails."""
    while True:
        try:
            ready, _, _ = select.select([fd, stop_r], [], [])
        except (OSError, ValueError):
            return
        if stop_r in ready:
            return
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        except OSError:
            return
        handle(data)


#: The period of the timer that stands in for inotify where it cannot be had.
POLL_SECONDS = 0.05


def _inode(path: str) -> int:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return 0


def _identity(path: str) -> tuple[int, ...]:
    try:
        st = os.lstat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _syscall(index: int, *args: object) -> int:
    from ..init.seccomp import libc_syscall, native_arch

    numbers = _NR.get(native_arch())
    if numbers is None:
        raise OSError(38, "no inotify syscall numbers for this architecture")
    return libc_syscall()(numbers[index], *args)


def inotify_init() -> int:
    return _syscall(0, IN_NONBLOCK | IN_CLOEXEC)


def inotify_add_watch(fd: int, path: str, mask: int) -> int:
    return _syscall(1, fd, os.fsencode(path), mask)


def inotify_rm_watch(fd: int, wd: int) -> int:
    return _syscall(2, fd, wd)
