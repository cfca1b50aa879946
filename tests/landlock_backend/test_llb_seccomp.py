"""The Landlock backend's seccomp modes: the policy through a BPF interpreter, then the kernel.

Without a network namespace or a mount over the socket file, these modes are
what keeps a command off the Docker socket (unix connect), off datagram
sockets (/dev/log, journald) and, with network hosts, off everything but TCP
(which Landlock then confines to the proxy's port).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.drivers.linux.init.seccomp import (
    AARCH64,
    AUDIT_ARCH,
    DENIED,
    LANDLOCK_BACKEND_MODES,
    MSG_FASTOPEN,
    NETWORK_MODES,
    NO_UNIX,
    SYSCALLS,
    TCP_ONLY,
    UNIX_NO_CONNECT,
    X86_64,
    compile_seccomp,
)

ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
ARCHES = (X86_64, AARCH64)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
STREAM, DGRAM, RAW, SEQPACKET = 1, 2, 3, 5
NONBLOCK_CLOEXEC = 0o4000 | 0o2000000
HIGH = st.integers(min_value=0, max_value=2**32 - 1).map(lambda h: h << 32)


def run_filter(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter for what compile_seccomp emits (ld, and, ja, jeq, jge, jset,
    ret); rejects anything the kernel's checker would."""
    assert prog and len(prog) % 8 == 0 and len(prog) // 8 <= 4096
    full = (list(args) + [0] * 6)[:6]
    data = (nr & 0xFFFFFFFF).to_bytes(4, "little") + arch.to_bytes(4, "little") + bytes(8)
    data += b"".join(a.to_bytes(8, "little") for a in full)
    insns = [(int.from_bytes(prog[i:i + 2], "little"), prog[i + 2], prog[i + 3],
              int.from_bytes(prog[i + 4:i + 8], "little")) for i in range(0, len(prog), 8)]
    acc = pc = 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            assert k % 4 == 0 and k + 4 <= len(data)
            acc, pc = int.from_bytes(data[k:k + 4], "little"), pc + 1
        elif code == 0x54:
            acc, pc = acc & k, pc + 1
        elif code == 0x05:
            pc += 1 + k
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
            assert pc < len(insns)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x}")


def verdict(mode: str, arch: str, name: str, *args: int) -> int:
    return run_filter(compile_seccomp(mode, arch), SYSCALLS[arch][name], AUDIT_ARCH[arch], args)


every = pytest.mark.parametrize("mode,arch", [(m, a) for m in LANDLOCK_BACKEND_MODES
                                              for a in ARCHES])


def test_modes_are_separate_from_the_bubblewrap_ones() -> None:
    assert not set(LANDLOCK_BACKEND_MODES) & set(NETWORK_MODES)
    with pytest.raises(ValueError, match="unix-no-connect"):
        compile_seccomp("hosts", X86_64)


@every
def test_program_stays_small_and_jumps_in_range(mode: str, arch: str) -> None:
    prog = compile_seccomp(mode, arch)
    assert len(prog) // 8 < 120
    insns = [prog[i:i + 8] for i in range(0, len(prog), 8)]
    for pc, insn in enumerate(insns):
        if insn[0] in (0x15, 0x35, 0x45):
            assert pc + 1 + max(insn[2], insn[3]) < len(insns)
    assert insns[-1][0] == 0x06


@every
@pytest.mark.parametrize("name", sorted(DENIED))
def test_the_denylist_is_unchanged(mode: str, arch: str, name: str) -> None:
    assert verdict(mode, arch, name) == EPERM


@every
def test_clone3_still_enosys(mode: str, arch: str) -> None:
    assert verdict(mode, arch, "clone3") == ENOSYS


# -- unix-no-connect (network none) ------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHES)
def test_none_allows_only_unix_stream_and_seqpacket(arch: str) -> None:
    for call in ("socket", "socketpair"):
        for family, kind, want in [
            (AF_UNIX, STREAM, ALLOW), (AF_UNIX, SEQPACKET, ALLOW),
            (AF_UNIX, STREAM | NONBLOCK_CLOEXEC, ALLOW), (AF_UNIX, DGRAM, EPERM),
            (AF_UNIX, RAW, EPERM), (AF_UNIX, DGRAM | NONBLOCK_CLOEXEC, EPERM),
            (AF_INET, STREAM, EPERM), (AF_INET6, STREAM, EPERM), (AF_NETLINK, RAW, EPERM),
            (AF_PACKET, RAW, EPERM), (AF_VSOCK, STREAM, EPERM),
        ]:
            assert verdict(UNIX_NO_CONNECT, arch, call, family, kind, 0) == want, \
                (call, family, kind)


