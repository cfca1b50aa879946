"""The node's workspace I/O through a real pool, against what the session's own commands left.

A session reopened under its id finds its workspace as its commands left
it, and a background command keeps changing it while the caller exports
it; the node reads and writes there on the host, unconfined. Each effect
is checked from the host.
"""

from __future__ import annotations

import gzip
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import SandboxCommand, SandboxConfig
from stockade.cluster import SandboxPool

from .conftest import RayCluster

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    # /var/tmp: the sandbox's /tmp is its own.
    root = Path(tempfile.mkdtemp(prefix="stockade-cluster-io-", dir="/var/tmp"))
    (root / "home" / ".aws").mkdir(parents=True)
    (root / "home" / ".aws" / "credentials").write_text("DECOY-NODE-CREDENTIAL" + "x" * 64)
    root.chmod(0o755)
    try:
        yield root / "home"
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(ray_cluster: RayCluster, home: Path) -> Iterator[SandboxPool]:
    config = SandboxConfig(mode="workspace-write", ledger=False, commands_per_minute=100000)
    p = SandboxPool(config, env={"HOME": str(home), "PATH": MINIMAL_PATH})
    try:
        yield p
    finally:
        p.close()


def sh(session: str, script: str) -> SandboxCommand:
    return SandboxCommand("/bin/sh", ["-c", script], session_id=session)


def test_reopening_a_session_over_a_planted_fifo_does_not_hang_its_node(
        pool: SandboxPool, ray_cluster: RayCluster) -> None:
    node = ray_cluster.worker_id
    pool.open_session("reopen", node=node)
    assert pool.execute(sh("reopen", "mkfifo main.py")).exit_code == 0
    pool.close_session("reopen")
    done: list[object] = []
    opener = threading.Thread(target=lambda: done.append(pool.open_session(
        "reopen", node=node, files={"main.py": b"print('seeded')\n"})), daemon=True)
    opener.start()
    opener.join(20)
    assert done, "the node's open waited on a FIFO the session's command planted"
    out = pool.execute(sh("reopen", "cat main.py"))
    assert out.stdout == b"print('seeded')\n", out
    pool.close_session("reopen")


def test_export_never_reads_through_a_link_a_running_command_swaps_in(
        pool: SandboxPool, home: Path) -> None:
    pool.open_session("swap")
    # As long as the credential's first bytes: the read through the link is of this size.
    pool.execute(sh("swap", "printf '%064d' 0 > f"))
    # renameat2(RENAME_EXCHANGE): `f` and `g` trade places as fast as the
    # kernel allows, so both names are always there, one a file, one a link.
    swapper = pool.start(SandboxCommand("python3", ["-c", (
        "import ctypes, os\n"
        f"os.symlink({str(home / '.aws' / 'credentials')!r}, 'g')\n"
        "libc = ctypes.CDLL(None)\n"
        "while True:\n"
        "    libc.renameat2(-100, b'f', -100, b'g', 2)\n")], session_id="swap"))
    leaked = False
    exported = 0
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline and not leaked:
            try:
                blob = pool.export("swap")
            except Exception:
                continue
            exported += 1
            leaked = b"DECOY-NODE" in gzip.decompress(blob)
    finally:
        swapper.stop()
        pool.close_session("swap")
    assert exported > 0
    assert not leaked, "the export read the host's credentials through a swapped-in link"
