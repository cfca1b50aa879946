"""seccomp-bpf: the syscall denylist the in-sandbox init installs last before exec.

`compile_seccomp` is a pure function from a network mode to classic-BPF
bytes, so the whole policy is unit-tested by running the program through an
interpreter; `install_seccomp` hands those bytes to the kernel.

This module is loaded two ways: as `stockade.drivers.linux.init.seccomp` by the
package, and as a top-level module by `init.py` inside bwrap, where every
import is paid for on every command. So it imports nothing from stockade and
nothing slower than the `posix` and `sys` built-ins (not even `__future__`).

Why not libseccomp through ctypes: it is a C library the host may not have
(it is not a wheel dependency), the policy is a flat list of about forty
comparisons that fits in one screen of BPF, and a Python compiler keeps the
policy a pure, deterministic function the tests can run without a kernel.
libseccomp's advantage -- a balanced search tree over hundreds of rules --
does not matter at this size.
"""

import posix
import sys

# Network modes of the socket gate (the seed's SeccompNetworkMode).
#   loopback (bubblewrap, network none): AF_UNIX, and TCP and UDP over IPv4
#       and IPv6. bwrap gives the command a network namespace of its own whose
#       only interface is `lo` (the init checks that before exec), so an IP
#       socket there reaches the command's own loopback and nothing else: a
#       server and its client in one command (`node server.js & curl
#       127.0.0.1:3000`) work, the host's 127.0.0.1 is another namespace's.
#       Raw, packet and SCTP/MPTCP/ICMP sockets stay refused (they need
#       CAP_NET_RAW, which the command never has, or are kernel code no
#       loopback workflow needs).
#   unix-only: AF_UNIX alone; what network none was before loopback was
#       allowed, kept for a config that names it.
#   proxy-routed (bubblewrap, network hosts): AF_UNIX, AF_INET, AF_INET6.
#   unrestricted (network all): every family.
LOOPBACK = "loopback"
UNIX_ONLY = "unix-only"
PROXY_ROUTED = "proxy-routed"
UNRESTRICTED = "unrestricted"
NETWORK_MODES = (LOOPBACK, UNIX_ONLY, PROXY_ROUTED, UNRESTRICTED)

# The Landlock backend's modes. Without bubblewrap there is no network
# namespace and no mount over a socket file, and Landlock (up to ABI 7) does
# not mediate connect() to a pathname unix socket: under the modes above a
# command would reach the Docker socket, the session bus, /dev/log. So these
# keep AF_UNIX to what cannot address a socket outside the process tree:
#   unix-no-connect (network none): AF_UNIX only; connect() denied; sendto()
#       with an address denied; no datagram sockets (sendmsg's msg_name is
#       behind a pointer BPF cannot read, and only datagrams use it).
#   tcp-only (network hosts): socket() makes only TCP over IPv4/IPv6, which
#       Landlock confines to the proxy's port; no UDP (Landlock has no UDP
#       rules); no MPTCP or SCTP, which Landlock's TCP rules do not cover;
#       no TCP Fast Open, which connects from sendto/sendmsg; AF_UNIX only
#       as stream socketpairs (asyncio's self-pipe, libuv's child stdio).
#   no-unix (network all): any family but AF_UNIX, which again only as
#       stream socketpairs.
# Every mode refuses chmod to a setuid or setgid mode (see compile_seccomp).
# (A write by a process without CAP_FSETID clears these bits, so a file
# created with them cannot be given contents afterwards.)
UNIX_NO_CONNECT = "unix-no-connect"
TCP_ONLY = "tcp-only"
NO_UNIX = "no-unix"
LANDLOCK_BACKEND_MODES = (UNIX_NO_CONNECT, TCP_ONLY, NO_UNIX)

#: Backend -> network policy kind ("none", "hosts", "all") -> the socket gate.
SECCOMP_MODES = {
    "bubblewrap": {"none": LOOPBACK, "hosts": PROXY_ROUTED, "all": UNRESTRICTED},
    "landlock": {"none": UNIX_NO_CONNECT, "hosts": TCP_ONLY, "all": NO_UNIX},
}
ALL_MODES = NETWORK_MODES + LANDLOCK_BACKEND_MODES

