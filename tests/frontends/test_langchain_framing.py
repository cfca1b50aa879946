"""Attacks on the LangChain persistent shell's framing, as root and as an unprivileged user.

Each test drives LangChain's own `ShellSession` over `StockadeExecutionPolicy`
in a process of the runner's user, as an agent would, and a command of the
model's attacks what carries the other commands: the shell's input (where a
command's framing and its status token travel), the directory the next
command starts in, the programs the framing runs, and the record of `exit`.
"""

from __future__ import annotations

import json
import sysconfig
from typing import Any

import pytest

from isolation.conftest import Box

pytestmark = [pytest.mark.isolation, pytest.mark.timeout(180)]

#: Runs the calls it is given in one `ShellSession` (a {"sleep": s} call waits
#: on the host) with the shell environment given, and prints what each showed and
#: every persistent-shell record.
DRIVER = """
import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from pathlib import Path
from langchain.agents.middleware.shell_tool import ShellSession
from stockade.adapters.langchain import StockadeExecutionPolicy
policy = StockadeExecutionPolicy(mode="workspace-write", command_timeout=20,
                                 termination_timeout=5)
session = ShellSession(Path.cwd(), policy, ("/bin/bash",), json.loads(sys.argv[4]))
session.start()
shown = []
try:
    for call in json.loads(sys.argv[3]):
        if "sleep" in call:
            time.sleep(call["sleep"])
            continue
        r = session.execute(call["command"], timeout=20)
        shown.append({"output": r.output, "exit_code": r.exit_code, "timed_out": r.timed_out})
    rows = policy._sandbox.core.ledger.query(last=100)
finally:
    session.stop(5)
    policy.close()
records = [(json.loads(r["argv"])[2] if isinstance(r["argv"], str) else r["argv"][2],
            r["outcome"], r["exit_code"])
           for r in sorted(rows, key=lambda r: r["id"]) if "persistent_shell" in str(r["detail"])]
print(json.dumps({"shown": shown, "records": records}))
"""


def _session(box: Box, calls: list[dict[str, Any]], env: dict[str, str] | None = None,
             ) -> tuple[list[dict[str, Any]], list[tuple[str, str, int | None]]]:
    pytest.importorskip("langchain.agents.middleware")
    purelib = sysconfig.get_paths()["purelib"]
    res = box.host([box.runner.python, "-I", "-c", DRIVER, box.runner.site, purelib,
                    json.dumps(calls), json.dumps(env or {})], timeout=150)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    out = json.loads(res.stdout.decode().strip().splitlines()[-1])
    return out["shown"], [(r[0], r[1], r[2]) for r in out["records"]]


#: A background job that, for `secs` seconds, opens every pipe in the sandbox it
#: can and reads each as soon as anything arrives: any status token it finds it
#: writes to `found` and prints with status 0 (a forged status line); with
#: `inject`, it writes a command line into every pipe it can open for writing.
SNOOP = r"""
import os, re, select, sys, time
me, secs, inject = os.getpid(), float(sys.argv[1]), sys.argv[2] == "inject"
opened, found = {}, open("found", "ab", buffering=0)
end = time.time() + secs
scanned = 0.0
while time.time() < end:
    if time.time() - scanned > 0.2:
        scanned = time.time()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    link = os.readlink(path)
                    if not link.startswith("pipe:") or link in opened:
                        continue
                    flags = os.O_WRONLY if inject else os.O_RDONLY
                    opened[link] = os.open(path, flags | os.O_NONBLOCK)
                    if inject:
                        os.write(opened[link], b"\ntouch injected\n")
                except OSError:
                    continue
    if inject:
        time.sleep(0.05)
        continue
    ready, _, _ = select.select(list(opened.values()), [], [], 0.05)
    for r in ready:
        try:
            data = os.read(r, 65536)
        except OSError:
            continue
        for token in re.findall(rb"__stockade_status_[0-9a-f]+", data):
            found.write(token + b"\n")
            os.write(1, token + b" 0\n")
"""


def _snoop(box: Box, mode: str) -> str:
    box.write(box.ws / "snoop.py", SNOOP)
    box.write(box.ws / "found", "")
    return f"(python3 snoop.py 6 {mode} 2>/dev/null &) ; echo started"


