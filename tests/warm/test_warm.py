"""Parked sandboxes: used only while they match, gone when they must be, out of a command's reach.

Every check of "gone" is made from outside: the host's process table (the
workspace's unique name is in every bwrap and init command line) and the
cgroup filesystem, never the pool's own bookkeeping.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.warm import WarmPool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux drivers")

BACKENDS = ["bubblewrap", "landlock"]
REPO = Path(__file__).resolve().parents[2]


def procs_with(marker: str) -> list[int]:
    """Live host processes whose command line holds `marker` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in raw:
            found.append(int(entry))
    return found


def wait_gone(marker: str, within: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := procs_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def cgroups_of(pid: int) -> list[str]:
    out: list[str] = []
    for depth in range(5):
        for prefix in ("stockade", "stockade-ll"):
            out += glob.glob("/sys/fs/cgroup/" + "*/" * depth + f"{prefix}-{pid}-*")
    return sorted(set(out))


def zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True  # gone by now


def cgroups_left(pid: int, within: float = 10.0) -> list[str]:
    """The cgroups of stockade `pid` still there after `within` s, beyond a zombie's wait.

    stockade empties a cgroup before a command's result is returned and
    removes it on a side thread moments later (flushed at close); a process
    reparented to PID 1 (the Landlock reaper, bwrap's helper) is reaped by
    PID 1, which here can take longer than stockade waits, and a zombie
    still counts as a member. Such a cgroup -- holding zombies only -- is
    removed here once they are reaped. One that is still there after
    `within` s holding nothing, or one holding a live process, is a leak.
    """
    deadline = time.monotonic() + within
    left = cgroups_of(pid)
    leaked = []
    for group in left:
        while os.path.isdir(group) and not _procs(group) and time.monotonic() < deadline:
            time.sleep(0.02)  # removed on stockade's side thread
        if not os.path.isdir(group):
            continue
        members = _procs(group)
        if not members or not all(zombie(m) for m in members):
            leaked.append(f"{group} holds {members or 'nothing'}")
            continue
        while time.monotonic() < deadline:
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        else:
            leaked.append(group)
    return leaked


def _procs(group: str) -> list[str]:
    try:
        return Path(group, "cgroup.procs").read_text().split()
    except OSError:
        return []


class World:
    def __init__(self, root: Path, backend: str) -> None:
        self.root = root
        self.backend = backend
        # Unique, and in every command line the sandbox's processes carry.
        self.ws = root / f"ws-{os.urandom(6).hex()}"
        self.ws.mkdir()
        (self.ws / ".git").mkdir()
        self.home = root / "home"
        self.home.mkdir()
        self.config_dir = root / "config"
        (self.config_dir / "stockade").mkdir(parents=True)
        self.user_config = self.config_dir / "stockade" / "config.toml"
        self.user_config.write_text("[sandbox]\n")
        self.env = {**os.environ, "HOME": str(self.home),
                    "XDG_STATE_HOME": str(root / "state"),
                    "XDG_CONFIG_HOME": str(self.config_dir),
                    "XDG_DATA_HOME": str(root / "data")}
        self.mode = ["workspace-write"]
        self.sandboxes: list[SyncWorkspaceSandbox] = []

    @property
    def marker(self) -> str:
        return self.ws.name

    def sandbox(self, **config: object) -> SyncWorkspaceSandbox:
        cfg = SandboxConfig(backend=self.backend, ledger=str(self.root / "ledger.db"), **config)
        sb = SyncWorkspaceSandbox(cfg, env=self.env, mode_source=lambda: self.mode[0])
        sb.open_session("s", str(self.ws))
        self.sandboxes.append(sb)
        return sb


def pool_of(sb: SyncWorkspaceSandbox) -> WarmPool:
    pool = sb.core.driver(True, str(sb.core.sessions["s"].cwd))._warm  # type: ignore[attr-defined]
    assert isinstance(pool, WarmPool)
    return pool


def settle(pool: WarmPool, timeout: float = 30.0) -> None:
    assert pool.settle(timeout), "the pool did not settle"


def run(sb: SyncWorkspaceSandbox, *argv: str, **kw: object) -> object:
    return sb.execute(SandboxCommand(argv[0], argv[1:], session_id="s", **kw))  # type: ignore[arg-type]


def state(pool: WarmPool) -> str:
    """What the pool held, for a failure that says only that a command went cold."""
    return (f"{pool.parked_count()} parked, {pool.hits} hits, {pool.misses} misses, "
            f"wanted {len(pool._wanted)}, hurried {len(pool._hurried)}, "
            f"backing off {pool._misses}")


def primed(world: World, **config: object) -> tuple[SyncWorkspaceSandbox, WarmPool]:
    """A session whose next command's sandbox is parked (the ledger exists by now)."""
    sb = world.sandbox(**config)
    run(sb, "/bin/true")
    pool = pool_of(sb)
    settle(pool)
    run(sb, "/bin/true")
    settle(pool)
    from stockade.drivers.writers import WRITERS

    assert pool.parked_count() == 1, (WRITERS.running(), pool._wanted, pool._misses, pool.misses)
    return sb, pool


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="stockade-warm-", dir="/var/tmp"))
    w = World(root, request.param)
    try:
        yield w
    finally:
        for sb in w.sandboxes:
            sb.close()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    # Every test, whatever it checked: closed means nothing of it is left.
    assert not wait_gone(w.marker), "a sandbox outlived its session"
    assert not cgroups_left(os.getpid()), "a cgroup outlived its session"


