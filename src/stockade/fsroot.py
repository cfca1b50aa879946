"""A directory opened once, and every host-side operation on its content relative to it.

The workspace is written by the adversary, and stockade reads, rewrites and
moves what a command left there on the host, as the person. Modelled on Go's
`os.Root` and Rust's cap-std: a `Root` holds a descriptor of the directory,
and a relative name can reach nothing outside it, because on Linux the
kernel resolves it (`openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS) and elsewhere a walk that opens one real directory at
a time with O_NOFOLLOW and refuses `..`. There is no string test of
containment here to get wrong: `/ws/../../etc` is not beneath `/ws`, and a
symlink the command planted one level up is not a way through.

No open can block or read without bound: a FIFO, socket or device planted at
a name stockade reads is refused, never waited on (a blocked read held the
workspace's guard lock, and every later command on it hung for good), and
files are read up to a cap.

Names read from workspace content (git index entries, `gitdir:` pointers,
manifest lines) are data: `check_name` refuses an absolute name, `..`, `.`,
an empty component or a NUL before anything is joined.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from .capabilities import within

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterator

# openat2(2): the same number on every architecture stockade supports.
_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Every read: a final symlink, a FIFO's writer or a terminal is never waited for.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class Refused(OSError):
    """A path stockade will not follow or read: it leaves the root, is not a regular
    file where one is expected, or is over the size it reads."""


class UnsafeName(ValueError):
    """A name taken from workspace content that would not stay where it was found."""


def check_name(name: str, *, git: bool = False) -> str:
    """`name`, if it is a plain relative path that stays beneath where it is joined.

    `git`: also refuse what git itself refuses in an index entry (a `.git`
    component in any case, a trailing slash), so a gitlink the person's git
    could never check out is not one stockade follows either.
    """
    if not name or "\x00" in name or name.startswith("/"):
        raise UnsafeName(f"not a relative name: {name!r}")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise UnsafeName(f"a name with {part or 'an empty'!r} component: {name!r}")
        if git and part.lower() == ".git":
            raise UnsafeName(f"a name with a .git component: {name!r}")
    return name


class _Syscall:
    """openat2 through `_ctypes`, bound on first use (see seccomp.Syscall for why not ctypes)."""

    fn: object = None
    missing = False


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    """openat2 beneath `dir_fd`, or -1 when this kernel or platform has none."""
    if _Syscall.missing:
        return -1
    if _Syscall.fn is None:
        if not sys.platform.startswith("linux"):
            _Syscall.missing = True
            return -1
        from .drivers.linux.init.seccomp import libc_syscall

        _Syscall.fn = libc_syscall()
    how = (flags.to_bytes(8, "little") + mode.to_bytes(8, "little")
           + _RESOLVE.to_bytes(8, "little"))
    try:
        return int(_Syscall.fn(_OPENAT2, dir_fd, os.fsencode(rel), how, len(how)))  # type: ignore[operator]
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM):
            # No openat2 (kernel < 5.6), or a seccomp filter that forbids it.
            _Syscall.missing = True
            return -1
        if exc.errno == errno.EXDEV:
            raise Refused(errno.EXDEV, f"leaves the directory it is read from: {rel}") from None
        if exc.errno == errno.ELOOP:
            raise Refused(errno.ELOOP, f"a symbolic link on the way: {rel}") from None
        raise


class Root:
    """A directory held open; every operation takes a name relative to it and stays beneath it.

    The directory itself is opened by its path once, at construction: it is
    one the person or stockade chose (the workspace, a writable root,
    stockade's state), never a name read from content.
    """

    __slots__ = ("fd", "path")

    def __init__(self, path: str, fd: int = -1) -> None:
        self.path = path
        self.fd = fd if fd >= 0 else os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Root({self.path!r})"

    def join(self, rel: str) -> str:
        """The host path of `rel`, for messages and records only: never opened by it."""
        return os.path.join(self.path, rel) if rel else self.path

    # -- resolution ------------------------------------------------------------------

    def open(self, rel: str, flags: int = _READ_FLAGS, mode: int = 0) -> int:
        """A descriptor of `rel`, resolved beneath the root with no symlink followed."""
        flags |= os.O_CLOEXEC | os.O_NOFOLLOW
        if rel in ("", "."):
            return os.open(".", flags, dir_fd=self.fd)
        if rel.startswith("/"):
            raise Refused(errno.EXDEV, f"an absolute name: {rel}")
        fd = _openat2(self.fd, rel, flags, mode)
        if fd >= 0:
            return fd
        parent, name = self._walk(rel)
        try:
            return os.open(name, flags, mode, dir_fd=parent)
        finally:
            os.close(parent)

    def _walk(self, rel: str) -> tuple[int, str]:
        """(fd of `rel`'s parent, last name): one real directory at a time, no `..`."""
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise Refused(errno.EXDEV, f"leaves the directory it is read from: {rel}")
        fd = os.open(".", _DIR_FLAGS, dir_fd=self.fd)
        try:
            for part in parts[:-1]:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError:
            os.close(fd)
            raise
        return fd, parts[-1]

    def parent(self, rel: str) -> tuple[int, str]:
        """(fd of `rel`'s directory, its last name); the caller closes the fd.

        For what must act on the entry itself, symlink or not: lstat, unlink,
        rename. Raises OSError when a directory on the way is missing, a
        symlink or not a directory.
        """
        head, _, name = rel.rpartition("/")
        if not name or name in (".", ".."):
            raise Refused(errno.EXDEV, f"no entry to act on: {rel!r}")
        return self.open(head, _DIR_FLAGS), name

    def sub(self, rel: str) -> Root:
        """A Root for the directory `rel` beneath this one."""
        return Root(self.join(rel), self.open(rel, _DIR_FLAGS))

    # -- questions ---------------------------------------------------------------------

    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry itself, or None when no real entry is there (missing, or a
        directory on the way is missing, a symlink or a file)."""
        try:
            if rel in ("", "."):
                return os.stat(self.fd)
            fd, name = self.parent(rel)
        except (FileNotFoundError, NotADirectoryError, Refused):
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                return None
            raise
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)

    def kind(self, rel: str) -> str:
        """"dir", "file", "link", "other" (a FIFO, socket or device) or "" when missing."""
        st = self.lstat(rel)
        if st is None:
            return ""
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        if stat.S_ISREG(st.st_mode):
            return "file"
        return "link" if stat.S_ISLNK(st.st_mode) else "other"

    def listdir(self, rel: str = "") -> list[str]:
        """The names in directory `rel`, sorted; [] when it is not a real directory."""
        try:
            fd = self.open(rel, _DIR_FLAGS)
        except OSError:
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    # -- reading -----------------------------------------------------------------------

    def read(self, rel: str, cap: int) -> bytes:
        """A regular file's bytes. Raises FileNotFoundError when missing, Refused when
        it is something else or larger than `cap`, OSError otherwise."""
        fd = self.open(rel, _READ_FLAGS)
        try:
            return read_fd(fd, cap, self.join(rel))
        finally:
            os.close(fd)

    def head(self, rel: str, size: int = 1 << 16) -> bytes:
        """Up to `size` bytes of a regular file; b"" when it is not one or unreadable."""
        try:
            fd = self.open(rel, _READ_FLAGS)
        except OSError:
            return b""
        return _head(fd, size)

    # -- changing --------------------------------------------------------------------

    def create(self, rel: str, data: bytes, mode: int = 0o644) -> None:
        """A new regular file at `rel` (which must not exist) holding `data`."""
        fd, name = self.parent(rel)
        try:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, mode, dir_fd=fd)
        finally:
            os.close(fd)
        with open(out, "wb") as fh:
            fh.write(data)

    def replace(self, rel: str, data: bytes, mode: int = 0o644,
                like: os.stat_result | None = None) -> None:
        """A new regular file at `rel` holding `data`, in place of whatever entry is there.

        Written under a fresh name beside it, then renamed over it: what a
        command left at `rel` is unlinked, never opened, so a FIFO there
        cannot hold the write and a file hard-linked to one outside the
        root is not written through. With `like` (the file replaced), the new
        one keeps its mode and, where this user may give it, its owner, and is
        on disk before the rename: a person's settings can hold secrets, and a
        looser or half-written copy would leak or lose them.
        """
        import contextlib

        fd, name = self.parent(rel)
        try:
            tmp = f".stockade-new-{os.urandom(6).hex()}"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600 if like is not None else mode, dir_fd=fd)
            try:
                with open(out, "wb") as fh:
                    if like is not None:
                        os.fchmod(out, stat.S_IMODE(like.st_mode))
                        if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                            with contextlib.suppress(PermissionError):
                                os.fchown(out, like.st_uid, like.st_gid)
                    fh.write(data)
                    if like is not None:
                        fh.flush()
                        os.fsync(out)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)

    def makedirs(self, rel: str, mode: int = 0o700) -> None:
        """Every missing directory of `rel`, beneath the root, none through a symlink."""
        done = ""
        for part in rel.split("/"):
            done = f"{done}/{part}" if done else part
            fd, name = self.parent(done)
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except FileExistsError:
                pass
            finally:
                os.close(fd)

    def remove(self, rel: str) -> None:
        """Remove `rel`, whatever it is, without following a link (see fstree.remove_entry)."""
        from .drivers.linux.host.fstree import remove_entry

        fd, name = self.parent(rel)
        try:
            remove_entry(fd, name)
        finally:
            os.close(fd)

    def move_to(self, rel: str, dest: Root, dest_rel: str) -> bool:
        """Move `rel` to `dest_rel` beneath `dest`; False when it was too large (or too
        unreadable) to copy across filesystems and was removed instead.

        A rename where both share a filesystem; otherwise a copy through
        descriptors (fstree's budget), then removal.
        """
        from .drivers.linux.host.fstree import TooLarge, read_tree, remove_entry, write_tree

        fd, name = self.parent(rel)
        try:
            dfd, dname = dest.parent(dest_rel)
            try:
                try:
                    os.rename(name, dname, src_dir_fd=fd, dst_dir_fd=dfd)
                    return True
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                try:
                    tree = read_tree(fd, name)
                except (TooLarge, OSError):
                    # Too large, or made unreadable inside (a directory of mode
                    # 0300 among the hooks): removed, never left where it runs.
                    tree = None
                if tree is not None:
                    write_tree(dfd, dname, tree)
                remove_entry(fd, name)
                return tree is not None
            finally:
                os.close(dfd)
        finally:
            os.close(fd)


def read_fd(fd: int, cap: int, what: str = "") -> bytes:
    """All of a regular file open at `fd`, refused when it is not one or over `cap` bytes."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(errno.EINVAL, f"not a regular file: {what}")
    if st.st_size > cap:
        raise Refused(errno.EFBIG, f"larger than {cap} bytes: {what}")
    chunks: list[bytes] = []
    left = cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > cap:
        raise Refused(errno.EFBIG, f"larger than {cap} bytes: {what}")
    return data


def head_of(path: str, size: int = 1 << 16) -> bytes:
    """`Root.head` for a file named by its path: the last name is not followed, and
    what is not a regular file reads as b"" without being waited on."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return b""
    return _head(fd, size)


def _head(fd: int, size: int) -> bytes:
    """Up to `size` bytes of the regular file open at `fd`, which it closes."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_file(path: str, cap: int) -> bytes:
    """`Root.read` for a file named by a path the person or stockade chose (its
    config, a project file): the last name is not followed if a link, a FIFO
    or device there is refused, and the read is capped."""
    fd = os.open(path, _READ_FLAGS)
    try:
        return read_fd(fd, cap, path)
    finally:
        os.close(fd)


class Roots:
    """The writable roots of one profile as open handles; a path is acted on through
    the deepest one holding it, lexically, or not at all."""

    __slots__ = ("_open",)

    def __init__(self, paths: list[str]) -> None:
        self._open: dict[str, Root] = {}
        for path in paths:
            norm = os.path.normpath(path)
            if norm not in self._open:
                try:
                    self._open[norm] = Root(norm)
                except OSError:
                    continue  # gone: nothing beneath it to act on

    @property
    def paths(self) -> list[str]:
        return list(self._open)

    def locate(self, path: str) -> tuple[Root, str] | None:
        """(the deepest root holding `path`, `path` relative to it), or None."""
        best: tuple[Root, str] | None = None
        for norm, root in self._open.items():
            rel = within(path, norm)
            if rel is not None and (best is None or len(norm) > len(best[0].path)):
                best = (root, rel)
        return best

    def holds(self, path: str) -> bool:
        return self.locate(path) is not None

    def close(self) -> None:
        for root in self._open.values():
            root.close()
        self._open.clear()

    def __iter__(self) -> Iterator[Root]:
        return iter(self._open.values())
