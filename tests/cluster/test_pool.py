"""SandboxPool against a real two-node Ray cluster: routing, the boundary, approvals, audit."""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from isolation.conftest import procs_with, snapshot, wait_gone
from stockade import (
    ApprovalGate,
    CapabilityDenied,
    InvalidCommand,
    SandboxCommand,
    SandboxConfig,
    SandboxUnavailable,
)
from stockade.approval import APPROVED_ONCE, DENIED
from stockade.cluster import PoolBusy, SandboxPool
from stockade.ledger import Ledger, decoded

from .conftest import RayCluster, wait_until

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
APPROVAL_TIMEOUT = 2.0


class ScriptedRequester:
    """The caller's approver: answers per program name; "hang" never answers."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.asked: list[tuple[str, list[str], int]] = []
        self.release = threading.Event()

    def request(self, request):  # type: ignore[no-untyped-def]
        # The pid proves where the decision ran: the caller's process, not a node's.
        self.asked.append((request.session_id, list(request.argv), os.getpid()))
        answer = self.answers.get(request.argv[-1], DENIED)
        if answer == "hang":
            self.release.wait(30)
            return DENIED
        return answer


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.sibling = root / "sibling"
        self.data = root / "data"  # the caller's XDG_DATA_HOME: its ledger lives here
        for d in (self.home, self.sibling, self.data):
            d.mkdir(parents=True)
        self.marker = f"DECOY-{secrets.token_hex(6)}"
        cred = self.home / ".aws" / "credentials"
        cred.parent.mkdir()
        cred.write_text(self.marker + "\n")
        (self.sibling / "notes.txt").write_text("sibling original\n")
        self.ledger = str(self.data / "stockade" / "ledger.db")


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    # /var/tmp, not /tmp: the sandbox's /tmp is a fresh tmpfs, so a target
    # there would be out of reach whatever the boundary did.
    root = Path(tempfile.mkdtemp(prefix="stockade-cluster-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    try:
        yield World(root)
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def make_config(world: World, **extra: object) -> SandboxConfig:
    values: dict[str, object] = {"mode": "workspace-write", "ledger": world.ledger,
                                 "commands_per_minute": 100000}
    values.update(extra)
    return SandboxConfig(**values)


@pytest.fixture(scope="module")
def requester() -> Iterator[ScriptedRequester]:
    r = ScriptedRequester()
    yield r
    r.release.set()


@pytest.fixture(scope="module")
def pool(ray_cluster: RayCluster, world: World,
         requester: ScriptedRequester) -> Iterator[SandboxPool]:
    p = SandboxPool(make_config(world), approval=ApprovalGate(requester, APPROVAL_TIMEOUT),
                    env={"HOME": str(world.home), "PATH": MINIMAL_PATH})
    roots = [Path(str(n.report["root"])) for n in p.nodes.values()]
    try:
        yield p
    finally:
        p.close()
    assert [r for r in roots if r.exists()] == []


def sh(session: str, script: str, **kw: object) -> SandboxCommand:
    return SandboxCommand("/bin/sh", ["-c", script], session_id=session, **kw)  # type: ignore[arg-type]


def test_one_actor_per_node_with_a_real_backend(pool: SandboxPool,
                                                ray_cluster: RayCluster) -> None:
    assert set(pool.nodes) == {ray_cluster.head_id, ray_cluster.worker_id}
    assert pool.unusable == {}
    for node in pool.nodes.values():
        assert node.report["backend"] in ("bubblewrap", "landlock")
        assert node.slot.limit == 2  # each node's CPU count in Ray


def test_sessions_spread_over_nodes_and_stay_pinned(pool: SandboxPool) -> None:
    a = pool.open_session("spread-a")
    b = pool.open_session("spread-b")
    assert a.node_id != b.node_id
    out = pool.execute(sh("spread-a", "echo hi > f.txt; cat f.txt; pwd"))
    assert out.exit_code == 0, out
    assert out.stdout.decode().split() == ["hi", a.cwd]
    assert pool.session("spread-a").node_id == a.node_id
    assert Path(a.cwd, "f.txt").read_text() == "hi\n"  # same machine: seen from outside
    pool.close_session("spread-a")
    pool.close_session("spread-b")


ESCAPE = """
try() { n=$1; shift; if ( "$@" ) 2>/dev/null; then echo "OK $n"; else echo "NO $n"; fi; }
try write-sibling sh -c 'echo pwned > "$1/pwned"' sh "$SIBLING"
try clobber-sibling sh -c 'echo pwned > "$1/notes.txt"' sh "$SIBLING"
try read-decoy cat "$HOME/.aws/credentials"
try write-workspace sh -c 'echo mine > mine.txt'
"""


def attempts(stdout: bytes) -> dict[str, bool]:
    out = {}
    for line in stdout.decode().splitlines():
        verdict, _, name = line.partition(" ")
        if verdict in ("OK", "NO"):
            out[name] = verdict == "OK"
    return out


@pytest.mark.parametrize("which", ["head", "worker"])
def test_escape_through_the_pool_is_blocked_on_each_node(
        pool: SandboxPool, world: World, ray_cluster: RayCluster, which: str) -> None:
    node = ray_cluster.head_id if which == "head" else ray_cluster.worker_id
    sid = f"escape-{which}"
    info = pool.open_session(sid, node=node)
    before = snapshot(world.sibling)
    env = {"SIBLING": str(world.sibling)}
    out = pool.execute(sh(sid, ESCAPE, env=env))
    seen = attempts(out.stdout)
    # Checked outside, on the node's filesystem: nothing outside the workspace changed.
    assert snapshot(world.sibling) == before
    assert world.marker.encode() not in out.stdout + out.stderr
    assert seen == {"write-sibling": False, "clobber-sibling": False, "read-decoy": False,
                    "write-workspace": True}, out
    assert Path(info.cwd, "mine.txt").read_text() == "mine\n"
    # The unconfined control: the same script on the host does all four.
    control_ws = world.root / f"control-{which}"
    control_ws.mkdir()
    control_sib = world.root / f"control-sibling-{which}"
    control_sib.mkdir()
    (control_sib / "notes.txt").write_text("sibling original\n")
    res = subprocess.run(["/bin/sh", "-c", ESCAPE], cwd=control_ws, capture_output=True,
                         env={"HOME": str(world.home), "PATH": MINIMAL_PATH,
                              "SIBLING": str(control_sib)}, timeout=30, check=False)
    assert attempts(res.stdout) == dict.fromkeys(seen, True)
    assert world.marker.encode() in res.stdout
    assert (control_sib / "pwned").exists()
    pool.close_session(sid)


def _alive(ident: dict[str, int]) -> bool:
    """The process `ident` names is still there (not a later one that got its pid)."""
    try:
        stat = Path(f"/proc/{ident['pid']}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return stat[0] != "Z" and int(stat[19]) == ident["start"]


@pytest.mark.timeout(300)  # a whole Ray cluster is started and stopped as the user
def test_escape_as_an_unprivileged_node_user(unpriv_ray_site: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching to the unprivileged test user needs root; the escape tests "
                    f"above already ran the nodes as this uid ({os.geteuid()})")
    from isolation.conftest import SYSTEM_PYTHON, TEST_USER, _ensure_user, kill_marked

    pw = _ensure_user()
    as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    root = Path(tempfile.mkdtemp(prefix="stockade-cluster-unpriv-", dir="/var/tmp"))
    # Short and the user's: Ray's socket paths must fit in sun_path, and every
    # file of this cluster is written by the user.
    ray_tmp = Path(tempfile.mkdtemp(prefix="sru-", dir="/tmp"))
    try:
        w = World(root)
        control_ws, control_sib = root / "control", root / "control-sibling"
        control_ws.mkdir()
        control_sib.mkdir()
        (control_sib / "notes.txt").write_text("sibling original\n")
        # Everything the attack aims at is the user's own, so only the boundary
        # stands between the command and it (the control below proves it).
        for dirpath, dirs, files in os.walk(root):
            for name in [".", *dirs, *files]:
                os.lchown(os.path.join(dirpath, name), pw.pw_uid, pw.pw_gid)
        os.chmod(w.home / ".aws" / "credentials", 0o600)
        os.chown(ray_tmp, pw.pw_uid, pw.pw_gid)
        os.chmod(root, 0o755)
        before = snapshot(w.sibling)
        spec = {"ledger": w.ledger, "home": str(w.home), "path": MINIMAL_PATH,
                "sibling": str(w.sibling), "script": ESCAPE}
        # PYTHONPATH, not `-I` and sys.path: the raylet starts each worker with
        # this interpreter and the environment it was given, and a worker that
        # cannot import ray never becomes the node's actor.
        env = {"HOME": str(w.home), "PATH": MINIMAL_PATH, "RAY_TMPDIR": str(ray_tmp),
               "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(unpriv_ray_site / "site"),
               "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        res = subprocess.run(
            [SYSTEM_PYTHON, str(unpriv_ray_site / "unpriv_driver.py"), json.dumps(spec)],
            cwd=str(w.home), env=env, capture_output=True, timeout=240, check=False,
            stdin=subprocess.DEVNULL, **as_user)  # type: ignore[call-overload]
        assert res.returncode == 0 and res.stdout, res.stderr.decode(errors="replace")[-3000:]
        report = json.loads(res.stdout.decode().splitlines()[-1])
        assert "error" not in report, report["error"]
        # Who ran it: the caller, every Ray process and the node's actor are the user.
        assert report["uid"] == pw.pw_uid and report["python"] == SYSTEM_PYTHON
        assert report["unusable"] == {} and report["backend"] in ("bubblewrap", "landlock")
        assert report["actor"]["uid"] == pw.pw_uid, report["actor"]
        assert report["cluster"] and {p["uid"] for p in report["cluster"]} == {pw.pw_uid}
        # Checked outside, on the node's filesystem: nothing outside the workspace changed.
        out = (report["stdout"] + report["stderr"]).encode()
        assert snapshot(w.sibling) == before
        assert w.marker.encode() not in out
        assert attempts(report["stdout"].encode()) == {
            "write-sibling": False, "clobber-sibling": False, "read-decoy": False,
            "write-workspace": True}, report
        assert report["mine"] == "mine\n"
        # The unconfined control, as the same user: the same script does all four.
        ctl = subprocess.run(["/bin/sh", "-c", ESCAPE], cwd=control_ws, capture_output=True,
                             env={"HOME": str(w.home), "PATH": MINIMAL_PATH,
                                  "SIBLING": str(control_sib)}, timeout=30, check=False,
                             **as_user)  # type: ignore[call-overload]
        assert attempts(ctl.stdout) == dict.fromkeys(
            ("write-sibling", "clobber-sibling", "read-decoy", "write-workspace"), True), ctl
        assert w.marker.encode() in ctl.stdout and (control_sib / "pwned").exists()
        # Nothing of that cluster is left: no process, no node root.
        assert wait_gone(str(ray_tmp), 30) == []
        left = [p for p in [*report["cluster"], report["actor"]] if _alive(p)]
        assert left == [], f"processes of {TEST_USER}'s cluster survived: {left}"
        assert not Path(report["root"]).exists()
        rows = [r for r in Ledger(w.ledger).query(last=100)
                if r["session"] == "escape-unprivileged"]
        assert [json.loads(str(r["detail"]))["node"] for r in rows] == [report["node_id"]]
    finally:
        kill_marked(str(ray_tmp))
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def forbid(session: str, name: str) -> SandboxCommand:
    # Asking to run without a boundary exceeds any mode: it always needs approval.
    return SandboxCommand("/bin/echo", [name], session_id=session, preference="forbid")


def test_approval_round_trips_to_the_caller(pool: SandboxPool, requester: ScriptedRequester,
                                            ray_cluster: RayCluster) -> None:
    sid = "approve-worker"
    pool.open_session(sid, node=ray_cluster.worker_id)
    requester.answers["approve-me"] = APPROVED_ONCE
    out = pool.execute(forbid(sid, "approve-me"))
    assert out.stdout == b"approve-me\n" and out.backend == "none"
    assert (sid, ["/bin/echo", "approve-me"], os.getpid()) in requester.asked

    with pytest.raises(CapabilityDenied, match="was denied"):
        pool.execute(forbid(sid, "deny-me"))

    requester.answers["hang-me"] = "hang"
    with pytest.raises(CapabilityDenied, match="not answered in time"):
        pool.execute(forbid(sid, "hang-me"))
    # The node is not left waiting: the same session runs its next command.
    assert pool.execute(sh(sid, "echo after")).stdout == b"after\n"
    pool.close_session(sid)


def test_no_approver_is_refused_as_locally(ray_cluster: RayCluster, world: World) -> None:
    with SandboxPool(make_config(world)) as p, \
            pytest.raises(CapabilityDenied, match="no approver is configured"):
        p.execute(forbid("no-approver", "x"))


def test_async_execute_with_an_async_requester(pool: SandboxPool,
                                               requester: ScriptedRequester) -> None:
    class AsyncRequester:
        def __init__(self) -> None:
            self.loop: asyncio.AbstractEventLoop | None = None

        async def request(self, request):  # type: ignore[no-untyped-def]
            self.loop = asyncio.get_running_loop()
            return APPROVED_ONCE

    async def main() -> tuple[bytes, bytes, bool]:
        asker = AsyncRequester()
        saved = pool.gate.requester  # type: ignore[union-attr]
        pool.gate.requester = asker  # type: ignore[union-attr,assignment]
        try:
            plain = await pool.aexecute(sh("async-a", "echo plain"))
            approved = await pool.aexecute(forbid("async-a", "async-ok"))
        finally:
            pool.gate.requester = saved  # type: ignore[union-attr]
        return plain.stdout, approved.stdout, asker.loop is asyncio.get_running_loop()

    plain, approved, same_loop = asyncio.run(main())
    assert (plain, approved, same_loop) == (b"plain\n", b"async-ok\n", True)
    pool.close_session("async-a")


@pytest.mark.timeout(200)  # without the kill, asyncio.run waits out the command's thread
def test_cancelled_aexecute_kills_the_command_on_its_node(ray_cluster: RayCluster,
                                                          world: World) -> None:
    node = ray_cluster.worker_id
    tag = secrets.token_hex(4)
    sleeper = f"sleep 97.{int(tag, 16) % 1000:03d}"
    with SandboxPool(make_config(world), max_concurrent_per_node=1) as p:
        info = p.open_session("cancel", node=node)

        async def main() -> tuple[float, list[object]]:
            # Its own timeout is far off: only the cancellation may end it.
            running = asyncio.ensure_future(p.aexecute(SandboxCommand(
                "/bin/sh", ["-c", f"{sleeper} & wait; echo late > late.txt", tag],
                session_id="cancel", timeout=300)))
            await asyncio.to_thread(wait_until, lambda: procs_with(sleeper), 30,
                                    "the command's child to run on the node")
            # A second one waits in the caller for the node's only place.
            queued = asyncio.ensure_future(p.aexecute(sh("cancel", "echo q > queued.txt")))
            await asyncio.to_thread(wait_until, lambda: p.load()[node][2] == 1, 30,
                                    "the second command to queue")
            started = time.monotonic()
            running.cancel()
            queued.cancel()
            for task in (running, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task
            took = time.monotonic() - started
            # Checked outside, on the node, as soon as the cancellation is through
            # (before asyncio.run would wait for a thread still carrying it).
            left = await asyncio.to_thread(lambda: wait_gone(tag, 5) + wait_gone(sleeper, 5))
            return took, left

        took, left = asyncio.run(main())
        # The shell and the child it waited on are gone, and neither the rest of
        # the script nor the queued command ever ran.
        assert left == []
        assert took < 15, f"cancelling took {took:.1f} s"
        assert not Path(info.cwd, "late.txt").exists()
        assert not Path(info.cwd, "queued.txt").exists()
        assert p.load()[node] == (1, 0, 0)
        assert p.census()[node]["processes"] == []
        assert p.execute(sh("cancel", "echo next")).stdout == b"next\n"


def test_cancel_during_an_approval_withdraws_it(pool: SandboxPool, requester: ScriptedRequester,
                                                world: World) -> None:
    sid = f"cancel-ask-{secrets.token_hex(3)}"
    requester.answers["cancel-while-asked"] = "hang"

    async def main() -> float:
        task = asyncio.ensure_future(pool.aexecute(forbid(sid, "cancel-while-asked")))
        await asyncio.to_thread(wait_until, lambda: any(
            a[0] == sid for a in requester.asked), 30, "the approval to be asked")
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    took = asyncio.run(main())
    # Not held until the gate's timeout, and not turned into a denial on the node.
    assert took < APPROVAL_TIMEOUT, f"cancelling took {took:.1f} s"
    assert pool.execute(sh(sid, "echo after")).stdout == b"after\n"
    rows = [r for r in Ledger(world.ledger).query(session=sid, last=100)]
    assert [json.loads(str(r["argv"])) for r in rows] == [["/bin/sh", "-c", "echo after"]]
    pool.close_session(sid)


def test_audit_records_from_both_nodes_reach_the_callers_ledger(
        pool: SandboxPool, world: World, ray_cluster: RayCluster) -> None:
    tag = secrets.token_hex(4)
    for node in (ray_cluster.head_id, ray_cluster.worker_id):
        sid = f"audit-{node[:6]}-{tag}"
        pool.open_session(sid, node=node)
        pool.execute(SandboxCommand("/bin/echo", [tag], session_id=sid))
        pool.close_session(sid)
    rows = [r for r in Ledger(world.ledger).query(last=1000) if tag in r["argv"]]
    nodes = {json.loads(r["detail"])["node"] for r in rows}
    assert nodes == {ray_cluster.head_id, ray_cluster.worker_id}
    # What a person on the caller's machine sees.
    res = subprocess.run([sys.executable, "-m", "stockade", "audit", "--json", "--last", "1000"],
                         capture_output=True, timeout=60, check=False,
                         env={**os.environ, "XDG_DATA_HOME": str(world.data)})
    assert res.returncode == 0, res.stderr
    shown = [json.loads(line) for line in res.stdout.decode().splitlines()]
    shown = [r for r in shown if tag in r["argv"]]
    assert {r["detail"]["node"] for r in shown} == nodes
    assert all(r["verdict"] == "ran" and r["backend"] != "none" for r in shown)
    text = subprocess.run([sys.executable, "-m", "stockade", "audit", "--last", "1000"],
                          capture_output=True, timeout=60, check=False,
                          env={**os.environ, "XDG_DATA_HOME": str(world.data)}).stdout.decode()
    for node in nodes:
        assert any(tag in line and f"node={node[:12]}" in line for line in text.splitlines())


class Served:
    """A loopback HTTP server that answers every GET and remembers the paths asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.paths.append(self.path)
                body = b"hello from the host\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def test_network_records_from_a_node_name_it_in_the_callers_ledger(
        ray_cluster: RayCluster, world: World, served: Served) -> None:
    tag = secrets.token_hex(4)
    grant = f"127.0.0.1:{served.port}"
    node = ray_cluster.worker_id
    sid = f"net-{tag}"
    with SandboxPool(make_config(world, allow_hosts=[grant]),
                     env={"HOME": str(world.home), "PATH": MINIMAL_PATH}) as p:
        p.open_session(sid, node=node)
        out = p.execute(SandboxCommand(
            "curl", ["-sS", "--max-time", "20", f"http://{grant}/{tag}"], session_id=sid))
        assert out.exit_code == 0 and out.stdout == b"hello from the host\n", out
        assert served.paths == [f"/{tag}"]  # the host's server was reached, once

        def rows() -> list[dict[str, object]]:
            # The proxy writes its record when the connection closes, which
            # can be after the command's reply: fetch what came later.
            p.flush_audit()
            return [decoded(r) for r in Ledger(world.ledger).query(table="network", last=1000)
                    if r["session"] == sid]

        [row] = wait_until(rows, 30, "the proxy's record of the connection")
    assert (row["host"], row["port"], row["allowed"]) == ("127.0.0.1", served.port, True)
    assert row["detail"] == {"node": node}
    # What a person on the caller's machine sees.
    env = {**os.environ, "XDG_DATA_HOME": str(world.data)}
    shown = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "stockade", "audit", "--network", "--json", "--last", "1000"],
        capture_output=True, timeout=60, check=True, env=env).stdout.decode().splitlines()]
    assert [r["detail"] for r in shown if r["session"] == sid] == [{"node": node}]
    text = subprocess.run(
        [sys.executable, "-m", "stockade", "audit", "--network", "--last", "1000"],
        capture_output=True, timeout=60, check=True, env=env).stdout.decode()
    [line] = [line for line in text.splitlines() if sid in line]
    assert f"allow 127.0.0.1:{served.port} node={node[:12]}" in line


