"""The six-step pipeline, driven through the fake driver and fake approver seams."""

import asyncio
import json
import os
import sqlite3

import pytest

from stockade import (
    ApprovalGate,
    CapabilityDenied,
    CommandTimeout,
    InvalidCommand,
    NetworkPolicy,
    SandboxCapabilities,
    SandboxCommand,
    SandboxConfig,
    SandboxError,
    SyncWorkspaceSandbox,
    WorkspaceSandbox,
    build_sandbox,
    session_scope,
)
from stockade.core import session_key
from stockade.errors import SandboxDisabled
from stockade.hooks import HookDecision, RateLimitHook
from stockade.testing import FakeApprovalRequester, FakeDriver, MockSandbox


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PATH": "/usr/bin:/bin"}


def make(tmp_path, env, *, mode="workspace-write", requester=None, hooks=None, **cfg):
    config = SandboxConfig(mode=mode, ledger=str(tmp_path / "ledger.db"),
                           workspace_root=str(tmp_path / "wsroot"), **cfg)
    driver = FakeDriver()
    sandbox = SyncWorkspaceSandbox(config, env=env, driver=driver, hooks=hooks or [],
                                   approval=ApprovalGate(requester) if requester else None)
    return sandbox, driver


def rows(tmp_path):
    conn = sqlite3.connect(tmp_path / "ledger.db")
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute("SELECT * FROM executions ORDER BY id")]


def test_provisioned_workspace_is_hashed_lazy_and_reused(tmp_path, env):
    sandbox, driver = make(tmp_path, env)
    out = sandbox.execute(SandboxCommand("/bin/sh", ["-c", "pwd"], session_id="s-1"))
    expected = tmp_path / "wsroot" / session_key("s-1")
    assert len(session_key("s-1")) == 32
    assert out.stdout.decode().strip() == str(expected)
    sandbox.execute(SandboxCommand("true", session_id="s-1"))
    assert len(sandbox.core.sessions) == 1 and driver.runs == 2


def test_session_from_context_variable(tmp_path, env):
    sandbox, _ = make(tmp_path, env)
    with session_scope("ctx"):
        sandbox.execute(SandboxCommand("true"))
    assert "ctx" in sandbox.core.sessions
    with pytest.raises(InvalidCommand, match="no session id"):
        sandbox.execute(SandboxCommand("true"))


def test_cwd_must_stay_inside_the_workspace(tmp_path, env):
    sandbox, driver = make(tmp_path, env)
    (tmp_path / "proj").mkdir()
    ws = sandbox.open_session("s", str(tmp_path / "proj"))
    (tmp_path / "proj" / "sub").mkdir()
    (tmp_path / "proj" / "escape").symlink_to(tmp_path)
    sandbox.execute(SandboxCommand("true", session_id="s", cwd="sub"))
    for bad in ("..", "/etc", "escape"):
        with pytest.raises(CapabilityDenied, match="cwd outside workspace"):
            sandbox.execute(SandboxCommand("true", session_id="s", cwd=bad))
    with pytest.raises(InvalidCommand, match="NUL"):
        SandboxCommand("true", cwd="a\x00b")
    assert driver.runs == 1 and ws.cwd.endswith("proj")


def test_within_baseline_runs_without_asking(tmp_path, env):
    asker = FakeApprovalRequester("denied")
    sandbox, driver = make(tmp_path, env, requester=asker)
    sandbox.execute(SandboxCommand("true", session_id="s"))
    assert asker.requests == [] and driver.runs == 1


def test_elevation_asks_and_a_session_grant_covers_narrower_requests(tmp_path, env):
    asker = FakeApprovalRequester("approved-session")
    sandbox, driver = make(tmp_path, env, requester=asker)
    ws = sandbox.open_session("s", None)
    wide = SandboxCapabilities(fs_write=[ws.cwd, "/usr"], spawn_subprocess=True)
    narrow = SandboxCapabilities(fs_write=[ws.cwd, "/usr/share"], spawn_subprocess=True)
    sandbox.execute(SandboxCommand("true", session_id="s", capabilities=wide))
    sandbox.execute(SandboxCommand("true", session_id="s", capabilities=narrow))
    assert len(asker.requests) == 1 and "write access to /usr" in asker.requests[0].reason
    wider = SandboxCapabilities(fs_write=["/"], spawn_subprocess=True)
    sandbox.execute(SandboxCommand("true", session_id="s", capabilities=wider))
    assert len(asker.requests) == 2 and driver.runs == 3