X86_64 = "x86_64"
AARCH64 = "aarch64"

AUDIT_ARCH = {X86_64: 0xC000003E, AARCH64: 0xC00000B7}

# Numbers from the kernel's syscall tables (arch/x86/entry/syscalls/syscall_64.tbl
# and the asm-generic table arm64 uses). aarch64 has no mknod: glibc calls mknodat.
SYSCALLS: dict[str, dict[str, int]] = {
    X86_64: {
        "ioctl": 16, "socket": 41, "connect": 42, "sendto": 44, "sendmsg": 46,
        "listen": 50, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "chmod": 90,
        "fchmod": 91,
        "rename": 82, "ptrace": 101,
        "syslog": 103, "capset": 126, "mknod": 133, "personality": 135, "pivot_root": 155,
        "prctl": 157, "chroot": 161, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
        "reboot": 169, "init_module": 175, "delete_module": 176, "kexec_load": 246,
        "add_key": 248, "request_key": 249, "keyctl": 250, "mknodat": 259,
        "renameat": 264, "fchmodat": 268, "unshare": 272, "perf_event_open": 298, "prlimit64": 302,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304, "sendmmsg": 307, "setns": 308, "process_vm_readv": 310,
        "process_vm_writev": 311, "finit_module": 313, "renameat2": 316, "seccomp": 317,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
        "mount_setattr": 442, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
        "landlock_restrict_self": 446, "fchmodat2": 452, "open_tree_attr": 467,
    },
    AARCH64: {
        "ioctl": 29, "mknodat": 33, "renameat": 38, "umount2": 39, "mount": 40, "pivot_root": 41,
        "chroot": 51, "fchmod": 52, "fchmodat": 53, "capset": 91, "personality": 92,
        "unshare": 97, "kexec_load": 104,
        "init_module": 105, "delete_module": 106, "syslog": 116, "ptrace": 117,
        "reboot": 142, "prctl": 167, "socket": 198, "socketpair": 199, "listen": 201,
        "connect": 203,
        "sendto": 206, "sendmsg": 211, "add_key": 217, "request_key": 218, "keyctl": 219,
        "clone": 220, "swapon": 224, "swapoff": 225, "perf_event_open": 241,
        "prlimit64": 261, "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268,
        "sendmmsg": 269, "process_vm_readv": 270, "process_vm_writev": 271,
        "finit_module": 273, "renameat2": 276, "seccomp": 277, "bpf": 280, "userfaultfd": 282,
        "kexec_file_load": 294, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
        "mount_setattr": 442, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
        "landlock_restrict_self": 446, "fchmodat2": 452, "open_tree_attr": 467,
    },
}

# Denied outright with EPERM, whatever the arguments.
DENIED = (
    # The mount table is what bwrap built: a mount could uncover what it
    # hid (a tmpfs over ~/.ssh) or remount a read-only bind read-write. The
    # new mount API is the same power through other doors.
    "mount", "umount2", "pivot_root", "chroot",
    "open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr",
    # Replacing the running kernel or loading code into it ends every boundary at once.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    # eBPF and perf are the largest kernel attack surfaces an unprivileged
    # process can reach, and perf reads other processes' activity.
    "bpf", "perf_event_open",
    # Reading and writing another process's memory: in a shared pid
    # namespace the command could patch the supervisor that watches it.
    # process_vm_* is the same primitive. Allowed only with `trace` (see
    # TRACE_SYSCALLS): inside bubblewrap's private PID namespace.
    "ptrace", "process_vm_readv", "process_vm_writev",
    # Kernel keyrings are not namespaced: the command could read or plant
    # keys in the user's session keyring (Kerberos tickets, fscrypt keys).
    "add_key", "request_key", "keyctl",
    # userfaultfd stalls kernel page faults at will: the standard tool for
    # winning the race conditions behind kernel exploits.
    "userfaultfd",
    # io_uring runs reads, opens and connects from kernel workers that
    # seccomp never sees, and was the most exploited subsystem of 2021-2023.
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # Host-wide switches: swap devices, the kernel log (kernel addresses
    # defeat KASLR), reboot.
    "swapon", "swapoff", "syslog", "reboot",
    # setns joins another namespace through an fd, e.g. a /proc/<pid>/ns/*
    # of a process outside the sandbox.
    "setns",
    # A file handle names an inode without a path, so open_by_handle_at
    # opens files the mount view never showed (the 2014 "shocker" escape).
    "open_by_handle_at", "name_to_handle_at",
)

