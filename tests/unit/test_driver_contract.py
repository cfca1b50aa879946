"""The driver contract at run time: what crosses the seam is typed, and every driver
explains its own failures (drivers/base.py, and the pipeline that reads it)."""

import os
import sqlite3

import pytest

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.drivers import (
    MEMORY,
    PIDS,
    Driver,
    Launch,
    LaunchReport,
    ProcessHandle,
    StartFailure,
)
from stockade.drivers.linux.bwrap import BubblewrapDriver
from stockade.drivers.none import NoneDriver
from stockade.drivers.session import Session
from stockade.errors import SandboxUnavailable
from stockade.process import Process
from stockade.testing import FakeDriver


def test_the_seam_exists_at_run_time() -> None:
    assert issubclass(Process, ProcessHandle)
    for cls in (BubblewrapDriver, NoneDriver, FakeDriver):
        assert issubclass(cls, Driver)
    launch = Launch(["/bin/sh", "-c", "echo hi; echo err >&2"], {"PATH": "/bin"}, "/")
    proc = launch.start()
    assert isinstance(proc, ProcessHandle)
    out = proc.communicate(timeout=10)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"hi\n", b"err\n")
    assert isinstance(launch.report, LaunchReport) and launch.report.limit_exceeded is None


def test_cleanup_fills_the_report_once_then_the_pipelines_undo() -> None:
    calls: list[str] = []

    def driver_cleanup(launch: Launch) -> None:
        calls.append("driver")
        launch.report.limit_exceeded = MEMORY

    launch = Launch(["true"], {}, "/", cleanup=driver_cleanup)
    launch.also(lambda: calls.append("pipeline"))
    launch.cleanup()
    launch.cleanup()
    assert calls == ["driver", "pipeline"] and launch.report.limit_exceeded == MEMORY


def test_bubblewraps_setup_error_is_its_own_failure_not_the_commands() -> None:
    driver = BubblewrapDriver(env={}, probe=False)
    why = driver.explain_failure(1, b"bwrap: No permissions to creating new namespace\n")
    assert why  # the machine's reason, whichever it is
    assert driver.explain_failure(1, b"grep: no such file\n") is None
    assert driver.explain_failure(0, b"bwrap: looks like it but the command ran\n") is None


class _RefusingDriver(FakeDriver):
    def explain_failure(self, returncode: int, stderr: bytes) -> str | None:
        return "the fake boundary could not start" if b"NOSTART" in stderr else None