def test_the_next_command_is_served_warm_and_the_audit_says_so(world: World) -> None:
    sb, pool = primed(world)
    hits = pool.hits
    out = run(sb, "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
    assert (out.exit_code, out.stdout, out.stderr) == (3, b"out\n", b"err\n")  # type: ignore[attr-defined]
    assert pool.hits == hits + 1, state(pool)
    records = sb.core.ledger.query(session="s", last=3)
    import json

    starts = [json.loads(str(r["detail"] or "{}")).get("start") for r in records]
    assert starts[-1] == "warm", records
    assert "cold" in starts, records


def test_the_parked_init_is_as_confined_as_a_cold_one(world: World) -> None:
    sb, pool = primed(world)
    hits = pool.hits
    out = run(sb, "/bin/sh", "-c",
              "grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; echo FDS; "
              "ls /proc/self/fd")
    assert pool.hits == hits + 1, state(pool)
    text = out.stdout.decode()  # type: ignore[attr-defined]
    for line in ("NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"):
        assert line in text, text
    # 0-2 and the descriptor `ls` reads the directory through; never the park socket.
    fds = text.split("FDS", 1)[1].split()
    assert sorted(int(x) for x in fds) == [0, 1, 2, 3], text


def test_stdin_timeout_and_duration_count_from_dispatch(world: World) -> None:
    sb, pool = primed(world)
    time.sleep(1.5)  # parked for longer than the timeout below
    hits = pool.hits
    out = run(sb, "/bin/cat", stdin=b"fed\n", timeout=1.0)
    assert pool.hits == hits + 1, state(pool)
    assert out.stdout == b"fed\n" and out.duration_ms < 1000  # type: ignore[attr-defined]


@pytest.mark.parametrize("change", ["appears", "disappears"])
def test_discarded_when_a_protected_name_appears_or_disappears(world: World,
                                                               change: str) -> None:
    if change == "disappears":
        (world.ws / ".envrc").write_text("export A=1\n")
    sb, pool = primed(world)
    parked = procs_with(world.marker)
    assert parked, "nothing parked to discard"
    if change == "appears":
        (world.ws / ".envrc").write_text("export A=1\n")
    else:
        (world.ws / ".envrc").unlink()
    hits, misses = pool.hits, pool.misses
    out = run(sb, "/bin/true")
    assert out.exit_code == 0  # type: ignore[attr-defined]
    assert (pool.hits, pool.misses) == (hits, misses + 1)
    deadline = time.monotonic() + 10
    while set(parked) & set(procs_with(world.marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(parked) & set(procs_with(world.marker)), "the stale sandbox still runs"


def test_discarded_when_the_mode_changes(world: World) -> None:
    sb, pool = primed(world)
    world.mode[0] = "read-only"
    hits, misses = pool.hits, pool.misses
    out = run(sb, "/bin/sh", "-c", "touch written 2>/dev/null; echo $?")
    assert out.stdout.strip() != b"0"  # type: ignore[attr-defined]
    assert not (world.ws / "written").exists()
    assert (pool.hits, pool.misses) == (hits, misses + 1)


def test_discarded_when_the_grants_change(world: World) -> None:
    extra = world.root / "granted"
    extra.mkdir()
    sb, pool = primed(world)
    caps = capabilities_for_mode("workspace-write", str(world.ws))
    caps = caps.replace(fs_write=(*caps.fs_write, str(extra)))
    hits, misses = pool.hits, pool.misses
    sb.core.gate.remember("s", "approved-session", caps)
    out = run(sb, "/bin/sh", "-c", f"echo x > {extra}/f", capabilities=caps)
    assert out.exit_code == 0, out.stderr  # type: ignore[attr-defined]
    assert (pool.hits, pool.misses) == (hits, misses + 1)
    assert (extra / "f").read_text() == "x\n"


def test_discarded_when_the_config_file_changes(world: World) -> None:
    sb, pool = primed(world)
    with open(world.user_config, "a") as fh:
        fh.write("# edited\n")
    hits, misses = pool.hits, pool.misses
    run(sb, "/bin/true")
    assert (pool.hits, pool.misses) == (hits, misses + 1)


def test_a_writer_starting_beside_a_parked_sandbox_discards_it(world: World) -> None:
    """A command that can write the workspace can swap what a parked sandbox bound."""
    sb, pool = primed(world)
    sb.open_session("t", str(world.ws))  # another session, the same workspace
    bg = sb.start(SandboxCommand("/bin/sleep", ["1"], session_id="t"))
    hits, misses = pool.hits, pool.misses
    out = run(sb, "/bin/true")
    assert out.exit_code == 0  # type: ignore[attr-defined]
    assert (pool.hits, pool.misses) == (hits, misses + 1), "served by a tainted sandbox"
    bg.wait(timeout=10)


def test_a_background_start_is_served_warm(world: World) -> None:
    sb, pool = primed(world)
    hits = pool.hits
    bg = sb.start(SandboxCommand("/bin/echo", ["bg"], session_id="s"))
    bg.wait(timeout=10)
    assert pool.hits == hits + 1, state(pool)
    assert bg.output("stdout")[0] == b"bg\n"


def test_nothing_left_after_close(world: World) -> None:
    sb, _pool = primed(world)
    assert procs_with(world.marker)
    assert cgroups_of(os.getpid()) or not _has_cgroups()
    sb.close()
    assert not wait_gone(world.marker)
    assert not cgroups_left(os.getpid())


def test_nothing_left_after_the_idle_timeout(world: World) -> None:
    sb, pool = primed(world, warm_idle_seconds=1.0)
    assert procs_with(world.marker)
    time.sleep(1.5)
    assert not wait_gone(world.marker, 5.0)
    assert not cgroups_left(os.getpid())
    hits, misses = pool.hits, pool.misses
    out = run(sb, "/bin/true")  # cold again, and it still works
    assert out.exit_code == 0 and (pool.hits, pool.misses) == (hits, misses)  # type: ignore[attr-defined]


def test_zero_disables_parking(world: World) -> None:
    sb = world.sandbox(warm_sandboxes=0)
    run(sb, "/bin/true")
    time.sleep(0.3)
    assert not procs_with(world.marker)
    assert sb.core.driver(True, str(world.ws))._warm is None  # type: ignore[attr-defined]
    assert last_detail(sb)["start"] == "cold"  # the audit says so with parking off too


def _has_cgroups() -> bool:
    from stockade.drivers.linux.host.limits import mechanism

    return mechanism()[0] != "rlimit"


KILLED_CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {src!r})
    from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
    ws, root, backend = sys.argv[1:4]
    sb = SyncWorkspaceSandbox(SandboxConfig(backend=backend, ledger=root + "/ledger.db",
                                            mode="workspace-write"))
    sb.open_session("s", ws)
    for _ in range(2):
        sb.execute(SandboxCommand("/bin/true", session_id="s"))
        sb.core._driver._warm.settle(30)
    print("parked", flush=True)
    time.sleep(120)
""")


NEXT_STOCKADE = textwrap.dedent("""
    import sys
    sys.path.insert(0, {src!r})
    from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
    ws, root, backend = sys.argv[1:4]
    with SyncWorkspaceSandbox(SandboxConfig(backend=backend, ledger=root + "/ledger.db",
                                            mode="workspace-write")) as sb:
        sb.open_session("s", ws)
        sys.exit(sb.execute(SandboxCommand("/bin/true", session_id="s")).exit_code)
""")


def test_nothing_left_running_after_stockade_is_killed(world: World) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD.format(src=str(REPO / "src")), str(world.ws),
         str(world.root), world.backend], env=world.env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"parked\n"
        assert procs_with(world.marker), "nothing was parked"
        groups = cgroups_of(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert not wait_gone(world.marker), "a parked sandbox outlived stockade"
        # The janitor stockade left behind kills what is still in them and
        # removes them: none is left for the next stockade to find.
        assert groups or not _has_cgroups()
        deadline = time.monotonic() + 5
        while any(os.path.isdir(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [g for g in groups if os.path.isdir(g)], groups

        def alive() -> list[str]:
            return [m for g in groups if os.path.isdir(g)
                    for m in Path(g, "cgroup.procs").read_text().split() if not zombie(m)]

        deadline = time.monotonic() + 10  # a killed process takes a moment to exit
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(), groups
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                zombie(m) and os.path.exists(f"/proc/{m}") for g in groups if os.path.isdir(g)
                for m in Path(g, "cgroup.procs").read_text().split()):
            time.sleep(0.05)
        next_one = subprocess.run(
            [sys.executable, "-c", NEXT_STOCKADE.format(src=str(REPO / "src")), str(world.ws),
             str(world.root), world.backend], env=world.env, capture_output=True, timeout=60)
        assert next_one.returncode == 0, next_one.stderr
        assert not cgroups_of(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_command_cannot_reach_or_signal_the_parked_sandbox(world: World) -> None:
    """A command running beside a parked sandbox (another session's) cannot touch it."""
    sb, pool = primed(world)
    other = world.root / "other"
    other.mkdir()
    sb.open_session("t", str(other))
    host_pids = procs_with(world.marker)
    assert host_pids
    script = "; ".join(
        [f"kill -0 {pid} 2>/dev/null && echo REACHED {pid}" for pid in host_pids]
        # Listing the numbers is same-uid business; following one is ptrace's.
        + [f"for f in /proc/{pid}/fd/*; do readlink $f >/dev/null 2>&1 && echo LINK $f; "
           f"(: >> $f) 2>/dev/null && echo OPENED $f; done" for pid in host_pids]
        + [f"cat /proc/{pid}/environ >/dev/null 2>&1 && echo ENVIRON {pid}" for pid in host_pids]
        + [f"kill -9 {pid} 2>/dev/null && echo KILLED {pid}" for pid in host_pids]
        + ["true"])
    # Control, without stockade (same user, kill -0 only): every door is open.
    unconfined = subprocess.run(["/bin/sh", "-c", script.replace("kill -9", "kill -0")],
                                capture_output=True, timeout=30).stdout.decode()
    for word in ("REACHED", "LINK", "OPENED", "ENVIRON"):
        assert word in unconfined, unconfined
    out = sb.execute(SandboxCommand("/bin/sh", ["-c", script], session_id="t"))
    text = out.stdout.decode() + out.stderr.decode()
    for word in ("KILLED", "REACHED", "LINK", "OPENED", "ENVIRON"):
        assert word not in text, text
    assert set(host_pids) <= set(procs_with(world.marker))
    # ... and the sandbox parked for the next command is the one that serves it.
    settle(pool)
    hits = pool.hits
    out = run(sb, "/bin/echo", "next")
    assert out.stdout == b"next\n" and pool.hits == hits + 1  # type: ignore[attr-defined]


# -- what a parked sandbox must never do, whatever happens around it ---------------


def parked_procs(marker: str) -> list[int]:
    """Live host processes of a parked sandbox in the workspace named `marker`."""
    return [pid for pid in procs_with(marker) if _holds(pid, b"stockade-parked")]


def _holds(pid: int, word: bytes) -> bool:
    try:
        return word in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def last_detail(sb: SyncWorkspaceSandbox, session: str = "s") -> dict[str, object]:
    import json

    record = sb.core.ledger.query(session=session, last=1)[-1]
    detail = json.loads(str(record["detail"] or "null"))
    assert isinstance(detail, dict), record
    return detail


def guards_alive(world: World) -> list[str]:
    """The metadata guards' alive files: one per command whose guard is not yet released."""
    return glob.glob(str(world.root / "state" / "stockade" / "guard" / "*.alive.*"))


def test_nothing_is_parked_over_a_path_the_last_command_removed(world: World) -> None:
    """The next sandbox is parked from the last command's profile, made before it ran.
    bwrap's `--ro-bind /dev/null` over a hidden file that went away meanwhile created
    an empty ~/.docker/config.json (and its directory) in the person's home. (The
    command itself can no longer move it: the directories above a mask are held.
    The person can, while the command runs.)"""
    if world.backend == "landlock":
        pytest.skip("the landlock backend refuses a hidden path inside a writable workspace")
    world.env["HOME"] = str(world.ws)  # a workspace of ~
    (world.ws / ".docker").mkdir()
    (world.ws / ".docker" / "config.json").write_text('{"auths": {}}\n')
    sb = world.sandbox(allow_home_workspace=True)
    pool = pool_of(sb)
    run(sb, "/bin/true")
    settle(pool)
    import threading

    def person() -> None:
        deadline = time.monotonic() + 10
        while not (world.ws / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.rename(world.ws / ".docker", world.root / "docker-moved")
        (world.ws / "go").write_text("")

    helper = threading.Thread(target=person)
    helper.start()
    out = run(sb, "/bin/sh", "-c", "touch running; while [ ! -e go ]; do sleep 0.01; done")
    helper.join()
    assert out.exit_code == 0, out.stderr  # type: ignore[attr-defined]
    settle(pool)
    time.sleep(0.2)
    assert not os.path.lexists(world.ws / ".docker"), "a placeholder was created on the host"
    assert not parked_procs(world.marker), "parked from a view the command changed"
    # The next command starts cold and parks from its own profile.
    run(sb, "/bin/true")
    assert last_detail(sb)["start"] == "cold"
    settle(pool)
    assert parked_procs(world.marker)
    sb.close()
    assert not os.path.lexists(world.ws / ".docker")
    assert (world.root / "docker-moved" / "config.json").read_text() == '{"auths": {}}\n'


@pytest.mark.parametrize("when", ["while-parked", "at-dispatch"])
def test_a_parked_sandbox_that_died_gives_way_to_a_cold_start(world: World, when: str) -> None:
    """Killed while it waits (the OOM killer): the next command must still run, cold,
    with its audit record, and the dead sandbox's descriptors and cgroup must go."""
    import select

    sb, pool = primed(world)
    parked = next(p for group in pool._parked.values() for p in group)
    assert parked.proc is not None and parked.sock is not None
    victim = parked.proc.pid
    sock = parked.sock
    groups = cgroups_of(os.getpid())
    fds = len(os.listdir("/proc/self/fd"))
    guards: list[object] = []

    def kill() -> None:
        os.kill(victim, signal.SIGKILL)
        # Until the init is gone too: its end of the park socket closes.
        assert select.select([sock], [], [], 10)[0], "the parked init outlived its sandbox"

    if when == "while-parked":
        kill()
        time.sleep(0.2)
    driver = sb.core._driver
    take_guard = driver._guard  # type: ignore[attr-defined]

    def guard(profile: object) -> object:
        guards.append(profile)
        if when == "at-dispatch" and len(guards) == 1:
            kill()  # after the dispatch's own look, once the command's guard is taken
        return take_guard(profile)

    # The pool's (taken at dispatch) and the driver's own (a cold start).
    pool._guard = guard  # type: ignore[method-assign]
    driver._guard = guard  # type: ignore[attr-defined]
    out = run(sb, "/bin/sh", "-c", "echo ran")
    assert (out.exit_code, out.stdout) == (0, b"ran\n")  # type: ignore[attr-defined]
    record = sb.core.ledger.query(session="s", last=1)[-1]
    assert record["outcome"] == "ran" and last_detail(sb)["start"] == "cold", record
    assert len(guards) == 1, "one metadata guard per command"
    assert not guards_alive(world), "the command's guard was not released"
    settle(pool)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{victim}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{victim}"), "the dead sandbox was not reaped"
    # One parked sandbox's descriptors then, one parked sandbox's now.
    assert len(os.listdir("/proc/self/fd")) == fds
    deadline = time.monotonic() + 10
    while (gone := [g for g in groups if os.path.isdir(g)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not gone, "the dead sandbox's cgroup is still there"
    assert parked_procs(world.marker), "nothing parked for the next command"


def test_nothing_parks_for_a_session_closed_while_its_command_ran(world: World) -> None:
    import asyncio

    from stockade import WorkspaceSandbox

    async def scenario() -> tuple[list[int], list[int]]:
        cfg = SandboxConfig(backend=world.backend, ledger=str(world.root / "ledger.db"),
                            mode="workspace-write")
        async with WorkspaceSandbox(cfg, env=world.env) as sb:
            await sb.open_session("s", str(world.ws))
            running = asyncio.ensure_future(
                sb.execute(SandboxCommand("/bin/sleep", ["1"], session_id="s")))
            await asyncio.sleep(0.3)
            await sb.close_session("s")
            await running
            pool = sb.core._driver._warm  # type: ignore[attr-defined]
            assert pool.settle(30)
            await asyncio.sleep(0.3)
            closed = procs_with(world.marker)
            # Reopened on the same workspace, it parks again.
            await sb.open_session("s", str(world.ws))
            await sb.execute(SandboxCommand("/bin/true", session_id="s"))
            assert pool.settle(30)
            reopened = parked_procs(world.marker)
        return closed, reopened

    closed, reopened = asyncio.run(scenario())
    assert closed == [], "a sandbox was parked for a closed session"
    assert reopened, "a session reopened on the workspace parks no more"


WRITER = "for i in $(seq 50); do echo $i > w.txt; sleep 0.1; done; rm -f w.txt"


@pytest.mark.parametrize("other", ["no pool", "no boundary"])
def test_a_writer_of_a_sandbox_without_a_pool_stops_parking_beside_it(world: World,
                                                                      other: str) -> None:
    """No sandbox is parked while a command that can write its workspace runs in this
    process -- whether or not that command's own sandbox parks, or has one."""
    warm = world.sandbox()
    writes = (world.sandbox(warm_sandboxes=0) if other == "no pool"
              else unconfined_sandbox(world))
    pool = pool_of(warm)
    writer = writes.start(SandboxCommand("/bin/sh", ["-c", WRITER], session_id="s"))
    try:
        run(warm, "/bin/true")
        settle(pool)
        time.sleep(0.3)
        assert writer.running()
        assert not parked_procs(world.marker), "parked while a writer runs"
        run(warm, "/bin/true")
        assert writer.running()
        assert last_detail(warm)["start"] == "cold"
    finally:
        writer.wait(timeout=10)


def unconfined_sandbox(world: World) -> SyncWorkspaceSandbox:
    """A sandbox of the `none` backend on the same workspace, session "s" open."""
    sb = SyncWorkspaceSandbox(
        SandboxConfig(backend="none", mode="full-access", ledger=str(world.root / "l2.db")),
        env=world.env, mode_source=lambda: "full-access")
    world.sandboxes.append(sb)
    sb.open_session("s", str(world.ws))
    return sb


@pytest.mark.parametrize("by", ["a command with no boundary", "another process"])
def test_a_hidden_file_linked_back_in_place_is_not_served_warm(world: World, by: str) -> None:
    """A hidden file removed and linked back under its name: the parked sandbox's
    mask over it went with the old name, the inode it checked came back, and the
    next command, served warm, read it -- whether a command of the `none` backend
    in the same process or another process on the host did it."""
    if world.backend == "landlock":
        pytest.skip("the landlock backend refuses a hidden path inside a writable workspace")
    (world.ws / "secret.env").write_text("CANARY_ENV\n")
    sb, pool = primed(world, unreadable=["secret.env"])
    swap = "ln secret.env .h && rm secret.env && mv .h secret.env"
    if by == "another process":
        subprocess.run(["/bin/sh", "-c", swap], cwd=world.ws, check=True)
    else:
        unconfined = unconfined_sandbox(world)
        assert run(unconfined, "/bin/sh", "-c", swap).exit_code == 0  # type: ignore[attr-defined]
    hits, misses = pool.hits, pool.misses
    out = run(sb, "/bin/cat", "secret.env")
    assert b"CANARY" not in out.stdout, "a parked sandbox was served after its mask went"  # type: ignore[attr-defined]
    assert (pool.hits, pool.misses) == (hits, misses + 1), state(pool)


def _repository(at: Path) -> None:
    (at / ".git" / "hooks").mkdir(parents=True)
    (at / ".git" / "objects").mkdir()
    (at / ".git" / "refs").mkdir()
    (at / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (at / ".git" / "config").write_text("[core]\n")


@pytest.mark.parametrize("inside_check", [True, False], ids=["stockade", "control"])
def test_a_name_swapped_around_the_park_is_not_served(
        world: World, inside_check: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parallel writer renames the directory holding a repository away and puts a
    decoy there just before bwrap mounts, then swaps them back: the read-only
    mounts hold the decoy, and every identity the host compares at `take` is
    the real repository's again. The control, without the init's check of its
    mounts, is served warm and the write lands."""
    if world.backend != "bubblewrap":
        pytest.skip("nothing is mounted by name under the Landlock backend")
    from stockade.drivers.linux import warm

    real = world.ws / "sub"
    _repository(real)
    sb, pool = primed(world)
    if not inside_check:
        monkeypatch.setattr(pool, "view", lambda _profile: [])
    in_place = warm.mounts_in_place
    swapped: list[bool] = []

    def swap_first(profile: object) -> bool:
        ok = in_place(profile)  # type: ignore[arg-type]
        if ok and not swapped:
            os.rename(real, world.ws / "sub-real")
            _repository(real)
            swapped.append(True)
        return ok

    monkeypatch.setattr(warm, "mounts_in_place", swap_first)
    run(sb, "/bin/true")
    settle(pool)
    assert swapped and pool.parked_count() == 1, state(pool)
    os.rename(real, world.ws / "sub-decoy")
    os.rename(world.ws / "sub-real", real)
    out = run(sb, "/bin/sh", "-c", "echo '[core] hooksPath = /tmp' >> sub/.git/config; echo ran")
    assert b"ran" in out.stdout, out  # type: ignore[attr-defined]
    planted = "hooksPath" in (real / ".git" / "config").read_text()
    start = last_detail(sb)["start"]
    if inside_check:
        assert (planted, start) == (False, "cold"), out
    else:
        assert (planted, start) == (True, "warm"), out


def test_a_directory_turned_into_a_link_before_dispatch_is_not_served(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deeper repository's hooks directory (`core.hooksPath = tools/hooks`): a
    writer moves `tools` into the top `.git` and leaves a link in its place
    just before the dispatch. Compared with its named parent (the link), the
    path passed for a mount of its own; a cold start binds through the link."""
    if world.backend != "bubblewrap":
        pytest.skip("nothing is mounted by name under the Landlock backend")
    from stockade.drivers.linux import warm

    lib = world.ws / "vendor" / "lib"
    _repository(lib)
    (lib / "tools" / "hooks").mkdir(parents=True)
    with open(lib / ".git" / "config", "a") as fh:
        fh.write("\thooksPath = tools/hooks\n")
    (world.ws / ".git" / "objects").mkdir()
    sb, _pool = primed(world)
    dispatch = warm.Parked.dispatch

    def flip_first(self: warm.Parked, argv: list[str], view: list[tuple[str, bool]]) -> bool:
        assert any(p == str(lib / "tools" / "hooks") for p, _same in view), view
        os.rename(lib / "tools", world.ws / ".git" / "objects" / "tools-real")
        os.symlink("../../.git/objects/tools-real", lib / "tools")
        return dispatch(self, argv, view)

    monkeypatch.setattr(warm.Parked, "dispatch", flip_first)
    run(sb, "/bin/sh", "-c", "echo planted > vendor/lib/tools/hooks/pre-commit")
    assert not (world.ws / ".git" / "objects" / "tools-real" / "hooks" / "pre-commit").exists()
    assert last_detail(sb)["start"] == "cold"


def test_a_repository_inside_a_hidden_directory_still_goes_warm(world: World) -> None:
    """Its metadata's mounts are under the directory's mask, unseen: checked for
    anyway, every command was refused its parked sandbox."""
    if world.backend != "bubblewrap":
        pytest.skip("the landlock backend refuses a hidden path inside a writable workspace")
    _repository(world.ws / "vendor" / "lib")
    sb, pool = primed(world, unreadable=["default", "vendor/"])
    run(sb, "/bin/true")
    assert last_detail(sb)["start"] == "warm", state(pool)


def test_a_parked_sandbox_that_does_not_answer_is_stopped_not_doubled(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gone cold after no answer, a command the parked init had begun all the same
    would run twice."""
    from stockade.drivers.linux import warm
    from stockade.errors import SandboxUnavailable

    sb, _pool = primed(world)
    parked = parked_procs(world.marker)
    assert parked

    def silent(self: object, argv: list[str], view: object) -> bool:
        raise TimeoutError

    monkeypatch.setattr(warm.Parked, "dispatch", silent)
    with pytest.raises(SandboxUnavailable, match="did not answer"):
        run(sb, "/bin/sh", "-c", "echo ran >> ran.txt")
    assert not (world.ws / "ran.txt").exists()
    deadline = time.monotonic() + 10
    while set(parked) & set(parked_procs(world.marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(parked) & set(parked_procs(world.marker))  # (another may park anew)


def test_a_writer_starting_while_a_sandbox_is_listed_taints_it(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that starts between the spawner's look for writers and the moment the
    new sandbox is listed as parked must still taint it."""
    import threading

    from stockade.drivers.linux import warm

    sb, pool = primed(world)
    other = world.sandbox(warm_sandboxes=0)
    writers: list[object] = []
    identity = warm.mount_identity

    def starts_a_writer(profile: object, watch: object) -> object:
        if threading.current_thread().name == "stockade-warm" and not writers:
            writers.append(other.start(SandboxCommand("/bin/sh", ["-c", WRITER],
                                                      session_id="s")))
        return identity(profile, watch)  # type: ignore[arg-type]

    monkeypatch.setattr(warm, "mount_identity", starts_a_writer)
    run(sb, "/bin/true")  # served warm; the spawner parks the next one
    # Its request to park may come after a first look at a pool with nothing to do.
    deadline = time.monotonic() + 30
    while not writers and time.monotonic() < deadline:
        settle(pool)
        time.sleep(0.05)
    assert writers, "the spawner never looked"
    try:
        run(sb, "/bin/true")
        assert writers[0].running()  # type: ignore[attr-defined]
        assert last_detail(sb)["start"] == "cold", "served by a sandbox a writer may have swapped"
    finally:
        writers[0].wait(timeout=10)  # type: ignore[attr-defined]


def test_a_background_start_is_audited_like_an_execute(world: World) -> None:
    sb, pool = primed(world)
    run(sb, "/bin/true")
    executed = last_detail(sb)
    assert executed["start"] == "warm"
    settle(pool)
    bg = sb.start(SandboxCommand("/bin/sleep", ["0.1"], session_id="s"))
    bg.wait(timeout=10)
    started = last_detail(sb)
    assert started["start"] == "warm"
    assert set(executed) <= set(started), (executed, started)
    # A profile nothing was parked for: cold, and said so.
    bg = sb.start(SandboxCommand("/bin/true", session_id="s", env={"ONCE": "1"}))
    bg.wait(timeout=10)
    started = last_detail(sb)
    assert started["start"] == "cold" and set(executed) <= set(started), started


def test_an_endless_idle_timeout_does_not_stop_parking(world: World) -> None:
    """Past the config's check (a driver option given in code): the spawner's wait
    must not overflow, or parking silently stops for good."""
    cfg = SandboxConfig(backend=world.backend, ledger=str(world.root / "ledger.db"))
    sb = SyncWorkspaceSandbox(cfg, env=world.env, mode_source=lambda: world.mode[0],
                              driver_options={"warm_idle_seconds": float("inf")})
    sb.open_session("s", str(world.ws))
    world.sandboxes.append(sb)
    pool = pool_of(sb)
    for _ in range(3):
        run(sb, "/bin/true")
        settle(pool, 15)
    assert last_detail(sb)["start"] == "warm"
    assert parked_procs(world.marker)


# -- a session's /tmp: one tmpfs for the session ($TMPDIR, /tmp under bubblewrap) -------

def test_a_parked_sandbox_has_the_sessions_bounded_tmp(world: World) -> None:
    sb, pool = primed(world, tmp_size_mb=16)
    hits = pool.hits
    out = run(sb, "/bin/sh", "-c", "head -c 10000000 /dev/zero > $TMPDIR/a && "
              "head -c 10000000 /dev/zero > $TMPDIR/b")
    assert pool.hits == hits + 1, "not served warm"
    assert out.exit_code == 1 and b"No space left" in out.stderr  # type: ignore[attr-defined]
    assert last_detail(sb)["session_tmp"] == "one tmpfs of 16 MiB for the session"
    assert pool.settle(30)
    out = run(sb, "/bin/sh", "-c", "ls $TMPDIR")
    assert out.stdout.decode().split() == ["a", "b"]  # type: ignore[attr-defined]
    tmp = sb.core.sessions["s"].tmp_dir
    assert tmp and os.listdir(tmp) == []  # nothing of it on the host


def test_without_nsenter_a_sessions_tmp_is_a_host_directory_and_says_so(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from stockade.drivers.linux.host import sessionns

    monkeypatch.setattr(sessionns, "NSENTER", str(world.root / "no-nsenter"))
    sb = world.sandbox(tmp_size_mb=16, warm_sandboxes=0)
    out = run(sb, "/bin/sh", "-c", "echo kept > $TMPDIR/f")
    assert out.exit_code == 0  # type: ignore[attr-defined]
    assert "no-nsenter" in str(last_detail(sb)["session_tmp"])
    assert os.listdir(sb.core.sessions["s"].tmp_dir or "") == ["f"]


def test_a_helper_that_cannot_unshare_leaves_a_host_directory_and_says_so(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a profile grants user namespaces to bwrap alone: the limit weakens, the
    sandbox does not, and both the record and doctor say so."""
    from stockade.doctor import backend_status
    from stockade.drivers.linux.host import sessionns

    refused = "stockade-session: unshare: Operation not permitted"
    tries = world.root / "tries"
    monkeypatch.setattr(sessionns, "HELPER", f"import sys; open({str(tries)!r}, 'a').write('x'); "
                        f"sys.exit({refused!r})")
    sb = world.sandbox(tmp_size_mb=16, warm_sandboxes=0)
    for _ in range(2):
        out = run(sb, "/bin/sh", "-c", "echo kept > $TMPDIR/f")
        assert out.exit_code == 0  # type: ignore[attr-defined]
        assert refused in str(last_detail(sb)["session_tmp"])
    assert tries.read_text() == "x", "asked again: the helper costs an interpreter start"
    assert os.listdir(sb.core.sessions["s"].tmp_dir or "") == ["f"]
    monkeypatch.setenv("XDG_STATE_HOME", str(world.root / "doctor-state"))
    drops = backend_status()[world.backend].get("drops", [])
    assert any(refused in line for line in drops), drops  # type: ignore[union-attr]