def test_approved_once_is_not_remembered(tmp_path, env):
    asker = FakeApprovalRequester("approved-once")
    sandbox, _ = make(tmp_path, env, requester=asker)
    caps = SandboxCapabilities(network=NetworkPolicy.allow_all(), spawn_subprocess=True)
    for _ in range(2):
        sandbox.execute(SandboxCommand("true", session_id="s", capabilities=caps))
    assert len(asker.requests) == 2


@pytest.mark.parametrize("outcome", ["denied", "timeout"])
def test_denied_or_timed_out_approval_raises_and_never_runs(tmp_path, env, outcome):
    sandbox, driver = make(tmp_path, env, requester=FakeApprovalRequester(outcome))
    caps = SandboxCapabilities(network=NetworkPolicy.allow_all(), spawn_subprocess=True)
    with pytest.raises(CapabilityDenied, match="unrestricted network"):
        sandbox.execute(SandboxCommand("true", session_id="s", capabilities=caps))
    assert driver.runs == 0
    [row] = rows(tmp_path)
    assert row["outcome"] == "denied" and row["denied"] == 1


def test_no_approver_means_denied_with_a_hint(tmp_path, env):
    sandbox, driver = make(tmp_path, env)
    with pytest.raises(CapabilityDenied, match="no approver"):
        sandbox.execute(SandboxCommand("true", session_id="s", preference="forbid"))
    assert driver.runs == 0


def test_mode_is_asked_once_per_command(tmp_path, env):
    modes = iter(["read-only", "workspace-write"])
    config = SandboxConfig(ledger=str(tmp_path / "l.db"), workspace_root=str(tmp_path / "r"))
    driver = FakeDriver()
    sandbox = SyncWorkspaceSandbox(config, env=env, driver=driver, hooks=[],
                                   mode_source=lambda: next(modes))
    sandbox.execute(SandboxCommand("true", session_id="s"))
    sandbox.execute(SandboxCommand("true", session_id="s"))
    assert [p.mode for _, p in driver.prepared] == ["read-only", "workspace-write"]
    assert [p.workspace_writable for _, p in driver.prepared] == [False, True]


def test_before_hook_denies_before_the_driver(tmp_path, env):
    class Deny:
        name = "deny"

        def before(self, command, session_id):
            return HookDecision.deny("no rm today")

    sandbox, driver = make(tmp_path, env, hooks=[Deny()])
    with pytest.raises(CapabilityDenied, match="no rm today"):
        sandbox.execute(SandboxCommand("rm", ["x"], session_id="s"))
    assert driver.runs == 0


def test_rate_limit_hook_counts_per_session_per_minute():
    now = [0.0]
    hook = RateLimitHook(2, clock=lambda: now[0])
    cmd = SandboxCommand("true")
    assert hook.before(cmd, "a").allowed and hook.before(cmd, "a").allowed
    assert not hook.before(cmd, "a").allowed
    assert hook.before(cmd, "b").allowed
    now[0] = 61.0
    assert hook.before(cmd, "a").allowed


def test_timeout_precedence_command_then_capabilities_then_config(tmp_path, env):
    sandbox, _ = make(tmp_path, env, default_timeout_seconds=0.2)
    with pytest.raises(CommandTimeout, match=r"0.2 s"):
        sandbox.execute(SandboxCommand("sleep", ["5"], session_id="s"))
    ws = sandbox.open_session("s")
    caps = SandboxCapabilities(fs_write=[ws.cwd], spawn_subprocess=True, timeout_secs=0.3)
    with pytest.raises(CommandTimeout, match=r"0.3 s"):
        sandbox.execute(SandboxCommand("sleep", ["5"], session_id="s", capabilities=caps))
    with pytest.raises(CommandTimeout, match=r"0.4 s") as info:
        sandbox.execute(SandboxCommand("sleep", ["5"], session_id="s", capabilities=caps,
                                       timeout=0.4))
    assert info.value.output.signal == 9