def test_the_pipeline_asks_every_driver_and_raises_not_returns(tmp_path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    config = SandboxConfig(mode="workspace-write", ledger=str(tmp_path / "l.db"),
                           workspace_root=str(tmp_path / "wsr"))
    with SyncWorkspaceSandbox(config, env=env, driver=_RefusingDriver(), hooks=[]) as box:
        with pytest.raises(SandboxUnavailable, match="fake boundary"):
            box.execute(SandboxCommand("/bin/sh", ["-c", "echo NOSTART >&2; exit 1"],
                                       session_id="s"))
        out = box.execute(SandboxCommand("/bin/sh", ["-c", "echo fine >&2; exit 1"],
                                         session_id="s"))
        assert out.exit_code == 1
    conn = sqlite3.connect(tmp_path / "l.db")
    outcomes = [r[0] for r in conn.execute("SELECT outcome FROM executions ORDER BY id")]
    assert outcomes == ["error", "ran"]


def test_finish_explains_a_start_only_when_the_init_did_not_confirm_it() -> None:
    driver = _RefusingDriver()
    launch = Launch(["true"], {}, "/")
    assert driver.finish(launch, 1, b"NOSTART\n").start_failure == StartFailure(
        "the fake boundary could not start")
    confirmed = Launch(["true"], {}, "/")
    confirmed.report.sandbox_started = True  # the command ran: what it printed is its own
    assert driver.finish(confirmed, 1, b"NOSTART\n").start_failure is None


def test_the_boundarys_reason_wins_over_a_refused_scope() -> None:
    launch = Launch(["true"], {}, "/")
    launch.report.start_failure = StartFailure("scope refused", stderr_says_why=True)
    assert _RefusingDriver().finish(launch, 1, b"x\n").start_failure == StartFailure(
        "scope refused", stderr_says_why=True)
    assert _RefusingDriver().finish(launch, 1, b"NOSTART\n").start_failure == StartFailure(
        "the fake boundary could not start")


def test_a_start_failure_is_frozen() -> None:
    failure = StartFailure("no")
    with pytest.raises(AttributeError):
        failure.reason = "yes"  # type: ignore[misc]


def test_a_report_merges_what_an_inner_launch_saw() -> None:
    outer, inner = LaunchReport(), LaunchReport()
    outer.neutralised.append("guard's")
    outer.audit["start"] = "warm"
    inner.neutralised.append("inner's")
    inner.removed.append("/w/x")
    inner.limit_exceeded = MEMORY
    inner.sandbox_started = False
    inner.start_failure = StartFailure("scope refused")
    inner.audit["limits"] = "cgroup-v2"
    outer.merge(inner)
    assert outer.neutralised == ["guard's", "inner's"] and outer.removed == ["/w/x"]
    assert outer.limit_exceeded == MEMORY and outer.sandbox_started is False
    assert outer.start_failure == StartFailure("scope refused")
    assert outer.audit == {"start": "warm"}  # taken when the inner launch was chosen
    kept = LaunchReport()
    kept.limit_exceeded, kept.sandbox_started = PIDS, True
    kept.merge(inner)
    assert kept.limit_exceeded == PIDS and kept.sandbox_started is True


# -- one registry of backends -----------------------------------------------------------------


def test_every_surface_offers_the_registrys_backends() -> None:
    from stockade import clitables, mcp_server
    from stockade.drivers import registry

    here = registry.choices("linux")
    assert here == ("auto", "bubblewrap", "landlock", "none")
    assert registry.choices("darwin") == ("auto", "seatbelt", "none")
    assert clitables.CHOICES["--backend"] == registry.choices()
    assert " | ".join(registry.choices()) in clitables.RUN_OPTIONS["--backend"][2]
    action = next(a for a in mcp_server.argument_parser()._actions
                  if "--backend" in a.option_strings)
    assert tuple(action.choices or ()) == registry.choices()


def test_config_accepts_every_registered_backend_and_its_options() -> None:
    from stockade.drivers import registry
    from stockade.errors import ConfigError

    for name in registry.names():
        assert SandboxConfig(backend=name).backend == name
    for key, option in registry.config_options().items():
        assert SandboxConfig().option(key) == option.default
    with pytest.raises(ConfigError, match="backend = 'bogus' is not one of auto, bubblewrap"):
        SandboxConfig(backend="bogus")


def test_each_entry_declares_the_options_its_driver_reads() -> None:
    """An entry's table stands in for its driver's own (so a command's config never
    imports another platform's driver): the two must agree."""
    import importlib

    from stockade.drivers import registry

    for backend in registry.REGISTRY.values():
        module, _, attr = backend.driver.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except ImportError:
            continue  # a driver of another platform that does not import here
        declared = {o.key for o in cls.options}
        assert not declared or declared == {o.key for o in backend.options()}, backend.name
        assert backend.options_ref != () or not cls.options, backend.name


def test_a_registered_backend_is_accepted_and_built_from_config(tmp_path) -> None:
    from stockade.drivers import registry
    from stockade.drivers.base import DriverOption

    class Toy(FakeDriver):
        name = "toy"
        options = (DriverOption("toy_level", "int", 1, "how toy"),)

    import sys
    import types

    module = types.ModuleType("toy_backend")
    module.Toy = Toy  # type: ignore[attr-defined]
    sys.modules["toy_backend"] = module
    registry.register(registry.Backend("toy", "toy_backend:Toy", "a test backend"))
    try:
        assert "toy" in registry.names() and "toy" in registry.choices()
        assert registry.config_options()["toy_level"].default == 1
        driver = registry.from_config(SandboxConfig(backend="none"), env={}, workspace="/",
                                      state_dir=str(tmp_path))
        assert driver.name == "none"

        class Cfg:
            backend = "toy"

        built = registry.from_config(Cfg(), env={}, workspace="/", state_dir=str(tmp_path))
        assert isinstance(built, Toy)
    finally:
        del registry.REGISTRY["toy"]
        del sys.modules["toy_backend"]


def test_seatbelt_takes_a_linux_config_without_deleting_anything() -> None:
    from stockade.drivers.macos.seatbelt import SeatbeltDriver

    config = SandboxConfig(backend="seatbelt", bwrap="/usr/bin/bwrap", max_pids=50)
    driver = SeatbeltDriver.from_config(config, env={"HOME": "/h"}, workspace="/w",
                                        state_dir="/s", probe=False)
    assert isinstance(driver, SeatbeltDriver) and config.bwrap == "/usr/bin/bwrap"


# -- session hooks --------------------------------------------------------------------------


class _SessionDriver(FakeDriver):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, ...]] = []
        self.tmps: dict[str, str | None] = {}

    def open_session(self, session: Session) -> None:
        self.calls.append(("open", session.id))
        self.tmps[session.id] = session.tmp

    def close_session(self, session: Session) -> None:
        assert session.closed
        self.calls.append(("close", session.id))

    def close(self) -> None:
        self.calls.append(("close-all",))


def test_the_core_tells_the_driver_when_sessions_begin_and_end(tmp_path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    config = SandboxConfig(mode="workspace-write", ledger=False,
                           workspace_root=str(tmp_path / "wsr"))
    driver = _SessionDriver()
    box = SyncWorkspaceSandbox(config, env=env, driver=driver, hooks=[])
    box.execute(SandboxCommand("true", session_id="a"))
    box.session("b")
    # Each hears of the session's own /tmp: one host directory, for all its commands.
    tmps = dict(driver.tmps)
    assert tmps["a"] and tmps["b"] and tmps["a"] != tmps["b"], tmps
    box.close_session("a")
    box.close()
    assert driver.calls == [("open", "a"), ("open", "b"), ("close", "a"), ("close", "b"),
                            ("close-all",)]


def test_a_driver_built_after_sessions_began_still_hears_of_them(tmp_path) -> None:
    from stockade.core import SandboxCore
    from stockade.ledger import Ledger

    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    core = SandboxCore(SandboxConfig(ledger=False, workspace_root=str(tmp_path / "w")),
                       env=env, ledger=Ledger(None), hooks=[])
    core.new_session("early", str(tmp_path))
    driver = _SessionDriver()
    assert core._opened(driver) is driver and driver.calls == [("open", "early")]


def test_a_session_owns_its_tmp_from_opening_to_removal(tmp_path) -> None:
    session = Session.open("s", str(tmp_path), tmp_base=str(tmp_path / "tmp"))
    assert session.tmp and os.path.isdir(session.tmp) and not session.closed
    os.makedirs(os.path.join(session.tmp, "a", "b"))
    session.remove_tmp()
    assert not os.path.lexists(session.tmp)
    assert Session.open("s", str(tmp_path), tmp_base=None).tmp is None