@pytest.mark.parametrize("arch", ARCHES)
def test_none_denies_connect_and_addressed_sendto(arch: str) -> None:
    assert verdict(UNIX_NO_CONNECT, arch, "connect", 3, 0x7FFF0000, 110) == EPERM
    assert verdict(UNIX_NO_CONNECT, arch, "sendto", 3, 0x1000, 5, 0, 0, 0) == ALLOW  # send()
    assert verdict(UNIX_NO_CONNECT, arch, "sendto", 3, 0x1000, 5, 0, 0x7FFF0000, 16) == EPERM
    # A pointer whose low half is zero is still a pointer.
    assert verdict(UNIX_NO_CONNECT, arch, "sendto", 3, 0x1000, 5, 0, 1 << 40, 16) == EPERM
    assert verdict(UNIX_NO_CONNECT, arch, "sendmsg", 3, 0x1000, 0) == ALLOW


@given(family=st.integers(min_value=0, max_value=2**32 - 1), high=HIGH,
       kind=st.integers(min_value=0, max_value=2**32 - 1))
def test_none_is_an_allowlist_whatever_the_high_bits(family: int, high: int, kind: int) -> None:
    allowed = family == AF_UNIX and kind & 0xF in (STREAM, SEQPACKET)
    assert verdict(UNIX_NO_CONNECT, X86_64, "socket", high | family, high | kind, 0) == (
        ALLOW if allowed else EPERM)


# -- tcp-only (network hosts) ------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHES)
def test_hosts_allows_tcp_and_stream_socketpairs_only(arch: str) -> None:
    for family, kind, proto, want in [
        (AF_INET, STREAM, 0, ALLOW), (AF_INET6, STREAM, 0, ALLOW), (AF_INET, STREAM, 6, ALLOW),
        (AF_INET, STREAM | NONBLOCK_CLOEXEC, 0, ALLOW),
        (AF_INET, STREAM, 262, EPERM),  # MPTCP: not covered by Landlock's TCP rules
        (AF_INET, STREAM, 132, EPERM),  # SCTP, likewise
        (AF_INET, DGRAM, 0, EPERM), (AF_INET6, DGRAM, 17, EPERM), (AF_INET, RAW, 1, EPERM),
        (AF_UNIX, STREAM, 0, EPERM), (AF_NETLINK, RAW, 0, EPERM),
    ]:
        assert verdict(TCP_ONLY, arch, "socket", family, kind, proto) == want, (family, kind)
    assert verdict(TCP_ONLY, arch, "socketpair", AF_UNIX, STREAM, 0) == ALLOW
    assert verdict(TCP_ONLY, arch, "socketpair", AF_UNIX, DGRAM, 0) == EPERM
    assert verdict(TCP_ONLY, arch, "connect", 3, 0x1000, 16) == ALLOW  # Landlock's to judge


@pytest.mark.parametrize("arch", ARCHES)
def test_hosts_refuses_tcp_fast_open(arch: str) -> None:
    """sendto(MSG_FASTOPEN) connects without connect(): Landlock's hook would not see it."""
    assert verdict(TCP_ONLY, arch, "sendto", 3, 0x1000, 5, MSG_FASTOPEN, 0x2000, 16) == EPERM
    assert verdict(TCP_ONLY, arch, "sendto", 3, 0x1000, 5, 0x4000, 0, 0) == ALLOW
    assert verdict(TCP_ONLY, arch, "sendmsg", 3, 0x1000, MSG_FASTOPEN) == EPERM
    assert verdict(TCP_ONLY, arch, "sendmsg", 3, 0x1000, 0x40) == ALLOW
    assert verdict(TCP_ONLY, arch, "sendmmsg", 3, 0x1000, 2, MSG_FASTOPEN) == EPERM


@pytest.mark.parametrize("arch", ARCHES)
def test_hosts_refuses_listen(arch: str) -> None:
    """listen() binds an unbound socket to every address, past Landlock's bind rule."""
    assert verdict(TCP_ONLY, arch, "listen", 3, 5) == EPERM
    assert verdict(NO_UNIX, arch, "listen", 3, 5) == ALLOW  # network all: any server


# -- no-unix (network all) ---------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHES)
def test_all_allows_every_family_but_unix(arch: str) -> None:
    for family in (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET):
        assert verdict(NO_UNIX, arch, "socket", family, DGRAM, 0) == ALLOW
    assert verdict(NO_UNIX, arch, "socket", AF_UNIX, STREAM, 0) == EPERM
    assert verdict(NO_UNIX, arch, "socketpair", AF_UNIX, STREAM, 0) == ALLOW
    assert verdict(NO_UNIX, arch, "socketpair", AF_UNIX, DGRAM, 0) == EPERM
    assert verdict(NO_UNIX, arch, "connect", 3, 0x1000, 16) == ALLOW


