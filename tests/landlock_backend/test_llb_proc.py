"""Processes under the Landlock backend: what it can harm, and what it leaves behind.

There is no PID namespace, so host processes are visible (a strict xfail).
What holds instead: Landlock's signal scope (ABI 6) keeps `kill -9 -1` inside
the command's own tree, its ptrace rule keeps /proc/<pid>/environ, mem and
root of other processes closed, and the reaper (or the cgroup) ends every
process the command started -- setsid daemons included -- when it ends,
times out, or stockade itself is killed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import time

import pytest

from isolation import test_iso_proc as iso
from isolation.conftest import SYSTEM_PYTHON, Box, kill_marked, procs_with, text, wait_gone

pytestmark = pytest.mark.isolation

host_sleep = iso.host_sleep


def remove_cgroups_of(pid: int) -> None:
    """rmdir the (empty) per-command cgroups a SIGKILLed stockade could not remove."""
    for depth in range(4):
        for path in glob.glob("/sys/fs/cgroup/" + "*/" * depth + f"stockade-ll-{pid}-*"):
            with contextlib.suppress(OSError):
                os.rmdir(path)


@pytest.mark.xfail(strict=True, reason=(
    "no PID namespace: host processes, their pids and command lines are visible in /proc; "
    "signal 0 to one answers EPERM (Landlock's signal scope), not ESRCH"))
def test_host_processes_invisible(box: Box, host_sleep: tuple[subprocess.Popen[bytes], str]
                                  ) -> None:
    iso.test_host_processes_invisible(box, host_sleep)


PEEK = r"""
import os, sys
pid = sys.argv[1]
for what in ("environ", "mem", "root/etc/hostname", "cwd/", "fd/0", "maps"):
    path = f"/proc/{pid}/{what}"
    try:
        if path.endswith("/"):
            os.listdir(path)
        else:
            with open(path, "rb") as fh:
                fh.read(16)
        print("READ", what)
    except OSError as exc:
        print("DENIED", what, exc.errno)
try:
    os.kill(int(pid), 0)
    print("SIGNALLED")
except OSError as exc:
    print("NOSIGNAL", exc.errno)
"""


def test_host_processes_cannot_be_read_or_signalled(
        box: Box, host_sleep: tuple[subprocess.Popen[bytes], str]) -> None:
    """What replaces invisibility: the process is visible, nothing in it is reachable."""
    proc, _arg = host_sleep
    res = box.py(PEEK, str(proc.pid))
    out = text(res)
    assert "READ" not in out, out
    assert "NOSIGNAL 1" in out, out
    # Control: the same peek, unconfined, reads the host process.
    res = box.py(PEEK, str(proc.pid), mode="full-access")
    assert "READ environ" in text(res) and "SIGNALLED" in text(res), text(res)


def test_kill_everything_inside_harms_nothing_outside(
        box: Box, host_sleep: tuple[subprocess.Popen[bytes], str]) -> None:
    iso.test_kill_everything_inside_harms_nothing_outside(box, host_sleep)


def test_control_unconfined_kill_does_reach_host_sleep(
        box: Box, host_sleep: tuple[subprocess.Popen[bytes], str]) -> None:
    iso.test_control_unconfined_kill_does_reach_host_sleep(box, host_sleep)


@pytest.mark.parametrize("options", [[], ["--json"]], ids=["passthrough", "json"])
def test_setsid_double_fork_leaves_no_survivor(box: Box, options: list[str]) -> None:
    iso.test_setsid_double_fork_leaves_no_survivor(box, options)


@pytest.mark.parametrize("options", [[], ["--json"]], ids=["passthrough", "json"])
def test_timeout_kills_whole_tree(box: Box, options: list[str]) -> None:
    iso.test_timeout_kills_whole_tree(box, options)


@pytest.mark.parametrize("options", [[], ["--json"]], ids=["passthrough", "json"])
def test_timeout_exit_status_is_124(box: Box, options: list[str]) -> None:
    iso.test_timeout_exit_status_is_124(box, options)


def test_timeout_reports_one_readable_line(box: Box) -> None:
    iso.test_timeout_reports_one_readable_line(box)


DAEMON_THEN_TIMEOUT = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[1][::-1]])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(60)
"""


def test_timeout_also_ends_setsid_daemons(box: Box) -> None:
    """The group kill at a timeout misses a daemon in its own session; the reaper does not."""
    marker = iso.unique_sleep_arg(3610)
    try:
        res = box.py(DAEMON_THEN_TIMEOUT, marker[::-1], options=["--timeout", "1"])
        assert res.returncode == 124, text(res)
        assert wait_gone(marker, iso.TEARDOWN_GRACE) == []
    finally:
        kill_marked(marker)


@pytest.mark.parametrize("flood", [
    ["head", "-c", "2G", "/dev/zero"],
    ["sh", "-c", "head -c 2G /dev/zero >&2"],
    ["yes"],
], ids=["stdout-zeros", "stderr-zeros", "yes"])
def test_output_flood_is_capped_in_bounded_memory(box: Box, flood: list[str]) -> None:
    iso.test_output_flood_is_capped_in_bounded_memory(box, flood)


def test_inherited_descriptors_do_not_reach_the_command(box: Box) -> None:
    iso.test_inherited_descriptors_do_not_reach_the_command(box)


def test_killing_stockade_takes_the_sandbox_with_it(box: Box) -> None:
    iso.test_killing_stockade_takes_the_sandbox_with_it(box)
    remove_dead_cgroups()


