"""What finding a repository created anywhere in the workspace costs (treewatch.py).

The first writing command on a workspace in a process walks it once and
watches every directory; each command after that pays for draining what
changed. Printed: the one-time setup on a tree of `--files` files (1,000
per directory), a drain with nothing new, a drain after a command made one
repository deep in the tree, and the watches the tree used against the
kernel's limit.

    .venv/bin/python bench/treewatch.py [--files 100000] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from stockade.drivers.linux.host.treewatch import TreeWatch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="stockade-bench-tree-", dir="/var/tmp")
    try:
        for i in range(args.files):
            d = os.path.join(top, "tree", f"d{i // 1000}", f"e{i // 100 % 10}")
            if i % 100 == 0:
                os.makedirs(d)
            with open(os.path.join(d, f"f{i}"), "w"):
                pass
        setups, idle, found = [], [], []
        for run in range(args.runs):
            start = time.perf_counter()
            tree = TreeWatch(top)
            setups.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            assert tree.drain() == []
            idle.append((time.perf_counter() - start) * 1000)
            repo = os.path.join(top, "tree", "d5", "e5", f"r{run}", ".git")
            os.makedirs(repo)
            deadline = time.monotonic() + 5
            start = time.perf_counter()
            got: list[str] = []
            while repo not in got and time.monotonic() < deadline:
                got += tree.drain()
            found.append((time.perf_counter() - start) * 1000)
            shutil.rmtree(os.path.dirname(repo))
            dirs = tree.directories
            tree.close()
        with open("/proc/sys/fs/inotify/max_user_watches") as fh:
            limit = fh.read().strip()
        print(f"tree of {args.files} files, {dirs} directories watched "
              f"(fs.inotify.max_user_watches = {limit}); {args.runs} runs, ms")
        for name, xs in (("setup, once per workspace", setups), ("drain, nothing new", idle),
                         ("drain, one repository made deep in the tree", found)):
            xs.sort()
            print(f"  {name:<46} median {statistics.median(xs):8.2f}  "
                  f"p95 {xs[int(len(xs) * 0.95) - 1]:8.2f}")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
