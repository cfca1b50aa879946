"""Every repository a command creates anywhere in the workspace, found without a walk per command.

`mkdir -p a/b && git -C a/b init && git -C a/b config core.fsmonitor CMD`
made a repository the host's `git status` in `a/b` obeyed (a prompt on `cd`,
an editor's scan): the guard looks only at a fixed set of names, and creating
`a/b/.git` changes nothing above `a/b`. So the workspace is walked once, when
its first writing command starts in this process, with an inotify watch on
every directory; from then on a new directory is watched as it appears and a
`.git` created or moved in anywhere is remembered, and the guard makes each
inert when its command ends. A command's cost is then what it changed.

It fails safe. Where the watch cannot follow (the kernel's limit on watches
reached, the event queue overflowed, a directory moved so its path is
stale), it says so (`incomplete`) and the next drain walks the tree again,
comparing against the repositories that existed at the start: correct, at
the cost of the walk.
"""

from __future__ import annotations

import os
import threading

from .watch import (
    IN_CREATE,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    events,
    inotify_add_watch,
    inotify_init,
    read_events,
)

IN_ISDIR = 0x40000000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR | IN_DONT_FOLLOW


class TreeWatch:
    """The `.git` entries that appear beneath `root` while it is watched."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.incomplete = ""
        self.directories = 0
        self._wd: dict[int, str] = {}
        self._lock = threading.Lock()
        self._found: set[str] = set()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._fd = -1
        self._thread: threading.Thread | None = None
        try:
            self._fd = inotify_init()
        except OSError as exc:
            self.incomplete = f"inotify unavailable ({exc.strerror or exc})"
        #: The repositories the person had: what a rescan compares against.
        self.existing = set(self._walk(root, watch=self._fd >= 0))
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
        """Every `.git` beneath `top` (not inside one, no link followed), watching each
        directory on the way when `watch`."""
        found: list[str] = []
        stack = [top]
        while stack:
            path = stack.pop()
            if watch and not self.incomplete:
                try:
                    self._wd[inotify_add_watch(self._fd, path, _MASK)] = path
                    self.directories += 1
                except OSError as exc:
                    if exc.errno == 28:  # ENOSPC: the per-user watch limit
                        self.incomplete = ("the kernel's inotify watch limit "
                                           "(fs.inotify.max_user_watches) was reached")
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for entry in entries:
                if entry.name == ".git":
                    found.append(entry.path)
                    continue
                try:
                    # The directory entry's type, no stat: a file costs nothing.
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                except OSError:
                    continue
        return found

    def _loop(self) -> None:
        read_events(self._fd, self._stop_r, self._locked_events)

    def _locked_events(self, data: bytes) -> None:
        with self._lock:
            self._events(data)

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
            if os.path.basename(path) == ".git":
                if mask & (IN_CREATE | IN_MOVED_TO):
                    self._found.add(path)
            elif mask & IN_ISDIR and mask & IN_MOVED_FROM:
                # Its watches move with it under their old paths.
                self.incomplete = self.incomplete or "a directory was moved"
            elif mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                # Made (or moved in) with content before the watch could see it.
                self._found.update(self._walk(path, watch=True))

    def drain(self) -> list[str]:
        """The `.git` paths that appeared since the last drain (all that exist and
        were not the person's, after a rescan when the watch could not follow)."""
        with self._lock:
            found, self._found = self._found, set()
            if self.incomplete:
                found |= set(self._walk(self.root, watch=False)) - self.existing
        return sorted(p for p in found if os.path.lexists(p))

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
