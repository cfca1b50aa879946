"""A node lost mid-command, and 500 commands leaving nothing behind."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from isolation.conftest import procs_with, wait_gone
from stockade import SandboxCommand, SandboxConfig, SandboxUnavailable
from stockade.cluster import NodeLost, SandboxPool
from stockade.ledger import Ledger

from .conftest import RayCluster, wait_until


@pytest.fixture
def ledger_path() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="stockade-cluster-ledger-", dir="/var/tmp")
    try:
        yield os.path.join(root, "ledger.db")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def config(ledger: str) -> SandboxConfig:
    return SandboxConfig(mode="workspace-write", ledger=ledger, commands_per_minute=100000)


@pytest.mark.timeout(300)  # a node is started for it, and Ray must declare it dead
def test_node_lost_mid_command(ray_cluster: RayCluster, ledger_path: str) -> None:
    victim = ray_cluster.add_node("stockade-victim")
    victim_id = victim.node_id  # type: ignore[attr-defined]
    pool = SandboxPool(config(ledger_path))
    root = None
    try:
        assert victim_id in pool.nodes
        root = pool.nodes[victim_id].report["root"]
        pool.open_session("doomed", node=victim_id)
        pool.open_session("survivor", node=ray_cluster.worker_id)
        marker = f"doomed-{secrets.token_hex(4)}"
        failure: list[BaseException] = []

        def run() -> None:
            try:
                pool.execute(SandboxCommand("/bin/sh", ["-c", "sleep 120; echo done", marker],
                                            session_id="doomed"))
            except BaseException as exc:
                failure.append(exc)

        t = threading.Thread(target=run)
        t.start()
        wait_until(lambda: procs_with(marker), 30, "the command to be running on the victim")
        victim.kill_raylet()  # type: ignore[attr-defined]
        t.join(60)
        assert not t.is_alive()
        [err] = failure
        assert isinstance(err, NodeLost) and isinstance(err, SandboxUnavailable)
        assert str(err).startswith(f"node {victim_id} lost while running '/bin/sh'")
        assert "not re-run" in str(err)
        # The session went with its node; it is not moved behind the caller's back.
        with pytest.raises(NodeLost, match=f"node {victim_id} lost"):
            pool.execute(SandboxCommand("/bin/true", session_id="doomed"))
        # The other node keeps serving, and new sessions avoid the lost one.
        assert pool.execute(SandboxCommand("/bin/echo", ["still"], session_id="survivor")
                            ).stdout == b"still\n"
        for i in range(4):
            assert pool.open_session(f"fresh-{i}").node_id != victim_id
        assert victim_id not in pool.healthy_nodes()
        # The sandboxed command died with its node, and the loss is in the ledger.
        assert wait_gone(marker, 30) == []
        [row] = [r for r in Ledger(ledger_path).query(last=100) if r["session"] == "doomed"
                 and r["outcome"] == "error"]
        assert victim_id in str(row["detail"]) and "lost" in str(row["detail"])
    finally:
        pool.close()
        ray_cluster.cluster.remove_node(victim, allow_graceful=False)  # type: ignore[attr-defined]
        if root:
            shutil.rmtree(str(root), ignore_errors=True)


@pytest.mark.timeout(400)  # 500 sandboxes on two loaded cores
def test_500_commands_over_16_sessions_leave_nothing(ray_cluster: RayCluster,
                                                     ledger_path: str) -> None:
    tag = secrets.token_hex(4)
    pool = SandboxPool(config(ledger_path))
    roots = [Path(str(n.report["root"])) for n in pool.nodes.values()]
    try:
        sessions = [f"load-{tag}-{i}" for i in range(16)]
        for sid in sessions:
            pool.open_session(sid)
        assert {pool.session(s).node_id for s in sessions} == set(pool.nodes)

        def one(i: int) -> bytes:
            sid = sessions[i % 16]
            out = pool.execute(SandboxCommand(
                "/bin/sh", ["-c", f'echo "$0 {i}" >> log.txt; echo {i}', tag], session_id=sid))
            assert out.exit_code == 0, out
            return out.stdout

        with ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(500)))
        assert results == [f"{i}\n".encode() for i in range(500)]
        lines = 0
        for sid in sessions:
            data = pool.read_files(sid, ["log.txt"])["log.txt"]
            lines += len(data.splitlines())
        assert lines == 500
        assert len([r for r in Ledger(ledger_path).query(last=1000) if tag in r["argv"]]) == 500
        census = pool.census()
        assert all(c["processes"] == [] for c in census.values())
    finally:
        pool.close()
    # Nothing left behind: no process, no workspace, no session /tmp, no node root.
    assert procs_with(tag) == []
    assert [r for r in roots if r.exists()] == []
