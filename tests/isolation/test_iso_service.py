"""The per-user service (`stockade run --service`): who can reach it, and that a command
served by it ends, reports and leaves nothing exactly as one run in process.

Each test's box has its own state directory, so its own service; the service
is found from outside by its command line, which names that directory.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import (
    MINIMAL_PATH,
    RUN_TIMEOUT,
    SRC,
    SYSTEM_PYTHON,
    Box,
    procs_with,
    users,
    wait_gone,
)

pytestmark = pytest.mark.isolation

SERVICE = "stockade.service"


def service_dir(box: Box) -> Path:
    return box.state / "state" / "stockade" / "service"


def services(box: Box) -> list[int]:
    return [pid for pid, cmd in procs_with(str(service_dir(box))) if SERVICE in cmd
            and "-c" in cmd.split()]


def started(box: Box, **env: str) -> int:
    """The box's service, started by a first run (which itself runs in process)."""
    res = box.run(["/bin/true"], options=["--service"], env=box.env(**env))
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = services(box)
        socks = list(service_dir(box).glob("*.sock")) if service_dir(box).exists() else []
        if found and socks and _answers(box, socks[0]):
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no service started for {box.root}")


def _answers(box: Box, path: Path) -> bool:
    # The service binds before it has imported stockade; it answers once it accepts.
    probe = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
             "print('ok')")
    res = box.host([SYSTEM_PYTHON, "-I", "-c", probe, str(path)])
    return res.returncode == 0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def served(box: Box, options: list[str], cmd: list[str], **kw: object
           ) -> subprocess.CompletedProcess[bytes]:
    return box.run(cmd, options=["--service", *options], **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_service_left(request: pytest.FixtureRequest):
    yield
    box = request.node.funcargs.get("box")
    if isinstance(box, Box):
        for pid in services(box):
            os.kill(pid, signal.SIGKILL)


# -- served, and the same as in process ------------------------------------------------


def test_a_served_command_runs_in_a_child_of_the_service(box: Box) -> None:
    pid = started(box)
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--service", "--", "/bin/sh", "-c",
                             "read x; echo out $x; echo err >&2; sleep 1; exit 7"]),
        cwd=box.ws, env=box.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not children(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    forked = children(pid)
    out, err = proc.communicate(b"in\n", timeout=RUN_TIMEOUT)
    assert forked, "the service forked no child for the command"
    assert (proc.returncode, out, err) == (7, b"out in\n", b"err\n")
    # Control: in process, the service sees nothing.
    res = box.run(["/bin/sh", "-c", "sleep 1; exit 7"], options=["--no-service"])
    assert res.returncode == 7 and not children(pid)


@pytest.mark.parametrize("case", [
    (["--json"], ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]),
    (["--json"], ["/bin/sh", "-c", "kill -9 $$"]),
    (["--json", "--timeout", "1"], ["/bin/sleep", "5"]),
    (["--json", "--max-output", "100"], ["/bin/sh", "-c", "yes | head -c 5000"]),
    (["--json", "--mode", "read-only"], ["/bin/sh", "-c", "echo x > f"]),
    (["--json", "--allow-read", "/etc"], ["/bin/true"]),
    (["--mode", "bogus"], ["/bin/true"]),
], ids=["status", "signal", "timeout", "budget", "denied", "approval", "usage"])
def test_status_and_json_are_the_in_process_ones(box: Box, case) -> None:
    options, cmd = case
    started(box)
    here = box.run(cmd, options=["--no-service", *options])
    there = served(box, options, cmd)
    assert there.returncode == here.returncode, (here.stderr, there.stderr)
    if "--json" in options and here.stdout:
        a, b = json.loads(here.stdout), json.loads(there.stdout)
        for doc in (a, b):
            doc.pop("duration_ms")
        assert a == b
    assert there.stderr == here.stderr


def test_each_command_has_its_audit_record(box: Box) -> None:
    started(box)
    for i in range(2):
        served(box, [], ["/bin/sh", "-c", f"exit {i + 3}"])
    res = box.runner.cli(["audit", "--last", "2", "--json"], cwd=box.ws, env=box.env())
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted(r["exit_code"] for r in rows) == [3, 4], res.stdout


def test_config_and_trust_are_read_for_each_command(box: Box) -> None:
    pid = started(box)
    touch = ["/bin/sh", "-c", "echo x > made"]
    box.user_config('mode = "read-only"')
    assert served(box, [], touch).returncode != 0 and not (box.ws / "made").exists()
    box.user_config('mode = "workspace-write"')
    assert served(box, [], touch).returncode == 0 and (box.ws / "made").exists()
    # The project's file may narrow only; widening it needs the person's trust.
    box.user_config("")
    box.write(box.ws / "stockade.toml", '[sandbox]\nmode = "workspace-write"\n')
    refused = served(box, [], touch)
    assert refused.returncode != 0 and b"trust" in refused.stderr, refused.stderr
    assert box.runner.cli(["trust", str(box.ws / "stockade.toml")], cwd=box.ws,
                          env=box.env()).returncode == 0
    (box.ws / "made").unlink()
    assert served(box, [], touch).returncode == 0 and (box.ws / "made").exists()
    assert services(box) == [pid], "one service served every change"


