"""Commands per second through a SandboxPool beside a local SyncWorkspaceSandbox.

Starts a two-node Ray cluster on this machine (ray.cluster_utils, its files
under one temporary directory), or joins one with --address. Runs
`/bin/true` N times spread over 1, 4 and 16 sessions (one thread each), the
same commands through a local SyncWorkspaceSandbox, and prints commands per
second and the median latency per command; the difference of the medians at
one session is what the pool adds per command (Ray's round trip, the node's
thread hand-off, the audit record crossing back).

    .venv/bin/python bench/cluster.py [--commands 200] [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox


def run(execute, sessions: int, commands: int, tag: str) -> tuple[float, float]:
    """(commands per second, median ms per command) with `sessions` threads."""
    names = [f"bench-{tag}-{sessions}-{i}" for i in range(sessions)]
    for name in names:  # warm: the session exists and its first command has run
        execute(SandboxCommand("/bin/true", session_id=name))
    latencies: list[float] = []

    def one(i: int) -> None:
        start = time.perf_counter()
        out = execute(SandboxCommand("/bin/true", session_id=names[i % sessions]))
        latencies.append((time.perf_counter() - start) * 1000.0)
        assert out.exit_code == 0, out

    start = time.perf_counter()
    with ThreadPoolExecutor(sessions) as ex:
        list(ex.map(one, range(commands)))
    elapsed = time.perf_counter() - start
    return commands / elapsed, statistics.median(latencies)


def timed_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def paired_latency(pool, config: SandboxConfig, pairs: int) -> tuple[float, float, float]:
    """Local and pool commands alternated in one session each, so the machine's load
    drifts the same way under both: the differences are the pool's own cost."""
    local = SyncWorkspaceSandbox(config)
    try:
        def loc() -> None:
            local.execute(SandboxCommand("/bin/true", session_id="paired"))

        def rem() -> None:
            pool.execute(SandboxCommand("/bin/true", session_id="paired"))

        loc()
        rem()
        a = []
        b = []
        for _ in range(pairs):
            a.append(timed_ms(loc))
            b.append(timed_ms(rem))
    finally:
        local.close()
    return (statistics.median(a), statistics.median(b),
            statistics.median(y - x for x, y in zip(a, b, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--address", default=None, help="an existing Ray cluster to join")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="stockade-bench-cluster-", dir="/var/tmp")
    config = SandboxConfig(mode="workspace-write", ledger=os.path.join(root, "ledger.db"),
                           commands_per_minute=10**6,
                           workspace_root=os.path.join(root, "local-ws"))
    rows: list[tuple[str, int, float, float]] = []
    local = SyncWorkspaceSandbox(config)
    try:
        for n in (1, 4, 16):
            rows.append(("local SyncWorkspaceSandbox", n, *run(local.execute, n,
                                                              args.commands, "local")))
    finally:
        local.close()

    import ray

    cluster = None
    raytmp = None
    if args.address is None:
        from ray.cluster_utils import Cluster

        raytmp = tempfile.mkdtemp(prefix="sray-", dir="/tmp")
        os.makedirs(os.path.join(raytmp, "ray"))
        os.environ["RAY_TMPDIR"] = raytmp
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "include_dashboard": False})
        cluster.add_node(num_cpus=2, include_dashboard=False)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
    else:
        ray.init(address=args.address, log_to_driver=False)
    from stockade.cluster import SandboxPool

    pool_config = SandboxConfig(mode="workspace-write", ledger=os.path.join(root, "ledger.db"),
                                commands_per_minute=10**6)
    try:
        with SandboxPool(pool_config, max_queue_per_node=64) as pool:
            nodes = len(pool.nodes)
            for n in (1, 4, 16):
                rows.append((f"SandboxPool ({nodes} nodes)", n,
                             *run(pool.execute, n, args.commands, "pool")))
            paired = paired_latency(pool, config, args.commands)
            node = next(iter(pool.nodes.values()))
            trip = [timed_ms(lambda n=node: ray.get(n.actor.census.remote()))
                    for _ in range(args.commands)]
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        if raytmp:
            shutil.rmtree(raytmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    print(f"{args.commands} x /bin/true per row, {os.cpu_count()} CPUs\n")
    print("| through | sessions | commands/s | median ms/command |")
    print("|---|---|---|---|")
    for name, n, rate, median in rows:
        print(f"| {name} | {n} | {rate:.1f} | {median:.1f} |")
    local_ms, pool_ms, diff_ms = paired
    print(f"\none session, local and pool commands alternated ({args.commands} pairs): "
          f"local median {local_ms:.1f} ms, pool median {pool_ms:.1f} ms, "
          f"median of the pairwise differences (the added latency) {diff_ms:.1f} ms")
    print(f"Ray round trip to a node actor, no command (median): "
          f"{statistics.median(trip):.2f} ms")


if __name__ == "__main__":
    main()
