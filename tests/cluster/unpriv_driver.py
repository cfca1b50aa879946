"""The caller of a Ray cluster whose nodes run as an unprivileged user, run as that user.

`test_pool.py` runs this with Debian's interpreter and a world-readable copy
of stockade and Ray (see `conftest.unpriv_ray_site`): it starts its own
cluster (every Ray process, every actor is then this user's), opens a
`SandboxPool`, runs one attack script on the node, closes everything and
prints one JSON report. The test judges the attack from outside, on the
filesystem; this script only reports what it saw and who ran it.

Argument: a JSON object with `ledger`, `home`, `path`, `sibling`, `script`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def identity(pid: int) -> dict[str, int]:
    """pid, owner and start time: enough to tell the process from a later one with its pid."""
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    # Field 22 of stat, counted after the parenthesised name (which may hold spaces).
    start = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    return {"pid": pid, "uid": uid, "start": start}


def attack(spec: dict[str, str], report: dict[str, object]) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from stockade import SandboxCommand, SandboxConfig
    from stockade.cluster import SandboxPool

    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        report["cluster"] = [identity(info.process.pid)
                             for infos in cluster.head_node.all_processes.values()
                             for info in infos]
        ray.init(address=cluster.address, log_to_driver=False)
        config = SandboxConfig(mode="workspace-write", ledger=spec["ledger"],
                               commands_per_minute=100000)
        pool = SandboxPool(config, env={"HOME": spec["home"], "PATH": spec["path"]})
        try:
            report["unusable"] = pool.unusable
            [(node_id, node)] = pool.nodes.items()
            report.update(node_id=node_id, backend=node.report["backend"],
                          root=node.report["root"], actor=identity(int(node.report["pid"])))
            info = pool.open_session("escape-unprivileged", node=node_id)
            out = pool.execute(SandboxCommand("/bin/sh", ["-c", spec["script"]],
                                              session_id=info.session_id,
                                              env={"SIBLING": spec["sibling"]}))
            mine = Path(info.cwd, "mine.txt")  # read here, outside the sandbox
            report.update(exit_code=out.exit_code, stdout=out.stdout.decode(errors="replace"),
                          stderr=out.stderr.decode(errors="replace"), cwd=info.cwd,
                          mine=mine.read_text() if mine.exists() else None)
        finally:
            pool.close()
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> int:
    spec = json.loads(sys.argv[1])
    report: dict[str, object] = {"uid": os.getuid(), "python": sys.executable}
    try:
        attack(spec, report)
    except BaseException as exc:  # the report says what broke; the test shows it
        report["error"] = "".join(traceback.format_exception(exc))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
