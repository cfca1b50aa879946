"""The seccomp policy, run through a classic-BPF interpreter: no kernel involved.

The interpreter accepts only what the kernel's seccomp checker accepts
(absolute word loads inside struct seccomp_data, forward jumps in range, a
final return), so a program it runs is one the kernel would load; the
real-kernel suite (test_seccomp_real.py) then proves the kernel agrees.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.drivers.linux.init import seccomp
from stockade.drivers.linux.init.seccomp import (
    AARCH64,
    AUDIT_ARCH,
    DENIED,
    LANDLOCK_BACKEND_MODES,
    LOOPBACK,
    NETWORK_MODES,
    PROXY_ROUTED,
    SYSCALLS,
    UNIX_ONLY,
    UNRESTRICTED,
    X86_64,
    compile_no_spawn,
    compile_seccomp,
)

ALLOW = 0x7FFF0000
EPERM = 0x00050000 | 1
ENOSYS = 0x00050000 | 38
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028
ARCHES = (X86_64, AARCH64)
U64 = st.integers(min_value=0, max_value=2**64 - 1)
HIGH = st.integers(min_value=0, max_value=2**32 - 1).map(lambda h: h << 32)

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWTIME = 0x20000, 0x10000000, 0x40000000, 0x80
THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes to clone
FORK_FLAGS = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD
# Numbers the filters never name, so stockade's tables do not carry them.
EVERYDAY = {X86_64: {"read": 0, "write": 1, "openat": 257, "execve": 59, "mmap": 9, "getpid": 39},
            AARCH64: {"read": 63, "write": 64, "openat": 56, "execve": 221, "mmap": 222,
                      "getpid": 172}}


class BPFError(Exception):
    """The program is one the kernel's seccomp checker would reject."""


