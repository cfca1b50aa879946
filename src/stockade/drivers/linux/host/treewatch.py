"""Every repository a command creates anywhere in the workspace, found without a walk per command.

`mkdir -p a/b && git -C a/b init && git -C a/b config core.fsmonitor CMD`
made a repository the host's `git status` in `a/b` obeyed (a prompt on `cd`,
an editor's scan): the guard looks only at a fixed set of names, and creating
`a/b/.git` changes nothing above `a/b`. So the workspace is walked once, when
its first writing command starts in this process, with an inotify watch on
every directory; from then on a new directory is watched as it appears and a
`.git` created or moved in anywhere is remembered, and the guard makes each
inert when its command ends. A command's cost is then what it changed.

The same watch remembers every agent or editor config (`.claude`, `.vscode`,
`.mcp.json`, ...: `hostpaths.NESTED_PROTECTED`) created below the top, where
no fixed name reaches it and a tool started in that directory (or an agent
reading a file there) loads it: the guard moves each to the quarantine.

A repository is a `.git` (directory or pointer file), or a directory laid
out as one (`HEAD`, `objects/`, `refs/`: `git init --bare a/b` with a
`core.worktree`), which git takes for a git directory before it looks for
`.git`. Those the person had when the watch began (`existing`) are held like
the workspace's own (`boundary.build_profile`); those that appeared since
(`made`) stay the command's: the guard makes every one inert again after
each command, so one it made inert cannot be re-armed by the next.

It fails safe. Where the watch cannot follow (the kernel's limit on watches
reached, the event queue overflowed, a directory moved so its path is
stale), it says so (`incomplete`) and the next drain walks the tree again,
comparing against the repositories that existed at the start: correct, at
the cost of the walk.
"""

from __future__ import annotations

import os
import threading

