"""The per-user service (`stockade run --service`): who can reach it, and that a command
served by it ends, reports and leaves nothing exactly as one run in process.

Each test's box has its own state directory, so its own service; the service
is found from outside by its command line, which names that directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import (
    _BOOT,
    MINIMAL_PATH,
    RUN_TIMEOUT,
    SRC,
    SYSTEM_PYTHON,
    Box,
    procs_with,
    until,
    users,
    wait_gone,
)

pytestmark = pytest.mark.isolation

SERVICE = "stockade.service"


def service_dir(box: Box) -> Path:
    return box.state / "state" / "stockade" / "service"


def own_service_dir(box: Box) -> Path:
    """The box's service directory, made ahead of the service, as the runner's, 0700."""
    d = service_dir(box)
    d.mkdir(parents=True)
    for p in (d.parent.parent, d.parent, d):
        os.chmod(p, 0o700)
        box.runner.own(p)
    return d


def services(box: Box) -> list[int]:
    """The box's services (not the children they forked, which share their command line)."""
    found = [pid for pid, cmd in procs_with(str(service_dir(box))) if SERVICE in cmd]
    return [pid for pid in found if _parent(pid) not in found]


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == ancestor:
            return True
    return False


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def started(box: Box, **env: str) -> int:
    """The box's service, started by a first run (which itself runs in process)."""
    res = box.run(["/bin/true"], options=["--service"], env=box.env(**env))
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = services(box)
        socks = list(service_dir(box).glob("*.sock")) if service_dir(box).exists() else []
        if found and any(_answers(box, sock) for sock in socks):
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


def wait_served(pid: int, marker: str) -> None:
    """Until a `sleep MARKER` runs below the service `pid`: the command was served."""
    deadline = time.monotonic() + 10
    while not any(_descends(p, pid) for p, _ in sleeps(marker)):
        assert time.monotonic() < deadline, "the command is not a descendant of the service"
        time.sleep(0.02)


@contextlib.contextmanager
def code_changed(box: Box, unpriv_site: str) -> Iterator[None]:
    """stockade's code, as the runner imports it, seen as edited; put back after."""
    site = Path(unpriv_site if box.runner.switches_user else SRC)
    code = site / "stockade" / "__main__.py"
    before = code.stat()
    os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    try:
        yield
    finally:
        os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns))


def background(box: Box, script: str, stdin: int = subprocess.DEVNULL
               ) -> subprocess.Popen[bytes]:
    """`stockade run --service -- sh -c SCRIPT`, left running, its output piped."""
    return box.runner.popen(
        box.runner.cli_argv(["run", "--service", "--", "/bin/sh", "-c", script]),
        cwd=box.ws, env=box.env(), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def served(box: Box, options: list[str], cmd: list[str], **kw: object
           ) -> subprocess.CompletedProcess[bytes]:
    return box.run(cmd, options=["--service", *options], **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_service_left(request: pytest.FixtureRequest):
    yield
    box = request.node.funcargs.get("box")
    if isinstance(box, Box):
        # Every service of the test, its own state directory's or another's.
        for pid, cmd in procs_with(str(box.root)):
            if SERVICE in cmd:
                os.kill(pid, signal.SIGKILL)


# -- served, and the same as in process ------------------------------------------------


def test_a_served_command_runs_in_a_child_of_the_service(box: Box) -> None:
    pid = started(box)
    marker = f"1.{_marker().replace('.', '')}"
    proc = background(box, f"read x; echo out $x; echo err >&2; sleep {marker}; exit 7",
                      stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(b"in\n")
    proc.stdin.flush()
    wait_served(pid, marker)
    out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert (proc.returncode, out, err) == (7, b"out in\n", b"err\n")
    # Control: in process, the service sees nothing.
    res = box.run(["/bin/sh", "-c", "sleep 1; exit 7"], options=["--no-service"])
    assert res.returncode == 7 and not children(pid)


@pytest.mark.parametrize("case", [
    (["--json"], ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]),
    (["--json"], ["/bin/sh", "-c", "kill -9 $$"]),
    (["--json", "--timeout", "1"], ["/bin/sleep", "5"]),
    # Output without end: one that ends by itself may or may not be stopped first.
    (["--json", "--max-output", "100"], ["/usr/bin/yes"]),
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
from stockade.serviceclient import _handshake, _prove, request
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[2])
except OSError as exc:
    print("connect", type(exc).__name__); sys.exit(0)
data = request(["--mode", "workspace-write", "--", "/bin/sh", "-c", "echo ran > " + sys.argv[3]])
cwd = os.open(".", os.O_PATH)
try:
    try:
        _handshake(s)
        s.sendmsg([len(data).to_bytes(4, "big"), data],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                    b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd)))])
        _prove(s)
    except ValueError:
        print("answer b''"); sys.exit(0)  # closed unanswered
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
    until(lambda: target.exists(), 10)
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