def run_filter(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Execute a classic-BPF seccomp program against one syscall; return its action."""
    if not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        raise BPFError("program length")
    full = (list(args) + [0] * 6)[:6]
    data = (nr & 0xFFFFFFFF).to_bytes(4, "little") + arch.to_bytes(4, "little")
    data += (0).to_bytes(8, "little")  # instruction pointer
    data += b"".join(a.to_bytes(8, "little") for a in full)
    insns = [(int.from_bytes(prog[i:i + 2], "little"), prog[i + 2], prog[i + 3],
              int.from_bytes(prog[i + 4:i + 8], "little")) for i in range(0, len(prog), 8)]
    acc, pc = 0, 0
    while True:
        if pc >= len(insns):
            raise BPFError("fell off the end")
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            if k % 4 or k + 4 > len(data):
                raise BPFError(f"load at {k}")
            acc = int.from_bytes(data[k:k + 4], "little")
            pc += 1
        elif code == 0x54:  # and #k
            acc &= k
            pc += 1
        elif code == 0x05:  # ja
            pc += 1 + k
        elif code in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset #k
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            target = pc + 1 + (jt if taken else jf)
            if target > len(insns) - 1:
                raise BPFError("jump past the end")
            pc = target
        elif code == 0x06:  # ret #k
            return k
        else:
            raise BPFError(f"opcode {code:#x} is not allowed in seccomp")


def verdict(mode: str, arch: str, name: str | int, *args: int) -> int:
    nr = SYSCALLS[arch][name] if isinstance(name, str) else name
    return run_filter(compile_seccomp(mode, arch), nr, AUDIT_ARCH[arch], args)


every = pytest.mark.parametrize("mode,arch", [(m, a) for m in NETWORK_MODES for a in ARCHES])


# -- structure ---------------------------------------------------------------

@every
def test_program_is_valid_classic_bpf_and_stays_small(mode: str, arch: str) -> None:
    prog = compile_seccomp(mode, arch)
    assert len(prog) % 8 == 0 and len(prog) // 8 < 100
    # Every conditional jump lands inside the program; the last insn returns.
    insns = [prog[i:i + 8] for i in range(0, len(prog), 8)]
    for pc, insn in enumerate(insns):
        if insn[0] in (0x15, 0x25, 0x35, 0x45):
            assert pc + 1 + max(insn[2], insn[3]) < len(insns)
    assert insns[-1][0] == 0x06


def test_compile_is_pure_and_deterministic() -> None:
    assert compile_seccomp(UNIX_ONLY, X86_64) == compile_seccomp(UNIX_ONLY, X86_64)
    assert compile_seccomp(UNIX_ONLY, X86_64) != compile_seccomp(UNRESTRICTED, X86_64)
    assert compile_seccomp(UNIX_ONLY, X86_64) != compile_seccomp(UNIX_ONLY, AARCH64)


def test_unknown_mode_and_arch_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown seccomp network mode 'hosts'"):
        compile_seccomp("hosts", X86_64)
    with pytest.raises(ValueError, match=r"no seccomp syscall table.*'riscv64'"):
        compile_seccomp(UNIX_ONLY, "riscv64")


def test_native_arch_is_this_machine() -> None:
    assert seccomp.native_arch() == {"x86_64": X86_64, "aarch64": AARCH64}.get(
        os.uname().machine, "")


def _header_numbers(path: str) -> dict[str, int]:
    numbers: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            m = re.match(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\s*$", line)
            if m:
                numbers[m.group(1)] = int(m.group(2))
    return numbers


@pytest.mark.parametrize("arch,header", [
    (X86_64, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    (AARCH64, "/usr/include/asm-generic/unistd.h"),
])
def test_syscall_tables_match_the_kernel_headers(arch: str, header: str) -> None:
    """A wrong number denies some other syscall and lets the dangerous one through."""
    if not os.path.exists(header):
        pytest.skip(f"{header} is not installed")
    numbers = _header_numbers(header)
    checked = 0
    for name, nr in SYSCALLS[arch].items():
        if name in numbers:  # older headers lack the newest calls (open_tree_attr)
            assert numbers[name] == nr, name
            checked += 1
    assert checked >= len(SYSCALLS[arch]) - 2


# -- the denylist --------------------------------------------------------------

@every
@pytest.mark.parametrize("name", DENIED)
def test_each_denied_syscall_gets_eperm(mode: str, arch: str, name: str) -> None:
    assert verdict(mode, arch, name) == EPERM


@given(args=st.tuples(U64, U64, U64, U64, U64, U64), name=st.sampled_from(DENIED),
       mode=st.sampled_from(NETWORK_MODES), arch=st.sampled_from(ARCHES))
def test_denied_syscalls_ignore_their_arguments(args: tuple[int, ...], name: str, mode: str,
                                                arch: str) -> None:
    assert verdict(mode, arch, name, *args) == EPERM


_SPECIAL = {"clone", "clone3", "unshare", "personality", "ioctl", "mknod", "mknodat", "socket",
            "socketpair", *seccomp.CHMOD_MODE_ARG}


@given(nr=st.integers(min_value=0, max_value=600), args=st.tuples(U64, U64, U64),
       arch=st.sampled_from(ARCHES))
def test_everything_else_is_allowed(nr: int, args: tuple[int, ...], arch: str) -> None:
    named = {v: k for k, v in SYSCALLS[arch].items()}
    if named.get(nr) in {*DENIED, *_SPECIAL}:
        return
    assert verdict(UNRESTRICTED, arch, nr, *args) == ALLOW


@every
@pytest.mark.parametrize("name,arg", sorted(seccomp.CHMOD_MODE_ARG.items()))
@given(mode_bits=st.integers(min_value=0, max_value=0o7777), high=HIGH)
def test_chmod_with_setuid_or_setgid_is_denied_and_others_allowed(
        mode: str, arch: str, name: str, arg: int, mode_bits: int, high: int) -> None:
    """The mode is a 16-bit umode_t: what the kernel ignores above it cannot hide the bits."""
    if name not in SYSCALLS[arch]:
        return  # aarch64 has no chmod or fchmod: only the *at forms
    args = [0, 0, 0]
    args[arg] = mode_bits | high
    expected = EPERM if mode_bits & 0o6000 else ALLOW
    assert verdict(mode, arch, name, *args) == expected


@every
@pytest.mark.parametrize("name", ["read", "write", "openat", "execve", "mmap", "getpid"])
def test_everyday_syscalls_are_allowed(mode: str, arch: str, name: str) -> None:
    assert verdict(mode, arch, EVERYDAY[arch][name]) == ALLOW


# -- architecture --------------------------------------------------------------

@pytest.mark.parametrize("foreign", [AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH[AARCH64]])
def test_a_foreign_architecture_is_denied_on_x86_64(foreign: int) -> None:
    """int 0x80 from an x86_64 process arrives as i386, where 20 is getpid, 21 mount."""
    prog = compile_seccomp(UNRESTRICTED, X86_64)
    for nr in (20, 21, 39, 165):
        assert run_filter(prog, nr, foreign) == EPERM


def test_a_foreign_architecture_is_denied_on_aarch64() -> None:
    prog = compile_seccomp(UNRESTRICTED, AARCH64)
    assert run_filter(prog, 172, AUDIT_ARCH_ARM) == EPERM
    assert run_filter(prog, 172, AUDIT_ARCH[X86_64]) == EPERM


@given(nr=st.integers(min_value=0x40000000, max_value=0xFFFFFFFF))
def test_x32_numbers_are_denied(nr: int) -> None:
    """x32 reaches the same kernel entry points as x86_64 under nr | 0x40000000."""
    assert verdict(UNRESTRICTED, X86_64, nr) == EPERM


def test_x32_alias_of_a_denied_and_an_allowed_syscall() -> None:
    assert verdict(UNRESTRICTED, X86_64, SYSCALLS[X86_64]["mount"] | 0x40000000) == EPERM
    assert verdict(UNRESTRICTED, X86_64, 39 | 0x40000000) == EPERM  # getpid


# -- namespaces ----------------------------------------------------------------

@every
def test_clone3_is_enosys_so_libc_falls_back_to_clone(mode: str, arch: str) -> None:
    assert verdict(mode, arch, "clone3") == ENOSYS


@every
@pytest.mark.parametrize("flags", [THREAD_FLAGS, FORK_FLAGS, 17, 0])
def test_clone_for_threads_and_forks_is_allowed(mode: str, arch: str, flags: int) -> None:
    assert verdict(mode, arch, "clone", flags) == ALLOW


@every
@pytest.mark.parametrize("ns", [CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, 0x20000000,
                                0x08000000, 0x04000000, 0x02000000])
def test_clone_into_a_new_namespace_is_denied(mode: str, arch: str, ns: int) -> None:
    assert verdict(mode, arch, "clone", FORK_FLAGS | ns) == EPERM


@given(high=HIGH, low=st.integers(min_value=0, max_value=2**32 - 1))
def test_clone_namespace_check_reads_the_low_word(high: int, low: int) -> None:
    expected = EPERM if low & seccomp.CLONE_NAMESPACES else ALLOW
    assert verdict(UNIX_ONLY, X86_64, "clone", high | low) == expected


@every
@pytest.mark.parametrize("ns", [CLONE_NEWUSER, CLONE_NEWUSER | CLONE_NEWNS, CLONE_NEWNS,
                                CLONE_NEWNET, CLONE_NEWTIME])
def test_unshare_of_a_namespace_is_denied(mode: str, arch: str, ns: int) -> None:
    assert verdict(mode, arch, "unshare", ns) == EPERM


@every
@pytest.mark.parametrize("flags", [0x400, 0x200, 0x40000])  # CLONE_FILES, CLONE_FS, SYSVSEM
def test_unshare_without_namespaces_is_allowed(mode: str, arch: str, flags: int) -> None:
    assert verdict(mode, arch, "unshare", flags) == ALLOW


# -- personality, ioctl, mknod -------------------------------------------------

@every
@pytest.mark.parametrize("persona,expected", [
    (0x0, ALLOW), (0xFFFFFFFF, ALLOW), (0x0040000, EPERM), (0x0400000, EPERM),
    (0x0008, EPERM), (0x1_0004_0000, EPERM),
])
def test_personality_only_default_or_query(mode: str, arch: str, persona: int,
                                           expected: int) -> None:
    assert verdict(mode, arch, "personality", persona) == expected


@every
@pytest.mark.parametrize("cmd", [seccomp.TIOCSTI, seccomp.TIOCLINUX])
def test_terminal_injection_ioctls_are_denied(mode: str, arch: str, cmd: int) -> None:
    assert verdict(mode, arch, "ioctl", 0, cmd) == EPERM


@given(high=HIGH, fd=st.integers(min_value=0, max_value=2**32 - 1),
       cmd=st.sampled_from([seccomp.TIOCSTI, seccomp.TIOCLINUX]))
def test_terminal_ioctls_with_junk_in_the_high_word_are_still_denied(high: int, fd: int,
                                                                     cmd: int) -> None:
    """The kernel truncates cmd to 32 bits; the filter must compare what it will use."""
    assert verdict(UNRESTRICTED, X86_64, "ioctl", fd, high | cmd) == EPERM
    assert verdict(UNRESTRICTED, AARCH64, "ioctl", fd, high | cmd) == EPERM


@given(cmd=st.integers(min_value=0, max_value=2**32 - 1), high=HIGH)
def test_other_ioctls_pass(cmd: int, high: int) -> None:
    if cmd in (seccomp.TIOCSTI, seccomp.TIOCLINUX):
        return
    assert verdict(UNIX_ONLY, X86_64, "ioctl", 1, high | cmd) == ALLOW


@every
@pytest.mark.parametrize("kind,expected", [
    (0o020000, EPERM), (0o060000, EPERM), (0o010000, ALLOW), (0o140000, ALLOW),
    (0o100000, ALLOW), (0, ALLOW),
])
def test_mknodat_denies_device_nodes_only(mode: str, arch: str, kind: int,
                                          expected: int) -> None:
    assert verdict(mode, arch, "mknodat", (-100) & 2**64 - 1, 0, kind | 0o644, 0) == expected


@pytest.mark.parametrize("kind,expected", [(0o020000, EPERM), (0o060000, EPERM),
                                           (0o010000, ALLOW)])
def test_legacy_mknod_on_x86_64(kind: int, expected: int) -> None:
    assert verdict(UNIX_ONLY, X86_64, "mknod", 0, kind | 0o600, 0) == expected
    assert "mknod" not in SYSCALLS[AARCH64]


# -- the socket gate -----------------------------------------------------------

GATE = {
    LOOPBACK: {AF_UNIX, AF_INET, AF_INET6},
    UNIX_ONLY: {AF_UNIX},
    PROXY_ROUTED: {AF_UNIX, AF_INET, AF_INET6},
    UNRESTRICTED: {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK},
}


@every
@pytest.mark.parametrize("family", [AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK])
@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_socket_families_per_mode(mode: str, arch: str, family: int, call: str) -> None:
    expected = ALLOW if family in GATE[mode] else EPERM
    assert verdict(mode, arch, call, family, 1, 0) == expected


@given(family=st.integers(min_value=0, max_value=2**32 - 1), high=HIGH,
       mode=st.sampled_from([LOOPBACK, UNIX_ONLY, PROXY_ROUTED]))
def test_gated_modes_are_allowlists(family: int, high: int, mode: str) -> None:
    """Any family not named -- AF_ALG, AF_BLUETOOTH, AF_XDP, tomorrow's -- is denied."""
    expected = ALLOW if family in GATE[mode] else EPERM
    assert verdict(mode, X86_64, "socket", high | family, 1, 0) == expected


def test_packet_netlink_vsock_denied_in_every_gated_mode() -> None:
    for mode in (LOOPBACK, UNIX_ONLY, PROXY_ROUTED):
        for family in (AF_PACKET, AF_NETLINK, AF_VSOCK):
            for arch in ARCHES:
                assert verdict(mode, arch, "socket", family, 2, 0) == EPERM


SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5
SOCK_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("family", [AF_INET, AF_INET6])
@pytest.mark.parametrize("kind,proto,expected", [
    (SOCK_STREAM, 0, ALLOW), (SOCK_STREAM, 6, ALLOW), (SOCK_DGRAM, 0, ALLOW),
    (SOCK_DGRAM, 17, ALLOW),
    (SOCK_STREAM, 262, EPERM),  # MPTCP
    (SOCK_STREAM, 132, EPERM), (SOCK_SEQPACKET, 132, EPERM),  # SCTP
    (SOCK_DGRAM, 136, EPERM),  # UDP-Lite
    (SOCK_DGRAM, 1, EPERM), (SOCK_DGRAM, 58, EPERM),  # ICMP "ping" sockets
    (SOCK_RAW, 0, EPERM), (SOCK_RAW, 255, EPERM), (SOCK_STREAM, 17, EPERM),
    (SOCK_DGRAM, 6, EPERM), (10, 0, EPERM),  # SOCK_PACKET
])
def test_loopback_mode_allows_tcp_and_udp_only(arch: str, family: int, kind: int, proto: int,
                                               expected: int) -> None:
    """The command's own loopback, for servers and clients: nothing but TCP and UDP."""
    assert verdict(LOOPBACK, arch, "socket", family, kind, proto) == expected
    assert verdict(LOOPBACK, arch, "socket", family, kind | SOCK_NONBLOCK_CLOEXEC,
                   proto) == expected


@given(kind=st.integers(min_value=0, max_value=2**32 - 1), high=HIGH,
       proto=st.integers(min_value=0, max_value=2**32 - 1))
def test_loopback_inet_checks_read_the_low_words(kind: int, high: int, proto: int) -> None:
    allowed = {(SOCK_STREAM, 0), (SOCK_STREAM, 6), (SOCK_DGRAM, 0), (SOCK_DGRAM, 17)}
    expected = ALLOW if (kind & 0xF, proto) in allowed else EPERM
    assert verdict(LOOPBACK, X86_64, "socket", AF_INET, high | kind, high | proto) == expected


def test_loopback_keeps_every_unix_socket() -> None:
    for kind in (SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET):
        assert verdict(LOOPBACK, X86_64, "socket", AF_UNIX, kind, 0) == ALLOW
        assert verdict(LOOPBACK, X86_64, "socketpair", AF_UNIX, kind, 0) == ALLOW


# -- tracing the command's own processes (trace=True) ---------------------------

TRACE = ("ptrace", "process_vm_readv", "process_vm_writev")


@every
def test_tracing_is_refused_unless_asked(mode: str, arch: str) -> None:
    for name in TRACE:
        assert verdict(mode, arch, name, 16, 2) == EPERM


@every
def test_trace_allows_ptrace_and_nothing_else_of_the_denylist(mode: str, arch: str) -> None:
    prog = compile_seccomp(mode, arch, trace=True)
    nr = SYSCALLS[arch]
    for name in DENIED:
        expected = ALLOW if name in TRACE else EPERM
        assert run_filter(prog, nr[name], AUDIT_ARCH[arch], (16, 2)) == expected, name
    # The rest of the policy is the same program's.
    assert run_filter(prog, nr["clone"], AUDIT_ARCH[arch], (CLONE_NEWUSER,)) == EPERM
    assert run_filter(prog, nr["ioctl"], AUDIT_ARCH[arch], (0, seccomp.TIOCSTI)) == EPERM


@every
@pytest.mark.parametrize("persona,expected", [
    (0x0, ALLOW), (0xFFFFFFFF, ALLOW), (0x0040000, ALLOW), (0x0400000, EPERM),
    (0x0440000, EPERM), (0x0008, EPERM), (0x1_0040_0000, EPERM),
])
def test_trace_allows_gdbs_aslr_switch_alone(mode: str, arch: str, persona: int,
                                             expected: int) -> None:
    prog = compile_seccomp(mode, arch, trace=True)
    assert run_filter(prog, SYSCALLS[arch]["personality"], AUDIT_ARCH[arch],
                      (persona,)) == expected


@pytest.mark.parametrize("mode", LANDLOCK_BACKEND_MODES)
def test_trace_is_never_compiled_for_the_landlock_backend(mode: str) -> None:
    with pytest.raises(ValueError, match="no PID namespace"):
        compile_seccomp(mode, X86_64, trace=True)


# -- the no-spawn filter (spawn_subprocess = False) ----------------------------


def no_spawn(arch: str, name: str | int, *args: int, audit: int | None = None) -> int:
    nr = SYSCALLS[arch][name] if isinstance(name, str) else name
    return run_filter(compile_no_spawn(arch), nr, AUDIT_ARCH[arch] if audit is None else audit,
                      args)


@pytest.mark.parametrize("arch", ARCHES)
def test_no_spawn_refuses_processes_and_keeps_threads(arch: str) -> None:
    assert no_spawn(arch, "clone", FORK_FLAGS) == EPERM
    assert no_spawn(arch, "clone", 0x4111) == EPERM  # posix_spawn: CLONE_VM | CLONE_VFORK
    assert no_spawn(arch, "clone", THREAD_FLAGS) == ALLOW
    assert no_spawn(arch, "clone3") == ENOSYS  # libc then takes clone, above
    for nr in EVERYDAY[arch].values():
        assert no_spawn(arch, nr) == ALLOW
    if arch == X86_64:
        assert no_spawn(arch, "fork") == EPERM and no_spawn(arch, "vfork") == EPERM


@given(high=HIGH)
def test_no_spawn_reads_the_low_word_of_clone_flags(high: int) -> None:
    assert no_spawn(X86_64, "clone", high | FORK_FLAGS) == EPERM
    assert no_spawn(X86_64, "clone", high | THREAD_FLAGS) == ALLOW


def test_no_spawn_denies_other_abis() -> None:
    assert no_spawn(X86_64, EVERYDAY[X86_64]["getpid"], audit=AUDIT_ARCH_I386) == EPERM
    assert no_spawn(X86_64, SYSCALLS[X86_64]["fork"] | 0x40000000) == EPERM  # x32 fork
    assert len(compile_no_spawn(X86_64)) // 8 < 20