# Tracing the command's own processes: gdb, strace, LeakSanitizer (which
# ptrace-attaches to its own threads from a helper task, and exits 1 with
# "LeakSanitizer does not work under ptrace" when it cannot). `trace=True`
# takes these out of DENIED. The init asks for it only where the kernel's own
# ptrace check (`__ptrace_may_access`) can reach nothing but the command's
# tree: bubblewrap's private PID namespace, whose other processes are bwrap's
# pid 1 (outside the command's Landlock domain, which Landlock's ptrace rule
# closes, so only with Landlock enforced) and the init's bridge and lifeline
# watcher (not dumpable: attaching needs CAP_SYS_PTRACE, which the command
# has not). The Landlock backend, with no PID namespace, never gets it.
TRACE_SYSCALLS = ("ptrace", "process_vm_readv", "process_vm_writev")

# Namespace flags of clone(2) and unshare(2). A new user namespace hands the
# command a full capability set in it, which is where most unprivileged
# kernel exploits start; without capabilities every other flag fails anyway,
# so denying all of them costs nothing and keeps the kernel code unreachable.
# CLONE_NEWTIME (0x80) is left out for clone: its low byte is the exit signal.
CLONE_NAMESPACES = 0x7E020000
CLONE_THREAD = 0x10000
UNSHARE_NAMESPACES = CLONE_NAMESPACES | 0x80

# personality(2): PER_LINUX, and 0xffffffff, which only queries. Anything
# else turns off ASLR (ADDR_NO_RANDOMIZE) or makes data executable
# (READ_IMPLIES_EXEC), which helps an exploit and no build. With `trace`,
# ADDR_NO_RANDOMIZE alone too: gdb turns ASLR off for the program it starts
# (`set disable-randomization`, on by default), and a process can only make
# its own later execs predictable -- no_new_privs means no setuid program
# could be run with it.
PERSONALITY_ALLOWED = (0x0, 0xFFFFFFFF)
ADDR_NO_RANDOMIZE = 0x0040000

# TIOCSTI pushes bytes into a terminal's input queue and TIOCLINUX can do the
# same through the console selection: typed into the caller's shell, they run
# outside the sandbox once it exits.
TIOCSTI = 0x5412
TIOCLINUX = 0x541C

# mknod(2) is denied for device nodes only. A device node is raw access to
# hardware (and a char 0:0 "whiteout" can be made without CAP_MKNOD);
# FIFOs are how `mkfifo` and GNU make's jobserver work, so they stay.
S_IFMT = 0o170000
DEVICE_TYPES = (0o020000, 0o060000)  # S_IFCHR, S_IFBLK

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
AF_NETLINK, AF_PACKET, AF_VSOCK = 16, 17, 40
# The socket families each mode may create; anything else gets EPERM, which
# covers AF_PACKET (raw frames), AF_NETLINK (routing and firewall tables)
# and AF_VSOCK (the hypervisor, reachable even without a network device).
# proxy-routed keeps AF_UNIX: asyncio's self-pipe and libuv's child stdio
# are AF_UNIX socketpairs, so without it `npm install` and every asyncio
# program break in exactly the mode meant for installing packages, while
# a unix socket reaches nothing the unix-only mode does not already allow.
SOCKET_FAMILIES = {
    LOOPBACK: (AF_UNIX, AF_INET, AF_INET6),
    UNIX_ONLY: (AF_UNIX,),
    PROXY_ROUTED: (AF_UNIX, AF_INET, AF_INET6),
}
#: Modes whose IP sockets are held to TCP and UDP (see `_loopback_sockets`).
INET_TCP_UDP_ONLY = (LOOPBACK,)
# Socket types (the low four bits of socket()'s type; the rest are
# SOCK_NONBLOCK and SOCK_CLOEXEC). AF_UNIX turns SOCK_RAW into SOCK_DGRAM,
# so an allowlist of the two connection-oriented types is the only safe form.
SOCK_TYPE_MASK = 0xF
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
IPPROTO_IP, IPPROTO_TCP, IPPROTO_UDP = 0, 6, 17
MSG_FASTOPEN = 0x20000000
S_ISUID_ISGID = 0o6000
# chmod-family syscall -> the index of its mode argument.
CHMOD_MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}

