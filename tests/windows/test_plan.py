"""Tier choice and refusal, SIDs, job limits and the host-allowlist refusal (all pure)."""

from __future__ import annotations

import pytest

from stockade.capabilities import NetworkPolicy
from stockade.drivers.base import MEMORY, PIDS
from stockade.drivers.windows import plan
from stockade.errors import ConfigError, SandboxUnavailable

NONE, ALL = NetworkPolicy.none(), NetworkPolicy.allow_all()


# -- tiers ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_job_only_never_runs_a_filesystem_mode_unless_allowed(mode: str) -> None:
    tier2 = (plan.RESTRICTED,) if mode == "read-only" else ()
    tiers, skipped = plan.candidate_tiers(mode, ALL)
    assert tiers == (plan.APPCONTAINER, *tier2)
    assert "windows_allow_job_only" in skipped[plan.JOB_ONLY]
    tiers, skipped = plan.candidate_tiers(mode, ALL, allow_job_only=True)
    assert tiers == (plan.APPCONTAINER, *tier2, plan.JOB_ONLY)


def test_only_the_appcontainer_writes_the_workspace() -> None:
    # Tier 2's Low label cannot keep .git in place: the user's Full Control on the
    # workspace grants DELETE on its children through FILE_DELETE_CHILD.
    for allow in (False, True):
        tiers, skipped = plan.candidate_tiers("workspace-write", ALL, allow_job_only=allow,
                                              allow_open_network=True)
        assert plan.RESTRICTED not in tiers
        assert "runs only read-only commands" in skipped[plan.RESTRICTED]
    tiers, skipped = plan.candidate_tiers("workspace-write", ALL, pinned=plan.RESTRICTED)
    assert tiers == () and plan.RESTRICTED in skipped
    assert plan.RESTRICTED in plan.candidate_tiers("read-only", ALL)[0]


def test_what_outlives_a_run_is_said_per_tier() -> None:
    assert set(plan.LIFETIME) == set(plan.TIERS)
    for tier in (plan.RESTRICTED, plan.JOB_ONLY):
        text = plan.LIFETIME[tier]
        for route in ("WMI", "Task Scheduler", "COM", "explorer", "outlive"):
            assert route in text, (tier, route)
    assert "unconfined" in plan.LIFETIME[plan.JOB_ONLY]
    assert "nothing outlives" not in plan.job_limits.__doc__


def test_full_access_runs_only_in_the_job() -> None:
    # Its write root is the whole filesystem: tiers 1 and 2 could allow that
    # only through a label or grant on a drive root, inherited by every file.
    tiers, skipped = plan.candidate_tiers("full-access", ALL)
    assert tiers == (plan.JOB_ONLY,)
    for tier in (plan.APPCONTAINER, plan.RESTRICTED):
        assert "drive root" in skipped[tier]
    tiers, skipped = plan.candidate_tiers("full-access", ALL, pinned=plan.APPCONTAINER)
    assert tiers == () and "drive root" in plan.refusal("full-access", ALL, {}, skipped).args[0]


def test_a_closed_network_needs_the_appcontainer() -> None:
    # Low integrity and the job object open sockets like any process: a
    # network-none command degrading to them would run with the network on.
    tiers, skipped = plan.candidate_tiers("read-only", NONE)
    assert tiers == (plan.APPCONTAINER,)
    assert "cannot close the network" in skipped[plan.RESTRICTED]
    assert "no filesystem boundary" in skipped[plan.JOB_ONLY]
    tiers, _ = plan.candidate_tiers("read-only", NONE, allow_open_network=True)
    assert tiers == (plan.APPCONTAINER, plan.RESTRICTED)
    tiers, _ = plan.candidate_tiers("read-only", NONE, allow_open_network=True,
                                    allow_job_only=True)
    assert tiers == plan.TIERS


def test_a_pinned_tier_has_no_fallback_and_a_wrong_name_is_a_config_error() -> None:
    assert plan.candidate_tiers("read-only", ALL, pinned=plan.RESTRICTED)[0] == (plan.RESTRICTED,)
    tiers, skipped = plan.candidate_tiers("read-only", ALL, pinned=plan.JOB_ONLY)
    assert tiers == () and plan.JOB_ONLY in skipped
    with pytest.raises(ConfigError, match="windows_tier 'sandboxie'"):
        plan.candidate_tiers("read-only", ALL, pinned="sandboxie")