def test_approvals_without_a_terminal_are_denied_as_in_process(box: Box) -> None:
    started(box)
    here = box.run(["/bin/true"], options=["--no-service", "--allow-read", "/etc"],
                   start_new_session=True)
    there = served(box, ["--allow-read", "/etc"], ["/bin/true"], start_new_session=True)
    assert here.returncode == there.returncode != 0
    assert b"no terminal to ask on" in there.stderr and there.stderr == here.stderr


# -- who can reach it ------------------------------------------------------------------


SEND = r"""
import os, socket, sys
sys.path.insert(0, sys.argv[1])
from stockade.serviceclient import request
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[2])
except OSError as exc:
    print("connect", type(exc).__name__); sys.exit(0)
data = request(["--mode", "workspace-write", "--", "/bin/sh", "-c", "echo ran > " + sys.argv[3]])
cwd = os.open(".", os.O_PATH)
try:
    s.sendmsg([len(data).to_bytes(4, "big"), data],
               [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                 b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd)))])
    got = s.recv(64)
    while got and not got.rstrip().split(b"\n")[-1].startswith(b"X"):
        more = s.recv(64)  # the client's end would end the command
        if not more:
            break
        got += more
    print("answer", got)
except OSError as exc:
    print("send", type(exc).__name__)
"""


def test_another_user_cannot_use_the_service(box: Box, unpriv_site: str) -> None:
    """Root's service refuses the test user at the directory; the user's refuses root,
    whom no mode stops, by its peer check. Control: its own uid is served."""
    started(box)
    sock = next(service_dir(box).glob("*.sock"))
    target = box.ws / "ran"
    other_uid = 0 if box.runner.switches_user else users.ensure_user().pw_uid
    other_gid = users.ensure_user().pw_gid
    other = (["setpriv", f"--reuid={other_uid}", f"--regid={other_gid}", "--clear-groups"]
             if other_uid else [])
    site = str(SRC) if other_uid == 0 else unpriv_site
    python = sys.executable if other_uid == 0 else SYSTEM_PYTHON
    res = subprocess.run([*other, python, "-I", "-c", SEND, site, str(sock), str(target)],
                         cwd="/", capture_output=True, timeout=RUN_TIMEOUT, check=False,
                         env={"PATH": MINIMAL_PATH, "HOME": "/"})
    out = res.stdout.decode()
    # Refused at the directory (the user), or closed unanswered (root).
    assert out.startswith(("connect PermissionError", "answer b''", "send ConnectionReset",
                           "send BrokenPipe")), (out, res.stderr)
    time.sleep(0.5)
    assert not target.exists()
    own_site = unpriv_site if box.runner.switches_user else str(SRC)
    control = box.host([box.runner.python, "-I", "-c", SEND, own_site, str(sock),
                        str(target)], env=box.env())
    assert control.stdout.startswith(b"answer b'P"), control
    deadline = time.monotonic() + 10
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.exists()


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_a_sandboxed_command_cannot_reach_the_service(box: Box, backend: str) -> None:
    started(box)
    sock = str(next(service_dir(box).glob("*.sock")))
    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
             "    s.connect(sys.argv[1]); print('CONNECTED')\n"
             "except OSError as exc:\n    print('refused', exc)\n")
    inside = served(box, ["--backend", backend], [SYSTEM_PYTHON, "-I", "-c", probe, sock])
    assert inside.returncode == 0, inside.stderr
    assert b"refused" in inside.stdout, inside.stdout
    control = box.host([SYSTEM_PYTHON, "-I", "-c", probe, sock])
    assert b"CONNECTED" in control.stdout


# -- ends: Ctrl-C, a dead client, a dead service ----------------------------------------


def sleeps(marker: str) -> list[tuple[int, str]]:
    return [(pid, cmd) for pid, cmd in procs_with(f"sleep {marker}")
            if cmd.startswith("sleep ")]


