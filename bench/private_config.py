"""What a repository's private git config costs each command under bubblewrap.

In a git workspace every command's renames reach the rename supervisor
(drivers/linux/init/renames.py), which lets each continue unless it targets the
private config. This runs `/bin/true` and 1000 renames in one warm session,
interleaved with the private copy on and off, and prints the medians.

    .venv/bin/python bench/private_config.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time

import stockade.drivers.linux.host.gitconfig as gitconfig
from stockade import SandboxCommand, SyncWorkspaceSandbox
from stockade.config import load_config

RENAMES = "import os\nfor i in range(1000):\n    open('f', 'w').close(); os.rename('f', 'g')\n"
CASES = {"/bin/true": ["/bin/true"], "1000 renames": ["/usr/bin/python3", "-c", RENAMES]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    real = gitconfig.private_paths
    times: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as ws:
        subprocess.run(["git", "init", "-q", ws], check=True)
        config = load_config(cwd=ws, mode="workspace-write", ledger=False, backend="bubblewrap")
        with SyncWorkspaceSandbox(config) as sandbox:
            sandbox.open_session("s", ws)
            sandbox.execute(SandboxCommand("/bin/true", session_id="s"))
            for _ in range(runs):
                for on in (True, False):
                    setattr(gitconfig, "private_paths", real if on else (lambda _p: []))  # noqa: B010
                    for name, argv in CASES.items():
                        start = time.perf_counter()
                        out = sandbox.execute(SandboxCommand(argv[0], argv[1:], session_id="s"))
                        assert out.exit_code == 0, out.stderr
                        times.setdefault((name, on), []).append(
                            (time.perf_counter() - start) * 1000)
    for name in CASES:
        with_copy, without = (statistics.median(times[name, flag]) for flag in (True, False))
        print(f"{name:14s} private config on {with_copy:7.1f} ms, off {without:7.1f} ms, "
              f"cost {with_copy - without:+6.1f} ms")


if __name__ == "__main__":
    main()