def remove_dead_cgroups() -> None:
    """The cgroups of killed stockades (whose pid is gone) that the isolation test's own
    sweep, which knows only bubblewrap's names, leaves behind."""
    for path in glob.glob("/sys/fs/cgroup/*/stockade-ll-*"):
        pid = os.path.basename(path).split("-")[2]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                os.rmdir(path)


def test_a_stale_cgroup_of_a_killed_stockade_does_not_break_later_runs(box: Box) -> None:
    """The isolation suite's reused-pid case: a stale stockade-ll-<pid>-1 is made for
    the pid the next stockade will have; the run must not trip over it."""
    launcher = box.runner.popen(
        ["/bin/sh", "-c", 'read go && exec "$@"', "sh",
         *box.runner.cli_argv(["run", "--", "/bin/sh", "-c", "exit 0"])],
        cwd=str(box.ws), env=box.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    made = []
    try:
        for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory"):
            path = os.path.join(base, f"stockade-ll-{launcher.pid}-1")
            if os.path.isdir(base) and os.access(base, os.W_OK) and not os.path.exists(path):
                os.mkdir(path)
                made.append(path)
        out, err = launcher.communicate(b"go\n", timeout=30)
        assert launcher.returncode == 0, (out + err).decode(errors="replace")
    finally:
        launcher.kill()
        for path in made:
            os.rmdir(path)


def test_killing_stockade_takes_setsid_daemons_with_it(box: Box) -> None:
    """SIGKILL to stockade: the init dies with its parent, and the reaper ends the rest."""
    marker = iso.unique_sleep_arg(3611)
    proc = box.runner.popen(box.runner.cli_argv(
        ["run", "--", SYSTEM_PYTHON, "-I", "-c", DAEMON_THEN_TIMEOUT, marker[::-1]]),
        cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not any(cmd.startswith("sleep ") for _, cmd in procs_with(marker)) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert any(cmd.startswith("sleep ") for _, cmd in procs_with(marker)), \
            "the daemon never started"
        proc.kill()
        proc.wait(timeout=5)
        assert wait_gone(marker, iso.TEARDOWN_GRACE) == [], "a daemon outlived stockade"
    finally:
        proc.kill()
        kill_marked(marker)
        remove_cgroups_of(proc.pid)


def test_killing_stockade_during_startup_leaves_nothing(box: Box) -> None:
    """The bwrap suite's start-up race, here: SIGKILL the moment the init appears.

    The init sets PR_SET_PDEATHSIG and then checks that its parent is still
    stockade, so a parent that died a moment earlier is noticed, not missed.
    """
    leaked: list[tuple[int, str]] = []
    for _ in range(iso.STARTUP_ATTEMPTS):
        arg = iso.unique_sleep_arg(3612)
        proc = box.runner.popen(box.runner.cli_argv(["run", "--", "/bin/sleep", arg]),
                                cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not any("init.py" in cmd for _, cmd in procs_with(arg)) \
                    and time.monotonic() < deadline:
                pass  # no sleep: the point is to land inside the start-up window
            proc.kill()
            proc.wait(timeout=5)
            leaked = wait_gone(arg, 1.0)
        finally:
            kill_marked(arg)
            remove_cgroups_of(proc.pid)
        if leaked:
            break
    assert leaked == [], f"outlived a killed stockade: {leaked}"


def test_a_memory_bomb_is_stopped_and_reported(box: Box, request: pytest.FixtureRequest) -> None:
    iso.test_a_memory_bomb_is_stopped_and_reported(box, request)


def test_one_process_cannot_allocate_past_max_memory(box: Box) -> None:
    iso.test_one_process_cannot_allocate_past_max_memory(box)


def test_a_fork_bomb_stops_at_max_pids(box: Box) -> None:
    iso.test_a_fork_bomb_stops_at_max_pids(box)


def test_control_the_fork_bomb_runs_to_its_end_under_a_higher_limit(box: Box) -> None:
    iso.test_control_the_fork_bomb_runs_to_its_end_under_a_higher_limit(box)


def test_a_fork_bomb_in_a_session_stops_at_max_pids_beside_the_users_other_tasks(
        box: Box) -> None:
    """A session's commands join its user namespace, where RLIMIT_NPROC counts only
    the tasks in it: a limit of all the user's tasks plus max_pids let this bomb
    run to the end (200) with 150 of the user's tasks elsewhere."""
    others = box.runner.popen(["/bin/sh", "-c", "i=0; while [ $i -lt 150 ]; do sleep 60 & "
                               "i=$((i+1)); done; echo up; wait"],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        assert others.stdout is not None and others.stdout.readline() == b"up\n"
        cfg = iso.limits_config(box, max_pids=40)
        res = box.py(iso.FORK_BOMB, mode="workspace-write",
                     options=["--config", cfg, "--session", "bomb"], timeout=iso.RUN_TIMEOUT + 30)
        words = res.stdout.decode().split()
        assert words[:1] == ["forked"] and int(words[1]) < 40, text(res)
    finally:
        os.killpg(others.pid, 9)
        others.wait(timeout=10)


def test_no_subprocess_stops_every_way_to_start_a_process(box: Box) -> None:
    iso.test_no_subprocess_stops_every_way_to_start_a_process(box)


def test_control_without_no_subprocess_every_child_starts(box: Box) -> None:
    iso.test_control_without_no_subprocess_every_child_starts(box)