# A client's half of the handshake, by hand (no stockade to import inside a sandbox):
# `proof` is the service child's memfd opened through its /proc, or one of the
# caller's own where that is refused.
HANDSHAKE = r"""
def greet(s):
    # The service opens this memfd through the caller's /proc and hands it back.
    mine = os.memfd_create("stockade-client-proof")
    s.sendall(b"H%d\n" % mine)
    msg, anc, _, _ = s.recvmsg(64, socket.CMSG_SPACE(4))
    for level, kind, data in anc:
        os.close(int.from_bytes(data[:4], sys.byteorder))
    if not msg:
        print("ANSWER b''")  # the service would not open the caller's memfd
        sys.exit(0)


def send(s, data, fds):
    s.sendmsg([len(data).to_bytes(4, "big"), data],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])


def prove(s, send=True, use=None):
    # The child's memfd, made once the request is in, opened through its /proc.
    msg, anc, _, _ = s.recvmsg(64, socket.CMSG_SPACE(4))
    if not msg:
        print("ANSWER b''")
        sys.exit(0)
    pid, n = msg[1:-1].split()
    try:
        proof = os.open(f"/proc/{int(pid)}/fd/{int(n)}", os.O_PATH)
    except OSError as exc:
        print("NO PROOF", exc)  # a service this process may not inspect
        proof = os.memfd_create("stockade-service-proof")
    if send:
        s.sendmsg([b"p"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                            (proof if use is None else use).to_bytes(4, sys.byteorder))])
    return proof


def answer(s):
    got = b""
    while True:
        more = s.recv(64)
        if not more:
            break
        got += more
    print("ANSWER", got)


def request(env, argv):
    # What Python adds to its own environment on a C locale (PEP 538), as the client had.
    env.update({k: v for k, v in os.environ.items() if k == "LC_CTYPE"})
    items = [b"stockade-service-3", str(len(argv)).encode(), *map(os.fsencode, argv)]
    pairs = [(k + "=" + v).encode() for k, v in env.items()]
    items += [str(len(pairs)).encode(), *pairs, b"18", b"", b""]
    return b"".join(len(i).to_bytes(4, "big") + i for i in items)
"""

# A request built by hand: run ARGV with the environment given as JSON, descriptors 0-2
# and the cwd passed along.
FORGE = r"""
import json, os, socket, sys
""" + HANDSHAKE + r"""
path, env, argv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
    greet(s)
    send(s, request(env, argv), [0, 1, 2, os.open(".", os.O_PATH)])
    prove(s)
    answer(s)
except OSError as exc:
    print("REFUSED", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_a_sandboxed_command_cannot_use_another_contexts_service(box: Box, backend: str
                                                                 ) -> None:
    """A service under another state directory (another harness, HOME or editor) is not
    hidden from this run's sandbox; what it must refuse is the process asking."""
    other = box.env(XDG_STATE_HOME=str(box.mkdir("other-state")))
    assert box.run(["/bin/true"], options=["--service"], env=other).returncode == 0
    sockets = box.root / "other-state" / "stockade" / "service"
    until(lambda: list(sockets.glob("*.sock")), 20)
    sock = str(next(sockets.glob("*.sock")))
    time.sleep(0.5)  # it binds before it imports; connections wait in its backlog anyway
    pwned = box.mkdir("out") / "PWNED"
    attack = ["--mode", "full-access", "--backend", "none", "--yes", "--", "/bin/sh", "-c",
              f"id > {pwned}"]
    inside = box.run([SYSTEM_PYTHON, "-I", "-c", FORGE, sock, json.dumps(other), *attack],
                     options=["--backend", backend])
    assert inside.returncode == 0, inside.stderr
    assert b"ANSWER b''" in inside.stdout or b"REFUSED" in inside.stdout, inside.stdout
    time.sleep(0.5)
    assert not pwned.exists()
    # Control: the same request from the host, in that context, is served.
    control = box.host([SYSTEM_PYTHON, "-I", "-c", FORGE, sock, json.dumps(other), *attack],
                       env=other)
    assert b"ANSWER b'P" in control.stdout, control
    assert pwned.exists()