def test_a_background_job_cannot_read_the_framing_or_forge_a_status(box: Box) -> None:
    start = _snoop(box, "read")
    slow_fail = "sleep 1; sh -c 'exit 7'"
    shown, records = _session(box, [{"command": start}, {"sleep": 1}, {"command": slow_fail},
                                    {"command": "echo third"}])
    assert (box.ws / "found").read_text() == "", "a command's job read a status token"
    assert shown[1]["exit_code"] == 7, shown
    assert "third" in shown[2]["output"], shown
    assert records == [(start, "ran", 0), (slow_fail, "ran", 7), ("echo third", "ran", 0)]


def test_a_background_job_cannot_write_into_the_shells_input(box: Box) -> None:
    start = _snoop(box, "inject")
    shown, records = _session(box, [{"command": start}, {"command": "sleep 2; echo second"},
                                    {"command": "sleep 1; echo third"}])
    assert not (box.ws / "injected").exists(), shown
    assert [r[0] for r in records] == [start, "sleep 2; echo second", "sleep 1; echo third"]
    assert "second" in shown[1]["output"] and "third" in shown[2]["output"], shown


def test_the_next_command_never_follows_a_symlink_swapped_in_for_its_directory(
        box: Box) -> None:
    # The first command ends in `here`; its background job then puts a symlink
    # to /etc where `here` was, before the second command starts.
    first = "mkdir here && cd here; (sleep 1; cd ..; mv here was-here; ln -s /etc here) &"
    shown, records = _session(box, [{"command": first}, {"sleep": 2.5},
                                    {"command": "pwd -P"}, {"command": "pwd -P"}])
    assert "/etc\n" not in shown[1]["output"].splitlines(keepends=True), shown
    assert shown[1]["exit_code"] == 126, shown
    assert "stockade refused this command" in shown[1]["output"], shown
    assert records[1] == ("pwd -P", "denied", None)
    # Refused once, then back in the workspace, which has not moved.
    assert shown[2]["output"].strip() == str(box.ws), shown
    assert records[2] == ("pwd -P", "ran", 0)


def test_the_framing_runs_no_program_a_command_put_on_path(box: Box) -> None:
    plant = ("mkdir -p bin && for p in cat env mktemp rm pwd; do "
             "printf '#!/bin/sh\\necho \"$0\" >> %s/planted-ran\\nexec /usr/bin/$(basename $0) "
             "\"$@\"\\n' \"$PWD\" > bin/$p; chmod +x bin/$p; done; export PATH=$PWD/bin:$PATH")
    shown, records = _session(box, [{"command": plant}, {"command": "echo hi"},
                                    {"command": "echo $PATH"}])
    assert not (box.ws / "planted-ran").exists(), (box.ws / "planted-ran").read_text()
    assert "hi" in shown[1]["output"] and f"{box.ws}/bin:" in shown[2]["output"], shown
    assert [r[2] for r in records] == [0, 0, 0]


def test_exit_alone_is_recorded_and_the_shell_goes_on(box: Box) -> None:
    shown, records = _session(box, [{"command": "cd /tmp && export KEPT=1"},
                                    {"command": "exit"}, {"command": "pwd; echo ${KEPT-}"}])
    assert records == [("cd /tmp && export KEPT=1", "ran", 0), ("exit", "ran", 0),
                       ("pwd; echo ${KEPT-}", "ran", 0)]
    assert shown[1]["exit_code"] == 0 and "ended its shell" in shown[1]["output"], shown
    assert shown[2]["output"].split() == ["/tmp", "1"], shown