def test_output_budget_is_split_and_marked(tmp_path, env):
    sandbox, _ = make(tmp_path, env, max_output_bytes=2000)
    out = sandbox.execute(SandboxCommand("sh", ["-c", "yes | head -c 100000"], session_id="s"))
    assert out.truncated and out.stdout.endswith(b"output truncated at 1000 bytes per stream]\n")
    assert len(out.stdout) < 1100


def test_audit_record_has_the_seed_fields(tmp_path, env):
    sandbox, _ = make(tmp_path, env)
    sandbox.execute(SandboxCommand("sh", ["-c", "exit 3"], session_id="audit"))
    [row] = rows(tmp_path)
    assert row["session"] == "audit" and row["program"] == "sh"
    assert json.loads(row["argv"]) == ["sh", "-c", "exit 3"]
    assert row["exit_code"] == 3 and row["backend"] == "fake" and row["mode"] == "workspace-write"
    assert json.loads(row["capabilities"])["spawn_subprocess"] is True
    assert row["duration_ms"] > 0 and row["outcome"] == "ran"


def test_disabled_config_builds_a_noop_that_always_errors(tmp_path):
    sandbox = build_sandbox(SandboxConfig(enabled=False))
    with pytest.raises(SandboxDisabled, match="sandbox disabled"):
        asyncio.run(sandbox.execute(SandboxCommand("true", session_id="s")))
    with pytest.raises(SandboxDisabled):
        SyncWorkspaceSandbox(SandboxConfig(enabled=False))


def test_async_shell_runs_the_same_pipeline(tmp_path, env):
    async def main():
        config = SandboxConfig(mode="workspace-write", ledger=str(tmp_path / "l.db"),
                               workspace_root=str(tmp_path / "r"))
        asker = FakeApprovalRequester("approved-session")
        async with WorkspaceSandbox(config, env=env, driver=FakeDriver(), hooks=[],
                                    approval=ApprovalGate(asker)) as sandbox:
            outs = await asyncio.gather(*[
                sandbox.execute(SandboxCommand("echo", [str(i)], session_id="same"))
                for i in range(5)])
            caps = SandboxCapabilities(network=NetworkPolicy.allow_all(), spawn_subprocess=True)
            await sandbox.execute(SandboxCommand("true", session_id="same", capabilities=caps))
            return outs, len(sandbox.core.sessions), asker.requests

    outs, sessions, asked = asyncio.run(main())
    assert [o.stdout for o in outs] == [f"{i}\n".encode() for i in range(5)]
    assert sessions == 1 and len(asked) == 1


def test_async_cancellation_kills_the_command(tmp_path, env):
    async def main():
        config = SandboxConfig(mode="workspace-write", ledger=False,
                               workspace_root=str(tmp_path / "r"))
        sandbox = WorkspaceSandbox(config, env=env, driver=FakeDriver(), hooks=[])
        task = asyncio.ensure_future(sandbox.execute(
            SandboxCommand("sh", ["-c", "echo $$ > pid; exec sleep 30"], session_id="c")))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        ws = await sandbox.for_session("c")
        return int(open(f"{ws.cwd}/pid").read())

    pid = asyncio.run(main())
    import os

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_background_process_lifecycle_and_session_close(tmp_path, env):
    sandbox, _ = make(tmp_path, env)
    proc = sandbox.start(SandboxCommand(
        "sh", ["-c", "echo started; while :; do sleep 0.05; done"], session_id="bg"))
    for _ in range(100):
        data, offset = proc.output("stdout", 0)
        if data:
            break
        import time

        time.sleep(0.02)
    assert data == b"started\n" and offset == 8 and proc.running()
    assert proc.output("stdout", offset) == (b"", 8)
    sandbox.close_session("bg")
    assert not proc.running() and proc.returncode is not None