# x32 syscalls are x86_64 syscalls with this bit set: the same kernel entry
# under another number, so every rule below would be bypassed through it.
X32_SYSCALL_BIT = 0x40000000

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38

# Offsets into struct seccomp_data: nr, arch, instruction pointer, args[6].
# Both supported architectures are little-endian, so an argument's low
# 32 bits are at its offset and the high 32 bits four bytes later.
OFF_NR, OFF_ARCH = 0, 4


def off_arg(index: int) -> int:
    return 16 + 8 * index


# Classic BPF opcodes used here (linux/bpf_common.h).
BPF_LD_W_ABS = 0x20
BPF_ALU_AND_K = 0x54
BPF_JMP_JA = 0x05
BPF_JMP_JEQ_K = 0x15
BPF_JMP_JGE_K = 0x35
BPF_JMP_JSET_K = 0x45
BPF_RET_K = 0x06


def native_arch() -> str:
    """The seccomp architecture of this interpreter, or "" when stockade has no table for it.

    The interpreter's word size matters, not just the kernel's: a 32-bit
    Python on an x86_64 kernel makes i386 syscalls, which the x86_64 filter
    would refuse wholesale.
    """
    machine = posix.uname().machine
    if sys.maxsize <= 2**32:
        return ""
    if machine in ("x86_64", "amd64"):
        return X86_64
    if machine in ("aarch64", "arm64"):
        return AARCH64
    return ""


