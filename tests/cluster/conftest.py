"""A real two-node Ray cluster on this machine, started once for tests/cluster.

`ray.cluster_utils.Cluster` starts each node as its own raylet with its own
resources, as separate machines would have; the pool under test cannot tell
the difference, and a test can kill one node's raylet from outside.

Everything Ray writes (sessions, sockets, logs, its address file) goes under
one fresh directory named by RAY_TMPDIR: without it Ray uses /tmp/ray and
its ray_current_cluster file, which any other Ray on the machine shares.
Ports are Ray's own free-port choices; nothing uses `ray start`'s defaults.
Health checks are fast so a killed node is declared dead in about a second,
not the default quarter of a minute: the fault test waits on that.

`unpriv_ray_site` is what a cluster whose nodes run as the unprivileged
test user needs: that user cannot reach this venv (on CI it sits under
/root, mode 700), so it gets a world-readable copy of stockade, Ray and
what Ray imports, for Debian's interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from isolation.conftest import _copy_site, wait_gone

ray = pytest.importorskip("ray", reason="the cluster tests need the [ray] extra "
                          "(make test installs it)")

FAST_HEALTH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}
NODE_ARGS = {"num_cpus": 2, "include_dashboard": False}


@dataclass
class RayCluster:
    cluster: object
    tmp: Path
    head_id: str
    worker_id: str

    def add_node(self, name: str) -> object:
        node = self.cluster.add_node(**NODE_ARGS, resources={name: 1})  # type: ignore[attr-defined]
        self.cluster.wait_for_nodes()  # type: ignore[attr-defined]
        return node


def wait_until(predicate, within: float, what: str):  # type: ignore[no-untyped-def]
    """Poll a condition with a deadline; fail naming it. A condition, never a fixed sleep."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    from ray.cluster_utils import Cluster

    # Short: a raylet's socket path must fit in sun_path (108 bytes).
    tmp = Path(tempfile.mkdtemp(prefix="sray-", dir="/tmp"))
    (tmp / "ray").mkdir()
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED")}
    os.environ["RAY_TMPDIR"] = str(tmp)
    # A test run reports nothing anywhere; CI has no route out in any case.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "resources": {"stockade-a": 1}, "_system_config": FAST_HEALTH})
    try:
        worker = cluster.add_node(**NODE_ARGS, resources={"stockade-b": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield RayCluster(cluster, tmp, cluster.head_node.node_id, worker.node_id)
    finally:
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        survivors = wait_gone(str(tmp), 30)
        shutil.rmtree(tmp, ignore_errors=True)
        assert not survivors, f"Ray left processes behind: {survivors}"


def _distributions(roots: list[str]) -> dict[str, object]:
    """The installed distributions `roots` need to import, theirs included (no extras)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    found: dict[str, object] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        dist = md.distribution(name)
        found[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def _copy_distributions(roots: list[str], dest: Path) -> None:
    """Copy what `roots` install into purelib, keeping modes, mtimes and byte code.

    Modes: Ray starts its GCS and raylet from executables inside its package,
    so an execute bit lost in the copy is a node that never starts. Byte
    code: the user cannot write __pycache__ here, and without the venv's
    .pyc (valid for any 3.11, checked against the copied sources' mtimes)
    every Ray worker would compile Ray again at start.
    """
    purelib = Path(sysconfig.get_paths()["purelib"])
    tops: set[str] = set()
    for dist in _distributions(roots).values():
        files = dist.files or []  # type: ignore[attr-defined]
        tops |= {f.parts[0] for f in files if f.parts and f.parts[0] not in ("..", "__pycache__")}
    for name in sorted(tops):
        src, out = purelib / name, dest / name
        if out.exists() or not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, out, symlinks=True)
        else:
            shutil.copy2(src, out)
    for dirpath, _dirs, names in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in names:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)


@pytest.fixture(scope="session")
def unpriv_ray_site() -> Iterator[Path]:
    """A directory the unprivileged user can read: `site/` (stockade, bubblewrap, re2,
    Ray and its requirements) and `unpriv_driver.py`."""
    top = Path(tempfile.mkdtemp(prefix="stockade-unpriv-ray-", dir="/tmp"))
    try:
        _copy_site(top / "site")
        _copy_distributions(["ray"], top / "site")
        shutil.copy2(Path(__file__).with_name("unpriv_driver.py"), top / "unpriv_driver.py")
        os.chmod(top / "unpriv_driver.py", 0o644)
        os.chmod(top, 0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)