# Listens in a service's place and answers the handshake as well as it can: the
# caller's memfd opened through its /proc if it may, else a guess.
LISTEN = r"""
import os, socket, sys, time
path, result = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(1)
s.settimeout(20)
got = "no connection"
try:
    conn, _ = s.accept()
    conn.settimeout(5)
    got = "connected, nothing sent"
    try:
        hello = conn.recv(64)
        pid = int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)[:4],
                             sys.byteorder)
        try:
            theirs = os.open(f"/proc/{pid}/fd/{int(hello[1:-1])}", os.O_PATH)
        except PermissionError:
            theirs = os.memfd_create("stockade-client-proof")
        conn.sendmsg([b"C\n"],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, theirs.to_bytes(4, sys.byteorder))])
        msg, anc, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(64))
        if anc:
            got = f"descriptors {len(anc)}"
    except (OSError, ValueError):
        pass
except OSError:
    pass
with open(result, "w") as f:
    f.write(got)
"""


def test_a_listener_in_a_sandbox_never_gets_the_callers_descriptors(box: Box) -> None:
    """A command that can write where a caller's service directory is (here the state
    directory sits in the workspace) listens in the service's place: the caller
    must not hand it its cwd, which is a way out of the sandbox's mounts."""
    victim = box.env(XDG_STATE_HOME=str(box.ws / "state"))
    key = box.host([box.runner.python, "-I", "-c",
                    f"import sys; sys.path.insert(0, {box.runner.site!r}); "
                    "from stockade.serviceclient import service_key; print(service_key())"],
                   env=victim).stdout.decode().strip()
    sock = box.ws / "state" / "stockade" / "service" / f"{key}.sock"
    result = box.ws / "result"
    listener = box.runner.popen(
        box.runner.cli_argv(["run", "--mode", "workspace-write", "--", SYSTEM_PYTHON, "-I",
                             "-c", LISTEN, str(sock), str(result)]),
        cwd=box.ws, env=box.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    until(lambda: sock.exists(), 20)
    assert sock.exists(), listener.stderr
    res = box.run(["/bin/true"], options=["--service"], env=victim)
    assert res.returncode == 0, res.stderr
    listener.communicate(timeout=RUN_TIMEOUT)
    assert result.read_text() == "connected, nothing sent"
    # Control: the same listener outside any sandbox is this caller's own kind, and
    # gets the descriptors: the check is what stood between.
    for p in (sock, result):
        p.unlink(missing_ok=True)
    for pid in services(box):
        os.kill(pid, signal.SIGKILL)
    host = box.runner.popen([SYSTEM_PYTHON, "-I", "-c", LISTEN, str(sock), str(result)],
                            cwd=box.ws, env=victim)
    until(lambda: sock.exists(), 20)
    box.run(["/bin/true"], options=["--service"], env=victim)
    host.wait(timeout=RUN_TIMEOUT)
    assert result.read_text().startswith("descriptors")


# enter(secret): a Landlock domain that lets nothing be read beneath `secret`, with no
# no_new_privs (root, with CAP_SYS_ADMIN, may): /proc shows no trace of it.
ENTER_LANDLOCK = r"""
def enter(secret):
    import ctypes
    secret = os.path.realpath(secret)
    libc = ctypes.CDLL(None, use_errno=True)
    READ_FILE = 1 << 2
    attr = ctypes.c_uint64(READ_FILE)
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    assert ruleset >= 0, ctypes.get_errno()

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    def allow(path):
        fd = os.open(path, os.O_PATH)
        rule = Beneath(READ_FILE, fd)
        assert libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) == 0
        os.close(fd)

    # Everything but the secret: each sibling along the way down to it.
    parent = "/"
    for part in secret.strip("/").split("/"):
        for name in os.listdir(parent):
            if name != part:
                allow(os.path.join(parent, name))
        parent = os.path.join(parent, part)
    assert libc.syscall(446, ruleset, 0) == 0, ctypes.get_errno()
"""

# That domain entered, the rest of argv run in it: `LANDLOCK SECRET ARGV...`.
LANDLOCK = "import os, sys\n" + ENTER_LANDLOCK + r"""
enter(sys.argv[1])
os.execv(sys.argv[2], sys.argv[2:])
"""


def test_a_caller_in_a_landlock_domain_without_no_new_privs_is_not_served(box: Box) -> None:
    """What /proc cannot show, the caller proves it is free of: it must be able to open
    the memfd of the child serving it through its /proc (Landlock's ptrace scope
    forbids it)."""
    if box.runner.switches_user:
        pytest.skip("a Landlock domain without no_new_privs needs CAP_SYS_ADMIN: root's case")
    started(box)
    sock = str(next(service_dir(box).glob("*.sock")))
    secret = box.mkdir("secret")
    box.write(secret / "key", "SECRET-KEY\n")
    out = box.mkdir("out") / "leak"
    attack = ["--mode", "full-access", "--backend", "none", "--yes", "--", "/bin/sh", "-c",
              f"cat {secret}/key > {out}"]
    forge = [SYSTEM_PYTHON, "-I", "-c", FORGE, sock, json.dumps(box.env()), *attack]
    here = box.host([SYSTEM_PYTHON, "-I", "-c", LANDLOCK, str(secret), *forge])
    assert b"NO PROOF" in here.stdout, (here.stdout, here.stderr)
    time.sleep(0.5)
    assert not out.exists()
    # Control: the same request from outside the domain is served.
    control = box.host(forge)
    assert b"ANSWER b'P" in control.stdout, control
    assert out.read_text() == "SECRET-KEY\n"


def _key(box: Box, env: dict[str, str]) -> str:
    return box.host([box.runner.python, "-I", "-c",
                     f"import sys; sys.path.insert(0, {box.runner.site!r}); "
                     "from stockade.serviceclient import service_key; print(service_key())"],
                    env=env).stdout.decode().strip()


def test_a_listener_in_a_landlock_domain_never_gets_the_callers_descriptors(box: Box) -> None:
    """Root in a Landlock domain without no_new_privs shows nothing in /proc: listening
    in the service's place, it must still not get the caller's stdin and cwd. What
    tells it is that it cannot open the caller's memfd through /proc."""
    if box.runner.switches_user:
        pytest.skip("a Landlock domain without no_new_privs needs CAP_SYS_ADMIN: root's case")
    secret = box.mkdir("secret")
    sock = own_service_dir(box) / f"{_key(box, box.env())}.sock"
    result = box.ws / "result"
    for wrap in ([SYSTEM_PYTHON, "-I", "-c", LANDLOCK, str(secret)], []):
        for p in (sock, result):
            p.unlink(missing_ok=True)
        listener = box.runner.popen([*wrap, SYSTEM_PYTHON, "-I", "-c", LISTEN, str(sock),
                                     str(result)], cwd=box.ws, env=box.env())
        until(lambda: sock.exists(), 20)
        assert sock.exists()
        res = box.run(["/bin/sh", "-c", "echo ran"], options=["--service"])
        assert res.returncode == 0 and res.stdout == b"ran\n", res.stderr
        listener.wait(timeout=RUN_TIMEOUT)
        if wrap:
            assert result.read_text() == "connected, nothing sent"
    # Control: outside the domain the same listener gets them.
    assert result.read_text().startswith("descriptors")


# Proves with a proof of an earlier connection ("held"), or after entering a Landlock
# domain once greeted ("landlock", root), or as a client does ("fresh").
LATE_PROOF = r"""
import ctypes, json, os, socket, sys
""" + HANDSHAKE + ENTER_LANDLOCK + r"""
path, env, out, how = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
data = request(env, ["--mode", "workspace-write", "--", "/bin/sh", "-c", "echo ran >> " + out])
held = None
if how == "held":
    first = socket.socket(socket.AF_UNIX)
    first.connect(path)
    greet(first)
    send(first, data, [0, 1, 2, os.open(".", os.O_PATH)])
    held = prove(first, send=False)  # opened while free to, kept
    first.close()
s = socket.socket(socket.AF_UNIX)
s.connect(path)
greet(s)
if how == "landlock":
    enter(sys.argv[5])
send(s, data, [0, 1, 2, os.open(".", os.O_PATH)])
prove(s, use=held)
answer(s)
"""


@pytest.mark.parametrize("how", ["held", "landlock"])
def test_a_proof_is_made_once_the_request_is_in(box: Box, how: str) -> None:
    """A proof opened earlier (on another connection, or on this one before the caller
    entered a Landlock domain) does not serve the request."""
    if how == "landlock" and box.runner.switches_user:
        pytest.skip("a Landlock domain without no_new_privs needs CAP_SYS_ADMIN: root's case")
    started(box)
    sock = str(next(service_dir(box).glob("*.sock")))
    out = box.ws / "ran"
    secret = box.mkdir("secret")
    script = [LATE_PROOF, sock, json.dumps(box.env()), str(out)]
    res = box.host([SYSTEM_PYTHON, "-I", "-c", *script, how, str(secret)])
    assert b"ANSWER b''" in res.stdout, res
    time.sleep(0.5)
    assert not out.exists()
    control = box.host([SYSTEM_PYTHON, "-I", "-c", *script, "fresh"])
    assert b"ANSWER b'P" in control.stdout, control
    assert out.read_text() == "ran\n"


def test_a_stopped_service_does_not_hold_a_command_up(box: Box) -> None:
    """A service that never answers (stopped, wedged): the command runs in process after
    a step's deadline, and once the service goes on, it runs nothing of it."""
    pid = started(box)
    out = box.ws / "ran"
    # The step's deadline cut from its 10 s, so the case costs the suite seconds.
    boot = _BOOT.format(site=box.runner.site, prelude=(
        "import stockade.serviceclient as c; c.HANDSHAKE_SECONDS = 2.0; "))
    os.kill(pid, signal.SIGSTOP)
    try:
        begun = time.monotonic()
        res = box.host([box.runner.python, "-I", "-c", boot, "run", "--service", "--mode",
                        "workspace-write", "--", "/bin/sh", "-c", f"echo ran >> {out}"])
        took = time.monotonic() - begun
        assert res.returncode == 0, res.stderr
        assert 2 <= took < 15, took  # a step's 2 s, then the run in process
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(2)
    assert out.read_text() == "ran\n"


SIGNALS_THEN = r"""
import os, signal, sys
for n in filter(None, sys.argv[1].split(",")):
    signal.signal(int(n), signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [int(n) for n in filter(None, sys.argv[2].split(","))])
os.execv(sys.argv[3], sys.argv[3:])
"""


def _with_signals(box: Box, ignored: str, blocked: str, argv: list[str]
                  ) -> subprocess.CompletedProcess[bytes]:
    """ARGV run with the signals IGNORED and BLOCKED (comma-separated numbers)."""
    return box.host([SYSTEM_PYTHON, "-I", "-c", SIGNALS_THEN, ignored, blocked, *argv])


@pytest.mark.parametrize("how", ["ignored", "blocked"])
def test_a_caller_that_ignores_or_blocks_sigusr1_runs_in_process(box: Box, how: str) -> None:
    """A served command learns by SIGUSR1 that its service died or its client went: a
    caller ignoring or blocking it would keep its command past both. The first
    run would start a service of this caller's key, the second be served."""
    usr1 = str(int(signal.SIGUSR1))
    ignored, blocked = (usr1, "") if how == "ignored" else ("", usr1)
    for where in ("--service", "--service", "--no-service"):
        argv = box.runner.cli_argv(["run", where, "--", "/bin/sh", "-c",
                                    "kill -USR1 $$; echo alive"])
        res = _with_signals(box, ignored, blocked, argv)
        assert (res.returncode, res.stdout) == (0, b"alive\n"), (where, res)
        if where == "--service":
            time.sleep(1.5)  # time for a service the run would start
    assert not services(box)


def test_real_time_signals_ignored_or_blocked_are_the_commands(box: Box) -> None:
    # A service of the key these callers would have but for their signals (started
    # through the same interpreter, for its LC_CTYPE), which must not serve them.
    _with_signals(box, "", "", box.runner.cli_argv(["run", "--service", "--", "/bin/true"]))
    until(lambda: services(box), 20)
    assert services(box)
    time.sleep(1)
    outs = []
    for where in ("--service", "--service", "--no-service"):
        argv = box.runner.cli_argv(["run", where, "--", "/bin/grep", "-E", "^Sig(Blk|Ign)",
                                    "/proc/self/status"])
        res = _with_signals(box, "36", "40", argv)
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
        if where == "--service":
            time.sleep(1.5)  # time for a service the run would start
    assert outs[0] == outs[1] == outs[2], outs


def test_a_caller_with_another_pid_namespace_for_its_children_is_not_served(box: Box
                                                                            ) -> None:
    if box.runner.switches_user:
        pytest.skip("unshare -p without a user namespace needs CAP_SYS_ADMIN: root's case")
    started(box)
    outs = []
    for where in ("--service", "--no-service"):
        argv = box.runner.cli_argv(["run", where, "--", "/bin/sh", "-c", "echo ok"])
        res = box.host(["unshare", "-p", *argv])
        outs.append((res.returncode, res.stdout))
    assert outs[0] == outs[1], outs


def test_a_working_directory_that_cannot_be_opened_is_reported_as_in_process(box: Box
                                                                           ) -> None:
    if not box.runner.switches_user:
        pytest.skip("root searches any directory: the unprivileged user's case")
    started(box)
    d = box.mkdir("ws/shut")
    os.chmod(d, 0)
    try:
        here = box.run(["/bin/true"], options=["--no-service"], cwd=d)
        there = box.run(["/bin/true"], options=["--service"], cwd=d)
    finally:
        os.chmod(d, 0o755)
    assert (there.returncode, there.stderr) == (here.returncode, here.stderr), there
    assert b"Traceback" not in there.stderr


def test_a_service_started_inside_a_landlock_domain_gives_way(box: Box) -> None:
    """Root in a Landlock domain without no_new_privs starts a service, which inherits
    the domain and may not inspect an unconfined caller: it gives its key up at
    the first such caller, and the next run is served by one outside."""
    if box.runner.switches_user:
        pytest.skip("a Landlock domain without no_new_privs needs CAP_SYS_ADMIN: root's case")
    secret = box.mkdir("secret")
    inside = box.runner.cli_argv(["run", "--service", "--backend", "landlock", "--",
                                  "/bin/true"])
    box.host([SYSTEM_PYTHON, "-I", "-c", LANDLOCK, str(secret), *inside])
    until(lambda: services(box), 20)
    [confined_pid] = services(box)
    time.sleep(1)
    # Through the same interpreter as the domain's caller, so of the same key (its
    # LC_CTYPE).
    plain = box.runner.cli_argv(["run", "--service", "--", "/bin/sh", "-c", "echo ran"])
    res = _with_signals(box, "", "", plain)
    assert (res.returncode, res.stdout) == (0, b"ran\n"), res.stderr
    until(lambda: confined_pid not in services(box), 10, every=0.1)
    assert confined_pid not in services(box), "the confined service kept the key"
    # The run started one outside, which serves the next.
    until(lambda: services(box), 10, every=0.1)
    [outside] = services(box)
    marker = _marker()
    proc = box.runner.popen([SYSTEM_PYTHON, "-I", "-c", SIGNALS_THEN, "", "",
                             *box.runner.cli_argv(["run", "--service", "--", "sleep", marker])],
                            cwd=box.ws, env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_served(outside, marker)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", [["chrt", "-b", "0"], ["ionice", "-c", "3"]],
                         ids=["scheduling policy", "I/O priority"])
def test_a_callers_priorities_are_its_commands(box: Box, how: list[str]) -> None:
    """Neither shows in what a service's key was made from before it; a service started
    with others would have handed them on."""
    started(box)
    script = "chrt -p $$ | sed -n 's/.*: //p'; ionice -p $$"
    outs = []
    for where in ("--service", "--no-service"):
        argv = box.runner.cli_argv(["run", where, "--", "/bin/sh", "-c", script])
        res = box.host([*how, *argv])
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1], outs
    assert (b"SCHED_BATCH" if how[0] == "chrt" else b"idle") in outs[0], outs


