"""Renames onto a privately bound file, done in place: the init's side.

git writes its config as `config.lock` renamed over `config`. Under
bubblewrap a command gets a private copy of each repository's config bound
over it (drivers/linux/host/gitconfig.py), and the kernel refuses a rename onto
a mount point with EBUSY, so `git remote add` failed. Here the command's
renames reach its parent as seccomp user notifications: one onto a private
file becomes a copy into it and an unlink of the source, and every other
continues in the kernel untouched. The parent carries the command's own
Landlock domain and seccomp filter, so it does nothing the command could
not do itself; the kernel's checks, not this code, are the boundary.

Loaded by the init as a top-level sibling: built-ins and the standard
library only, never the stockade package.
"""

import fcntl
import posix
import select
import struct

TYPE_CHECKING = False

if TYPE_CHECKING:
    from .seccomp import Syscall

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
# _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct seccomp_notif_resp),
# _IOW('!', 2, __u64): the same numbers on x86_64 and aarch64.
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
NOTIF_SIZE = 80
AT_FDCWD = -100
#: Larger than any file git renames into place here; a bigger one is refused.
MAX_BYTES = 1 << 20
EBUSY, ENOENT, EFBIG = 16, 2, 27


def filter_program(numbers: "dict[str, int]", audit_arch: int) -> bytes:
    """A seccomp program that reports rename, renameat and renameat2 and allows the rest."""
    ld, jeq, ret = 0x20, 0x15, 0x06
    renames = [numbers[name] for name in ("rename", "renameat", "renameat2") if name in numbers]
    # A foreign ABI jumps past the rename tests to the ALLOW: the main filter refuses it.
    code = [(ld, 0, 0, 4), (jeq, 0, len(renames) + 1, audit_arch), (ld, 0, 0, 0)]
    for n, nr in enumerate(renames):
        code.append((jeq, len(renames) - n, 0, nr))
    code += [(ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, SECCOMP_RET_USER_NOTIF)]
    return b"".join(struct.pack("<HBBI", op, jt, jf, k) for op, jt, jf, k in code)


def supervise(sc: "Syscall", numbers: "dict[str, int]", audit_arch: int,
              private: "list[str]") -> None:
    """Fork: the child returns to become the command, this process serves its renames.

    Returns only in the child. The parent exits with the command's status
    once it ends (a signal that killed it kills the parent the same way).
    A kernel that refuses the filter (a listener already in the chain) leaves
    the command as it was before: a rename onto the private file fails.
    """
    import _socket

    files = Private(private)
    if not files.identities:
        return
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    child = posix.fork()
    if child == 0:
        ours.close()
        try:
            prog = filter_program(numbers, audit_arch)
            listener = sc(numbers["seccomp"], SECCOMP_SET_MODE_FILTER,
                          SECCOMP_FILTER_FLAG_NEW_LISTENER, sc.fprog(prog))
        except OSError:
            theirs.close()
            return
        theirs.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                                 struct.pack("i", listener))])
        posix.close(listener)
        theirs.close()
        return
    theirs.close()
    listener = -1
    try:
        _msg, ancillary, _flags, _addr = ours.recvmsg(1, _socket.CMSG_SPACE(4))
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
                listener = struct.unpack("i", data[:4])[0]
    except OSError:
        pass
    ours.close()
    posix._exit(_serve(listener, child, files, numbers))


def _serve(listener: int, child: int, files: "Private", numbers: "dict[str, int]") -> int:
    import _signal

    for sig in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(sig, _signal.SIG_IGN)  # the command's to answer; this follows it
    pidfd = posix.pidfd_open(child)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if listener >= 0:
        poller.register(listener, select.POLLIN)
    while True:
        for fd, events in poller.poll():
            if fd == pidfd:
                _pid, status = posix.waitpid(child, 0)
                if posix.WIFSIGNALED(status):
                    sig = posix.WTERMSIG(status)
                    try:
                        _signal.signal(sig, _signal.SIG_DFL)
                    except (OSError, ValueError):
                        pass  # SIGKILL and SIGSTOP: already their default
                    posix.kill(posix.getpid(), sig)
                return posix.waitstatus_to_exitcode(status) & 0xFF
            if events & (select.POLLHUP | select.POLLERR):
                poller.unregister(fd)
                continue
            buf = bytearray(NOTIF_SIZE)
            try:
                fcntl.ioctl(listener, NOTIF_RECV, buf)
            except OSError:
                continue  # the caller died meanwhile
            notif_id, pid = struct.unpack_from("<QI", buf, 0)
            nr = struct.unpack_from("<i", buf, 16)[0]
            args = struct.unpack_from("<6Q", buf, 32)
            error, proceed = _answer(listener, notif_id, pid, nr, args, files, numbers)
            reply = struct.pack("<QqiI", notif_id, 0, -error if error else 0,
                                SECCOMP_USER_NOTIF_FLAG_CONTINUE if proceed else 0)
            try:
                fcntl.ioctl(listener, NOTIF_SEND, reply)
            except OSError:
                pass


