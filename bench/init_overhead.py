"""What the in-sandbox init (no_new_privs, Landlock, seccomp, checks) adds to each command.

Runs `/bin/true` under the same bwrap command line stockade builds, three
ways, interleaved so machine noise hits all of them alike:

  raw     bwrap ... -- /bin/true
  python  bwrap ... -- python -I -S -c pass          (the interpreter's floor)
  init    bwrap ... -- python -I -S init.py CFG -- /bin/true

and prints medians, the init's overhead over raw bwrap, and the init's own
breakdown (it reports per-stage times when its config asks for them).

    .venv/bin/python bench/init_overhead.py [--runs 41] [--python /usr/bin/python3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.bwrap import build_bwrap_args, locate_bwrap
from stockade.drivers.linux.layers import (
    INNER_INIT_PATH,
    ensure_bytecode,
    init_argv,
    init_config,
    init_mounts,
    init_python,
    inner_python,
    launch_env,
)

STAGES = ("config", "imports", "no_new_privs", "landlock", "seccomp_compile",
          "seccomp_install", "verify")


def spawn(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = (time.perf_counter() - start) * 1000.0
    if done.returncode != 0:
        raise SystemExit(f"{argv[-1]!r} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed, done.stderr.decode()


def stage_times(stderr: str) -> dict[str, float]:
    """Per-stage durations from the init's cumulative `stockade-init timing:` line."""
    for line in stderr.splitlines():
        if line.startswith("stockade-init timing: "):
            marks = dict(item.split("=") for item in line.split(": ", 1)[1].split())
            out, before = {}, 0.0
            for stage in STAGES:
                at = float(marks[stage])
                out[stage] = at - before
                before = at
            return out
    raise SystemExit(f"no timing line from the init: {stderr!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--python", default=init_python(),
                        help="interpreter for the init (default: this one, resolved)")
    args = parser.parse_args()
    ensure_bytecode()  # what a wheel install ships; measure that, not a compile per run

    env = dict(os.environ)
    ws = os.path.realpath(tempfile.mkdtemp(prefix="stockade-init-bench-"))
    bwrap = locate_bwrap(env, ws)
    profile = build_profile(mode="workspace-write", workspace=ws, cwd=ws,
                            capabilities=capabilities_for_mode("workspace-write", ws),
                            read_scope="host", host_env=env)
    # Placeholders for missing protected names need the driver's host-side step.
    profile = profile.replace(
        protected=tuple(p for p in profile.protected if not p.kind.startswith("missing")))

    def wrapped(inner: list[str]) -> list[str]:
        # As the driver does: the init's mounts go into /dev before it turns read-only.
        return build_bwrap_args(profile, bwrap, inner=inner,
                                extra_mounts=init_mounts(args.python))

    config = init_config(profile)
    config["timing"] = True
    python = inner_python(args.python)  # where the sandbox shows it
    variants = {
        "raw": wrapped(["/bin/true"]),
        "python": wrapped([python, "-I", "-S", "-c", "pass"]),
        "init": wrapped(init_argv(python, INNER_INIT_PATH, config, ["/bin/true"])),
    }
    start_env = launch_env(profile.env)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for argv in variants.values():  # warm the page cache
        spawn(argv, start_env)
    for _ in range(args.runs):
        for name, argv in variants.items():
            elapsed, stderr = spawn(argv, start_env)
            samples[name].append(elapsed)
            if name == "init":
                for stage, ms in stage_times(stderr).items():
                    stages[stage].append(ms)

    med = {name: statistics.median(values) for name, values in samples.items()}
    low = {name: min(values) for name, values in samples.items()}
    in_main = {stage: statistics.median(v) for stage, v in stages.items()}
    print(f"/bin/true, {args.runs} interleaved runs, ms; init python: {args.python}\n")
    print(f"  {'':38} {'median':>7} {'min':>7}")
    for name, label in (("raw", "bwrap alone"), ("python", "bwrap + python -I -S -c pass"),
                        ("init", "bwrap + init + /bin/true")):
        print(f"  {label:<38} {med[name]:7.2f} {low[name]:7.2f}")
    print(f"\n  {'init overhead over bwrap alone':<38} {med['init'] - med['raw']:7.2f} "
          f"{low['init'] - low['raw']:7.2f}")
    print(f"    {'python startup':<36} {med['python'] - med['raw']:7.2f} "
          f"{low['python'] - low['raw']:7.2f}")
    print(f"    {'stockade init, all of it':<36} {med['init'] - med['python']:7.2f} "
          f"{low['init'] - low['python']:7.2f}")
    print("\n  inside init main (median of each stage):")
    labels = {"config": "config (_json)", "imports": "imports (landlock, seccomp)",
              "no_new_privs": "harden + no_new_privs (+_ctypes)",
              "verify": "verify caps and fds, env"}
    for stage in STAGES:
        print(f"    {labels.get(stage, stage):<36} {in_main[stage]:7.2f}")
    print(f"    {'total in main':<36} {sum(in_main.values()):7.2f}")
    print("  the rest of 'stockade init' is compiling init.py and importing initcore")

if __name__ == "__main__":
    main()