def _none_left(box: Box) -> bool:
    """True once no service of the box runs: a starter that cannot take its key gives
    up within seconds."""
    until(lambda: not services(box), 10, every=0.1)
    return not services(box)


def test_a_fifo_at_the_keys_lock_starts_no_service(box: Box) -> None:
    """A service holding a FIFO would not be counted against the bound of 8."""
    d = own_service_dir(box)
    os.mkfifo(d / f"{_key(box, box.env())}.lock")
    box.runner.own(d / f"{_key(box, box.env())}.lock")
    res = box.run(["/bin/true"], options=["--service"])
    assert res.returncode == 0, res.stderr
    assert _none_left(box), "a service took a FIFO for its lock"
    assert not list(d.glob("*.sock"))
    (d / f"{_key(box, box.env())}.lock").unlink()
    started(box)  # control


def test_a_held_start_lock_does_not_pile_up_services(box: Box) -> None:
    d = own_service_dir(box)
    start = d / "start.lock"
    start.touch()
    box.runner.own(start)
    # -o: the lock is flock's own, not its child's, and goes with it.
    holder = subprocess.Popen(["flock", "-o", str(start), "sleep", "30"])
    try:
        for _ in range(3):
            assert box.run(["/bin/true"], options=["--service"]).returncode == 0
        assert _none_left(box), "starters wait on a start lock someone else holds"
    finally:
        holder.kill()
        holder.wait()
    started(box)  # control