def test_seeded_workspace_reads_back_without_following_links(
        pool: SandboxPool, world: World) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"from the tarball\n"
        entry = tarfile.TarInfo("pkg/readme.txt")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    sid = "seeded"
    pool.open_session(sid, files={"src/main.py": b"print('hi')\n"}, tarball=buf.getvalue())
    out = pool.execute(sh(sid, "cat src/main.py pkg/readme.txt; echo made > out.txt; "
                               f"ln -s {world.home}/.aws/credentials leak"))
    assert out.stdout == b"print('hi')\nfrom the tarball\n", out
    assert pool.read_files(sid, ["out.txt"]) == {"out.txt": b"made\n"}
    with pytest.raises(InvalidCommand, match="symlink is never followed"):
        pool.read_files(sid, ["leak"])
    with tarfile.open(fileobj=io.BytesIO(pool.export(sid))) as tar:
        names = set(tar.getnames())
        assert tar.getmember("leak").issym()
    assert {"src/main.py", "pkg/readme.txt", "out.txt", "leak"} <= names
    with pytest.raises(InvalidCommand):
        pool.read_files(sid, ["../../etc/passwd"])
    pool.close_session(sid)


def test_a_closed_sessions_workspace_does_not_come_back_with_its_id(
        ray_cluster: RayCluster, world: World) -> None:
    """The workspace lives under the node's root (also where the node's environment
    sets XDG_DATA_HOME) and goes with its session: an id used again starts empty."""
    elsewhere = world.root / "node-data-home"
    env = {"HOME": str(world.home), "PATH": MINIMAL_PATH, "XDG_DATA_HOME": str(elsewhere)}
    with SandboxPool(make_config(world), env=env) as p:
        roots = {n: str(node.report["root"]) for n, node in p.nodes.items()}
        sid = "reused-id"
        info = p.open_session(sid, files={"secret.txt": b"left by the first session\n"})
        assert info.cwd.startswith(roots[info.node_id] + "/workspaces/"), (info, roots)
        assert p.execute(sh(sid, "cat secret.txt; echo more > made.txt")).exit_code == 0
        p.close_session(sid)
        again = p.open_session(sid, node=info.node_id)
        assert again.cwd == info.cwd
        out = p.execute(sh(sid, "ls -A; cat secret.txt"))
        assert out.stdout == b"" and b"No such file" in out.stderr, out
        p.close_session(sid)
        assert p.census()[info.node_id]["sessions"] == []
    assert not elsewhere.exists() or not any(elsewhere.rglob("workspaces"))
    assert [r for r in roots.values() if os.path.exists(r)] == []


