"""Per-command overhead of stockade against its floor: bwrap alone and a plain spawn.

The Landlock backend (no bwrap: the init's layers straight under stockade)
gets its own rows, so the two backends are compared on the same machine.

Runs `/bin/true` N times each way and prints median and p95 in milliseconds,
in an empty workspace and in one holding 100,000 files (which must cost the
same: nothing on the per-command path may walk the workspace).

    .venv/bin/python bench/exec_overhead.py [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time

import stockade
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox, WorkspaceSandbox
from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.bwrap import build_bwrap_args, locate_bwrap


def timed(fn, runs: int) -> list[float]:
    fn()  # warm caches, pyc, the probe
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def row(name: str, samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    return f"| {name} | {statistics.median(samples):.1f} | {p95:.1f} |"


def make_big_workspace(root: str, count: int) -> str:
    path = os.path.join(root, f"ws-{count}")
    marker = os.path.join(path, ".complete")
    if os.path.exists(marker):
        return path
    os.makedirs(path, exist_ok=True)
    per_dir = 1000
    for d in range(count // per_dir):
        sub = os.path.join(path, f"d{d:03d}")
        os.makedirs(sub, exist_ok=True)
        for f in range(per_dir):
            open(os.path.join(sub, f"f{f:04d}"), "w").close()
    open(marker, "w").close()
    return path


def measure(workspace: str, runs: int, label: str) -> list[str]:
    env = dict(os.environ)
    bwrap = locate_bwrap(env, workspace)
    ws = os.path.realpath(workspace)
    caps = capabilities_for_mode("workspace-write", ws)
    profile = build_profile(mode="workspace-write", workspace=ws, cwd=ws, capabilities=caps,
                            read_scope="host", host_env=env)
    # The same namespaces and mounts stockade uses, minus protected-name
    # placeholders, which need the driver's host-side step.
    profile = profile.replace(
        protected=tuple(p for p in profile.protected if not p.kind.startswith("missing")))
    raw = build_bwrap_args(profile, bwrap, inner=["/bin/true"])
    ledger = os.path.join(tempfile.mkdtemp(), "ledger.db")
    config = SandboxConfig(mode="workspace-write", ledger=ledger)
    sync_sb = SyncWorkspaceSandbox(config)
    sync_sb.open_session("bench", ws)
    cmd = SandboxCommand("/bin/true", session_id="bench")
    ll_config = SandboxConfig(mode="workspace-write", ledger=ledger, backend="landlock")
    ll_sb = SyncWorkspaceSandbox(ll_config)
    ll_sb.open_session("bench", ws)

    async def async_runs() -> list[float]:
        sb = WorkspaceSandbox(config)
        await sb.open_session("bench", ws)
        await sb.execute(cmd)
        out = []
        for _ in range(runs):
            start = time.perf_counter()
            await sb.execute(cmd)
            out.append((time.perf_counter() - start) * 1000.0)
        await sb.aclose()
        return out

    cli = [os.path.join(os.path.dirname(sys.executable), "stockade"), "run", "--mode",
           "workspace-write", "--", "/bin/true"]
    ll_cli = [*cli[:2], "--backend", "landlock", *cli[2:]]
    rows = [
        row(f"plain spawn ({label})", timed(lambda: subprocess.run(["/bin/true"]), runs)),
        row(f"raw bwrap, same namespaces ({label})",
            timed(lambda: subprocess.run(raw, env=profile.env), runs)),
        row(f"SyncWorkspaceSandbox.execute ({label})", timed(lambda: sync_sb.execute(cmd), runs)),
        row(f"WorkspaceSandbox.execute, async ({label})", asyncio.run(async_runs())),
        row(f"`stockade run` CLI ({label})",
            timed(lambda: subprocess.run(cli, cwd=ws, check=True), runs)),
        row(f"SyncWorkspaceSandbox.execute, landlock backend ({label})",
            timed(lambda: ll_sb.execute(cmd), runs)),
        row(f"`stockade run --backend landlock` CLI ({label})",
            timed(lambda: subprocess.run(ll_cli, cwd=ws, check=True), runs)),
    ]
    sync_sb.close()
    ll_sb.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    # Users get compiled bytecode from a wheel install; measure that, not
    # the first-run compile (PYTHONDONTWRITEBYTECODE may be set here).
    compileall.compile_dir(os.path.dirname(stockade.__file__), quiet=1)
    base = os.path.join(tempfile.gettempdir(), "stockade-bench")
    os.makedirs(base, exist_ok=True)
    empty = tempfile.mkdtemp(dir=base)
    big = make_big_workspace(base, args.files)
    print(f"/bin/true, {args.runs} runs each, milliseconds\n")
    print("| path | median | p95 |\n|---|---|---|")
    for line in measure(empty, args.runs, "empty workspace"):
        print(line)
    for line in measure(big, args.runs, f"{args.files:,} files"):
        print(line)


if __name__ == "__main__":
    main()