CHROOT = r"""
set -e
cr=$1; ws=$2; services=$3; shift 3
# Every top-level directory, so the checkout and its interpreter are there wherever they are.
for p in /*; do
  [ -d "$p" ] || continue
  mkdir -p "$cr$p"; mount --bind "$p" "$cr$p"
done
mkdir -p "$cr/only-here"; echo IN-THE-CHROOT > "$cr/only-here/x"
# The service, started in this mount namespace, outside the chroot.
(cd "$ws" && "$@" run --service -- /bin/true)
i=0
while [ $i -lt 100 ] && ! ls "$services"/*.sock >/dev/null 2>&1; do sleep 0.1; i=$((i+1)); done
sleep 1
for how in --no-service --service; do
  /usr/sbin/chroot "$cr" /bin/sh -c 'cd "$0" && exec "$@"' "$ws" \
    "$@" run $how --backend landlock -- cat /only-here/x || true
done
"""


def test_a_chrooted_caller_is_not_served_from_outside_its_root(box: Box) -> None:
    """A chroot shares the mount namespace: its root is what tells it apart."""
    if box.runner.switches_user:
        pytest.skip("chroot needs CAP_SYS_CHROOT: root's case")
    prefix = box.runner.cli_argv([])
    res = box.host(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", CHROOT,
                    "sh", str(box.root / "cr"), str(box.ws), str(service_dir(box)), *prefix])
    assert services(box), "no service was started outside the chroot"
    assert res.stdout == b"IN-THE-CHROOT\n" * 2, (res.stdout, res.stderr)