def test_background_process_through_the_pool(pool: SandboxPool) -> None:
    marker = f"bg-{secrets.token_hex(4)}"
    proc = pool.start(sh("bg", "echo ready; exec sleep 60", env={"M": marker}))
    assert proc.running()
    wait_until(lambda: proc.output()[0] == b"ready\n", 30, "the process's first line")
    data, offset = proc.output()
    assert offset == len(data)
    assert proc.wait(0.01) is None
    assert proc.stop(30) is not None  # bounded, not a guess: stop returns once it is done
    assert not proc.running()
    # A second process is stopped by closing its session, as locally.
    # Digits only: `sleep 61.c0` exits at once ("invalid time interval"), and the
    # process the session's close was to stop was gone, or never seen, before it.
    interval = f"61.{secrets.randbelow(900000) + 100000}"
    other = pool.start(sh("bg", f"exec sleep {interval}"))
    wait_until(lambda: [c for _, c in procs_with(f"sleep {interval}")
                        if c.startswith("sleep ")], 30, "the second process's sleep")
    assert other.running()
    pool.close_session("bg")
    assert wait_gone(f"sleep {interval}", 30) == []
    with pytest.raises(SandboxUnavailable, match="session was closed"):
        other.running()


def test_backpressure_queue_then_clear_error(ray_cluster: RayCluster, world: World,
                                             tmp_path: Path) -> None:
    with SandboxPool(make_config(world), max_concurrent_per_node=1, max_queue_per_node=1) as p:
        node = ray_cluster.worker_id
        info = p.open_session("bp", node=node)
        gate = Path(info.cwd) / "go"
        results: list[object] = []

        def run(script: str) -> None:
            try:
                results.append(p.execute(sh("bp", script)).stdout)
            except Exception as exc:
                results.append(exc)

        first = threading.Thread(target=run, args=("while [ ! -e go ]; do sleep 0.02; done; "
                                                   "echo first",))
        first.start()
        wait_until(lambda: p.load()[node][1] == 1, 30, "the first command to run")
        second = threading.Thread(target=run, args=("echo second",))
        second.start()
        wait_until(lambda: p.load()[node][2] == 1, 30, "the second command to queue")
        with pytest.raises(PoolBusy, match=r"1 commands running \(limit 1\) and 1 waiting"):
            p.execute(sh("bp", "echo third"))
        gate.write_text("")
        first.join(30)
        second.join(30)
        assert sorted(map(str, results)) == ["b'first\\n'", "b'second\\n'"]
        assert p.load()[node] == (1, 0, 0)