from ....hostpaths import NESTED_PROTECTED
from .watch import (
    IN_CREATE,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    events,
    inotify_add_watch,
    inotify_init,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from ....patterns import Matcher

IN_ISDIR = 0x40000000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR | IN_DONT_FOLLOW


#: Entries that may make a directory a git directory to git, whatever its name.
GITDIR_SHAPE = ("HEAD", "objects", "refs", "commondir")


def bare_shaped(path: str) -> bool:
    """Whether git may take `path` itself for a git directory (no link followed here).

    git asks for a `HEAD` that is a file or a link into `refs/`, and
    `objects` and `refs` it can enter -- through links, and in the
    directory a `commondir` names when there is one. So: a `HEAD` that is
    not a directory, and `commondir`, or `objects` and `refs` of any kind
    but a file. Wider than git, never narrower.
    """
    import stat

    def mode(name: str) -> int:
        try:
            return os.lstat(os.path.join(path, name)).st_mode
        except OSError:
            return 0

    head = mode("HEAD")
    if not head or stat.S_ISDIR(head):
        return False
    if mode("commondir"):
        return True
    return all(m and not stat.S_ISREG(m) for m in (mode("objects"), mode("refs")))


def _shaped(names: set[str]) -> bool:
    return "HEAD" in names and ("commondir" in names or {"objects", "refs"} <= names)


def repositories(top: str, on_directory: Callable[[str], None] | None = None, *,
                 shaped_top: bool = False,
                 on_entry: Callable[[str, bool], None] | None = None,
                 on_closed: Callable[[str], bool] | None = None) -> list[str]:
    """Every repository beneath `top` (see the module's doc; no link followed),
    calling `on_directory` for each directory before reading it.

    The walk goes on inside a repository: a directory built inside one and
    renamed (`mv d/.git d/P`) holds what was made there unseen. Only
    `objects` of a `.git` is skipped, git's own fan-out of hashes: one of a
    directory merely shaped as a git directory is the command's to fill.
    `shaped_top`: `top` itself counts when shaped as a git directory (the
    workspace's own shape is the guard's `_bare_shaped`). `on_entry` sees
    every entry's path on the way, and whether it is a directory.
    `on_closed` is told of a directory that cannot be read, and returns
    whether to try it again (it gave the owner's bits back).
    """
    found: list[str] = []
    stack = [top]
    while stack:
        path = stack.pop()
        if on_directory is not None:
            on_directory(path)
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            continue
        except OSError:
            if on_closed is None or not on_closed(path):
                continue
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
        names = {e.name for e in entries}
        gitdir = os.path.basename(path) == ".git" or (
            _shaped(names) and bare_shaped(path))
        if gitdir and (shaped_top or path != top) and os.path.basename(path) != ".git":
            found.append(path)
        for entry in entries:
            try:
                # The directory entry's type, no stat: a file costs nothing.
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if on_entry is not None:
                on_entry(entry.path, is_dir)
            if entry.name == ".git":
                found.append(entry.path)
            if is_dir and not (entry.name == "objects" and os.path.basename(path) == ".git"):
                stack.append(entry.path)
    return found


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of `path`; None when it is gone, (-1, -1) when it cannot be
    told (a directory on the way made unreadable): kept, never taken for gone."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return (-1, -1)
    return (st.st_dev, st.st_ino)


class TreeWatch:
    """The repositories beneath `root`: those it had, and those that appeared since."""

    def __init__(self, root: str, matcher: Matcher | None = None) -> None:
        self.root = root
        #: `unreadable`'s workspace patterns (patterns.py), and what they match.
        self.matcher = matcher
        self._matched: set[str] = set()
        self.incomplete = ""
        self.directories = 0
        self._wd: dict[int, str] = {}
        self._lock = threading.Lock()
        self._found: set[str] = set()
        #: The repositories that appeared while watched, as the guard has seen them.
        self.made: set[str] = set()
        #: Agent and editor configs below the top that are the person's, by identity
        #: (one deleted and made again is new; one the person moved stays theirs),
        #: and those that appeared while watched, until the guard has moved them.
        self.configs: dict[str, tuple[int, int]] = {}
        self._found_configs: set[str] = set()
        #: Directories that could not be read when the watch began, and their change
        #: times: the person's, left as they are unless changed since.
        self._closed: dict[str, int] = {}
        self._started = False
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._fd = -1
        self._thread: threading.Thread | None = None
        try:
            self._fd = inotify_init()
        except OSError as exc:
            self.incomplete = f"inotify unavailable ({exc.strerror or exc})"
        #: The repositories the person had: what a rescan compares against.
        self.existing = set(self._walk(root, watch=self._fd >= 0))
        self._started = True
        self._settle()
        if self._fd >= 0:
            self._thread = threading.Thread(target=self._run, name="stockade-treewatch",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._lock:
                fds, self._fd, self._stop_r = (self._fd, self._stop_r), -1, -1
            # Retiring a thousand watches takes the kernel milliseconds: not on
            # the path of the command or of the session's close.
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def _walk(self, top: str, *, watch: bool) -> list[str]:
        return repositories(top, self._add_watch if watch else None,
                            shaped_top=top != self.root, on_entry=self._entry,
                            on_closed=self._closed_directory)

    def _closed_directory(self, path: str) -> bool:
        """A directory that cannot be read hides whatever was made in it (`mkdir -m 0311
        d`, then a config or repository inside, then `chmod 755 d` for the person's
        next look): the tree counts as unwatched, and after the watch began one of
        the runner's own gets its owner's bits back to be read. One the person had
        closed, unchanged since, is left as it was."""
        import stat

        from ....fsroot import Root

        self.incomplete = self.incomplete or f"a directory could not be read: {path}"
        try:
            # Reached beneath the root with no link followed (a parallel command can
            # swap a name on the way), and changed through that handle alone.
            with Root(self.root) as top:
                fd = top.open(os.path.relpath(path, self.root), os.O_PATH | os.O_DIRECTORY)
        except (OSError, ValueError):
            return False
        try:
            st = os.fstat(fd)
            if not self._started:
                self._closed[path] = st.st_ctime_ns
                return False
            if self._closed.get(path) == st.st_ctime_ns or st.st_uid != os.geteuid():
                return False
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def _entry(self, path: str, is_dir: bool) -> None:
        if self.matcher and self.matcher(os.path.relpath(path, self.root), is_dir):
            self._matched.add(path)
        if os.path.basename(path) in NESTED_PROTECTED and \
                os.path.dirname(path) != self.root:  # the top's are the profile's
            self._found_configs.add(path)

    def matched(self) -> tuple[str, ...]:
        """The workspace's files `unreadable`'s patterns name, as they are now (after
        a walk when the watch could not follow)."""
        with self._lock:
            self._catch_up()
            if self.incomplete:
                self._matched.clear()
                self._walk(self.root, watch=False)
            self._matched = {p for p in self._matched if os.path.lexists(p)}
            return tuple(sorted(self._matched))

    def _add_watch(self, path: str) -> None:
        if self.incomplete:
            return
        try:
            self._wd[inotify_add_watch(self._fd, path, _MASK)] = path
            self.directories += 1
        except (FileNotFoundError, NotADirectoryError):
            pass  # gone already: its creator's events say what was there
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC: the per-user watch limit
                self.incomplete = ("the kernel's inotify watch limit "
                                   "(fs.inotify.max_user_watches) was reached")
            else:  # EACCES: a directory made unreadable; what it holds is unseen
                self.incomplete = f"a directory could not be watched ({exc.strerror})"

    def _loop(self) -> None:
        # Events are read under the lock, not only handled under it, so that no
        # batch is ever read but unhandled while `matched()` catches up.
        import select

        while True:
            try:
                ready, _, _ = select.select([self._fd, self._stop_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop_r in ready:
                return
            with self._lock:
                if not self._catch_up():
                    return

    def _events(self, data: bytes) -> None:
        for wd, mask, name in events(data):
            if mask & IN_Q_OVERFLOW:
                self.incomplete = "inotify's event queue overflowed"
                continue
            if mask & IN_IGNORED:
                self._wd.pop(wd, None)
                continue
            parent = self._wd.get(wd)
            if parent is None:
                continue
            path = os.path.join(parent, name)
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._entry(path, bool(mask & IN_ISDIR))
                if name == ".git":
                    self._found.add(path)
                elif name in GITDIR_SHAPE:
                    self._found.add(parent)  # perhaps a git directory: judged at the drain
                if mask & IN_ISDIR:
                    # Made (or moved in) with content before the watch could see
                    # it; a `.git` too, where a repository can be built unseen.
                    self._found.update(self._walk(path, watch=True))
            elif mask & IN_ISDIR and mask & IN_MOVED_FROM:
                # Its watches move with it under their old paths.
                self.incomplete = self.incomplete or "a directory was moved"

    def _catch_up(self) -> bool:
        """Read, under the lock, every event queued: what was made just before the
        question (a command's last act, a file the person saved a moment before
        the next command) is answered for, not left in the queue. False when the
        descriptor failed."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            self._events(data)
        return False

    def drain(self) -> tuple[list[str], list[str]]:
        """Every repository that appeared while watched and still exists (they join
        `made`), and every agent or editor config below the top that appeared and
        is there, unless it is one of the person's (moved, or under its own name);
        one that cannot be looked at is kept, for the guard to report. When the
        watch could not follow, one walk of the tree finds both."""
        with self._lock:
            self._catch_up()
            found, self._found = self._found, set()
            if self.incomplete:
                found |= set(self._walk(self.root, watch=False)) - self.existing
            found = {p for p in found
                     if os.path.basename(p) == ".git" or (p != self.root and bare_shaped(p))}
            self.made = {p for p in self.made | found if os.path.lexists(p)}
            self.existing -= self.made
            return sorted(self.made), self._drain_configs()

    def settle_configs(self) -> None:
        """What appeared while no command could have made it (no guard alive) is the
        person's: a `.vscode` they made between two commands is not the next one's."""
        with self._lock:
            self._catch_up()
            self._settle()

    def _settle(self) -> None:
        for path in self._found_configs:
            identity = _identity(path)
            if identity is not None and identity != (-1, -1):
                self.configs[path] = identity
        self._found_configs = set()

    def _drain_configs(self) -> list[str]:
        # The guard moves them away, so none stays to be counted the person's.
        found, self._found_configs = self._found_configs, set()
        theirs = set(self.configs.values())
        made = []
        for path in sorted(found):
            identity = _identity(path)
            if identity is not None and identity not in theirs:
                made.append(path)
        return made

    def adopt(self, paths: list[str]) -> None:
        """`paths` were made by commands stockade did not see end (it was killed)."""
        with self._lock:
            self.made.update(paths)
            self.existing.difference_update(paths)

    def held(self) -> tuple[str, ...]:
        """The person's repositories beneath the root (not its own `.git`), to hold."""
        with self._lock:
            top = os.path.join(self.root, ".git")
            return tuple(sorted(p for p in self.existing
                                if p != top and os.path.lexists(p)))

    def close(self) -> None:
        """Stop watching; the thread closes its own descriptors as it goes."""
        if self._stop_w < 0:
            return
        if self._thread is None:
            for fd in (self._fd, self._stop_r):
                if fd >= 0:
                    os.close(fd)
            self._fd = self._stop_r = -1
        else:
            os.write(self._stop_w, b"x")
        os.close(self._stop_w)
        self._stop_w = -1
