"""What a session's bounded /tmp costs a command, measured in one run.

A session with its own /tmp runs every command through nsenter into the
session's mount namespace; a session without one (`ephemeral_tmp`) gets a
fresh /tmp per command and no nsenter (under bubblewrap a tmpfs, under
Landlock a TMPDIR made and removed on the host). `SyncWorkspaceSandbox.execute
(/bin/true)`, workspace-write, the two kinds alternated command by command so
that load falls on both alike, cold (parking off) and warm (a 200 ms pause
before each command, as in bench/warm.py). Then the one-off cost of making a
session's namespace (its first command, against a later one).

    .venv/bin/python bench/session_tmp.py [--runs 50] [--backend landlock]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox


def stats(samples: list[float]) -> str:
    s = sorted(samples)
    return f"{statistics.median(s):.1f} | {s[min(len(s) - 1, int(len(s) * 0.95))]:.1f}"


def sandbox(base: str, warm: bool, backend: str) -> SyncWorkspaceSandbox:
    sb = SyncWorkspaceSandbox(SandboxConfig(
        mode="workspace-write", backend=backend, warm_sandboxes=1 if warm else 0,
        ledger=os.path.join(base, f"ledger-{warm}.db"), commands_per_minute=1_000_000))
    # A workspace each: a command writing in a workspace discards what is
    # parked there for another session (docs/warm.md).
    sb.session("own", tempfile.mkdtemp(dir=base))
    sb.session("fresh", tempfile.mkdtemp(dir=base), ephemeral_tmp=True)
    for sid in ("own", "fresh"):  # the ledger, then a command seen by each
        for _ in range(2):
            sb.execute(SandboxCommand("/bin/true", session_id=sid))
    return sb


def timed(sb: SyncWorkspaceSandbox, sid: str) -> float:
    start = time.perf_counter()
    sb.execute(SandboxCommand("/bin/true", session_id=sid))
    return (time.perf_counter() - start) * 1000.0


def first_commands(base: str, runs: int, backend: str) -> tuple[list[float], list[float]]:
    first, later = [], []
    sb = SyncWorkspaceSandbox(SandboxConfig(
        mode="workspace-write", backend=backend, warm_sandboxes=0,
        ledger=os.path.join(base, "ledger-first.db"), commands_per_minute=1_000_000))
    ws = tempfile.mkdtemp(dir=base)
    sb.execute(SandboxCommand("/bin/true", session_id="prime"))
    for i in range(runs):
        sb.session(f"n{i}", ws)
        first.append(timed(sb, f"n{i}"))
        later.append(timed(sb, f"n{i}"))
        sb.close_session(f"n{i}")
    sb.close()
    return first, later


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--backend", default="bubblewrap", choices=("bubblewrap", "landlock"))
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="stockade-bench-", dir="/var/tmp")
    print(f"{args.backend}, load {os.getloadavg()[0]:.1f}, {args.runs} runs per row, ms\n")
    print("| command | median | p95 |\n|---|---|---|")
    for warm in (False, True):
        sb = sandbox(base, warm, args.backend)
        own, fresh = [], []
        for _ in range(args.runs):
            for sid, into in (("own", own), ("fresh", fresh)):
                if warm:
                    time.sleep(0.2)
                into.append(timed(sb, sid))
        sb.close()
        kind = "warm, 200 ms pauses" if warm else "cold"
        print(f"| {kind}: session /tmp (one tmpfs, nsenter) | {stats(own)} |")
        print(f"| {kind}: fresh /tmp per command | {stats(fresh)} |")
    first, later = first_commands(base, args.runs, args.backend)
    print(f"| a session's first command (makes its namespace) | {stats(first)} |")
    print(f"| its second command | {stats(later)} |")
    print(f"\nload {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