def test_a_node_that_cannot_build_a_boundary_is_never_used(ray_cluster: RayCluster,
                                                           world: World) -> None:
    # Only this cluster's nodes' roots: another stockade on the machine makes its own.
    ours = [f"stockade-node-{n[:12]}-*" for n in (ray_cluster.head_id, ray_cluster.worker_id)]

    def roots() -> set[Path]:
        return {p for pattern in ours for p in Path(tempfile.gettempdir()).glob(pattern)}

    before = roots()
    with pytest.raises(SandboxUnavailable) as err:
        SandboxPool(make_config(world, backend="seatbelt"))
    assert roots() <= before
    message = str(err.value)
    assert "no node in the Ray cluster can build a boundary" in message
    assert ray_cluster.head_id in message and ray_cluster.worker_id in message
    assert "stockade doctor" in message


def test_command_policy_applies_on_the_node_as_locally(ray_cluster: RayCluster,
                                                       world: World) -> None:
    from stockade import SyncWorkspaceSandbox

    rule = {"name": "no-sneaky", "regex": "sneaky-[0-9]+", "action": "block",
            "description": "a rule only this test has"}
    cfg = make_config(world, command_policy={"custom_rules": [rule]},
                      workspace_root=str(world.root / "local-ws"))
    cmd = SandboxCommand("/bin/echo", ["sneaky-42"], session_id="policy")
    with SyncWorkspaceSandbox(cfg) as local, pytest.raises(CapabilityDenied) as here:
        local.execute(cmd)
    with SandboxPool(cfg) as p:
        for node in p.nodes:
            sid = f"policy-{node[:6]}"
            p.open_session(sid, node=node)
            with pytest.raises(CapabilityDenied) as there:
                p.execute(SandboxCommand("/bin/echo", ["sneaky-42"], session_id=sid))
            assert str(there.value) == str(here.value)
            assert "no-sneaky" in str(there.value)
            assert p.execute(SandboxCommand("/bin/echo", ["fine"], session_id=sid)
                             ).stdout == b"fine\n"
