"""SandboxPool against a real two-node Ray cluster: routing, the boundary, approvals, audit."""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterator
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
from stockade.ledger import Ledger

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
    try:
        yield p
    finally:
        p.close()


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
