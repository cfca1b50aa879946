"""Which resource-limit mechanism holds, for each host shape (pure detection)."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from stockade.drivers.linux.host import limits
from stockade.drivers.linux.host.limits import (
    Limits,
    ScopeCgroup,
    detect,
    nproc_limit,
    parse_proc_cgroup,
)

HYBRID = "4:memory:/svc/x\n8:pids:/\n1:cpu:/\n0::/\n"
PURE_V2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope\n"


def probes(files, writable=(), exists=()):
    return dict(read=lambda p: files.get(p, ""), writable=lambda p: p in writable,
                exists=lambda p: p in exists or p in files)


def test_parse_proc_cgroup():
    assert parse_proc_cgroup(HYBRID) == {"memory": "/svc/x", "pids": "/", "cpu": "/", "": "/"}


def test_v1_hybrid_with_writable_memory_and_pids():
    files = {"/proc/self/cgroup": HYBRID}
    dirs = ("/sys/fs/cgroup/memory/svc/x", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu")
    kind, bases, _ = detect(**probes(files, writable=dirs, exists=dirs))
    assert kind == "cgroup-v1"
    assert bases["memory"] == "/sys/fs/cgroup/memory/svc/x"
    assert bases["pids"] == "/sys/fs/cgroup/pids"


def test_v1_not_writable_falls_back_to_rlimits_with_a_reason():
    kind, bases, why = detect(**probes({"/proc/self/cgroup": HYBRID}))
    assert kind == "rlimit" and bases == {} and "no writable cgroup" in why


def test_pure_v2_delegated_and_not():
    base = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope"
    files = {"/proc/self/cgroup": PURE_V2, "/sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
             f"{base}/cgroup.controllers": "cpu memory pids"}
    assert detect(**probes(files, writable=(base,)))[0] == "cgroup-v2"
    kind, _, why = detect(**probes(files))
    assert kind == "rlimit" and "not writable" in why and "systemd-run" in why
    files[f"{base}/cgroup.controllers"] = "cpu"
    assert "lacks controllers memory, pids" in detect(**probes(files, writable=(base,)))[2]


MANAGER = "/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service"
SESSION = "0::/user.slice/user-1000.slice/session-3.scope\n"


def scope_host(uid: int, controllers: str = "cpu memory pids", *, private: bool = True,
               tools: bool = True) -> dict[str, object]:
    manager = MANAGER.format(uid=uid)
    files = {"/proc/self/cgroup": SESSION, "/sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
             "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/cgroup.controllers":
             "cpu memory pids", f"{manager}/cgroup.controllers": controllers}
    present = {"/run/user/x/systemd/private"} if private else set()
    if tools:
        present |= {"/usr/bin/systemd-run", "/usr/bin/setpriv"}
    return dict(read=lambda p: files.get(p, ""), writable=lambda p: False,
                exists=lambda p: p in present or p in files, runtime_dir="/run/user/x")


def test_a_systemd_user_manager_with_the_controllers_gives_scopes() -> None:
    uid = os.getuid()
    kind, bases, why = detect(**scope_host(uid))  # type: ignore[arg-type]
    assert kind == "systemd-scope", why
    assert bases == {"": MANAGER.format(uid=uid), "run": "/usr/bin/systemd-run",
                     "runtime": "/run/user/x"}
    assert "not writable" in why and "transient scope" in why


@pytest.mark.parametrize("host", [
    dict(controllers="cpu"),  # memory and pids not delegated: MemoryMax= would be a no-op
    dict(private=False),      # no user manager listening
    dict(tools=False),        # no systemd-run / setpriv
], ids=["controllers", "no-manager", "no-tools"])
def test_without_a_usable_user_manager_only_rlimits_remain(host: dict[str, object]) -> None:
    kind, _bases, why = detect(**scope_host(os.getuid(), **host))  # type: ignore[arg-type]
    assert kind == "rlimit" and "Delegate=yes" in why


def scope(tmp_path: Path, run: str = "/usr/bin/systemd-run", **limits: int) -> ScopeCgroup:
    manager = {"": "/sys/fs/cgroup/m", "run": run, "runtime": "/run/user/7"}
    return ScopeCgroup(manager, Limits(**limits), "stockade-1-ab", str(tmp_path))


def test_scope_argv_carries_each_limit_and_keeps_the_report_out_of_the_command(
        tmp_path: Path) -> None:
    argv = scope(tmp_path, memory_mb=256, max_pids=50, cpu_percent=150).enter_argv(
        ["bwrap", "--", "cmd"], {"XDG_RUNTIME_DIR": "/run/user/7"})
    assert argv[:3] == ["/usr/bin/env", "XDG_RUNTIME_DIR=/run/user/7", "/usr/bin/systemd-run"]
    head = argv[:argv.index("--")]
    assert {"--user", "--scope", "--collect", "--unit=stockade-1-ab.scope"} <= set(head)
    props = {head[i + 1] for i, word in enumerate(head) if word == "-p"}
    assert props == {"OOMPolicy=continue", "MemoryMax=256M", "MemorySwapMax=0",
                     "TasksMax=51", "CPUQuota=150%"}
    tail = argv[argv.index("--") + 1:]
    assert tail[:3] == ["/usr/bin/setpriv", "--pdeathsig", "KILL"]
    assert tail[-5:] == [str(tmp_path / "stockade-1-ab.scope-report"), "/run/user/7",
                         "bwrap", "--", "cmd"]
    assert scope(tmp_path).enter_argv(["c"])[-2] == "-"  # the command had no XDG_RUNTIME_DIR


FAKE_SYSTEMD_RUN = '#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n'


@pytest.mark.skipif(not os.path.exists("/usr/bin/setpriv"), reason="needs util-linux setpriv")
def test_the_recording_shell_runs_the_command_and_passes_its_status(tmp_path: Path) -> None:
    """systemd-run replaced by a script that execs what follows `--` (it does the same once
    the scope exists): everything after it -- env, setpriv, the shell -- runs for real."""
    fake = tmp_path / "systemd-run"
    fake.write_text(FAKE_SYSTEMD_RUN)
    fake.chmod(0o755)
    cg = scope(tmp_path, run=str(fake), max_pids=10)
    script = 'echo "${XDG_RUNTIME_DIR-unset} $STOCKADE_INIT_PARENT $PPID"; exit 7'
    res = subprocess.run(cg.enter_argv(["/bin/sh", "-c", script]), capture_output=True,
                         timeout=10, check=False)
    assert res.returncode == 7, res.stderr
    xdg, named, ppid = res.stdout.decode().split()
    assert xdg == "unset" and named == ppid  # the shell named itself, and is the parent
    assert cg.started()
    assert not cg.oom_killed() and not cg.pids_exhausted()
    killed = subprocess.run(cg.enter_argv(["/bin/sh", "-c", "kill -9 $$"]), timeout=10,
                            check=False)
    assert killed.returncode == -9  # a signal death stays a signal death
    cg.remove()
    assert not os.path.exists(cg.report)


def test_scope_counters_are_read_from_the_report(tmp_path: Path) -> None:
    cg = scope(tmp_path)
    Path(cg.report).write_text("started /user.slice/x.scope\nlow 0\noom 1\noom_kill 1\n"
                               "max 0\n")
    assert cg.started() and cg.oom_killed() and not cg.pids_exhausted()
    Path(cg.report).write_text("started \n")  # no cgroup line: systemd never ran the shell
    assert not cg.started()
    Path(cg.report).unlink()
    assert not cg.started() and not cg.oom_killed()


def test_a_scope_systemd_refused_is_the_reports_start_failure(tmp_path: Path) -> None:
    from stockade.drivers import LaunchReport

    cg = scope(tmp_path)
    Path(cg.report).write_text("started \n")  # systemd never ran the recording shell
    report = LaunchReport()
    limits.read_limits(cg, report)
    failure = report.start_failure
    assert failure is not None and failure.stderr_says_why
    assert failure.message(b"Failed to start transient scope unit: Access denied\n") == (
        "the command did not run: systemd-run could not start its scope "
        "(Failed to start transient scope unit: Access denied)")
    Path(cg.report).write_text("started /user.slice/x.scope\n")
    report = LaunchReport()
    limits.read_limits(cg, report)
    assert report.start_failure is None


def test_nproc_is_max_pids_in_a_user_namespace_and_headroom_without_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_MECHANISM", ("rlimit", {}, "test"))
    monkeypatch.setattr(limits.os, "getuid", lambda: 1000)
    monkeypatch.setattr(limits, "_user_tasks", lambda uid, userns=0: 5 if userns == 9 else 37)
    assert nproc_limit(50, own_user_namespace=True) == 50
    assert nproc_limit(50, own_user_namespace=False) == 87
    # A session's user namespace, joined: the tasks already in it.
    assert nproc_limit(50, own_user_namespace=False, joined_user_namespace=9) == 55
    assert nproc_limit(None, own_user_namespace=True) is None
    monkeypatch.setattr(limits.os, "getuid", lambda: 0)  # the kernel never applies it to root
    assert nproc_limit(50, own_user_namespace=True) is None
    monkeypatch.setattr(limits.os, "getuid", lambda: 1000)
    monkeypatch.setattr(limits, "_MECHANISM", ("cgroup-v1", {}, "test"))  # pids.max holds
    assert nproc_limit(50, own_user_namespace=True) is None


THREADS = "import threading, time; [threading.Thread(target=time.sleep, args=(30,)).start() " \
          "for _ in range(4)]; print('up', flush=True); time.sleep(30)"


def test_user_tasks_counts_threads() -> None:
    """A uid nobody else uses, running one process of five threads, has five tasks."""
    if os.geteuid() != 0:
        assert limits._user_tasks(os.getuid()) >= os.stat("/proc/self/task").st_nlink - 2
        return
    uid = 64999
    assert limits._user_tasks(uid) == 0
    proc = subprocess.Popen(["/usr/bin/python3", "-I", "-S", "-c", THREADS], user=uid,
                            group=uid, extra_groups=[], stdout=subprocess.PIPE, cwd="/")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert limits._user_tasks(uid) == 5
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_process_already_in_the_supervisor_leaf_sees_the_delegated_cgroup_above() -> None:
    base = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope"
    files = {"/proc/self/cgroup": f"0::{base[len('/sys/fs/cgroup'):]}/stockade-supervisor\n",
             "/sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
             f"{base}/cgroup.controllers": "cpu memory pids"}
    kind, bases, _ = detect(**probes(files, writable=(base,)))
    assert (kind, bases) == ("cgroup-v2", {"": base})


def test_v2_cgroup_is_prepared_once_then_filled(tmp_path: Path) -> None:
    """The v2 steps against a plain directory standing in for a delegated cgroup."""
    (tmp_path / "cgroup.procs").write_text("")
    (tmp_path / "cgroup.subtree_control").write_text("")
    cg = limits.ExecCgroup("cgroup-v2", {"": str(tmp_path)}, Limits(64, 10, 50), "stockade-1-a")
    assert (tmp_path / "stockade-supervisor").is_dir()
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    made = tmp_path / "stockade-1-a"
    assert {p.name: p.read_text() for p in made.iterdir()} == {
        "memory.max": str(64 << 20), "memory.swap.max": "0", "pids.max": "10",
        "cpu.max": "50000 100000"}
    assert cg.enter_argv(["true"])[-1] == "true"
    # A later stockade finds the controllers enabled and leaves the file alone
    # (writing it again would fail with EBUSY once a member has appeared above).
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    limits.ExecCgroup("cgroup-v2", {"": str(tmp_path)}, Limits(64, 10, None), "stockade-1-b")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "cpu memory pids\n"


def test_prime_migration_moves_this_process_where_it_already_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    monkeypatch.setattr(limits, "_MECHANISM", ("rlimit", {}, "test"))
    limits.prime_migration()  # no cgroup of stockade's: nothing to start
    time.sleep(0.05)
    assert procs.read_text() == ""
    monkeypatch.setattr(limits, "_MECHANISM", ("cgroup-v1", {"pids": str(tmp_path)}, "test"))
    limits.prime_migration()
    deadline = time.monotonic() + 5
    while procs.read_text() != str(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert procs.read_text() == str(os.getpid())


def test_a_flush_waits_for_the_removals_on_the_side_thread() -> None:
    import threading

    gate = threading.Event()
    removed: list[str] = []

    class Slow:
        def remove(self) -> None:
            gate.wait(10)
            removed.append("slow")

    limits._REMOVALS.put(Slow())  # type: ignore[arg-type]
    threading.Timer(0.2, gate.set).start()
    limits.flush_removals()  # close() and exit rely on this: nothing pending after it
    assert removed == ["slow"]


@pytest.mark.skipif(limits.mechanism()[0] not in ("cgroup-v1", "cgroup-v2"),
                    reason="needs a cgroup stockade can write here (root has one in CI)")
def test_dispose_leaves_the_cgroup_empty_before_it_returns(tmp_path: Path) -> None:
    import threading

    cgroup = limits.exec_cgroup(None, 50, None, prefix="stockade", report_dir=str(tmp_path))
    assert isinstance(cgroup, limits.ExecCgroup)
    proc = subprocess.Popen(cgroup.enter_argv(["sleep", "60"]))
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped as the driver's child is
    procs = [os.path.join(d, "cgroup.procs") for d in cgroup.dirs.values()]
    deadline = time.monotonic() + 10
    while not all(Path(p).read_text().split() for p in procs):
        assert proc.poll() is None and time.monotonic() < deadline, "never joined"
        time.sleep(0.01)
    cgroup.dispose()

    def members(path: str) -> list[str]:
        try:
            return Path(path).read_text().split()
        except OSError:  # removed meanwhile by the janitor (ENOENT, or ENODEV mid-removal)
            return []

    # The guard's sweep runs right after: nothing of the command may run by then.
    assert not any(members(p) for p in procs)
    assert proc.wait(5) == -9
    limits.flush_removals()
    assert not any(os.path.isdir(d) for d in cgroup.dirs.values())


def test_the_janitor_removes_what_it_was_told_of_and_still_held_at_hang_up(
        tmp_path: Path) -> None:
    made = [tmp_path / name for name in ("a", "b", "c")]
    for d in made:
        d.mkdir()
    told = f"+{made[0]}\n+{made[1]}\n+{made[2]}\n-{made[1]}\n"  # b: removed by stockade itself
    subprocess.run(["/bin/sh", "-c", limits.JANITOR, "stockade-janitor"], input=told.encode(),
                   timeout=30, check=True)
    assert [d.name for d in made if d.exists()] == ["b"]
    assert not list(tmp_path.glob("*/*")), "it wrote into a directory that is not a cgroup"