def test_a_confined_caller_runs_in_process(box: Box) -> None:
    """no_new_privs (and so a Landlock domain) or a seccomp filter cannot be compared,
    and a service's child would not carry them."""
    argv = box.runner.cli_argv(["run", "--service", "--", "/bin/true"])
    res = box.host(["setpriv", "--no-new-privs", *argv])
    assert res.returncode == 0, res.stderr
    time.sleep(0.5)
    assert not services(box) and not service_dir(box).exists()
    started(box)  # control


# -- ends: Ctrl-C, a dead client, a dead service ----------------------------------------


def sleeps(marker: str) -> list[tuple[int, str]]:
    return [(pid, cmd) for pid, cmd in procs_with(f"sleep {marker}")
            if cmd.startswith("sleep ")]


def _tree(box: Box, marker: str, pid: int) -> subprocess.Popen[bytes]:
    """A served command whose tree is two `sleep MARKER`s."""
    proc = background(box, f"sleep {marker} & sleep {marker}; wait")
    until(lambda: len(sleeps(marker)) >= 2, 20)
    assert len(sleeps(marker)) == 2, "the command's tree did not start"
    wait_served(pid, marker)
    return proc


def _marker() -> str:
    return f"{900 + int.from_bytes(os.urandom(2), 'big') % 99}.{os.getpid() % 1000:03d}"