def test_a_process_starting_while_its_session_closes_is_stopped(tmp_path, env):
    # A pool node closed a session while one of its background commands was
    # still starting; the process, tracked by a session already gone, ran on.
    from stockade.sync import perform_start

    sandbox, _ = make(tmp_path, env)
    ws = sandbox.session("late")
    marker = f"30.{os.getpid()}"

    def close_then_start(run):
        sandbox.close_session("late")
        return perform_start(run, sandbox.core, ws)

    with pytest.raises(SandboxError, match="closed while this command started"):
        sandbox.start_with(SandboxCommand("sleep", [marker], session_id="late"),
                           close_then_start)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
                and _cmdline(pid) == f"sleep\0{marker}\0"]
    assert ws.processes == set()


def test_a_session_closed_before_its_commands_profile_leaves_no_cache_layer(tmp_path, env):
    class CloseFirst:
        name = "close-first"

        def before(self, command, session_id):
            sandbox.close_session(session_id)
            return HookDecision.allow()

    sandbox, _ = make(tmp_path, env, hooks=[CloseFirst()])
    sandbox.session("late")
    caches = os.path.join(sandbox.core.state_dir, "caches")
    with pytest.raises(SandboxError, match="was closed"):
        sandbox.execute(SandboxCommand("true", session_id="late"))
    assert not os.path.isdir(caches) or os.listdir(caches) == []


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""


def test_mock_sandbox_records_commands():
    mock = MockSandbox()
    out = asyncio.run(mock.execute(SandboxCommand("ls", session_id="x")))
    assert out.exit_code == 0 and mock.commands[0].program == "ls"


def test_huge_command_is_refused_before_anything_runs():
    with pytest.raises(InvalidCommand, match="over the"):
        SandboxCommand("echo", ["x" * (1 << 20)])


@pytest.mark.parametrize("stderr, path", [
    (b"/bin/sh: 1: cannot create /etc/hosts: Read-only file system", "/etc/hosts"),
    ("mkdir: cannot create directory \u2018.git/hooks\u2019: Read-only file system".encode(),
     ".git/hooks"),
    (b"touch: cannot touch '/root/.bashrc': Read-only file system", "/root/.bashrc"),
])
def test_denial_hint_names_the_path_the_error_is_about(stderr, path):
    from stockade.denial import denial_hint

    assert denial_hint("read-only", stderr, "workspace-write").startswith(
        f"blocked by the sandbox: {path} ")


def test_a_refused_connect_reads_as_network_not_a_file():
    from stockade.denial import likely_sandbox_denied

    stderr = (b'Traceback (most recent call last):\n  File "/usr/lib/python3.11/socket.py", '
              b'line 851, in create_connection\n    sock.connect(sa)\n'
              b'PermissionError: [Errno 13] Permission denied\n')
    assert likely_sandbox_denied(1, None, stderr, sandboxed=True) == "network"


def test_full_access_runs_in_the_workspace_not_in_stockades_cwd(tmp_path, env, monkeypatch):
    config = SandboxConfig(mode="full-access", ledger=False)
    sandbox = SyncWorkspaceSandbox(config, env=env, hooks=[])
    ws = sandbox.open_session("fa", str(tmp_path))
    monkeypatch.chdir("/")
    out = sandbox.execute(SandboxCommand("pwd", session_id="fa"))
    assert out.stdout.decode().strip() == ws.cwd and out.backend == "none"


def test_a_writable_workspace_holding_the_home_is_refused(tmp_path, env):
    """Unless the person's config accepts it: every dotfile a tool runs is in there."""
    sandbox, driver = make(tmp_path, env)
    sandbox.open_session("s", str(tmp_path))  # a directory above the home
    with pytest.raises(CapabilityDenied, match="allow_home_workspace"):
        sandbox.execute(SandboxCommand("true", session_id="s"))
    assert driver.runs == 0
    sandbox, driver = make(tmp_path, env, allow_home_workspace=True)
    sandbox.open_session("s", env["HOME"])
    sandbox.execute(SandboxCommand("true", session_id="s"))
    assert driver.runs == 1


