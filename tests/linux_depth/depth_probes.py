"""Issue every syscall the seccomp policy cares about; print {probe: outcome} as JSON.

    python depth_probes.py SECCOMP_DIR [--install MODE] [--only a,b,c]

Run as a plain child (the control), as a child that installs the filter
itself (`--install`), or as the command inside bwrap + stockade-init. Every
probe runs in its own forked child, so one that succeeds -- unshare in the
control, personality -- cannot change what the next one sees, and one that
crashes reports the signal. Arguments are chosen so that without the filter
each call fails harmlessly (a missing path, a bad fd, an unknown type) or
does something contained to that child: the filter must be what says EPERM.

Outcomes: "ok" (the call returned >= 0), an errno name, or "signal N".
"""

import ctypes
import errno
import json
import mmap
import os
import socket
import sys
import threading

MISSING = b"/nonexistent-stockade-probe"
CLONE_NEWUSER, CLONE_FILES, SIGCHLD = 0x10000000, 0x400, 17
AT_FDCWD = -100
TIOCSTI, TIOCLINUX, TCGETS = 0x5412, 0x541C, 0x5401


def main() -> None:
    sys.path.append(sys.argv[1])
    import seccomp  # the module under test, by path: no stockade import needed here

    arch = seccomp.native_arch()
    table = seccomp.SYSCALLS[arch]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def sc(name: str | int, *args: object) -> int:
        nr = table[name] if isinstance(name, str) else name
        conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
        res = libc.syscall(ctypes.c_long(nr), *conv)
        if res < 0:
            raise OSError(ctypes.get_errno(), "")
        return int(res)

    def ioctl_on_pty(cmd: int) -> int:
        _master, slave = os.openpty()
        return sc("ioctl", slave, cmd, b"x")

    def clone_newuser() -> int:
        pid = sc("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def int80_getpid() -> int:
        # mov eax, 20 (i386 getpid); int 0x80; ret -- the i386 ABI from a 64-bit process.
        code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
        mem = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE
                        | mmap.PROT_EXEC)
        mem.write(code)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        result = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
        if result < 0:
            raise OSError(-result, "")
        return result

    def sock(family: int, kind: int = socket.SOCK_STREAM) -> int:
        socket.socket(family, kind).close()
        return 0

    def pair(family: int) -> int:
        for s in socket.socketpair(family):
            s.close()
        return 0

    def thread() -> int:
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        return 0

    def fork() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        return 0 if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7 else -1

    def mkfifo() -> int:
        path = f"/tmp/stockade-probe-fifo-{os.getpid()}"
        os.mkfifo(path)
        os.unlink(path)
        return 0

    probes = {
        "mount": lambda: sc("mount", b"none", MISSING, b"tmpfs", 0, None),
        "umount2": lambda: sc("umount2", MISSING, 0),
        "pivot_root": lambda: sc("pivot_root", MISSING, MISSING),
        "chroot": lambda: sc("chroot", MISSING),
        "open_tree": lambda: sc("open_tree", AT_FDCWD, MISSING, 0),
        "open_tree_attr": lambda: sc("open_tree_attr", AT_FDCWD, MISSING, 0, None, 0),
        "move_mount": lambda: sc("move_mount", -1, b"", -1, b"", 0),
        "fsopen": lambda: sc("fsopen", b"stockade-no-such-fs", 0),
        "fsconfig": lambda: sc("fsconfig", -1, 0, None, None, 0),
        "fsmount": lambda: sc("fsmount", -1, 0, 0),
        "fspick": lambda: sc("fspick", AT_FDCWD, MISSING, 0),
        "mount_setattr": lambda: sc("mount_setattr", AT_FDCWD, MISSING, 0, None, 0),
        "kexec_load": lambda: sc("kexec_load", 0, 0, None, 0x7FFF0000),
        "kexec_file_load": lambda: sc("kexec_file_load", -1, -1, 0, None, 0x7FFFFFFF),
        "init_module": lambda: sc("init_module", None, 0, b""),
        "finit_module": lambda: sc("finit_module", -1, b"", 0),
        "delete_module": lambda: sc("delete_module", b"stockade_no_such_module", 0),
        "bpf": lambda: sc("bpf", 0xFFFF, None, 0),
        "perf_event_open": lambda: sc("perf_event_open", None, 0, -1, -1, 0),
        "ptrace": lambda: sc("ptrace", 0x4206, 0x3FFFFFF0, 0, 0),
        "process_vm_readv": lambda: sc("process_vm_readv", 0x3FFFFFF0, None, 1, None, 1, 0),
        "process_vm_writev": lambda: sc("process_vm_writev", 0x3FFFFFF0, None, 1, None, 1, 0),
        "add_key": lambda: sc("add_key", b"stockade-no-such-type", b"x", None, 0, -2),
        "request_key": lambda: sc("request_key", b"stockade-no-such-type", b"x", None, 0),
        "keyctl": lambda: sc("keyctl", 0xFFFF, 0, 0, 0, 0),
        "userfaultfd": lambda: sc("userfaultfd", 0x7FFF),
        "io_uring_setup": lambda: sc("io_uring_setup", 0, None),
        "io_uring_enter": lambda: sc("io_uring_enter", -1, 0, 0, 0, None, 0),
        "io_uring_register": lambda: sc("io_uring_register", -1, 0, None, 0),
        "mknodat_chr": lambda: sc("mknodat", AT_FDCWD, MISSING + b"/n", 0o020600, 0),
        "mknodat_blk": lambda: sc("mknodat", AT_FDCWD, MISSING + b"/n", 0o060600, 0),
        "swapon": lambda: sc("swapon", MISSING, 0),
        "swapoff": lambda: sc("swapoff", MISSING),
        "syslog": lambda: sc("syslog", 10, None, 0),
        "reboot": lambda: sc("reboot", 0, 0, 0, None),
        "setns": lambda: sc("setns", -1, 0),
        "unshare_newuser": lambda: sc("unshare", CLONE_NEWUSER),
        "clone_newuser": clone_newuser,
        "clone3": lambda: sc("clone3", None, 0),
        "open_by_handle_at": lambda: sc("open_by_handle_at", -1, None, 0),
        "name_to_handle_at": lambda: sc("name_to_handle_at", AT_FDCWD, b"/", None, None, 0),
        "personality_aslr_off": lambda: sc("personality", 0x0040000),
        "tiocsti": lambda: ioctl_on_pty(TIOCSTI),
        "tiocsti_high_bits": lambda: ioctl_on_pty(TIOCSTI | 1 << 32),
        "tioclinux": lambda: ioctl_on_pty(TIOCLINUX),
        "socket_inet": lambda: sock(socket.AF_INET),
        "socket_inet6": lambda: sock(socket.AF_INET6),
        "socket_packet": lambda: sock(socket.AF_PACKET, socket.SOCK_DGRAM),
        "socket_netlink": lambda: sock(socket.AF_NETLINK, socket.SOCK_DGRAM),
        "socket_vsock": lambda: sock(40),
        "socket_inet_high_bits": lambda: sc("socket", socket.AF_INET | 1 << 32, 1, 0),
        "socketpair_inet": lambda: pair(socket.AF_INET),
        # Allowed in every mode.
        "getpid": lambda: sc(39 if arch == "x86_64" else 172),
        "fork": fork,
        "thread": thread,
        "socket_unix": lambda: sock(socket.AF_UNIX),
        "socketpair_unix": lambda: pair(socket.AF_UNIX),
        "personality_query": lambda: sc("personality", 0xFFFFFFFF),
        "tcgets": lambda: ioctl_on_pty(TCGETS),
        "unshare_files": lambda: sc("unshare", CLONE_FILES),
        "mkfifo": mkfifo,
    }
    if arch == "x86_64":
        probes["mknod_chr"] = lambda: sc("mknod", MISSING + b"/n", 0o020600, 0)
        probes["x32_getpid"] = lambda: sc(39 | 0x40000000)
        probes["i386_int80_getpid"] = int80_getpid

    args = sys.argv[2:]
    if "--install" in args:
        mode = args[args.index("--install") + 1]
        seccomp.set_no_new_privs()
        seccomp.install_seccomp(seccomp.compile_seccomp(mode))
    if "--only" in args:
        wanted = args[args.index("--only") + 1].split(",")
        probes = {k: v for k, v in probes.items() if k in wanted}

    results = {}
    for name, probe in probes.items():
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            try:
                probe()
                outcome = "ok"
            except OSError as exc:
                outcome = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            os.write(wfd, outcome.encode())
            os._exit(0)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as fh:
            outcome = fh.read().decode()
        status = os.waitpid(pid, 0)[1]
        if os.WIFSIGNALED(status):
            outcome = f"signal {os.WTERMSIG(status)}"
        results[name] = outcome
    print(json.dumps(results))


if __name__ == "__main__":
    main()