def test_ctrl_c_ends_the_commands_whole_tree(box: Box) -> None:
    pid = started(box)
    marker = _marker()
    proc = _tree(box, marker, pid)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 130
    assert not wait_gone(f"sleep {marker}", 10)


def test_a_killed_client_ends_its_command(box: Box) -> None:
    pid = started(box)
    marker = _marker()
    proc = _tree(box, marker, pid)
    proc.kill()
    proc.communicate(timeout=RUN_TIMEOUT)
    assert not wait_gone(f"sleep {marker}", 10)


def test_a_killed_service_ends_its_commands_and_the_next_run_starts_another(box: Box) -> None:
    pid = started(box)
    marker = _marker()
    proc = _tree(box, marker, pid)
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


def test_a_caller_that_ignores_sigterm_still_loses_its_command_with_the_service(
        box: Box) -> None:
    def deaf(cmd: list[str]) -> list[str]:
        # An ignored signal is part of the key: this caller has a service of its own.
        argv = box.runner.cli_argv(["run", "--service", "--", *cmd])
        return ["/bin/sh", "-c", "trap '' TERM; exec \"$@\"", "sh", *argv]

    assert box.host(deaf(["/bin/true"])).returncode == 0
    until(lambda: services(box), 20)
    pid = services(box)[0]
    time.sleep(0.5)  # it binds before its imports; a run meanwhile waits in its backlog
    marker = _marker()
    proc = box.runner.popen(deaf(["/bin/sh", "-c", f"sleep {marker} & sleep {marker}; wait"]),
                            cwd=box.ws, env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_served(pid, marker)
    os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=RUN_TIMEOUT)
    assert not wait_gone(f"sleep {marker}", 10)


def test_a_code_change_lets_running_commands_finish(box: Box, unpriv_site: str) -> None:
    pid = started(box)
    marker = f"3.{_marker().replace('.', '')}"
    slow = background(box, f"sleep {marker}; echo done")
    wait_served(pid, marker)
    with code_changed(box, unpriv_site):
        assert served(box, [], ["/bin/true"]).returncode == 0
        # The old one let go of its key while its command runs: a new one starts.
        until(lambda: not (set(services(box)) <= {pid}), 20)
        assert pid in services(box) and len(services(box)) == 2
    out, err = slow.communicate(timeout=RUN_TIMEOUT)
    assert (slow.returncode, out) == (0, b"done\n"), err
    until(lambda: pid not in services(box), 10)
    assert pid not in services(box)


def test_stale_files_do_not_count_and_live_services_are_bounded(box: Box) -> None:
    d = own_service_dir(box)
    for i in range(9):  # what killed services leave: files no one holds
        for suffix in (".sock", ".lock"):
            box.write(d / f"stale{i}{suffix}", "", 0o600)
    started(box)
    for i in range(8):
        box.run(["/bin/true"], options=["--service"], env=box.env(CONTEXT=str(i)))
    until(lambda: len(services(box)) >= 8, 20, every=0.1)
    time.sleep(1)
    assert len(services(box)) == 8


def test_it_exits_when_idle_and_leaves_nothing(box: Box) -> None:
    started(box, STOCKADE_SERVICE_IDLE_SECONDS="1")
    assert served(box, [], ["/bin/true"],
                  env=box.env(STOCKADE_SERVICE_IDLE_SECONDS="1")).returncode == 0
    until(lambda: not services(box), 15, every=0.1)
    assert not services(box)
    assert not list(service_dir(box).glob("*.sock"))
    box.runner.wait_idle()