def test_the_accounts_home_is_refused_whatever_home_says(tmp_path):
    """HOME unset, relative or elsewhere once made the real home an ordinary project."""
    import pwd

    real_home = pwd.getpwuid(os.geteuid()).pw_dir
    if not os.path.isdir(real_home):
        pytest.skip(f"this account's home {real_home} does not exist")
    for env in ({"PATH": "/usr/bin:/bin"}, {"HOME": ".", "PATH": "/usr/bin:/bin"},
                {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}):
        sandbox, driver = make(tmp_path, env)
        sandbox.open_session("s", real_home)
        with pytest.raises(CapabilityDenied, match="allow_home_workspace"):
            sandbox.execute(SandboxCommand("true", session_id="s"))
        assert driver.runs == 0


def test_fs_write_in_read_only_is_refused_before_anyone_is_asked(tmp_path, env):
    asker = FakeApprovalRequester("approved-session")
    sandbox, driver = make(tmp_path, env, mode="read-only", requester=asker)
    ws = sandbox.open_session("s", None)
    caps = SandboxCapabilities(fs_write=[ws.cwd], spawn_subprocess=True)
    with pytest.raises(CapabilityDenied, match="fs_write needs workspace-write or full-access"):
        sandbox.execute(SandboxCommand("true", session_id="s", capabilities=caps))
    assert asker.requests == [] and driver.runs == 0
    assert rows(tmp_path)[-1]["outcome"] == "denied"


def test_a_proxy_refusal_for_the_commands_key_marks_it_denied(tmp_path, env):
    from stockade.proxy import ProxyDecision

    sandbox, _ = make(tmp_path, env)
    core = sandbox.core
    core._proxy_decision(ProxyDecision(connection_id=1, session_id="s\x1f1", protocol="http",
                                       host="other.example", port=443, allowed=False,
                                       rule="", reason="not on the allow list"))
    assert core._proxy_refusals["s\x1f1"] == ("other.example", 443, "not on the allow list")


def test_the_denial_hint_is_kept_in_the_ledger(tmp_path, env):
    sandbox, _ = make(tmp_path, env)
    (tmp_path / "proj").mkdir()
    sandbox.open_session("s", str(tmp_path / "proj"))
    # FakeDriver runs unconfined: the error text is what the hint is made from.
    out = sandbox.execute(SandboxCommand(
        "sh", ["-c", "echo 'sh: 1: cannot create /etc/x: Read-only file system' >&2; exit 2"],
        session_id="s"))
    assert out.likely_sandbox_denied and "/etc/x is outside the workspace" in out.denial_hint
    assert json.loads(rows(tmp_path)[-1]["detail"])["hint"] == out.denial_hint


def test_a_command_in_a_directory_whose_name_is_not_utf8_is_still_recorded(tmp_path, env):
    """SQLite refused the name, and the command's record was lost: whatever it did
    there left no trace in the ledger."""
    sandbox, _ = make(tmp_path, env)
    ws = sandbox.session("odd")
    odd = os.fsdecode(os.fsencode(ws.cwd) + b"/x\xff")
    os.mkdir(odd)
    out = sandbox.execute(SandboxCommand("sh", ["-c", "echo ran"], session_id="odd", cwd=odd))
    assert out.stdout == b"ran\n"
    db = sqlite3.connect(str(tmp_path / "ledger.db"))
    cwds = [row[0] for row in db.execute("SELECT cwd FROM executions")]
    starts = [row[0] for row in db.execute("SELECT cwd FROM starts")]
    assert cwds == [ws.cwd + "/x\\xff"] and starts == cwds, (cwds, starts)


def test_a_run_that_ends_with_stockade_gets_an_end_record(tmp_path, env):
    """A `stockade run` ended by SIGTERM (raised in its main thread) left the start
    record alone: read by `audit --follow`, the command was running for ever."""

    class Terminated(BaseException):
        pass

    def perform(run):
        run.launch.cleanup()
        raise Terminated

    sandbox, _ = make(tmp_path, env)
    with pytest.raises(Terminated):
        sandbox.execute_with(SandboxCommand("true", session_id="t"), perform)
    db = sqlite3.connect(str(tmp_path / "ledger.db"))
    starts = list(db.execute("SELECT argv FROM starts"))
    ends = list(db.execute("SELECT outcome, detail FROM executions"))
    assert len(starts) == 1 and len(ends) == 1, (starts, ends)
    assert ends[0][0] == "error"
    assert "ended with stockade, before the command (Terminated)" in ends[0][1]