def _tree(box: Box, marker: str) -> subprocess.Popen[bytes]:
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--service", "--", "/bin/sh", "-c",
                             f"sleep {marker} & sleep {marker}; wait"]),
        cwd=box.ws, env=box.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while len(sleeps(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sleeps(marker)) == 2, "the command's tree did not start"
    return proc


def _marker() -> str:
    return f"{900 + int.from_bytes(os.urandom(2), 'big') % 99}.{os.getpid() % 1000:03d}"


def test_ctrl_c_ends_the_commands_whole_tree(box: Box) -> None:
    started(box)
    marker = _marker()
    proc = _tree(box, marker)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 130
    assert not wait_gone(f"sleep {marker}", 10)


def test_a_killed_client_ends_its_command(box: Box) -> None:
    started(box)
    marker = _marker()
    proc = _tree(box, marker)
    proc.kill()
    proc.communicate(timeout=RUN_TIMEOUT)
    assert not wait_gone(f"sleep {marker}", 10)


def test_a_killed_service_ends_its_commands_and_the_next_run_starts_another(box: Box) -> None:
    pid = started(box)
    marker = _marker()
    proc = _tree(box, marker)
    os.kill(pid, signal.SIGKILL)
    _out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == -signal.SIGTERM, err  # as `stockade run` ends on SIGTERM
    assert b"the service that ran this command ended" in err
    assert not wait_gone(f"sleep {marker}", 10)
    # Its socket is left behind, stale: the next run works and starts a new service.
    assert list(service_dir(box).glob("*.sock"))
    again = started(box)
    assert again != pid
    assert served(box, [], ["/bin/sh", "-c", "exit 5"]).returncode == 5


# -- what it keeps, and when it leaves -------------------------------------------------


def test_it_exits_when_idle_and_leaves_nothing(box: Box) -> None:
    started(box, STOCKADE_SERVICE_IDLE_SECONDS="1")
    assert served(box, [], ["/bin/true"],
                  env=box.env(STOCKADE_SERVICE_IDLE_SECONDS="1")).returncode == 0
    deadline = time.monotonic() + 15
    while services(box) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not services(box)
    assert not list(service_dir(box).glob("*.sock"))
    box.runner.wait_idle()


def test_a_change_to_stockades_code_starts_a_new_service(box: Box, unpriv_site: str) -> None:
    pid = started(box)
    site = Path(unpriv_site if box.runner.switches_user else SRC)
    code = site / "stockade" / "__main__.py"
    before = code.stat()
    try:
        os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        res = served(box, [], ["/bin/sh", "-c", "exit 4"])
        assert res.returncode == 4, res.stderr  # run in process, this once
        deadline = time.monotonic() + 10
        while pid in services(box) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid not in services(box)
    finally:
        os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_the_service_holds_none_of_the_callers_descriptors(box: Box) -> None:
    """A harness reading a pipe it gave `stockade run` waits for every holder of its
    write end: the service started in the background must not be one."""
    read_end, write_end = os.pipe()
    try:
        proc = box.runner.popen(box.runner.cli_argv(["run", "--service", "--", "/bin/true"]),
                                cwd=box.ws, env=box.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, pass_fds=[write_end])
        os.close(write_end)
        write_end = -1
        assert proc.wait(timeout=RUN_TIMEOUT) == 0
        assert services(box), "the first run started no service"
        os.set_blocking(read_end, False)
        deadline = time.monotonic() + 10
        while True:
            try:
                assert os.read(read_end, 1) == b""
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the service holds the caller's pipe"
                time.sleep(0.05)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_terminal_runs_in_process(box: Box) -> None:
    leader, follower = pty.openpty()
    try:
        proc = box.runner.popen(box.runner.cli_argv(["run", "--service", "--", "/bin/true"]),
                                cwd=box.ws, env=box.env(), stdin=follower, stdout=follower,
                                stderr=follower, start_new_session=True)
        assert proc.wait(timeout=RUN_TIMEOUT) == 0
    finally:
        os.close(follower)
        os.close(leader)
    assert not services(box) and not service_dir(box).exists()
    # Control: the same run with pipes starts the service.
    started(box)


def test_the_service_directory_must_be_the_users_alone(box: Box) -> None:
    d = service_dir(box)
    d.mkdir(parents=True)
    for p in (d.parent.parent, d.parent, d):
        os.chmod(p, 0o700)
        box.runner.own(p)
    os.chmod(d, 0o777)
    res = served(box, [], ["/bin/sh", "-c", "exit 6"])
    assert res.returncode == 6
    time.sleep(1)
    assert not services(box) and not list(d.iterdir())


def test_a_project_file_cannot_turn_it_on(box: Box) -> None:
    box.write(box.ws / "stockade.toml", "[sandbox]\nservice = true\n")
    res = box.run(["/bin/true"])
    assert res.returncode != 0 and b"service" in res.stderr
    assert not services(box)



IMPORTS = r"""
import os, sys
from stockade import service
service._preload()
before = set(sys.modules)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    from stockade import cli
    for extra in ([], ["--json"]):
        cli.dispatch(["run", "--mode", "workspace-write", *extra, "--", "/bin/true"])
    new = sorted(m for m in set(sys.modules) - before if m.startswith("stockade") or "." in m)
    os.write(w, " ".join(new).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print("NEW:" + os.read(r, 1 << 20).decode())
"""


def test_a_served_command_imports_nothing_the_service_could_have(tmp_path: Path) -> None:
    """Each import in the child is paid again for every command."""
    ws = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        res = subprocess.run([sys.executable, "-I", "-c", IMPORTS], cwd=ws,
                             capture_output=True, timeout=RUN_TIMEOUT, check=False,
                             env={"PATH": MINIMAL_PATH, "HOME": str(tmp_path)})
        line = [x for x in res.stdout.decode().splitlines() if x.startswith("NEW:")]
        assert line == ["NEW:"], (res.stdout, res.stderr)
    finally:
        shutil.rmtree(ws)
