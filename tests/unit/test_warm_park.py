"""The init's park mode: ready, then the argv, and a refusal for anything else."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from stockade.drivers.linux.init import initcore


def test_parse_command_takes_a_list_of_strings_only() -> None:
    assert initcore.parse_command('["/bin/echo", "a b", "\\udcff"]') == [
        "/bin/echo", "a b", "\udcff"]
    for bad in ('"x"', "[1]", '["a"] trailing', "{}", "[", ""):
        assert initcore.parse_command(bad) is None, bad


def test_await_command_says_ready_then_returns_the_argv_and_closes() -> None:
    mine, theirs = socket.socketpair()
    fd = os.dup(theirs.fileno())
    theirs.close()

    answer = []

    def stockade() -> None:
        assert mine.recv(1) == b"R"
        mine.sendall(b'{"argv": ["/bin/true", "x"], "view": []}')
        mine.shutdown(socket.SHUT_WR)
        answer.append(mine.recv(1))
        mine.close()

    t = threading.Thread(target=stockade)
    t.start()
    assert initcore.await_command(fd) == ["/bin/true", "x"]
    t.join()
    assert answer == [b"G"]
    with pytest.raises(OSError):
        os.fstat(fd)  # closed: the command never holds it


def test_await_command_refuses_when_stockade_hangs_up() -> None:
    mine, theirs = socket.socketpair()
    fd = os.dup(theirs.fileno())
    theirs.close()
    mine.close()
    with pytest.raises((initcore.Refusal, OSError)):
        initcore.await_command(fd)


@pytest.mark.parametrize("message", [
    b'{"not": "argv"}', b'["/bin/true"]', b'{"argv": ["/bin/true"]}',
    b'{"argv": [], "view": []}', b'{"argv": ["/bin/true"], "view": [["/x", 1, 0, 0]]}',
    b'{"argv": ["/bin/true"], "view": [["/x", true, 0]]}',
    b'{"argv": ["/bin/true"], "view": [], "more": 1}',
])
def test_await_command_refuses_a_malformed_message(message: bytes) -> None:
    mine, theirs = socket.socketpair()
    fd = os.dup(theirs.fileno())
    theirs.close()
    mine.sendall(message)
    mine.shutdown(socket.SHUT_WR)
    with pytest.raises(initcore.Refusal):
        initcore.await_command(fd)
    mine.close()


def test_the_view_is_answered_before_anything_runs(tmp_path: object) -> None:
    """A path the host expects mounted that is not (a name swapped before bwrap
    mounted and back after): the init answers N and refuses."""
    plain = os.path.join(str(tmp_path), "config")
    open(plain, "w").close()
    mine, theirs = socket.socketpair()
    fd = os.dup(theirs.fileno())
    theirs.close()
    st = os.lstat(plain)
    mine.sendall(f'{{"argv": ["/bin/true"], "view": [["{plain}", true, {st.st_dev}, '
                 f'{st.st_ino}]]}}'.encode())
    mine.shutdown(socket.SHUT_WR)
    with pytest.raises(initcore.Refusal, match="is not mounted"):
        initcore.await_command(fd)
    assert mine.recv(2) == b"RN"
    mine.close()


def test_view_problem_takes_a_mount_of_its_own_with_the_hosts_identity(tmp_path: object) -> None:
    proc = os.lstat("/proc")
    assert initcore.view_problem([("/proc", True, proc.st_dev, proc.st_ino)]) == ""
    assert initcore.view_problem([("/proc", False, 0, 0)]) == ""
    assert "another file" in initcore.view_problem([("/proc", True, proc.st_dev, proc.st_ino + 7)])
    plain = os.path.join(str(tmp_path), "plain")
    os.mkdir(plain)
    assert "not mounted" in initcore.view_problem([(plain, False, 0, 0)])
    assert "not reachable" in initcore.view_problem([("/nonexistent/x", False, 0, 0)])


def test_view_problem_follows_no_link_on_the_way() -> None:
    """A directory on the way turned into a link to a mount elsewhere (the top
    `.git`'s bind) passed when the path's mount was compared with its named parent's."""
    assert os.path.islink("/proc/self")
    for path in ("/proc/self", "/proc/self/fd", "/proc/./self", "relative", "/proc/../proc"):
        assert "not reachable" in initcore.view_problem([(path, False, 0, 0)]), path


def test_warm_settings_take_zero_and_refuse_negatives(tmp_path: object) -> None:
    from stockade.config import SandboxConfig, load_config
    from stockade.errors import ConfigError

    assert SandboxConfig(warm_sandboxes=0).warm_sandboxes == 0
    assert SandboxConfig().warm_sandboxes == 1 and SandboxConfig().warm_idle_seconds == 300.0
    for bad in ({"warm_sandboxes": -1}, {"warm_sandboxes": True}, {"warm_idle_seconds": 0}):
        with pytest.raises(ConfigError):
            SandboxConfig(**bad)  # type: ignore[arg-type]
    path = os.path.join(str(tmp_path), "config.toml")
    with open(path, "w") as fh:
        fh.write("[sandbox]\nwarm_sandboxes = 2\nwarm_idle_seconds = 30\n")
    config = load_config(paths=[path])
    assert (config.warm_sandboxes, config.warm_idle_seconds) == (2, 30)


@pytest.mark.parametrize("value", [float("inf"), 1e300, 86400.5])
def test_an_idle_timeout_past_its_bound_is_a_config_error_naming_the_key(
        tmp_path: object, value: float) -> None:
    """`inf` passed the positive-number check and killed the spawner thread later."""
    from stockade.config import SandboxConfig, load_config
    from stockade.errors import ConfigError

    with pytest.raises(ConfigError, match="warm_idle_seconds"):
        SandboxConfig(warm_idle_seconds=value)
    path = os.path.join(str(tmp_path), "config.toml")
    with open(path, "w") as fh:
        fh.write(f"[sandbox]\nwarm_idle_seconds = {'inf' if value == float('inf') else value}\n")
    with pytest.raises(ConfigError, match="warm_idle_seconds"):
        load_config(paths=[path])
    assert SandboxConfig(warm_idle_seconds=86400).warm_idle_seconds == 86400


@pytest.mark.parametrize("idle", [float("inf"), 1e300, float("nan")])
def test_the_spawner_sleeps_a_bounded_time_whatever_the_idle_timeout(idle: float) -> None:
    import time

    from stockade.drivers.linux.warm import MAX_WAKE, Parked, WarmPool
    from stockade.drivers.session import Session

    pool = WarmPool(lambda *a, **k: None, lambda p: None, idle_timeout=idle)  # type: ignore[arg-type, return-value]
    parked = Parked.__new__(Parked)
    parked.created = time.monotonic()
    pool._parked[Session("t", "/w", None)] = [parked]
    # Condition.wait(inf) raised OverflowError in the spawner; NaN spun at 0.
    assert pool._next_wake() == MAX_WAKE


def test_a_pool_keeps_two_sessions_on_one_workspace_apart() -> None:
    from test_bwrap_args import profile

    from stockade.drivers.linux.warm import Parked, WarmPool
    from stockade.drivers.session import Session

    pool = WarmPool(lambda *a, **k: None, lambda p: None)  # type: ignore[arg-type, return-value]
    # Neither has a /tmp of its own: a key made of workspace and /tmp was one key for both.
    first, second = Session("a", "/w", None), Session("b", "/w", None)
    for session in (first, second):
        pool._parked[session] = [Parked(session, profile().replace(session=session), "k", ())]
    first.closed = True
    pool.drop(first)
    assert list(pool._parked) == [second]
    pool.request(profile().replace(session=first))  # a closed session asks for nothing
    assert not pool._wanted