#: A background job that waits for a later command's bash (its command line holds
#: TARGET), attaches to it with ptrace and rewrites the command the gate approved in
#: its heap: `echo real-output` becomes `touch /tmp/PWNED`. It writes what it managed
#: to `traced`.
TRACER = r"""
import ctypes, os, re, struct, time
L = ctypes.CDLL(None, use_errno=True)
L.ptrace.restype = ctypes.c_long
L.ptrace.argtypes = [ctypes.c_long] * 2 + [ctypes.c_void_p] * 2
log = open("traced", "a")
end = time.time() + 15
while time.time() < end:
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            c = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if not (c.startswith(b"/bin/bash") and b"TARGET" in c):
            continue
        p = int(p)
        if L.ptrace(16, p, None, None) != 0:
            log.write(f"attach refused {ctypes.get_errno()}\n")
            raise SystemExit
        os.waitpid(p, 0x40000000)
        for ln in open(f"/proc/{p}/maps"):
            if "[heap]" not in ln:
                continue
            lo, hi = (int(x, 16) for x in ln.split()[0].split("-"))
            buf = b"".join(struct.pack("<q", L.ptrace(2, p, ctypes.c_void_p(a), None))
                           for a in range(lo, hi, 8))
            for m in re.finditer(rb"echo real-output", buf):
                a = lo + m.start() // 8 * 8
                o = m.start() % 8
                w = bytearray(buf[a - lo:a - lo + 24])
                w[o:o + 16] = b"touch /tmp/PWNED"
                for i in (0, 8, 16):
                    L.ptrace(5, p, ctypes.c_void_p(a + i),
                             ctypes.c_void_p(struct.unpack("<q", w[i:i + 8])[0]))
                log.write("patched\n")
        L.ptrace(17, p, None, None)
        raise SystemExit
    time.sleep(0.02)
"""


def test_a_background_job_cannot_trace_a_later_command(box: Box) -> None:
    """Each command runs in a Landlock domain of its own, so a job an earlier command
    left cannot attach to the next one's bash and change what the gate approved (it
    once ran `touch` where the record said `echo`)."""
    box.write(box.ws / "tracer.py", TRACER)
    start = "(python3 tracer.py >/dev/null 2>&1 &); echo started"
    target = "# TARGET\nsleep 3\necho real-output\nls /tmp"
    shown, records = _session(box, [{"command": start}, {"command": target}])
    traced = (box.ws / "traced").read_text() if (box.ws / "traced").exists() else ""
    assert "patched" not in traced, (traced, shown)
    assert "real-output" in shown[1]["output"] and "PWNED" not in shown[1]["output"], shown
    assert records == [(start, "ran", 0), (target, "ran", 0)]


def test_without_landlock_no_command_runs(box: Box) -> None:
    """Without Landlock there is no domain to keep a job one command leaves away from
    the next command's memory (ptrace, /proc/<pid>/mem) and descriptors: every
    command then ran unconfined, and the tracer rewrote what the gate approved."""
    box.write(box.ws / "tracer.py", TRACER)
    start = "(python3 tracer.py >/dev/null 2>&1 &); echo started"
    target = "# TARGET\nsleep 3\necho real-output\nls /tmp"
    shown, records = _session(box, [{"command": start}, {"command": target}],
                              env={"STOCKADE_SHELL_NO_LANDLOCK": "1"})
    assert not (box.ws / "traced").exists(), shown
    for result in shown:
        assert result["exit_code"] == 126, shown
        assert "could not make one here (this kernel has no Landlock)" in result["output"], shown
        assert "started" not in result["output"] and "real-output" not in result["output"]
    assert records == [(start, "denied", None), (target, "denied", None)]


def test_a_variable_too_large_to_pass_on_does_not_end_the_shell(box: Box) -> None:
    """One over the kernel's limit for a single string made the next command's exec
    fail with E2BIG: the shell died, and that command was recorded as run."""
    big = "export KEEP=1; export BIG=$(head -c 200000 /dev/zero | tr '\\0' a); echo set"
    shown, records = _session(box, [{"command": big}, {"command": "echo second; "
                                                                  "echo ${KEEP-unset}"}])
    assert "second" in shown[1]["output"] and "1" in shown[1]["output"].split(), shown
    assert records == [(big, "ran", 0), ("echo second; echo ${KEEP-unset}", "ran", 0)]


#: A background job that waits for a later command's bash (its command holds VICTIM)
#: and puts its own state in that command's place, for the commands after it:
#: PATH=/tmp/evil first. Through the state file's name (a FIFO symlinked there,
#: written once the shell opens it) or through the bash's descriptor for it.
STATE_THIEF = r"""
import os, time
forged = b"state\0/\0/\n\0PATH=/tmp/evil:/usr/bin:/bin\0end\0"
end = time.time() + 15
while time.time() < end:
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if not (argv[0] == b"/bin/bash" and len(argv) > 7 and b"VICTIM" in argv[6]):
            continue
        where = os.fsdecode(argv[7])
        if where.isdigit():
            try:
                fd = os.open(f"/proc/{p}/fd/{where}", os.O_WRONLY)
                open("thief", "a").write("forged\n")  # could reach it: as good as done
                os.pwrite(fd, forged, 0)
            except OSError as exc:
                open("thief", "a").write(f"refused {exc.errno}\n")
            raise SystemExit
        fifo = where + ".f"
        os.mkfifo(fifo)
        os.symlink(fifo, where + ".l")
        os.rename(where + ".l", where)
        with open(fifo, "rb") as f:
            while not f.read().endswith(b"end\0"):
                pass
        with open(fifo, "wb") as f:
            f.write(forged)
        open("thief", "a").write("forged\n")
        raise SystemExit
    time.sleep(0.01)
"""