def test_the_refusal_names_every_tier_and_why() -> None:
    _, skipped = plan.candidate_tiers("workspace-write", NONE)
    err = plan.refusal("workspace-write", NONE, {plan.APPCONTAINER: "CreateAppContainerProfile "
                                                 "failed: error 5"}, skipped)
    text = str(err)
    assert isinstance(err, SandboxUnavailable)
    for tier in plan.TIERS:
        assert tier in text
    assert "never runs a command without the boundary" in text
    assert "stockade doctor" in text


# -- SIDs ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "sid"), [
    # Published SIDs of two Microsoft packages (the legacy Edge and Mail).
    ("microsoft.microsoftedge_8wekyb3d8bbwe",
     "S-1-15-2-3624051433-2125758914-1423191267-1740899205-1073925389-3782572162-737981194"),
    ("Microsoft.MicrosoftEdge_8wekyb3d8bbwe",
     "S-1-15-2-3624051433-2125758914-1423191267-1740899205-1073925389-3782572162-737981194"),
    ("microsoft.windowscommunicationsapps_8wekyb3d8bbwe",
     "S-1-15-2-2551677095-2355568638-4209445997-2436930744-3692183382-387691378-1866284433"),
])
def test_appcontainer_sid_matches_published_values(name: str, sid: str) -> None:
    assert plan.appcontainer_sid(name) == sid


def test_profile_names_are_per_run_and_valid() -> None:
    a, b = plan.profile_name("0123abcd"), plan.profile_name("ffff0000")
    assert a != b and plan.appcontainer_sid(a) != plan.appcontainer_sid(b)
    assert a == "stockade.run.0123abcd"
    with pytest.raises(ValueError):
        plan.profile_name("has space")
    with pytest.raises(ValueError):
        plan.profile_name("x" * 60)


def test_capabilities_follow_the_network_policy() -> None:
    assert plan.capability_sids(NONE) == ()
    assert plan.capability_sids(ALL) == (plan.INTERNET_CLIENT,
                                         plan.PRIVATE_NETWORK_CLIENT_SERVER)
    assert plan.INTERNET_CLIENT_SERVER not in plan.capability_sids(ALL)
    with pytest.raises(SandboxUnavailable, match="host allowlist"):
        plan.capability_sids(NetworkPolicy.allow_hosts(["example.com"]))


# -- the job -------------------------------------------------------------------------


def test_job_limits_from_the_config() -> None:
    lim = plan.job_limits(200, 512)
    assert lim.active_processes == 200
    assert lim.process_memory == 512 * 1024 * 1024
    assert lim.limit_flags == (plan.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
                               | plan.JOB_OBJECT_LIMIT_PROCESS_MEMORY
                               | plan.JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
                               | plan.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE) == 0x2508
    assert lim.ui_restrictions == 0xFF


def test_kill_on_close_and_no_error_dialog_hold_without_limits() -> None:
    lim = plan.job_limits(None, None)
    assert lim.limit_flags == 0x2400
    assert lim.active_processes == 0 and lim.process_memory == 0
    with pytest.raises(ConfigError):
        plan.job_limits(0, None)
    with pytest.raises(ConfigError):
        plan.job_limits(None, -1)


def test_limit_hit_from_job_notifications() -> None:
    assert plan.limit_hit([]) is None
    assert plan.limit_hit([6, 7, 4]) is None  # new process, exit, active zero
    assert plan.limit_hit([plan.JOB_OBJECT_MSG_ACTIVE_PROCESS_LIMIT]) == PIDS
    assert plan.limit_hit([3, plan.JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT]) == MEMORY


# -- the network ---------------------------------------------------------------------


def test_host_allowlist_refusal_lists_the_exact_resolved_addresses() -> None:
    table = {"example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                             "93.184.215.14"],
             "pypi.org": ["151.101.0.223"]}

    def resolve(host: str) -> list[str]:
        if host not in table:
            raise OSError("Name or service not known")
        return table[host]

    err = plan.host_allowlist_refusal(["example.com", "pypi.org", "*.github.com", "nx.invalid"],
                                      resolve)
    text = str(err)
    assert "example.com -> 2606:2800:21f:cb07:6820:80da:af6b:8b2c, 93.184.215.14;" in text
    assert "pypi.org -> 151.101.0.223" in text
    assert "*.github.com (a wildcard: no fixed address)" in text
    assert "nx.invalid (does not resolve: Name or service not known)" in text
    assert "Windows Filtering Platform" in text and "administrator" in text