def _answer(listener: int, notif_id: int, pid: int, nr: int, args: "tuple[int, ...]",
            private: "Private", numbers: "dict[str, int]") -> "tuple[int, bool]":
    """(errno, continue in the kernel) for one rename.

    Every rename of the command's comes here (a build makes thousands), so
    one whose target is not named like a private file goes on at once,
    its source never read.
    """
    if nr == numbers.get("rename"):
        old_dir, old, new_dir, new, flags = AT_FDCWD, args[0], AT_FDCWD, args[1], 0
    else:
        old_dir, old, new_dir, new = _fd(args[0]), args[1], _fd(args[2]), args[3]
        flags = args[4] if nr == numbers.get("renameat2") else 0
    if flags:
        return 0, True  # an exchange or no-replace onto a mount: the kernel's EBUSY
    try:
        mem = posix.open(f"/proc/{pid}/mem", posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return 0, True
    try:
        new_name = _string(mem, new)
        if new_name.rpartition(b"/")[2] not in private.names:
            return 0, True
        old_path = _where(pid, old_dir, _string(mem, old))
        new_path = _where(pid, new_dir, new_name)
    except OSError:
        return 0, True
    finally:
        posix.close(mem)
    try:
        # The paths were read from memory the caller could still change; the
        # answer below must reach the call that was asked about, or none.
        fcntl.ioctl(listener, NOTIF_ID_VALID, struct.pack("<Q", notif_id))
    except OSError:
        return ENOENT, False
    if not old_path or not new_path or _identity(new_path) not in private.identities:
        return 0, True
    return _replace(old_path, new_path, private.identities), False


class Private:
    """The private files, by identity, and the names they go by."""

    __slots__ = ("identities", "names")

    def __init__(self, paths: "list[str]") -> None:
        self.identities: set[tuple[int, int]] = set()
        self.names: set[bytes] = set()
        for path in paths:
            try:
                st = posix.stat(path)
            except OSError:
                continue
            self.identities.add((st.st_dev, st.st_ino))
            self.names.add(path.rpartition("/")[2].encode())


def _fd(value: int) -> int:
    low = value & 0xFFFFFFFF
    return low - (1 << 32) if low & 0x80000000 else low


def _string(mem: int, address: int) -> bytes:
    """The NUL-terminated string at `address`, read page by page (PATH_MAX at most)."""
    out = b""
    while len(out) < 4096:
        chunk = posix.pread(mem, 4096 - (address % 4096), address)
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return out + chunk[:end]
        out += chunk
        address += len(chunk)
    raise OSError(ENOENT, "no string")


def _where(pid: int, dirfd: int, name: bytes) -> bytes:
    """`name` as the caller would resolve it, seen from here (same mounts, same root)."""
    if not name:
        return b""
    if name.startswith(b"/"):
        return name
    base = f"/proc/{pid}/cwd" if dirfd == AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
    return base.encode() + b"/" + name


def _identity(path: bytes) -> "tuple[int, int] | None":
    try:
        st = posix.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _replace(old_path: bytes, new_path: bytes, identities: "set[tuple[int, int]]") -> int:
    """Copy `old_path` into the private file at `new_path`, then remove it; an errno."""
    flags = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC
    try:
        src = posix.open(old_path, flags)
    except OSError as exc:
        return exc.errno or EBUSY
    try:
        st = posix.fstat(src)
        if (st.st_dev, st.st_ino) in identities or (st.st_mode & 0o170000) != 0o100000:
            return EBUSY  # what the kernel says of a rename onto a mount point
        if st.st_size > MAX_BYTES:
            return EFBIG
        data = b""
        while chunk := posix.read(src, MAX_BYTES + 1 - len(data)):
            data += chunk
        if len(data) > MAX_BYTES:
            return EFBIG
    except OSError as exc:
        return exc.errno or EBUSY
    finally:
        posix.close(src)
    try:
        dst = posix.open(new_path, posix.O_WRONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
    except OSError as exc:
        return exc.errno or EBUSY
    try:
        st = posix.fstat(dst)
        if (st.st_dev, st.st_ino) not in identities:
            return EBUSY  # the path was switched after it was checked
        posix.ftruncate(dst, 0)
        view = memoryview(data)
        while view:
            view = view[posix.write(dst, view):]
        posix.unlink(old_path)
    except OSError as exc:
        return exc.errno or EBUSY
    finally:
        posix.close(dst)
    return 0
