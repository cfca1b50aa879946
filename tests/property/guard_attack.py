"""One hostile command's leftovers against the metadata guard, judged from outside.

A case (plain JSON, so the same cases run under Debian's python3 as an
unprivileged user) says what the workspace held before the command and what
the command did to it. `run_case` builds a fresh directory holding the
workspace, a victim tree beside it (a repository of the person's, with a
hook, a credentials config, a submodule and a worktree, plus plain files)
and stockade's state dir, then:

    build the profile; MetadataGuard A (and B, for two overlapping commands)
    apply the case's operations to the workspace, as the command
    release A (and B), while a thread flips one directory to a symlink and back
    build a new profile and guard on the same workspace, release it

and returns every violation it saw: the victim tree or the directory beside
the workspace changed (names, types, modes, owners, sizes, bytes, inode
numbers, mtimes), a step of stockade's did not finish within `LIMIT`
seconds, the process read more than `READ_BOUND` bytes (`rchar` in
/proc/self/io, the kernel's own count), a quarantine entry's recorded
origin is not beneath the workspace, a step raised, or a later command
could not start.

The operations never follow a symlink themselves (every directory on the
way is opened with O_NOFOLLOW), so whatever reaches the victim is the
guard's doing, not the attacker's.

As a script: python3 guard_attack.py --site SITE CASES.json BASE SHM_BASE
runs every case of CASES.json in both shapes (one guard, two overlapping)
under BASE (and SHM_BASE for a state dir on another filesystem) and prints
one JSON line per run: {"case": i, "overlap": bool, "violations": [...]}.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import inspect
import json
import os
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time

#: Seconds any one step of stockade's may take; a FIFO read would take forever.
LIMIT = 10.0
#: Bytes stockade may read through a whole case. Every file the cases plant
#: is tiny or over every cap stockade reads with, so a read anywhere near
#: this is one that ignored a cap (or read a device or sparse file through).
READ_BOUND = 64 << 20
#: The shared index the crafted `link` extensions name (sha1 width).
SHARED = "ab" * 20
#: A relative climb that reaches / from any depth the cases build.
UPS = "../" * 48

#: Victim files a hard link may share an inode with.
VICTIM_FILES = ("secret.txt", "repo/.git/config", "repo/.git/hooks/pre-commit",
                "repo/.git/index", "config")


def crafted_index(gitlinks: list[str], shared: str = "") -> bytes:
    """A version 2 git index whose entries are `gitlinks` (mode 160000), named as given;
    with `shared`, a `link` extension naming `sharedindex.<shared>` (a split index)."""
    body = b""
    for name in gitlinks:
        raw = name.encode("utf-8", "surrogateescape")
        entry = (struct.pack(">10I", 0, 0, 0, 0, 0, 0, 0o160000, 0, 0, 0) + bytes(20)
                 + struct.pack(">H", min(len(raw), 0xFFF)) + raw)
        body += entry + b"\0" * (8 - len(entry) % 8)
    ext = b""
    if shared:
        empty_ewah = struct.pack(">III", 0, 0, 0)
        data = bytes.fromhex(shared) + empty_ewah * 2
        ext = b"link" + struct.pack(">I", len(data)) + data
    content = b"DIRC" + struct.pack(">II", 2, len(gitlinks)) + body + ext
    return content + hashlib.sha1(content).digest()


# -- the world ---------------------------------------------------------------------------


class World:
    """One case's directories: top/{ws,victim,state}, the state possibly on tmpfs."""

    def __init__(self, base: str, shm_base: str, state_on_tmpfs: bool) -> None:
        self.top = tempfile.mkdtemp(prefix="case-", dir=base)
        os.chmod(self.top, 0o755)
        self.ws = os.path.join(self.top, "ws")
        self.victim = os.path.join(self.top, "victim")
        self.shm_top = ""
        if state_on_tmpfs and shm_base and os.stat(shm_base).st_dev != os.stat(base).st_dev:
            # Quarantine across filesystems: a copy through descriptors, not a rename.
            self.shm_top = tempfile.mkdtemp(prefix="case-", dir=shm_base)
            self.state = os.path.join(self.shm_top, "state")
        else:
            self.state = os.path.join(self.top, "state")
        os.mkdir(self.ws, 0o755)
        os.mkdir(self.state, 0o700)

    def resolve(self, text: str, link_name: str = "") -> str:
        """A symbolic name of the case made concrete for this world."""
        return (text.replace("@U", UPS + self.top.lstrip("/")).replace("@V", self.victim)
                .replace("@W", self.ws).replace("@T", self.top).replace("@SELF", link_name))

    def outside(self) -> dict[str, object]:
        """Everything the guard must leave alone, as it is now."""
        out: dict[str, object] = {"victim": snapshot(self.victim),
                                  "top": sorted(os.listdir(self.top))}
        if self.shm_top:
            out["shm_top"] = sorted(os.listdir(self.shm_top))
        return out

    def unjam(self) -> None:
        """Wake whatever is blocked opening a FIFO in the world (O_RDWR never blocks)."""
        for where in (self.ws, self.state):
            for dirpath, dirs, files in os.walk(where):
                for name in dirs + files:
                    path = os.path.join(dirpath, name)
                    try:
                        if stat.S_ISFIFO(os.lstat(path).st_mode):
                            os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW))
                    except OSError:
                        pass

    def remove(self) -> None:
        for path in (self.top, self.shm_top):
            if path:
                shutil.rmtree(path, ignore_errors=True)