def test_a_background_job_cannot_set_the_state_later_commands_start_with(box: Box) -> None:
    """A job of one command once replaced a later command's state file, and every
    command after it ran with the job's PATH: `ls` was the job's program."""
    box.write(box.ws / "thief.py", STATE_THIEF)
    start = ("mkdir -p /tmp/evil; printf '#!/bin/sh\\necho PWNED-ls\\n' > /tmp/evil/ls; "
             "chmod +x /tmp/evil/ls; (python3 thief.py >/dev/null 2>&1 &); echo started")
    victim = "# VICTIM\nsleep 1; echo two"
    shown, _records = _session(box, [{"command": start}, {"sleep": 0.5}, {"command": victim},
                                     {"command": "ls /; echo $PATH"}])
    assert "PWNED-ls" not in shown[2]["output"], shown
    assert "/tmp/evil" not in shown[2]["output"], shown
    thief = box.ws / "thief"
    assert not thief.exists() or "forged" not in thief.read_text(), thief.read_text()


#: A background job that, while a later command (its bash's command line holds VICTIM)
#: runs, writes INJECTED into the stdout and stderr of every process it can see through
#: /proc (each one's own descriptors and each of its threads'), or with `kill` sends
#: that command's bash SIGKILL. It writes what it managed to `intruder`.
INTRUDER = r"""
import os, sys, time
me, log = os.getpid(), open("intruder", "a", buffering=1)
end = time.time() + 15
while time.time() < end:
    pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    victims = []
    for p in pids:
        try:
            if b"VICTIM" in open(f"/proc/{p}/cmdline", "rb").read():
                victims.append(int(p))
        except OSError:
            continue
    if not victims:
        time.sleep(0.02)
        continue
    if sys.argv[1] == "kill":
        for v in victims:
            try:
                os.kill(v, 9)
                log.write(f"killed {v}\n")
            except OSError as exc:
                log.write(f"kill refused {exc.errno}\n")
        raise SystemExit
    for p in pids:
        for where in [f"/proc/{p}"] + [f"/proc/{p}/task/{t}" for t in os.listdir(f"/proc/{p}/task")
                                       if os.path.isdir(f"/proc/{p}/task")]:
            for fd in (1, 2):
                try:
                    w = os.open(f"{where}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                    os.write(w, b"INJECTED\n")
                    log.write(f"wrote {where}/fd/{fd}\n")
                except OSError as exc:
                    log.write(f"refused {where}/fd/{fd} {exc.errno}\n")
    raise SystemExit
"""


@pytest.mark.parametrize("how", ["write", "kill"])
def test_a_background_job_cannot_write_into_or_kill_a_later_command(box: Box, how: str) -> None:
    """A job one command left once wrote into a later command's output through that
    command's /proc/<pid>/fd/1, and killed it (status 137)."""
    box.write(box.ws / "intruder.py", INTRUDER)
    start = f"(python3 intruder.py {how} >/dev/null 2>&1 &); echo started"
    victim = "# VICTIM\nsleep 2; echo victim-done"
    shown, records = _session(box, [{"command": start}, {"command": victim},
                                    {"command": "echo third"}])
    log = (box.ws / "intruder").read_text() if (box.ws / "intruder").exists() else ""
    assert "INJECTED" not in shown[1]["output"] + shown[2]["output"], (log, shown)
    assert "wrote" not in log and "killed" not in log, (log, shown)
    assert shown[1]["exit_code"] == 0 and "victim-done" in shown[1]["output"], (log, shown)
    assert records == [(start, "ran", 0), (victim, "ran", 0), ("echo third", "ran", 0)]
