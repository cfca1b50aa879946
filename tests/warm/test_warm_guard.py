"""A command served by a parked sandbox sweeps a killed run's leftovers as a cold one does.

A baseline whose guards all died (stockade killed while a command that could
write ran) is swept by the next command on the workspace, whatever its mode:
when only some runs swept, a planted hook stayed live through any number of
the others, and the person's next `git commit` ran it. Checked from outside:
the planted files are gone from the workspace and in the quarantine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_warm
from test_warm import World, last_detail, primed, run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux drivers")

#: Both backends, each with the teardown checks of test_warm (nothing outlives a session).
world = test_warm.world

#: (what a writable command leaves for the host to run, what the guard moves and reports).
#: bubblewrap holds `.git` read-only during the run, so a hook is left only where nothing
#: does.
PLANTED = {"bubblewrap": [(".envrc", ".envrc"), (".vscode/tasks.json", ".vscode")]}
PLANTED["landlock"] = [*PLANTED["bubblewrap"],
                       (".git/hooks/pre-commit", ".git/hooks/pre-commit")]


def kill_a_writable_run(world: World) -> None:
    """`stockade run --mode workspace-write` on the workspace, SIGKILLed while its command
    runs: its guard's baseline stays, with no guard alive, and what appears at a protected
    name from then on is what that command left, as far as any later run can tell."""
    src = Path(__file__).resolve().parents[2] / "src"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r}); "
         "from stockade.cli import main; sys.exit(main())", "run", "--backend", world.backend,
         "--mode", "workspace-write", "--", "sh", "-c", "touch started; exec sleep 30"],
        cwd=world.ws, env=world.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (world.ws / "started").exists() and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    _, err = proc.communicate(timeout=30)
    assert (world.ws / "started").exists(), err
    guards = world.root / "state" / "stockade" / "guard"
    assert [p for p in guards.iterdir() if p.is_dir()], "the killed run left no baseline"
    for name, _entry in PLANTED[world.backend]:
        (world.ws / name).parent.mkdir(parents=True, exist_ok=True)
        (world.ws / name).write_text("#!/bin/sh\necho ran\n")


def quarantined(state: Path, name: str) -> list[Path]:
    """What the guard moved to the quarantine from a path ending in `/name`."""
    return [origin.with_name("item") for origin in state.rglob("quarantine/*/*/origin")
            if origin.read_text().rstrip("\n").endswith("/" + name)]


def test_a_warm_read_only_command_sweeps_what_a_killed_run_left(world: World) -> None:
    world.mode[0] = "read-only"
    sb, pool = primed(world)
    kill_a_writable_run(world)
    taken: list[object] = []
    take = pool.take

    def spy(profile: object) -> object:
        parked = take(profile)  # type: ignore[arg-type]
        taken.append(parked)
        return parked

    pool.take = spy  # type: ignore[method-assign]
    out = run(sb, "/bin/sh", "-c", "echo ran")
    assert (out.exit_code, out.stdout) == (0, b"ran\n"), out.stderr  # type: ignore[attr-defined]
    assert taken and taken[0] is not None, "the read-only command was not offered a parked one"

    state = world.root / "state" / "stockade"
    for name, entry in PLANTED[world.backend]:
        assert not os.path.lexists(world.ws / name), f"{name} is still live after the run"
        [kept] = quarantined(state, entry)
        assert b"echo ran" in kept.joinpath(os.path.relpath(name, entry)).read_bytes()
    # Reported as a cold run reports it: to the model in the hint, in the audit record.
    detail = last_detail(sb)
    reported = {str(n["path"]) for n in detail["neutralised"]}  # type: ignore[attr-defined]
    assert {str(world.ws / e) for _, e in PLANTED[world.backend]} <= reported, detail
    assert ".envrc" in (out.denial_hint or "")  # type: ignore[attr-defined]
    # Swept once: the next command finds no baseline left to sweep.
    again = run(sb, "/bin/true")
    assert again.exit_code == 0 and "neutralised" not in last_detail(sb)  # type: ignore[attr-defined]