def _write(path: str, data: bytes | str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def build_victim(victim: str) -> None:
    """A repository of the person's outside the workspace, and plain files beside it."""
    j = os.path.join
    git = j(victim, "repo", ".git")
    for d in ("objects", "refs/heads"):
        os.makedirs(j(git, d))
    _write(j(victim, "repo", "README"), "the person's project\n")
    _write(j(git, "HEAD"), "ref: refs/heads/main\n")
    _write(j(git, "config"), "[core]\n\trepositoryformatversion = 0\n\tsshCommand = ssh -i "
           "~/.ssh/work\n[credential]\n\thelper = store\n")
    _write(j(git, "hooks", "pre-commit"), "#!/bin/sh\nexit 0\n", 0o755)
    _write(j(git, "hooks", "pre-commit.sample"), "#!/bin/sh\n")
    _write(j(git, "index"), crafted_index(["m"]))
    _write(j(git, "modules", "m", "config"), "[core]\n\tworktree = ../../../m\n")
    _write(j(git, "modules", "m", "hooks", "post-checkout"), "#!/bin/sh\nexit 0\n", 0o755)
    _write(j(git, "worktrees", "w", "gitdir"), j(victim, "wt", ".git") + "\n")
    _write(j(git, "worktrees", "w", "commondir"), "../..\n")
    _write(j(victim, "repo", "m", ".git"), "gitdir: ../.git/modules/m\n")
    _write(j(victim, "wt", ".git"), f"gitdir: {git}/worktrees/w\n")
    _write(j(victim, "secret.txt"), "a decoy credential\n", 0o600)
    _write(j(victim, "config"), "[core]\n\tfsmonitor = /bin/true\n")
    _write(j(victim, "dir", "file"), "x\n", 0o640)


def build_base(ws: str, base: dict[str, bool]) -> None:
    """The workspace as the person left it before the command."""
    j = os.path.join
    if base.get("repo"):
        git = j(ws, ".git")
        for d in ("objects", "refs/heads", "info"):
            os.makedirs(j(git, d))
        _write(j(git, "HEAD"), "ref: refs/heads/main\n")
        _write(j(git, "config"), "[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        _write(j(git, "hooks", "pre-commit.sample"), "#!/bin/sh\n")
        _write(j(git, "info", "exclude"), "# exclude\n")
        _write(j(git, "index"), crafted_index(["m"] if base.get("submodule") else []))
        if base.get("submodule"):
            mod = j(git, "modules", "m")
            os.makedirs(j(mod, "objects"))
            _write(j(mod, "HEAD"), "ref: refs/heads/main\n")
            _write(j(mod, "config"), "[core]\n\trepositoryformatversion = 0\n"
                   "\tworktree = ../../../m\n")
            _write(j(mod, "hooks", "post-checkout.sample"), "#!/bin/sh\n")
            _write(j(ws, "m", ".git"), "gitdir: ../.git/modules/m\n")
        if base.get("worktree"):
            wt = j(git, "worktrees", "w")
            _write(j(wt, "HEAD"), "ref: refs/heads/w\n")
            _write(j(wt, "gitdir"), j(ws, "wt", ".git") + "\n")
            _write(j(wt, "commondir"), "../..\n")
            _write(j(ws, "wt", ".git"), f"gitdir: {wt}\n")
    if base.get("extras"):
        _write(j(ws, ".vscode", "settings.json"), "{}\n")
        _write(j(ws, "stockade.toml"), "[sandbox]\n")
    _write(j(ws, "src.py"), "x = 1\n")


def snapshot(root: str) -> dict[str, tuple[object, ...]]:
    """Every entry under `root`: type, mode, owner, size, inode, mtime, and bytes or target.

    No link is followed and nothing but a regular file is opened (a FIFO a
    broken guard moved here must not hang the check)."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if dirpath == root else [*dirs, *files]:
            path = os.path.normpath(os.path.join(dirpath, name))
            st = os.lstat(path)
            body: object = None
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                try:
                    body = os.read(fd, 1 << 20)
                finally:
                    os.close(fd)
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size,
                                                st.st_ino, st.st_mtime_ns, body)
    return out


@contextlib.contextmanager
def memory_cap(headroom: int = 3 << 30):  # type: ignore[no-untyped-def]
    """RLIMIT_AS at what the process maps now plus `headroom`, for the duration: a read
    that ignores a cap then fails with MemoryError (and shows in `rchar`) instead of
    filling the machine's memory from a 10 GiB sparse file."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", "rb") as fh:
        mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = mapped + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def rchar() -> int:
    with open("/proc/self/io", "rb") as fh:
        for line in fh:
            if line.startswith(b"rchar:"):
                return int(line.split()[1])
    return 0


# -- the command's operations --------------------------------------------------------------


def _walk(ws_fd: int, rel: str, create: bool) -> int | None:
    """A descriptor of directory `rel` beneath the workspace, every component a real
    directory (made when `create`); None when one is a link, a file or missing."""
    fd = os.dup(ws_fd)
    for part in [p for p in rel.split("/") if p]:
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def _clear(fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=fd)
    else:
        os.unlink(name, dir_fd=fd)


def _content(spec: list[object], world: World) -> tuple[bytes, int]:
    kind = spec[0]
    r = world.resolve
    if kind == "hook":
        return b"#!/bin/sh\ntouch pwned\n", 0o755
    if kind == "plan":
        return b"pick 0000000 x\nexec touch pwned\n", 0o644
    if kind == "junk":
        return b"\xff\xfe\x00[core\n\tfsmonitor\n", 0o644
    if kind == "empty":
        return b"", 0o644
    if kind == "config":
        worktree, include, hooks = spec[1:4]
        text = "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch pwned\n"
        if worktree is not None:
            text += f"\tworktree = {r(str(worktree))}\n"
        if hooks is not None:
            text += f"\thooksPath = {r(str(hooks))}\n"
        text += "[extensions]\n\tworktreeConfig = true\n"
        if include is not None:
            text += f"[include]\n\tpath = {r(str(include))}\n"
        return text.encode("utf-8", "surrogateescape"), 0o644
    if kind == "gitdir":
        return f"gitdir: {r(str(spec[1]))}\n".encode("utf-8", "surrogateescape"), 0o644
    if kind == "line":
        return f"{r(str(spec[1]))}\n".encode("utf-8", "surrogateescape"), 0o644
    if kind == "index":
        names = [r(str(n)) for n in spec[1]]  # type: ignore[union-attr]
        return crafted_index(names, SHARED if spec[2] else ""), 0o644
    raise ValueError(f"unknown content {spec!r}")


def _expand(op: list[object], world: World) -> list[list[object]]:
    """A compound operation as the plain ones it is made of."""
    kind = op[0]
    if kind == "repo":
        at, links, shared = str(op[1]), op[2], op[3]
        g = f"{at}/.git" if at else ".git"
        out: list[list[object]] = [
            ["file", f"{g}/HEAD", ["line", "ref: refs/heads/main"]],
            ["dir", f"{g}/objects"], ["dir", f"{g}/refs"],
            ["file", f"{g}/config", ["config", None, None, None]],
            ["file", f"{g}/hooks/pre-commit", ["hook"]],
            ["file", f"{g}/index", ["index", links, shared is not None]]]
        if shared is not None:
            out.append(["file", f"{g}/sharedindex.{SHARED}", ["index", shared, False]])
        return out
    if kind == "chain":
        # Repositories nested through their gitlinks, past the guard's depth limit.
        at, depth = str(op[1]), int(op[2])  # type: ignore[call-overload]
        out = []
        for i in range(depth):
            d = "/".join([p for p in (at, *(["r"] * i)) if p])
            g = f"{d}/.git" if d else ".git"
            out += [["file", f"{g}/HEAD", ["line", "ref: refs/heads/main"]],
                    ["file", f"{g}/config", ["config", None, None, None]],
                    ["file", f"{g}/hooks/post-checkout", ["hook"]],
                    ["file", f"{g}/index", ["index", ["r"], False]]]
        return out
    if kind == "worktree":
        name, gitdir, common = op[1:4]
        w = f".git/worktrees/{name}"
        return [["file", f"{w}/HEAD", ["line", "ref: refs/heads/x"]],
                ["file", f"{w}/gitdir", ["line", gitdir]],
                ["file", f"{w}/commondir", ["line", common]],
                ["file", f"{w}/config.worktree", ["config", gitdir, None, "hooks"]],
                ["file", f"{w}/hooks/pre-commit", ["hook"]],
                ["file", f"{w}/index", ["index", ["sub", "..", "@V/repo"], False]]]
    if kind == "module":
        name, worktree = op[1:3]
        m = f".git/modules/{name}"
        return [["file", f"{m}/HEAD", ["line", "ref: refs/heads/main"]],
                ["file", f"{m}/config", ["config", worktree, None, None]],
                ["file", f"{m}/hooks/post-checkout", ["hook"]],
                ["file", f"{m}/index", ["index", ["m", "../../victim/repo"], False]]]
    if kind == "bare":
        # The workspace's top laid out as a bare repository.
        return [["file", "HEAD", ["line", "ref: refs/heads/main"]], ["dir", "objects"],
                ["dir", "refs"], ["file", "config", ["config", "@V/repo", "@V/config", "@V"]],
                ["file", "index", ["index", ["sub", "../victim/repo"], True]],
                ["file", f"sharedindex.{SHARED}", ["index", ["@V/repo"], False]]]
    if kind == "cycle":
        # Two repositories the command made, each leading to the other.
        return [["file", "a/.git", ["gitdir", "@W/b/.git"]],
                ["file", "b/.git/HEAD", ["line", "ref: refs/heads/main"]],
                ["file", "b/.git/config", ["config", "../../a", None, None]],
                ["file", "b/.git/index", ["index", ["x", "a"], False]],
                ["file", "b/x/.git", ["gitdir", "../../a/.git"]],
                ["file", "b/.git/modules/c/commondir", ["line", "../.."]],
                ["file", "b/.git/modules/c/config", ["config", "../../../../a", None, None]],
                ["file", "b/.git/modules/c/index", ["index", ["b"], False]],
                ["file", ".git/index", ["index", ["a", "b"], False]]]
    return [op]


def apply_op(ws_fd: int, op: list[object], world: World) -> None:
    """One operation of the command; a failure (an earlier operation put a file where
    this one needs a directory) is the command's problem and is ignored."""
    for step in _expand(op, world):
        with contextlib.suppress(OSError, ValueError):
            _apply(ws_fd, step, world)


def _apply(ws_fd: int, op: list[object], world: World) -> None:
    kind, rel = str(op[0]), str(op[1])
    head, _, name = rel.rpartition("/")
    if kind == "nest":
        fd = _walk(ws_fd, "/".join([rel] + ["d"] * int(op[2])), create=True)  # type: ignore[call-overload]
        if fd is not None:
            with contextlib.suppress(OSError):
                os.mkdir(".git", dir_fd=fd)
                os.mkdir(".git/hooks", dir_fd=fd)
                _create(fd, ".git/hooks/pre-commit", b"#!/bin/sh\n", 0o755)
            os.close(fd)
        return
    if not name:
        return
    fd = _walk(ws_fd, head, create=True)
    if fd is None:
        return
    try:
        if kind == "dir":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            return
        if kind == "rm":
            _clear(fd, name)
            return
        if kind == "move":
            dest = str(op[2])
            dhead, _, dname = dest.rpartition("/")
            dfd = _walk(ws_fd, dhead, create=True)
            if dfd is not None and dname:
                try:
                    _clear(dfd, dname)
                    os.rename(name, dname, src_dir_fd=fd, dst_dir_fd=dfd)
                finally:
                    os.close(dfd)
            return
        _clear(fd, name)
        if kind == "file":
            data, mode = _content(op[2], world)  # type: ignore[arg-type]
            _create(fd, name, data, mode)
        elif kind == "link":
            os.symlink(world.resolve(str(op[2]), name), name, dir_fd=fd)
        elif kind == "hard":
            os.link(os.path.join(world.victim, str(op[2])), name, dst_dir_fd=fd,
                    follow_symlinks=False)
        elif kind == "fifo":
            os.mkfifo(name, 0o644, dir_fd=fd)
        elif kind == "sock":
            os.mknod(name, stat.S_IFSOCK | 0o644, dir_fd=fd)
        elif kind == "dev":
            # Devices no driver answers (major 0): opening one fails, never blocks.
            node = stat.S_IFCHR if len(name) % 2 else stat.S_IFBLK
            os.mknod(name, node | 0o644, os.makedev(0, 0), dir_fd=fd)
        elif kind == "sparse":
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                          dir_fd=fd)
            try:
                os.ftruncate(out, int(op[2]))  # type: ignore[call-overload]
            finally:
                os.close(out)
        else:
            raise ValueError(f"unknown operation {op!r}")
    finally:
        os.close(fd)


def _create(fd: int, name: str, data: bytes, mode: int) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        os.fchmod(out, mode)
    finally:
        os.close(out)


# -- a directory swapped for a link while stockade works -----------------------------------


_RENAME_EXCHANGE = 2


class Flipper:
    """Swaps a directory of the workspace with a symlink to the victim, over and over,
    with renameat2(RENAME_EXCHANGE) (so the name is never missing), until stopped,
    for at most `LIMIT` seconds."""

    def __init__(self, ws_fd: int, rel: str, target: str) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        head, _, self.name = rel.rpartition("/")
        self.link = f".{self.name}.flip"
        self.fd = _walk(ws_fd, head, create=True)
        if self.fd is None:
            return
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.name, 0o755, dir_fd=self.fd)
            if not stat.S_ISDIR(os.stat(self.name, dir_fd=self.fd,
                                        follow_symlinks=False).st_mode):
                raise NotADirectoryError(rel)
            inner = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                            dir_fd=self.fd)
            try:
                # Work for the guard inside it: a hook, and a config that runs a program.
                for leaf, data, mode in (("pre-commit", b"#!/bin/sh\ntouch pwned\n", 0o755),
                                         ("config", b"[core]\n\tfsmonitor = x\n", 0o644)):
                    with contextlib.suppress(OSError):
                        _create(inner, leaf, data, mode)
            finally:
                os.close(inner)
            _clear(self.fd, self.link)
            os.symlink(target, self.link, dir_fd=self.fd)
        except OSError:
            os.close(self.fd)
            self.fd = None
            return
        libc = ctypes.CDLL(None, use_errno=True)
        self._renameat2 = getattr(libc, "renameat2", None)
        self._thread = threading.Thread(target=self._loop, name="flipper", daemon=True)
        self._thread.start()

    def _swap(self) -> bool:
        a, b = self.name.encode(), self.link.encode()
        if self._renameat2 is not None:
            ok = self._renameat2(self.fd, a, self.fd, b, _RENAME_EXCHANGE) == 0
            if ok or ctypes.get_errno() != errno.EINVAL:
                return ok
        try:  # no RENAME_EXCHANGE on this filesystem: a name briefly missing
            os.rename(a, b"." + a + b".tmp", src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.rename(b, a, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.rename(b"." + a + b".tmp", b, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError:
            return False
        return True

    def _loop(self) -> None:
        end = time.monotonic() + LIMIT
        while not self._stop.is_set() and time.monotonic() < end:
            if self._swap():
                self.count += 1
            else:
                time.sleep(0.0005)

    def stop(self, as_directory: bool) -> None:
        """Stop flipping; `as_directory`: leave the directory at its name, not the link."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            at = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
            if as_directory and stat.S_ISLNK(at.st_mode):
                self._swap()
        os.close(self.fd)
        self.fd = None


# -- stockade, bounded ---------------------------------------------------------------------


class Hung(Exception):
    pass


class _Stop(Exception):
    """A step of stockade's failed or hung: recorded, and the case goes no further."""


def bounded(fn, what: str, world: World):  # type: ignore[no-untyped-def]
    """fn() on a thread of its own; Hung when it takes longer than LIMIT."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(LIMIT)
    if thread.is_alive():
        end = time.monotonic() + 5
        while thread.is_alive() and time.monotonic() < end:
            world.unjam()
            thread.join(0.1)
        raise Hung(f"{what} did not finish within {LIMIT:.0f} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def _profile(ws: str):  # type: ignore[no-untyped-def]
    from stockade.boundary import build_profile
    from stockade.capabilities import capabilities_for_mode

    caps = capabilities_for_mode("workspace-write", ws)
    return build_profile(mode="workspace-write", workspace=ws, cwd=ws, capabilities=caps,
                         read_scope="host", host_env={"HOME": "/nonexistent"},
                         use_scratch=False)


def _guard(profile, state: str, case: dict[str, object]):  # type: ignore[no-untyped-def]
    from stockade.drivers.linux.host.guard import MetadataGuard

    kw = {}
    if "watch" in inspect.signature(MetadataGuard.__init__).parameters:
        kw["watch"] = bool(case.get("watch"))
    return MetadataGuard(profile, state, restore_content=bool(case.get("content")), **kw)


FLIP_TARGETS = {".git": "@V/repo/.git", "hooks": "@V/repo/.git/hooks"}


def run_case(case: dict[str, object], base: str, shm_base: str, *, overlap: bool) -> list[str]:
    """The violations one case produces; [] when stockade held."""
    world = World(base, shm_base, case.get("state") == "tmpfs")
    try:
        with memory_cap():
            return _run(case, world, overlap)
    finally:
        world.unjam()
        world.remove()


def _run(case: dict[str, object], world: World, overlap: bool) -> list[str]:
    build_victim(world.victim)
    build_base(world.ws, case.get("base") or {})  # type: ignore[arg-type]
    before = world.outside()
    bad: list[str] = []

    def step(fn, what: str):  # type: ignore[no-untyped-def]
        try:
            return bounded(fn, what, world)
        except Hung as exc:
            bad.append(str(exc))
            raise _Stop from exc
        except Exception as exc:
            bad.append(f"{what} raised {type(exc).__name__}: {exc}")
            raise _Stop from exc

    read0 = rchar()
    try:
        profile = step(lambda: _profile(world.ws), "building the profile")
        guards = [step(lambda: _guard(profile, world.state, case), "guard A")]
        if overlap:
            guards.append(step(lambda: _guard(profile, world.state, case), "guard B"))
        ws_fd = os.open(world.ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for op in case.get("ops") or ():  # type: ignore[attr-defined]
                apply_op(ws_fd, op, world)
            flip = case.get("flip")
            flipper = None
            if flip:
                name = os.path.basename(str(flip))
                flipper = Flipper(ws_fd, str(flip),
                                  world.resolve(FLIP_TARGETS.get(name, "@V/repo")))
            try:
                step(guards[0].release, "release of guard A")
            finally:
                if flipper is not None:
                    # Two commands: B's tree may have left the link in place,
                    # and B's release must deal with it. One command: it is dead.
                    flipper.stop(as_directory=not overlap)
            if overlap:
                step(guards[1].release, "release of guard B")
        finally:
            os.close(ws_fd)
    except _Stop:
        return bad
    read = rchar() - read0
    if read > READ_BOUND:
        bad.append(f"read {read} bytes through the guard's work (bound {READ_BOUND})")
    bad += _outside_changed(before, world, "after the release")
    bad += _origins(world)
    try:
        later = step(lambda: _profile(world.ws), "a later command's profile")
        guard = step(lambda: _guard(later, world.state, case), "a later command's guard")
        step(guard.release, "a later command's release")
    except _Stop:
        return bad
    bad += _outside_changed(before, world, "after a later command")
    bad += _origins(world)
    return bad


def _outside_changed(before: dict[str, object], world: World, when: str) -> list[str]:
    after = world.outside()
    bad = []
    for key, was in before.items():
        now = after[key]
        if now == was:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            diff = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
            bad.append(f"{when}: the victim tree changed at {diff[:8]}")
        else:
            bad.append(f"{when}: beside the workspace ({key}) {was} became {now}")
    return bad


def _origins(world: World) -> list[str]:
    """Every quarantine entry must say it came from beneath the workspace."""
    bad = []
    quarantine = os.path.join(world.state, "quarantine")
    for dirpath, _dirs, files in os.walk(quarantine):
        if "origin" not in files:
            continue
        path = os.path.join(dirpath, "origin")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            origin = os.read(fd, 1 << 16).decode("utf-8", "surrogateescape").rstrip("\n")
        finally:
            os.close(fd)
        norm = os.path.normpath(origin)
        if origin != norm or not norm.startswith(world.ws + "/"):
            bad.append(f"a quarantine entry from outside the workspace: {origin!r}")
    return bad


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] != "--site":
        print(__doc__, file=sys.stderr)
        return 2
    site, cases_file, base, shm_base = argv[1:]
    sys.path.insert(0, site)
    with open(cases_file) as fh:
        cases = json.load(fh)
    for i, case in enumerate(cases):
        for overlap in (False, True):
            bad = run_case(case, base, shm_base, overlap=overlap)
            print(json.dumps({"case": i, "overlap": overlap, "violations": bad}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
