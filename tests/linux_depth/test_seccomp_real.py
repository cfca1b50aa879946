"""The seccomp policy against the real kernel: each denied call is issued and must see EPERM.

Each run is a child process (depth_probes.py) that installs the filter
itself, then forks once per probe. The same probes run without the filter
as a control: there, as root, none of them may answer EPERM, or a passing
test would prove nothing about the filter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.drivers.linux.init import seccomp
from stockade.drivers.linux.init.seccomp import NETWORK_MODES, PROXY_ROUTED, UNIX_ONLY, UNRESTRICTED

pytestmark = [
    pytest.mark.isolation,
    pytest.mark.skipif(not sys.platform.startswith("linux") or not seccomp.native_arch(),
                       reason="needs Linux on x86_64 or aarch64"),
]

PROBES = Path(__file__).with_name("depth_probes.py")
SECCOMP_DIR = Path(seccomp.__file__).parent
X86 = seccomp.native_arch() == seccomp.X86_64

DENIED_PROBES = [
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "open_tree_attr", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "ptrace",
    "process_vm_readv", "process_vm_writev", "add_key", "request_key", "keyctl", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "mknodat_chr", "mknodat_blk",
    "swapon", "swapoff", "syslog", "reboot", "setns", "unshare_newuser", "clone_newuser",
    "open_by_handle_at", "name_to_handle_at", "personality_aslr_off", "tiocsti",
    "tiocsti_high_bits", "tioclinux",
    *(["mknod_chr", "x32_getpid", "i386_int80_getpid"] if X86 else []),
]
ALLOWED_PROBES = ["getpid", "fork", "thread", "socket_unix", "socketpair_unix",
                  "personality_query", "tcgets", "unshare_files", "mkfifo"]
GATED = {
    UNIX_ONLY: {"socket_inet": "EPERM", "socket_inet6": "EPERM", "socket_packet": "EPERM",
                "socket_netlink": "EPERM", "socket_vsock": "EPERM",
                "socket_inet_high_bits": "EPERM", "socketpair_inet": "EPERM"},
    PROXY_ROUTED: {"socket_inet": "ok", "socket_inet6": "ok", "socket_packet": "EPERM",
                   "socket_netlink": "EPERM", "socket_vsock": "EPERM",
                   "socket_inet_high_bits": "ok"},
}


def probe(*args: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-I", str(PROBES), str(SECCOMP_DIR), *args],
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, str] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def control() -> dict[str, str]:
    return probe()


@pytest.fixture(scope="module")
def filtered() -> dict[str, dict[str, str]]:
    return {mode: probe("--install", mode) for mode in NETWORK_MODES}


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user the kernel says EPERM by itself")
def test_control_nothing_is_eperm_without_the_filter(control: dict[str, str]) -> None:
    assert {k: v for k, v in control.items() if v == "EPERM"} == {}


@pytest.mark.parametrize("mode", NETWORK_MODES)
@pytest.mark.parametrize("name", DENIED_PROBES)
def test_denied_syscall_gets_eperm(filtered: dict[str, dict[str, str]], mode: str,
                                   name: str) -> None:
    assert filtered[mode][name] == "EPERM"


@pytest.mark.parametrize("mode", NETWORK_MODES)
def test_clone3_gets_enosys(filtered: dict[str, dict[str, str]], mode: str) -> None:
    assert filtered[mode]["clone3"] == "ENOSYS"


@pytest.mark.parametrize("mode", NETWORK_MODES)
@pytest.mark.parametrize("name", ALLOWED_PROBES)
def test_allowed_calls_still_work(filtered: dict[str, dict[str, str]], mode: str,
                                  name: str) -> None:
    assert filtered[mode][name] == "ok"


@pytest.mark.parametrize("mode", [UNIX_ONLY, PROXY_ROUTED])
def test_socket_gate(filtered: dict[str, dict[str, str]], mode: str) -> None:
    got = {k: filtered[mode][k] for k in GATED[mode]}
    # IPv6 may be compiled out; then the kernel, not the filter, refuses it.
    if mode == PROXY_ROUTED and got["socket_inet6"] == "EAFNOSUPPORT":
        got["socket_inet6"] = "ok"
    assert got == GATED[mode]


def test_unrestricted_mode_leaves_sockets_alone(filtered: dict[str, dict[str, str]],
                                                control: dict[str, str]) -> None:
    names = [k for k in control if k.startswith(("socket_", "socketpair_"))]
    assert {k: filtered[UNRESTRICTED][k] for k in names} == {k: control[k] for k in names}


@pytest.mark.skipif(not X86, reason="x86_64 only")
def test_int80_control_really_reached_the_i386_entry(control: dict[str, str]) -> None:
    """Without ia32 emulation int 0x80 faults, and the filtered EPERM would prove nothing."""
    if control["i386_int80_getpid"].startswith("signal"):
        pytest.skip("this kernel runs without ia32 emulation")
    assert control["i386_int80_getpid"] == "ok"


CHILD = r"""
import os, sys, threading, json
sys.path.append(sys.argv[1])
import seccomp
sc = seccomp.libc_syscall()
table = seccomp.SYSCALLS[seccomp.native_arch()]
go, done = threading.Event(), threading.Event()
out = {}
def worker():
    go.wait()
    try:
        sc(table["unshare"], 0x10000000)
        out["thread_unshare"] = "ok"
    except OSError as exc:
        out["thread_unshare"] = exc.errno
    done.set()
threading.Thread(target=worker).start()
seccomp.harden_process(sc)
seccomp.set_no_new_privs(sc)
seccomp.install_seccomp(seccomp.compile_seccomp("unix-only"), sc)
go.set(); done.wait()
status = open("/proc/self/status").read()
out["status"] = {l.split(":")[0]: l.split(":")[1].strip() for l in status.splitlines()}
import resource
out["core"] = resource.getrlimit(resource.RLIMIT_CORE)
print(json.dumps(out))
"""


def test_filter_reaches_threads_started_before_it_and_hardening_holds() -> None:
    """TSYNC: a thread that existed before the filter is filtered too."""
    done = subprocess.run([sys.executable, "-I", "-c", CHILD, str(SECCOMP_DIR)],
                          capture_output=True, timeout=60, check=True)
    out = json.loads(done.stdout)
    assert out["thread_unshare"] == 1  # EPERM
    assert out["status"]["NoNewPrivs"] == "1"
    assert out["status"]["Seccomp"] == "2"
    assert out["core"] == [0, 0]


def test_install_refuses_malformed_programs() -> None:
    for prog in (b"", b"1234567", bytes(8 * 4097)):
        with pytest.raises(ValueError, match="eight-byte instructions"):
            seccomp.install_seccomp(prog)
