"""How long the command-policy filter adds to each command.

    .venv/bin/python bench/command_policy.py [--repeat N] [--fresh N]

Prints the median time of `CommandPolicy.check` for ordinary commands,
settled by the fast path (a policy whose filter is not compiled yet) and by
the compiled filter (normalise + every default rule in RE2, which a policy
uses once compiled), a blocked command, a 256 KiB
`bash -s` script, and a 256 KiB input built to be as slow as possible, next
to the targets: 50 us for a command, 5 ms for a script. The hostile case has
no target; it shows the bound an agent pays for its own crafted input.

Then what one `stockade run` pays, which is what matters for a CLI: the
median over fresh interpreters of importing the package, building the hook
from an empty `[sandbox.command_policy]` table and checking one command,
for a plain command (target 0.5 ms) and for a blocked one (the full path:
`re`, `re2`, compiling the filter). Each interpreter has already imported
what `stockade.core` imports anyway (`stockade`, its errors, hooks and
command modules), so the row is the filter's own share.
"""

from __future__ import annotations

import argparse
import compileall
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import stockade
from stockade.command_policy import CommandPolicy, fastpath
from stockade.command_policy.normalize import SCAN_LIMIT, scan_target

COMMANDS = [
    ("git", ["status", "--short"]),
    ("bash", ["-c", "cd src && python -m pytest -q tests/unit --maxfail=1 2>&1 | tail -n 20"]),
    ("npm", ["run", "build", "--", "--mode=production"]),
    ("sh", ["-c", "rm -rf build/ dist/ && make -j8 all"]),
    ("docker", ["run", "--rm", "-v", "/work:/work", "python:3.11", "pytest", "-q"]),
    ("curl", ["-fsSL", "-o", "out.tar.gz", "https://example.com/releases/v1.2.3/out.tar.gz"]),
]

_SCRIPT_LINES = [
    "#!/usr/bin/env bash",
    "set -euo pipefail",
    'ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"',
    "export PATH=\"$HOME/.local/bin:$PATH\"",
    "# install the toolchain for job {n}",
    "sudo apt-get update -qq && sudo apt-get install -y -qq build-essential curl jq",
    "python3 -m pip install --user -r requirements-{n}.txt",
    'for f in src/*.py tests/*.py; do python3 -m py_compile "$f"; done',
    "if [ -d build/{n} ]; then rm -rf build/{n}; fi",
    "mkdir -p build/{n} dist/{n}",
    "curl -fsSL -o build/{n}/data.json https://api.example.com/v2/items?page={n}",
    "jq -r '.items[] | select(.active) | .name' build/{n}/data.json | sort -u > names-{n}.txt",
    "sed -i -e 's/\\t/    /g' -e 's/[[:space:]]*$//' build/{n}/names.txt",
    'count=$(wc -l < build/{n}/names.txt); echo "job {n}: $count names"',
    "tar czf dist/{n}/bundle.tgz -C build/{n} .",
    "docker build -t registry.example.com/app:{n} --build-arg VERSION=1.{n}.0 .",
    "git log --oneline -n 5 | while read -r sha msg; do echo \"$sha $msg\"; done",
    "find . -name '*.pyc' -delete",
    'cat > build/{n}/config.ini <<EOF\n[job]\nid = {n}\nname = build-{n}\nEOF',
    "grep -rn 'TODO' src/ | awk -F: '{print $1}' | uniq -c | sort -rn | head",
    "make -C native -j4 CFLAGS='-O2 -g' \\\n  LDFLAGS='-Wl,--as-needed' all",
    "echo \"done at `date -u +%H:%M:%S`\"",
    'trap \'echo "failed at line $LINENO" >&2\' ERR',
]


def script(size: int = SCAN_LIMIT, *, utf8: bool = False) -> bytes:
    """A long build script of ordinary commands, deterministic."""
    rng = random.Random(42)
    lines: list[str] = []
    total = 0
    n = 0
    while total < size:
        line = rng.choice(_SCRIPT_LINES).replace("{n}", str(n))
        if utf8 and n % 50 == 0:
            line += "  # ✓ überprüft"
        lines.append(line)
        total += len(line) + 1
        n += 1
    return "\n".join(lines).encode()[:size]


_HOSTILE = ["rm ", "-rf ", "/", " ", "sudo ", "-S", "(){ ", "|", "&", "curl ", "| sh", "dd ",
            "of=", "/dev/sd", "select disk 1\n", "powershell ", "-e ", "C:/", "rd /s ",
            "reg delete ", "HKLM", "icacls ", "/grant ", "Everyone:", "bcdedit ", "format ",
            "chmod ", "777 ", "/etc", ">", "tee ", "\n", "iex ", "a", "Remove-Item ", "-Recurse "]


