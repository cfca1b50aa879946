"""`stockade run` in process against `stockade run --service`, on one machine in one run.

For each path: wall time per command (median, p95) for `/bin/true` run one
after another with a pause between (alternated, so both see the same
machine), then throughput with 1 and 8 callers at once, and the CPU each
command costs: the caller's own (its children's rusage, which counts bwrap
and the init when it runs them) plus, when served, what the service's
children used (the service's cutime and cstime, read from /proc before and
after). The load average is printed with the table.

    .venv/bin/python bench/service.py [--pairs 40] [--per-caller 25]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from stockade.serviceclient import service_dir

STOCKADE = os.path.join(os.path.dirname(sys.executable), "stockade")
TICK = os.sysconf("SC_CLK_TCK")


def argv(served: bool) -> list[str]:
    return [STOCKADE, "run", "--service" if served else "--no-service", "--mode",
            "workspace-write", "--", "/bin/true"]


def once(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000.0


def service_cpu(state: str) -> float:
    """Seconds of CPU the service's reaped children used so far (0 without a service)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"stockade.service" not in cmd or state.encode() not in cmd:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime are fields 14-17 (1-based) of stat.
        total += sum(int(x) for x in fields[11:15]) / TICK
    return total


def stop_services(env: dict[str, str]) -> None:
    """Ends the services of `env`'s state directory that the bench started."""
    subprocess.run(["pkill", "-f", service_dir(env)], check=False)


def children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def throughput(served: bool, callers: int, per: int, cwd: str, env: dict[str, str],
               state: str) -> tuple[float, float]:
    """(commands per second, CPU milliseconds per command)."""
    cpu0, svc0 = children_cpu(), service_cpu(state)
    start = time.perf_counter()

    def work() -> None:
        for _ in range(per):
            once(argv(served), cwd, env)

    threads = [threading.Thread(target=work) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    n = callers * per
    cpu = (children_cpu() - cpu0) + (service_cpu(state) - svc0)
    return n / wall, cpu * 1000.0 / n


def summary(samples: list[float]) -> str:
    s = sorted(samples)
    return f"{statistics.median(s):.1f} | {s[min(len(s) - 1, int(len(s) * 0.95))]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--per-caller", type=int, default=25)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="stockade-bench-service-")
    try:
        ws = os.path.join(top, "ws")
        os.mkdir(ws)
        subprocess.run(["git", "init", "-q", ws], check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        # The user's own state directory, as a user runs it: one under /tmp made
        # every command slower here (0.16-0.20 s against 0.11-0.13 s, cold CLI).
        state = service_dir(env)
        for served in (False, True, True):  # pyc, the probe, and the service's start
            once(argv(served), ws, env)
        time.sleep(1.0)
        cold: list[float] = []
        warm: list[float] = []
        for _ in range(args.pairs):
            cold.append(once(argv(False), ws, env))
            time.sleep(0.2)
            warm.append(once(argv(True), ws, env))
            time.sleep(0.2)
        print(f"load average before the throughput rows: {os.getloadavg()}")
        print("| path | median ms | p95 ms |")
        print("|---|---|---|")
        print(f"| `stockade run` in process | {summary(cold)} |")
        print(f"| `stockade run --service` | {summary(warm)} |")
        print()
        print("| path | callers | commands/s | CPU ms per command |")
        print("|---|---|---|---|")
        for callers in (1, 8):
            for served in (False, True):
                rate, cpu = throughput(served, callers, args.per_caller, ws, env, state)
                name = "`--service`" if served else "in process"
                print(f"| {name} | {callers} | {rate:.1f} | {cpu:.1f} |")
        print(f"load average after: {os.getloadavg()}")
    finally:
        stop_services(env)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