def test_a_change_to_stockades_code_starts_a_new_service(box: Box, unpriv_site: str) -> None:
    pid = started(box)
    with code_changed(box, unpriv_site):
        res = served(box, [], ["/bin/sh", "-c", "exit 4"])
        assert res.returncode == 4, res.stderr  # run in process, this once
        until(lambda: pid not in services(box), 10)
        assert pid not in services(box)


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


def _pane(tmux: list[str]) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", "t"], capture_output=True,
                          check=False).stdout.decode()


def _pane_shows(tmux: list[str], text: str, seconds: float = RUN_TIMEOUT) -> str:
    until(lambda: text in _pane(tmux), seconds, every=0.1)
    return _pane(tmux)


@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed here")
def test_a_terminal_keeps_its_job_control_and_ctrl_c_with_the_service_on(box: Box) -> None:
    """A person's terminal (tmux) with the service on: the command sees the terminal,
    Ctrl-C typed there ends its whole tree with 130, and nothing was served."""
    marker = _marker()
    sock = box.root / "tmux.sock"
    tmux = ["tmux", "-S", str(sock)]
    script = (f"test -t 0 && test -t 1 && echo TTY-IN-$(stty size | tr ' ' x); "
              f"sleep {marker} & sleep {marker}; wait")
    run = box.runner.cli_argv(["run", "--service", "--mode", "workspace-write", "--",
                               "/bin/sh", "-c", script])
    env = ["env", "-i", *(f"{k}={v}" for k, v in box.env(TERM="xterm").items())]
    if box.runner.switches_user:
        env = ["setpriv", f"--reuid={box.runner.uid}", f"--regid={box.runner.gid}",
               "--clear-groups", *env]
    line = f"cd {shlex.quote(str(box.ws))} && {shlex.join([*env, *run])}; echo EXIT=$?; sleep 600"
    subprocess.run([*tmux, "new-session", "-d", "-s", "t", "-x", "91", "-y", "23", line],
                   check=True)
    try:
        shown = _pane_shows(tmux, "TTY-IN-23x91")
        assert "TTY-IN-23x91" in shown, shown
        until(lambda: len(sleeps(marker)) >= 2, 20)
        assert len(sleeps(marker)) == 2, _pane(tmux)
        subprocess.run([*tmux, "send-keys", "-t", "t", "C-c"], check=True)
        shown = _pane_shows(tmux, "EXIT=")
        assert "EXIT=130" in shown, shown
        until(lambda: not sleeps(marker), 10)
        assert not sleeps(marker)
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
    assert not services(box) and not service_dir(box).exists()


def test_the_service_directory_must_be_the_users_alone(box: Box) -> None:
    d = own_service_dir(box)
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


LATE = r"""
import ctypes, os, sys, time
sys.path.insert(0, sys.argv[1])
from stockade import serviceclient as sc
how, target = sys.argv[2], sys.argv[3]
facts = sc.process_facts()
key = sc.service_key(facts=facts)
sock, pid = sc._connect(f"{sc.service_dir(dict(os.environ))}/{key}.sock", facts)
argv = ["--mode", "workspace-write", "--", "/bin/sh", "-c", f"echo ran > {target}"]
if how == "confined-after-connect":
    time.sleep(0.5)  # the service has long read what it reads on connect
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
elif how == "handed-to-a-child":
    if os.fork():
        os.wait()
        sys.exit(0)
try:
    print("STATUS", sc._served(sock, argv))
except sc._Gone:
    print("REFUSED")
"""


@pytest.mark.parametrize("how", ["confined-after-connect", "handed-to-a-child"])
def test_the_peer_is_judged_as_it_is_when_its_request_arrives(box: Box, how: str) -> None:
    """Facts read at connect time, and a request from whoever holds the connection
    then, would serve a caller that confined itself (or a confined child) after."""
    started(box)
    target = box.ws / "ran"
    res = box.host([box.runner.python, "-I", "-c", LATE, box.runner.site, how, str(target)])
    assert b"REFUSED" in res.stdout, (res.stdout, res.stderr)
    assert not target.exists()
    control = box.host([box.runner.python, "-I", "-c", LATE, box.runner.site, "as-is",
                        str(target)])
    assert b"STATUS 0" in control.stdout, (control.stdout, control.stderr)
    assert target.exists()


def test_a_fifo_in_the_service_directory_holds_nothing_up(box: Box) -> None:
    d = own_service_dir(box)
    os.mkfifo(d / "zz.lock", 0o600)
    box.runner.own(d / "zz.lock")
    res = served(box, [], ["/bin/sh", "-c", "exit 3"], timeout=15)
    assert res.returncode == 3
    started(box)
