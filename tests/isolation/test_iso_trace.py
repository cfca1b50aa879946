"""Debuggers, strace and LeakSanitizer on the command's own processes, and nothing else.

Under bubblewrap a command runs in a PID namespace of its own, so ptrace
reaches only the processes it started: bwrap's pid 1 is outside its Landlock
domain, the init's helpers are not dumpable, and the host's processes are not
in the namespace at all. There the seccomp filter lets ptrace through; under
the Landlock backend, with no PID namespace, it does not, and the refusal
says why (tests/landlock_backend/test_llb_trace.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Box, text

pytestmark = pytest.mark.isolation

TOOLS = "/usr/bin:/usr/local/bin"
CLEAN_C = '#include <stdio.h>\n#include <stdlib.h>\n' \
          'int main(void) { char *p = malloc(10); p[0] = 1; free(p); puts("clean"); return 0; }\n'
LEAK_C = '#include <stdlib.h>\nvoid *keep;\n' \
         'int main(void) { keep = malloc(77); keep = 0; return 0; }\n'


def _compile(box: Box, name: str, source: str, *flags: str) -> Path:
    """A C program built on the host into the workspace, or a skip that says why."""
    cc = shutil.which("gcc", path=TOOLS) or shutil.which("clang", path=TOOLS)
    if cc is None:
        pytest.skip("no C compiler (gcc or clang) on this host")
    src = box.write(box.ws / f"{name}.c", source)
    out = box.ws / name
    res = subprocess.run([cc, *flags, "-g", "-o", str(out), str(src)], capture_output=True,
                         text=True, check=False, timeout=120)
    if res.returncode != 0:
        pytest.skip(f"{cc} cannot build {' '.join(flags)}: {res.stderr.strip()[:200]}")
    box.runner.own(out)
    return out


def test_asan_leak_check_passes_on_a_clean_program(box: Box) -> None:
    """LeakSanitizer ptrace-attaches to its own threads; refused, a clean program
    exited 1 with "LeakSanitizer does not work under ptrace"."""
    prog = _compile(box, "clean", CLEAN_C, "-fsanitize=address")
    assert subprocess.run([str(prog)], capture_output=True, check=False).returncode == 0
    res = box.run([str(prog)], mode="workspace-write")
    assert res.returncode == 0, text(res)
    assert "clean" in text(res) and "does not work under ptrace" not in text(res)


def test_asan_leak_check_finds_a_leak(box: Box) -> None:
    prog = _compile(box, "leak", LEAK_C, "-fsanitize=address")
    res = box.run([str(prog)], mode="workspace-write")
    assert res.returncode != 0
    assert "detected memory leaks" in text(res) and "77 byte(s) leaked" in text(res), text(res)


@pytest.mark.skipif(shutil.which("strace", path=TOOLS) is None, reason="strace is not installed")
def test_strace_follows_the_commands_own_processes(box: Box) -> None:
    res = box.sh("strace -f -e trace=execve -o trace.txt /bin/sh -c '/bin/echo traced'; "
                 "cat trace.txt", mode="workspace-write")
    assert res.returncode == 0, text(res)
    assert "traced" in text(res) and 'execve("/bin/echo"' in text(res), text(res)


@pytest.mark.skipif(shutil.which("gdb", path=TOOLS) is None, reason="gdb is not installed")
def test_gdb_runs_a_program_to_a_breakpoint(box: Box) -> None:
    prog = _compile(box, "plain", CLEAN_C, "-O0")
    res = box.run(["gdb", "-q", "-batch", "-ex", "break main", "-ex", "run", "-ex", "bt",
                   "-ex", "continue", str(prog)], mode="workspace-write")
    out = text(res)
    assert res.returncode == 0, out
    assert "Breakpoint 1, main" in out and "clean" in out and "exited normally" in out, out
    # gdb turns ASLR off for what it starts (personality ADDR_NO_RANDOMIZE).
    assert "disabling address space randomization" not in out, out


# Attach to a pid that is not one of the command's own; print the errno.
ATTACH = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for pid in sys.argv[1:]:
    if libc.ptrace(16, int(pid), 0, 0) == 0:  # PTRACE_ATTACH
        print("ATTACHED", pid)
    else:
        print(errno.errorcode[ctypes.get_errno()], pid)
"""

# A host process that allows any same-uid tracer, even under Yama's ptrace_scope 1,
# so the unconfined control can attach to it.
TRACEABLE = "import ctypes, time; ctypes.CDLL(None).prctl(0x59616d61, -1, 0, 0, 0); " \
            "print('up', flush=True); time.sleep(3600)"


@pytest.fixture
def host_target(box: Box) -> Iterator[subprocess.Popen[bytes]]:
    proc = box.runner.popen(["/usr/bin/python3", "-I", "-c", TRACEABLE],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    yield proc
    proc.kill()
    proc.wait(timeout=5)


def test_no_process_outside_the_sandbox_can_be_traced(box: Box,
                                                      host_target: subprocess.Popen[bytes]
                                                      ) -> None:
    """The host's process is not in the command's PID namespace; bwrap's pid 1 and
    the init's helpers (the lifeline watcher) are, and are still out of reach."""
    res = box.sh(f'"$1" -I -c "$2" {host_target.pid} 1 $(ls /proc | grep -E "^[0-9]+$" | '
                 'grep -vx "$$" | grep -vx 1)', "/usr/bin/python3", ATTACH,
                 mode="workspace-write")
    out = text(res)
    lines = res.stdout.decode().splitlines()
    assert lines and not any(line.startswith("ATTACHED") for line in lines), out
    assert f"ESRCH {host_target.pid}" in lines, out
    assert "EPERM 1" in lines, out
    time.sleep(0.1)
    assert host_target.poll() is None  # untouched


def test_control_unconfined_the_host_process_can_be_traced(
        box: Box, host_target: subprocess.Popen[bytes]) -> None:
    res = box.py(ATTACH, str(host_target.pid), mode="full-access")
    assert f"ATTACHED {host_target.pid}" in text(res), text(res)
