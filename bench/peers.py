"""stockade beside its peers: one `/bin/true`, confined, start to end, in one run.

Each round runs every path once, in turn, with a 200 ms pause before each
command (an agent's rhythm), so every row sees the same machine; the load
average is printed with the table. Paths a machine lacks are listed as such:

- raw bwrap (the bundled 0.11) with the namespaces stockade uses, no stockade;
- firejail `--noprofile --net=none` (Debian's `firejail`);
- `stockade run` in process and `stockade run --service`;
- `SyncWorkspaceSandbox.execute` in one session, warm (parked sandboxes) and cold;
- Codex's `codex sandbox`, workspace-write (`npm install @openai/codex`, under
  `--node-prefix`) and Anthropic's `srt` (`@anthropic-ai/sandbox-runtime`).

    .venv/bin/python bench/peers.py [--rounds 40] [--node-prefix /tmp/peers]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from service import stop_services  # bench/service.py

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.drivers.linux.bwrap import locate_bwrap

STOCKADE = os.path.join(os.path.dirname(sys.executable), "stockade")


def spawn(argv: list[str], cwd: str, env: dict[str, str]) -> Callable[[], object]:
    def run() -> object:
        return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=True)
    return run


def library(ws: str, env: dict[str, str], warm: bool) -> tuple[Callable[[], object],
                                                                SyncWorkspaceSandbox]:
    sb = SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write"), env=env,
                              driver_options={"warm_sandboxes": 1 if warm else 0})
    sb.session("bench", ws)
    cmd = SandboxCommand("/bin/true", session_id="bench")
    return (lambda: sb.execute(cmd)), sb


def workspace(top: str, name: str) -> str:
    """A git workspace of the path's own: what one tool leaves in its workspace (and a
    parked sandbox's watch sees) must not touch another's."""
    ws = os.path.join(top, name)
    os.mkdir(ws)
    subprocess.run(["git", "init", "-q", ws], check=True)
    return ws


def paths(top: str, env: dict[str, str], prefix: str
          ) -> tuple[list[tuple[str, Callable[[], object]]], list[str], list[SyncWorkspaceSandbox]]:
    rows: list[tuple[str, Callable[[], object]]] = []
    ws = workspace(top, "raw")
    missing: list[str] = []
    bwrap = locate_bwrap(env, ws)
    rows.append(("raw bwrap, stockade's namespaces", spawn(
        [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
         "--bind", ws, ws, "--unshare-all", "--die-with-parent", "--new-session", "/bin/true"],
        ws, env)))
    ws = workspace(top, "firejail")
    if shutil.which("firejail"):
        rows.append(("firejail --noprofile --net=none", spawn(
            ["firejail", "--quiet", "--noprofile", "--net=none", "/bin/true"], ws, env)))
    else:
        missing.append("firejail (apt-get install firejail)")
    for name, flag in (("`stockade run` in process", "--no-service"),
                       ("`stockade run --service`", "--service")):
        rows.append((name, spawn([STOCKADE, "run", flag, "--mode", "workspace-write", "--",
                                  "/bin/true"], workspace(top, flag), env)))
    made = []
    for name, warm in (("library `execute`, warm", True), ("library `execute`, cold", False)):
        fn, sb = library(workspace(top, name.split()[-1]), env, warm)
        made.append(sb)
        rows.append((name, fn))
    codex = os.path.join(prefix, "node_modules", ".bin", "codex")
    ws = workspace(top, "codex")
    if os.path.exists(codex):
        rows.append(("Codex `codex sandbox` (workspace-write)", spawn(
            [codex, "sandbox", "-c", 'sandbox_mode="workspace-write"', "--", "/bin/true"],
            ws, env)))
    else:
        missing.append(f"Codex ({codex})")
    srt = os.path.join(prefix, "node_modules", ".bin", "srt")
    ws = workspace(top, "srt")
    if os.path.exists(srt):
        srt_env = {**env, "PATH": os.path.dirname(bwrap) + os.pathsep + env["PATH"]}
        rows.append(("Anthropic `srt`", spawn([srt, "/bin/true"], ws, srt_env)))
    else:
        missing.append(f"srt ({srt})")
    return rows, missing, made


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--node-prefix", default="/tmp/peers")
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="stockade-bench-peers-")
    made: list[SyncWorkspaceSandbox] = []
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        rows, missing, made = paths(top, env, args.node_prefix)
        usable = []
        for name, fn in rows:
            try:
                fn()
                fn()  # caches, the probe, the service's start
                usable.append((name, fn))
            except (subprocess.CalledProcessError, OSError) as exc:
                missing.append(f"{name} (failed here: {exc})")
        time.sleep(1.0)
        samples: dict[str, list[float]] = {name: [] for name, _ in usable}
        load = os.getloadavg()
        for _ in range(args.rounds):
            for name, fn in usable:
                time.sleep(args.pause)
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1000.0)
        print(f"{args.rounds} rounds, {args.pause * 1000:.0f} ms pause; load average "
              f"{load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
        print("| path | median ms | p95 ms |")
        print("|---|---|---|")
        for name, values in samples.items():
            s = sorted(values)
            print(f"| {name} | {statistics.median(s):.1f} | "
                  f"{s[min(len(s) - 1, int(len(s) * 0.95))]:.1f} |")
        for name in missing:
            print(f"not measured: {name}")
    finally:
        for sb in made:
            sb.close()
        stop_services(env)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
