"""Warm against cold: what a parked sandbox saves a session, measured in one run.

Every row of the table comes from the same invocation on the same machine,
so they compare. `SyncWorkspaceSandbox.execute(/bin/true)`, workspace-write,
on both Linux backends:

- the agent's rhythm: a 200 ms pause before each command (the model's turn),
  beside a raw bwrap with the same namespaces and the cold path;
- back to back, no pause;
- throughput: 200 sequential commands in one session, and 8 sessions in
  parallel (threads, one session each), commands per second;
- the worst case: a profile that changes every command (a new environment
  variable each time), so no parked sandbox can ever be used.

Then the memory a parked sandbox holds (PSS and RSS of its processes).

    .venv/bin/python bench/warm.py [--runs 50] [--pause 0.2]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

import stockade
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.bwrap import build_bwrap_args, locate_bwrap

BACKENDS = ("bubblewrap", "landlock")


def stats(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(len(s) * 0.95))]


def row(name: str, samples: list[float], b: Bench | None = None) -> str:
    median, p95 = stats(samples)
    served = ""
    if b is not None and b.served and "warm" in name:
        h, _m = b.served[-1]
        served = f" | {h} of {len(samples) + 1}"  # + the untimed first call
    elif b is not None:
        served = " | "
    return f"| {name} | {median:.1f} | {p95:.1f}{served} |"


def timed(fn: Callable[[], object], runs: int, pause: float = 0.0) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        if pause:
            time.sleep(pause)
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


class Bench:
    def __init__(self, base: str) -> None:
        self.base = base
        self.sandboxes: list[SyncWorkspaceSandbox] = []
        self.served: list[tuple[int, int]] = []
        self.primed: dict[int, tuple[int, int]] = {}

    def workspace(self) -> str:
        ws = os.path.realpath(tempfile.mkdtemp(dir=self.base))
        os.makedirs(os.path.join(ws, ".git"))
        return ws

    def sandbox(self, backend: str, warm: bool, sessions: int = 1) -> SyncWorkspaceSandbox:
        config = SandboxConfig(mode="workspace-write", backend=backend,
                               ledger=os.path.join(tempfile.mkdtemp(dir=self.base), "l.db"),
                               warm_sandboxes=1 if warm else 0,
                               commands_per_minute=1_000_000)
        sb = SyncWorkspaceSandbox(config)
        for i in range(sessions):
            sb.open_session(f"s{i}", self.workspace())
        # Twice: the first creates the ledger, which changes the next profile.
        for i in range(sessions):
            for _ in range(2):
                sb.execute(SandboxCommand("/bin/true", session_id=f"s{i}"))
                settle(sb)
        self.sandboxes.append(sb)
        self.primed[id(sb)] = hits(sb)
        return sb

    def done(self, sb: SyncWorkspaceSandbox) -> None:
        """Closed after its row: a parked sandbox left over would only add noise."""
        h, m = hits(sb)
        h0, m0 = self.primed.pop(id(sb), (0, 0))
        self.served.append((h - h0, m - m0))
        sb.close()
        self.sandboxes.remove(sb)

    def close(self) -> None:
        for sb in list(self.sandboxes):
            sb.close()


def settle(sb: SyncWorkspaceSandbox) -> None:
    pool = getattr(sb.core._driver, "_warm", None)
    if pool is not None:
        pool.settle(30)


def hits(sb: SyncWorkspaceSandbox) -> tuple[int, int]:
    pool = getattr(sb.core._driver, "_warm", None)
    return (pool.hits, pool.misses) if pool is not None else (0, 0)


TRUE = SandboxCommand("/bin/true", session_id="s0")


def rhythm(b: Bench, backend: str, warm: bool, runs: int, pause: float) -> list[float]:
    sb = b.sandbox(backend, warm)
    out = timed(lambda: sb.execute(TRUE), runs, pause)
    b.done(sb)
    return out


def sequential(b: Bench, backend: str, warm: bool, count: int) -> float:
    sb = b.sandbox(backend, warm)
    start = time.perf_counter()
    for _ in range(count):
        sb.execute(TRUE)
    rate = count / (time.perf_counter() - start)
    b.done(sb)
    return rate


def parallel(b: Bench, backend: str, warm: bool, sessions: int, each: int) -> float:
    sb = b.sandbox(backend, warm, sessions)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        cmd = SandboxCommand("/bin/true", session_id=f"s{i}")
        try:
            for _ in range(each):
                sb.execute(cmd)
        except BaseException as exc:  # reported below, never hidden
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(sessions)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = sessions * each / (time.perf_counter() - start)
    b.done(sb)
    if errors:
        raise errors[0]
    return rate


def changing(b: Bench, backend: str, warm: bool, runs: int, pause: float) -> list[float]:
    sb = b.sandbox(backend, warm)
    n = [0]

    def one() -> None:
        n[0] += 1
        sb.execute(SandboxCommand("/bin/true", session_id="s0", env={"STEP": str(n[0])}))

    out = timed(one, runs, pause)
    b.done(sb)
    return out


def parked_memory(b: Bench, backend: str) -> str:
    """PSS and RSS of every process of one parked sandbox, from /proc."""
    sb = b.sandbox(backend, True)
    settle(sb)
    marker = sb.core.sessions["s0"].cwd.encode()
    pss = rss = 0
    names = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
            if marker not in cmd:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key == "Pss":
                        pss += int(value.split()[0])
                    elif key == "Rss":
                        rss += int(value.split()[0])
            names.append(os.path.basename(cmd.split(b"\0")[0].decode()))
        except OSError:
            continue
    b.done(sb)
    return (f"{backend}: {len(names)} processes ({', '.join(sorted(names))}), "
            f"PSS {pss / 1024:.1f} MiB, RSS {rss / 1024:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args()
    compileall.compile_dir(os.path.dirname(stockade.__file__), quiet=1)
    base = tempfile.mkdtemp(prefix="stockade-warm-bench-", dir="/var/tmp")
    b = Bench(base)
    try:
        ws = b.workspace()
        env = dict(os.environ)
        caps = capabilities_for_mode("workspace-write", ws)
        profile = build_profile(mode="workspace-write", workspace=ws, cwd=ws, capabilities=caps,
                                read_scope="host", host_env=env)
        profile = profile.replace(
            protected=tuple(p for p in profile.protected if not p.kind.startswith("missing")))
        raw = build_bwrap_args(profile, locate_bwrap(env, ws), inner=["/bin/true"])
        pause = args.pause
        lines = [row(f"raw bwrap, same namespaces, {pause * 1000:.0f} ms pauses",
                     timed(lambda: subprocess.run(raw, env=profile.env, check=True),
                           args.runs, pause), Bench(base))]
        through: list[str] = []
        for backend in BACKENDS:
            for warm in (False, True):
                label = "warm" if warm else "cold"
                lines.append(row(f"{backend}, {label}, {pause * 1000:.0f} ms pauses",
                                 rhythm(b, backend, warm, args.runs, pause), b))
            for warm in (False, True):
                label = "warm" if warm else "cold"
                lines.append(row(f"{backend}, {label}, back to back",
                                 rhythm(b, backend, warm, args.runs, 0.0), b))
            for warm in (False, True):
                label = "warm" if warm else "cold"
                lines.append(row(f"{backend}, {label}, profile changes every command",
                                 changing(b, backend, warm, args.runs, pause), b))
            for warm in (False, True):
                label = "warm" if warm else "cold"
                seq = sequential(b, backend, warm, args.sequential)
                par = parallel(b, backend, warm, args.sessions,
                               max(1, args.sequential // args.sessions))
                through.append(f"| {backend}, {label} | {seq:.0f} | {par:.0f} |")
        print(f"/bin/true through SyncWorkspaceSandbox.execute, workspace-write, "
              f"{args.runs} runs per row, milliseconds ({os.cpu_count()} cores)\n")
        print("| path | median | p95 | served warm |\n|---|---|---|---|")
        print("\n".join(lines))
        print(f"\nThroughput, commands per second: {args.sequential} sequential in one "
              f"session; {args.sessions} sessions in parallel, "
              f"{max(1, args.sequential // args.sessions)} each\n")
        print("| backend | sequential | parallel |\n|---|---|---|")
        print("\n".join(through))
        print("\nMemory of one parked sandbox:")
        for backend in BACKENDS:
            print(f"- {parked_memory(b, backend)}")
    finally:
        b.close()
        import shutil

        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