class _Assembler:
    """Classic BPF with forward jumps to named labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int | str]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        self.code.append((code, jt, jf, k))

    def load(self, offset: int) -> None:
        self.op(BPF_LD_W_ABS, offset)

    def jump(self, target: str) -> None:
        self.code.append((BPF_JMP_JA, None, None, target))

    def ret(self, action: int) -> None:
        self.op(BPF_RET_K, action)

    def bytes(self) -> bytes:
        out = bytearray()
        for pc, (code, jt, jf, k) in enumerate(self.code):
            out += code.to_bytes(2, "little")
            for target in (jt, jf):
                # A conditional jump is an 8-bit forward offset; a policy
                # that outgrows it must fail here, not in the kernel.
                offset = 0 if target is None else self.labels[target] - pc - 1
                if not 0 <= offset <= 255:
                    raise ValueError(f"seccomp jump from {pc} to {target} out of range")
                out.append(offset)
            if isinstance(k, str):
                k = self.labels[k] - pc - 1
            out += k.to_bytes(4, "little")
        return bytes(out)


def compile_seccomp(network_mode: str, arch: str | None = None, *, trace: bool = False) -> bytes:
    """The filter for `network_mode` as struct sock_filter bytes (pure).

    `trace`: allow ptrace, process_vm_readv/writev and personality's
    ADDR_NO_RANDOMIZE (see TRACE_SYSCALLS), for a command in a PID namespace
    of its own; never with the Landlock backend's modes, which have none.
    """
    arch = _checked_arch(network_mode, arch, trace)
    nr = SYSCALLS[arch]
    a = _Assembler()
    _native_abi_only(a, arch)
    _dispatch(a, nr, network_mode, trace)
    _argument_checks(a, nr, trace)
    if network_mode in SOCKET_FAMILIES:
        _socket_families(a, network_mode)
    elif network_mode in LANDLOCK_BACKEND_MODES:
        _landlock_backend_sockets(a, network_mode)
    _verdicts(a)
    return a.bytes()


def _checked_arch(network_mode: str, arch: str | None, trace: bool) -> str:
    """The architecture to compile for, once the mode, `trace` and it are known to fit together."""
    if network_mode not in ALL_MODES:
        raise ValueError(f"unknown seccomp network mode {network_mode!r}: "
                         f"choose one of {', '.join(ALL_MODES)}")
    if trace and network_mode in LANDLOCK_BACKEND_MODES:
        raise ValueError(f"seccomp mode {network_mode!r} is the Landlock backend's, which has "
                         "no PID namespace: tracing stays refused there")
    arch = native_arch() if arch is None else arch
    if arch not in SYSCALLS:
        raise ValueError(f"no seccomp syscall table for architecture {arch or 'unknown'!r}: "
                         "stockade supports x86_64 and aarch64")
    return arch


def _dispatch(a: _Assembler, nr: dict[str, int], network_mode: str, trace: bool) -> None:
    """Every syscall the filter has a view on jumps to its verdict or its argument check;
    any other is allowed."""
    for name in DENIED:
        if not (trace and name in TRACE_SYSCALLS):
            a.op(BPF_JMP_JEQ_K, nr[name], jt="deny")
    # clone3 passes its flags in memory, where BPF cannot read them. ENOSYS
    # makes glibc fall back to clone, whose flags are a register.
    a.op(BPF_JMP_JEQ_K, nr["clone3"], jt="enosys")
    a.op(BPF_JMP_JEQ_K, nr["clone"], jt="clone")
    a.op(BPF_JMP_JEQ_K, nr["unshare"], jt="unshare")
    a.op(BPF_JMP_JEQ_K, nr["personality"], jt="personality")
    a.op(BPF_JMP_JEQ_K, nr["ioctl"], jt="ioctl")
    if "mknod" in nr:
        a.op(BPF_JMP_JEQ_K, nr["mknod"], jt="mknod")
    a.op(BPF_JMP_JEQ_K, nr["mknodat"], jt="mknodat")
    # Every mode: a command run by root owns what it creates as the real root
    # (the user namespace maps 0 to 0), and bwrap's nosuid mounts protect only
    # the sandbox, so `chmod 4755` would leave a setuid-root program in the
    # workspace for any local user to run on the host.
    for name, arg in CHMOD_MODE_ARG.items():
        if name in nr:
            a.op(BPF_JMP_JEQ_K, nr[name], jt=f"mode_arg{arg}")
    if network_mode in SOCKET_FAMILIES:
        a.op(BPF_JMP_JEQ_K, nr["socket"], jt="socket")
        a.op(BPF_JMP_JEQ_K, nr["socketpair"], jt="socket")
    elif network_mode in LANDLOCK_BACKEND_MODES:
        a.op(BPF_JMP_JEQ_K, nr["socket"], jt="ll_socket")
        a.op(BPF_JMP_JEQ_K, nr["socketpair"], jt="ll_socketpair")
        if network_mode == UNIX_NO_CONNECT:
            a.op(BPF_JMP_JEQ_K, nr["connect"], jt="deny")
            a.op(BPF_JMP_JEQ_K, nr["sendto"], jt="sendto_address")
        elif network_mode == TCP_ONLY:
            # listen() on a socket never bound binds it to every address on a
            # free port first, and Landlock's bind rule never sees that bind:
            # a server on the host's 0.0.0.0. Nothing here may serve (its
            # AF_UNIX sockets are socketpairs), so no listen at all.
            a.op(BPF_JMP_JEQ_K, nr["listen"], jt="deny")
            a.op(BPF_JMP_JEQ_K, nr["sendto"], jt="fastopen_arg3")
            a.op(BPF_JMP_JEQ_K, nr["sendmmsg"], jt="fastopen_arg3")
            a.op(BPF_JMP_JEQ_K, nr["sendmsg"], jt="fastopen_arg2")
    a.ret(SECCOMP_RET_ALLOW)


def _argument_checks(a: _Assembler, nr: dict[str, int], trace: bool) -> None:
    """No namespace, TIOCSTI, device node or setuid/setgid bit gets past an argument check.

    Every compare reads only the low 32 bits. The kernel truncates these
    arguments to int before use, so comparing all 64 bits would let
    ioctl(fd, TIOCSTI | 1 << 32) past the filter as something else and into
    the kernel as TIOCSTI.
    """
    a.label("clone")
    a.load(off_arg(0))
    a.op(BPF_JMP_JSET_K, CLONE_NAMESPACES, jt="deny", jf="allow")
    a.label("unshare")
    a.load(off_arg(0))
    a.op(BPF_JMP_JSET_K, UNSHARE_NAMESPACES, jt="deny", jf="allow")
    a.label("personality")
    a.load(off_arg(0))
    for value in (*PERSONALITY_ALLOWED, *((ADDR_NO_RANDOMIZE,) if trace else ())):
        a.op(BPF_JMP_JEQ_K, value, jt="allow")
    a.jump("deny")
    a.label("ioctl")
    a.load(off_arg(1))
    a.op(BPF_JMP_JEQ_K, TIOCSTI, jt="deny")
    a.op(BPF_JMP_JEQ_K, TIOCLINUX, jt="deny", jf="allow")
    if "mknod" in nr:
        a.label("mknod")
        a.load(off_arg(1))
        a.jump("node_type")
    a.label("mknodat")
    a.load(off_arg(2))
    a.label("node_type")
    a.op(BPF_ALU_AND_K, S_IFMT)
    a.op(BPF_JMP_JEQ_K, DEVICE_TYPES[0], jt="deny")
    a.op(BPF_JMP_JEQ_K, DEVICE_TYPES[1], jt="deny", jf="allow")
    a.label("mode_arg1")
    a.load(off_arg(1))
    a.jump("setid_mode")
    a.label("mode_arg2")
    a.load(off_arg(2))
    a.label("setid_mode")
    a.op(BPF_JMP_JSET_K, S_ISUID_ISGID, jt="deny", jf="allow")


def _socket_families(a: _Assembler, network_mode: str) -> None:
    """socket() and socketpair() open only the families `network_mode` lists (bubblewrap)."""
    a.label("socket")
    a.load(off_arg(0))
    inet = network_mode in INET_TCP_UDP_ONLY
    for family in SOCKET_FAMILIES[network_mode]:
        a.op(BPF_JMP_JEQ_K, family, jt="inet_type" if inet and family != AF_UNIX else "allow")
    a.jump("deny")
    if inet:
        _tcp_udp_only(a)


def _native_abi_only(a: _Assembler, arch: str) -> None:
    """Deny every other ABI, then load the syscall number.

    A syscall made through another ABI (int 0x80 from an x86_64 process is
    i386, with different numbers) would dodge every rule after this.
    """
    a.load(OFF_ARCH)
    a.op(BPF_JMP_JEQ_K, AUDIT_ARCH[arch], jf="deny")
    a.load(OFF_NR)
    if arch == X86_64:
        a.op(BPF_JMP_JGE_K, X32_SYSCALL_BIT, jt="deny")


def _verdicts(a: _Assembler) -> None:
    """The labels every rule jumps to; last, because classic BPF only jumps forward."""
    a.label("allow")
    a.ret(SECCOMP_RET_ALLOW)
    a.label("deny")
    a.ret(SECCOMP_RET_ERRNO | EPERM)
    a.label("enosys")
    a.ret(SECCOMP_RET_ERRNO | ENOSYS)


def _tcp_udp_only(a: _Assembler) -> None:
    """An IP socket of the loopback mode: TCP (stream) or UDP (datagram), nothing else.

    SOCK_RAW needs CAP_NET_RAW, which the command never holds; refusing it
    here too keeps that one check from being the only one. The protocol is
    held to the default or the named TCP/UDP: MPTCP, SCTP, UDP-Lite and ICMP
    "ping" sockets are kernel code no loopback server needs (Go falls back
    to TCP when MPTCP is refused).
    """
    a.label("inet_type")
    a.load(off_arg(1))
    a.op(BPF_ALU_AND_K, SOCK_TYPE_MASK)
    a.op(BPF_JMP_JEQ_K, SOCK_STREAM, jt="inet_tcp")
    a.op(BPF_JMP_JEQ_K, SOCK_DGRAM, jt="inet_udp", jf="deny")
    a.label("inet_tcp")
    a.load(off_arg(2))
    a.op(BPF_JMP_JEQ_K, IPPROTO_IP, jt="allow")
    a.op(BPF_JMP_JEQ_K, IPPROTO_TCP, jt="allow", jf="deny")
    a.label("inet_udp")
    a.load(off_arg(2))
    a.op(BPF_JMP_JEQ_K, IPPROTO_IP, jt="allow")
    a.op(BPF_JMP_JEQ_K, IPPROTO_UDP, jt="allow", jf="deny")


def _landlock_backend_sockets(a: _Assembler, network_mode: str) -> None:
    """The socket rules of the Landlock backend's modes (see LANDLOCK_BACKEND_MODES)."""
    a.label("ll_socket")
    a.load(off_arg(0))
    if network_mode == UNIX_NO_CONNECT:
        a.op(BPF_JMP_JEQ_K, AF_UNIX, jt="unix_type", jf="deny")
    elif network_mode == TCP_ONLY:
        a.op(BPF_JMP_JEQ_K, AF_INET, jt="tcp_type")
        a.op(BPF_JMP_JEQ_K, AF_INET6, jt="tcp_type", jf="deny")
    else:
        # Everything but AF_UNIX: the packet families stay usable under
        # network all, as they are with bubblewrap.
        a.op(BPF_JMP_JEQ_K, AF_UNIX, jt="deny", jf="allow")
    a.label("ll_socketpair")
    a.load(off_arg(0))
    a.op(BPF_JMP_JEQ_K, AF_UNIX, jf="deny")
    a.label("unix_type")
    a.load(off_arg(1))
    a.op(BPF_ALU_AND_K, SOCK_TYPE_MASK)
    a.op(BPF_JMP_JEQ_K, SOCK_STREAM, jt="allow")
    a.op(BPF_JMP_JEQ_K, SOCK_SEQPACKET, jt="allow", jf="deny")
    if network_mode == UNIX_NO_CONNECT:
        # A 64-bit pointer: NULL only when both halves are zero.
        a.label("sendto_address")
        a.load(off_arg(4))
        a.op(BPF_JMP_JEQ_K, 0, jf="deny")
        a.load(off_arg(4) + 4)
        a.op(BPF_JMP_JEQ_K, 0, jt="allow", jf="deny")
    if network_mode == TCP_ONLY:
        a.label("tcp_type")
        a.load(off_arg(1))
        a.op(BPF_ALU_AND_K, SOCK_TYPE_MASK)
        a.op(BPF_JMP_JEQ_K, SOCK_STREAM, jf="deny")
        a.load(off_arg(2))
        a.op(BPF_JMP_JEQ_K, IPPROTO_IP, jt="allow")
        a.op(BPF_JMP_JEQ_K, IPPROTO_TCP, jt="allow", jf="deny")
        # The flags of sendto and sendmmsg are their fourth argument, sendmsg's its third.
        a.label("fastopen_arg3")
        a.load(off_arg(3))
        a.jump("fastopen")
        a.label("fastopen_arg2")
        a.load(off_arg(2))
        a.label("fastopen")
        a.op(BPF_JMP_JSET_K, MSG_FASTOPEN, jt="deny", jf="allow")


