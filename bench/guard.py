"""The metadata guard's per-command cost: its baseline before a command and its sweep after.

Two copies of stockade are measured in one run, alternated round by round so
that the machine's load falls on both alike: this tree, and an earlier
revision (`--before`, checked out into a temporary worktree). Each runs in a
worker process of its own and times `MetadataGuard(profile)` plus
`release()` on the same workspace: a git repository with a commit, one
submodule, and `--files` files (100,000 by default: the guard must cost the
same there as in an empty one, since nothing it does may walk the tree).

Both backends' guards are timed: bubblewrap's records identities only,
Landlock's keeps a copy of every protected path to restore it. The warm
path builds the same guard per command, so these figures are its cost too.

    .venv/bin/python bench/guard.py [--before REV] [--rounds 10] [--runs 20] [--files N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r"""
import json, sys, time
from stockade.capabilities import capabilities_for_mode
from stockade.boundary import build_profile
from stockade.drivers.linux.host.guard import MetadataGuard

ws, state = sys.argv[1], sys.argv[2]
caps = capabilities_for_mode("workspace-write", ws)
profile = build_profile(mode="workspace-write", workspace=ws, cwd=ws, capabilities=caps,
                        read_scope="host", host_env={"HOME": "/nonexistent"}, use_scratch=False)
for line in sys.stdin:
    runs, content = json.loads(line)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        MetadataGuard(profile, state, restore_content=content).release()
        out.append((time.perf_counter() - start) * 1000.0)
    print(json.dumps(out), flush=True)
"""


def make_workspace(top: str, files: int) -> str:
    ws = os.path.join(top, "ws")
    sub = os.path.join(top, "sub")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_ALLOW_PROTOCOL": "file"}

    def git(*args: str, cwd: str) -> None:
        subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env,
                       check=True, capture_output=True)

    for path in (ws, sub):
        os.makedirs(path)
        git("init", "-q", "-b", "main", cwd=path)
        with open(os.path.join(path, "README"), "w") as fh:
            fh.write("x\n")
        git("add", "README", cwd=path)
        git("commit", "-qm", "init", cwd=path)
    git("submodule", "add", "-q", sub, "lib", cwd=ws)
    git("commit", "-qm", "submodule", cwd=ws)
    for i in range(files):
        d = os.path.join(ws, "tree", f"d{i // 1000}")
        if i % 1000 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i}"), "w"):
            pass
    return ws


def worker(src: str, ws: str, state: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": src}
    return subprocess.Popen([sys.executable, "-c", WORKER, ws, state], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def ask(proc: subprocess.Popen[str], runs: int, content: bool) -> list[float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps([runs, content]) + "\n")
    proc.stdin.flush()
    return list(json.loads(proc.stdout.readline()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="45e2506", help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="stockade-bench-guard-", dir="/var/tmp")
    old = os.path.join(top, "before")
    try:
        subprocess.run(["git", "-C", REPO, "worktree", "add", "-q", "--detach", old, args.before],
                       check=True)
        ws = make_workspace(top, args.files)
        states = {name: os.path.join(top, f"state-{name}") for name in ("before", "after")}
        procs = {"before": worker(os.path.join(old, "src"), ws, states["before"]),
                 "after": worker(os.path.join(REPO, "src"), ws, states["after"])}
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.rounds):
            for content in (False, True):
                for name, proc in procs.items():
                    times.setdefault((name, content), []).extend(ask(proc, args.runs, content))
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        print(f"guard baseline + sweep per command, {args.files} files, "
              f"{args.rounds} alternated rounds of {args.runs} (ms)")
        print(f"{'backend':<12}{'revision':<10}{'median':>8}{'p95':>8}")
        for content in (False, True):
            for name in ("before", "after"):
                xs = sorted(times[(name, content)])
                p95 = xs[int(len(xs) * 0.95) - 1]
                label = "landlock" if content else "bubblewrap"
                print(f"{label:<12}{name:<10}{statistics.median(xs):>8.2f}{p95:>8.2f}")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", old],
                       capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