def hostile(size: int = SCAN_LIMIT) -> bytes:
    """Every rule's fragments, shuffled: the worst input for one DFA over all rules."""
    rng = random.Random(1)
    out: list[str] = []
    total = 0
    while total < size:
        piece = rng.choice(_HOSTILE)
        out.append(piece)
        total += len(piece)
    return "".join(out).encode()[:size]


# Run in a fresh interpreter: import + build + first check, timed from inside.
_FRESH = """
import time
import stockade, stockade.errors, stockade.hooks, stockade.command
from stockade.command import SandboxCommand
command = SandboxCommand({program!r}, {args!r})
started = time.perf_counter()
from stockade.command_policy import policy_hook_from_config
decision = policy_hook_from_config({{}}).before(command, "bench")
elapsed = time.perf_counter() - started
assert decision.allowed is {allowed!r}, decision.reason
print(elapsed)
"""


def fresh_process_seconds(program: str, args: list[str], allowed: bool, runs: int) -> float:
    """Median of `runs` fresh interpreters: import the package, build the hook, check once."""
    code = _FRESH.format(program=program, args=args, allowed=allowed)
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        times.append(float(out.stdout))
    return statistics.median(times)


def median_seconds(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200,
                        help="timings per case (the 256 KiB cases use a tenth)")
    parser.add_argument("--fresh", type=int, default=25,
                        help="fresh interpreters per fresh-process case (at least 20)")
    args = parser.parse_args()
    # An installed package has its bytecode cached; a source tree run with
    # PYTHONDONTWRITEBYTECODE may not, and each fresh interpreter would then
    # time the compiler instead of the filter.
    compileall.compile_dir(Path(stockade.__file__).parent, quiet=1)

    # Fresh interpreters first: measured after the 256 KiB cases below, on a
    # small VM, they read a third slower or more.
    runs = max(args.fresh, 20)
    fresh = [
        ("plain command (/bin/true)", fresh_process_seconds("/bin/true", [], True, runs),
         0.5e-3),
        ("blocked command (rm -rf /)",
         fresh_process_seconds("rm", ["-rf", "/"], False, runs), None),
    ]

    # Until a policy's filter is compiled, a command no rule can match is
    # settled by the fast path; after that RE2 is faster and answers all.
    cold = CommandPolicy()
    settled = [(program, argv) for program, argv in COMMANDS
               if fastpath.settled(scan_target(program, argv, None)[0], fastpath.DEFAULT_GUARDS)]

    started = time.perf_counter()
    policy = CommandPolicy()
    policy.check("rm", ["-rf", "/"])  # the first full check compiles the filter
    build = time.perf_counter() - started
    policy.check("git", ["status"])  # warm the lazily built DFA states

    def every_command(on: CommandPolicy, commands: list[tuple[str, list[str]]]) -> None:
        for program, argv in commands:
            on.check(program, argv)

    big = max(args.repeat // 10, 5)
    plain, accented, evil = script(), script(utf8=True), hostile()
    rows = [
        (f"typical command, fast path ({len(settled)} of {len(COMMANDS)})",
         median_seconds(lambda: every_command(cold, settled), args.repeat) / len(settled),
         50e-6),
        ("typical command, compiled filter",
         median_seconds(lambda: every_command(policy, COMMANDS), args.repeat) / len(COMMANDS),
         50e-6),
        ("blocked command (rm -rf //)",
         median_seconds(lambda: policy.check("rm", ["-rf", "//"]), args.repeat), 50e-6),
        ("256 KiB stdin script",
         median_seconds(lambda: policy.check("bash", ["-s"], plain), big), 5e-3),
        ("256 KiB stdin script, some UTF-8",
         median_seconds(lambda: policy.check("bash", ["-s"], accented), big), 5e-3),
        ("256 KiB hostile input (no target)",
         median_seconds(lambda: policy.check("bash", ["-s"], evil), big), None),
    ]
    assert cold._filter is None, "the fast-path row took the full path"
    print(f"command policy: {len(policy.rules)} default rules; the first full check (import "
          f"re2, compile the filter) took {build * 1e3:.1f} ms")
    _table(rows)
    print(f"\nfresh process: import + build + first check (median of {runs})")
    _table(fresh)


def _table(rows: list[tuple[str, float, float | None]]) -> None:
    print(f"{'case':36} {'median':>11} {'target':>9}")
    for name, seconds, target in rows:
        shown = f"{seconds * 1e6:8.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:8.2f} ms"
        if target is None:
            goal = ""
        else:
            goal = f"{target * 1e6:.0f} us" if target < 1e-3 else f"{target * 1e3:.0f} ms"
            goal += "  ok" if seconds <= target else "  OVER"
        print(f"{name:36} {shown:>11} {goal:>9}")


if __name__ == "__main__":
    main()