class Syscall:
    """syscall(2), bound through `_ctypes`, the C half of ctypes.

    `import ctypes` costs about 4 ms on a small VM (it pulls in os, types,
    struct and its own Python layer) and the in-sandbox init pays its imports
    on every command; the three C types and one function pointer needed here
    come from `_ctypes` directly for a tenth of that. (`ctypes` itself is
    built on exactly these names, so there is nothing to fall back to.)
    Calls return the result or raise OSError with the kernel's errno.
    """

    def __init__(self) -> None:
        from _ctypes import (
            FUNCFLAG_CDECL,
            FUNCFLAG_USE_ERRNO,
            CFuncPtr,
            Structure,
            _SimpleCData,
            byref,
            dlopen,
            get_errno,
        )

        class Long(_SimpleCData):  # type: ignore[type-arg]
            _type_ = "l"

        class UShort(_SimpleCData):  # type: ignore[type-arg]
            _type_ = "H"

        class CharP(_SimpleCData):  # type: ignore[type-arg]
            _type_ = "z"

        class Function(CFuncPtr):
            _flags_ = FUNCFLAG_CDECL | FUNCFLAG_USE_ERRNO
            _restype_ = Long

        class SockFprog(Structure):
            _fields_ = (("len", UShort), ("filter", CharP))

        class Library:  # what CFuncPtr reads from a CDLL: the dlopen handle
            _handle = dlopen(None)  # type: ignore[arg-type]  # NULL: the running program

        self._fn = Function(("syscall", Library()))  # type: ignore[arg-type]
        self._long = Long
        self._fprog = SockFprog
        self._byref = byref
        self._errno = get_errno

    def __call__(self, nr: int, *args: object) -> int:
        result: int = self._fn(self._long(nr),
                               *(self._long(a) if isinstance(a, int) else a for a in args))
        if result == -1:
            err = self._errno()
            raise OSError(err, posix.strerror(err))
        return result

    def fprog(self, prog: bytes) -> object:
        """A pointer to struct sock_fprog for `prog`; keep it alive until the call returns."""
        return self._byref(self._fprog(len(prog) // 8, prog))


_SYSCALL: list[Syscall] = []


def libc_syscall() -> Syscall:
    if not _SYSCALL:
        _SYSCALL.append(Syscall())
    return _SYSCALL[0]


PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
# All threads, or a thread started before the filter would keep running
# unfiltered inside the same process.
SECCOMP_FILTER_FLAG_TSYNC = 1
RLIMIT_CORE = 4


def set_no_new_privs(syscall: Syscall | None = None, arch: str | None = None) -> None:
    """PR_SET_NO_NEW_PRIVS: execve can no longer grant privileges (setuid, file caps)."""
    sc = syscall or libc_syscall()
    sc(SYSCALLS[arch or native_arch()]["prctl"], PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def harden_process(syscall: Syscall | None = None, arch: str | None = None) -> None:
    """Not dumpable, no core files: for stockade's own helper processes.

    A dumpable helper can be ptrace-attached by any process of the same user,
    and its core file -- or the host's core_pattern pipe, which runs as root
    outside every namespace -- would receive its memory, configuration included.
    (The third part of helper hardening, keeping LD_* out of their
    environment, is `layers.launch_env`.)
    """
    sc = syscall or libc_syscall()
    table = SYSCALLS[arch or native_arch()]
    sc(table["prctl"], PR_SET_DUMPABLE, 0, 0, 0, 0)
    sc(table["prlimit64"], 0, RLIMIT_CORE, bytes(16), None)


def compile_no_spawn(arch: str | None = None) -> bytes:
    """A second filter, for a command whose capabilities say spawn_subprocess=False (pure).

    Stacked on the main filter just before exec, after the init's own
    forks: fork, vfork and clone without CLONE_THREAD return EPERM, so the
    command may run threads but start no process. clone3 is ENOSYS here as
    in the main filter, which sends libc's posix_spawn back to clone.
    """
    arch = native_arch() if arch is None else arch
    if arch not in SYSCALLS:
        raise ValueError(f"no seccomp syscall table for architecture {arch or 'unknown'!r}")
    nr = SYSCALLS[arch]
    a = _Assembler()
    _native_abi_only(a, arch)
    for name in ("fork", "vfork"):  # x86_64 only: aarch64 has clone alone
        if name in nr:
            a.op(BPF_JMP_JEQ_K, nr[name], jt="deny")
    a.op(BPF_JMP_JEQ_K, nr["clone3"], jt="enosys")
    a.op(BPF_JMP_JEQ_K, nr["clone"], jf="allow")
    a.load(off_arg(0))
    a.op(BPF_JMP_JSET_K, CLONE_THREAD, jt="allow", jf="deny")
    _verdicts(a)
    return a.bytes()


def install_seccomp(prog: bytes, syscall: Syscall | None = None, arch: str | None = None) -> None:
    """Load `prog` into the calling process; no_new_privs must be set first.

    Raises OSError with the kernel's errno: EACCES means no_new_privs was not
    set, EINVAL that the kernel rejected the program.
    """
    if not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        raise ValueError("a seccomp program is 1 to 4096 eight-byte instructions")
    sc = syscall or libc_syscall()
    fprog = sc.fprog(prog)
    thread = sc(SYSCALLS[arch or native_arch()]["seccomp"], SECCOMP_SET_MODE_FILTER,
                SECCOMP_FILTER_FLAG_TSYNC, fprog)
    if thread:
        # TSYNC reports the thread it could not synchronise instead of failing;
        # that thread would run unfiltered.
        raise OSError(16, f"seccomp could not filter thread {thread}")