# -- setuid and setgid modes -------------------------------------------------------------


@every
@pytest.mark.parametrize("name", ["chmod", "fchmod", "fchmodat", "fchmodat2"])
def test_no_setuid_or_setgid_mode_by_chmod(mode: str, arch: str, name: str) -> None:
    """Root without a user namespace owns what it makes as the real root: a setuid bit
    would leave a root program in the workspace for any local user."""
    if name not in SYSCALLS[arch]:
        pytest.skip(f"{arch} has no {name}")
    at = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}[name]

    def call(file_mode: int) -> int:
        args = [3, 0x1000, 0, 0]
        args[at] = file_mode
        return verdict(mode, arch, name, *args)

    for ok in (0o755, 0o644, 0o1777, 0o700):
        assert call(ok) == ALLOW, oct(ok)
    for bad in (0o4755, 0o2755, 0o6755, 0o4000 | (1 << 40)):
        assert call(bad) == EPERM, oct(bad)


# -- the kernel agrees -------------------------------------------------------------------

PROBE = r"""
import json, os, socket, sys
sys.path.append(sys.argv[1])
import seccomp
sc = seccomp.libc_syscall()
seccomp.set_no_new_privs(sc)
seccomp.install_seccomp(seccomp.compile_seccomp(sys.argv[2]), sc)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = "EPERM" if exc.errno == 1 else f"errno {exc.errno}"
attempt("unix-stream", lambda: socket.socket(socket.AF_UNIX))
attempt("unix-dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("pair", lambda: socket.socketpair())
attempt("pair-dgram", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("tcp", lambda: socket.socket())
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
def unix_connect():
    a, b = socket.socketpair()
    a.connect(sys.argv[3])
attempt("connect", unix_connect)
def addressed():
    a, b = socket.socketpair()
    a.sendto(b"x", sys.argv[3])
attempt("sendto-address", addressed)
def plain_send():
    a, b = socket.socketpair()
    a.send(b"x")
attempt("send", plain_send)
target = sys.argv[4]
attempt("chmod-exec", lambda: os.chmod(target, 0o755))
attempt("chmod-setuid", lambda: os.chmod(target, 0o4755))
attempt("chmod-setgid", lambda: os.chmod(target, 0o2755))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def kernel_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    from stockade.drivers.linux.init import seccomp

    here = os.path.dirname(seccomp.__file__)
    sock = str(tmp_path_factory.mktemp("sock") / "s")
    target = tmp_path_factory.mktemp("chmod") / "prog"
    target.write_text("#!/bin/sh\n")
    out = {}
    for mode in LANDLOCK_BACKEND_MODES:
        res = subprocess.run([sys.executable, "-I", "-c", PROBE, here, mode, sock, str(target)],
                             capture_output=True, timeout=30, check=False)
        assert res.returncode == 0, res.stderr.decode()
        out[mode] = json.loads(res.stdout)
    return out


@pytest.mark.isolation
@pytest.mark.parametrize("mode", LANDLOCK_BACKEND_MODES)
def test_kernel_chmod(kernel_verdicts: dict[str, dict[str, str]], mode: str) -> None:
    v = kernel_verdicts[mode]
    assert v["chmod-exec"] == "ok", v
    assert v["chmod-setuid"] == v["chmod-setgid"] == "EPERM", v


@pytest.mark.isolation
def test_kernel_unix_no_connect(kernel_verdicts: dict[str, dict[str, str]]) -> None:
    v = kernel_verdicts[UNIX_NO_CONNECT]
    assert v["unix-stream"] == v["pair"] == v["send"] == "ok", v
    for name in ("unix-dgram", "pair-dgram", "tcp", "udp", "connect", "sendto-address"):
        assert v[name] == "EPERM", (name, v)


@pytest.mark.isolation
def test_kernel_tcp_only(kernel_verdicts: dict[str, dict[str, str]]) -> None:
    v = kernel_verdicts[TCP_ONLY]
    assert v["tcp"] == v["pair"] == v["send"] == "ok", v
    for name in ("unix-stream", "unix-dgram", "pair-dgram", "udp"):
        assert v[name] == "EPERM", (name, v)


@pytest.mark.isolation
def test_kernel_no_unix(kernel_verdicts: dict[str, dict[str, str]]) -> None:
    v = kernel_verdicts[NO_UNIX]
    assert v["tcp"] == v["udp"] == v["pair"] == v["send"] == "ok", v
    for name in ("unix-stream", "unix-dgram", "pair-dgram"):
        assert v[name] == "EPERM", (name, v)
