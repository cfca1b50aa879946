"""The argument builder is pure: these tests run nothing."""

import os

import pytest

from stockade.boundary import build_profile
from stockade.capabilities import NetworkPolicy, SandboxCapabilities, capabilities_for_mode
from stockade.drivers.linux.bwrap import build_bwrap_args
from stockade.drivers.linux.host.bwrap_binary import find_bwrap
from stockade.errors import SandboxUnavailable
from stockade.profile import DIR, FILE, LINK, MISSING, SOCKET

WS = "/work/proj"


def fake_fs(entries):
    return lambda path: entries.get(path, MISSING)


def profile(mode="workspace-write", entries=None, env=None, **kw):
    env = {"HOME": "/home/u", "PATH": "/usr/bin", **(env or {})}
    caps = kw.pop("capabilities", None) or capabilities_for_mode(mode, WS)
    files = {WS: DIR, "/usr": DIR, "/etc": DIR, "/bin": LINK, **(entries or {})}
    return build_profile(mode=mode, workspace=WS, cwd=WS, capabilities=caps,
                         read_scope=kw.pop("read_scope", "host"), host_env=env,
                         kind=fake_fs(files), use_scratch=False, **kw)


def pairs(args, flag):
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_namespaces_and_hardening_flags():
    args = build_bwrap_args(profile(), "/usr/bin/bwrap", inner=["echo", "hi"])
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                 "--unshare-net", "--die-with-parent", "--new-session", "--disable-userns"):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    # The command comes after `--`, so a program named --bind is just a program.
    assert args[-3:] == ["--", "echo", "hi"]


def test_network_all_keeps_the_host_network_namespace():
    caps = capabilities_for_mode("workspace-write", WS).replace(network=NetworkPolicy.allow_all())
    args = build_bwrap_args(profile(capabilities=caps), "bwrap", inner=["true"])
    assert "--unshare-net" not in args


def test_a_launch_that_joins_its_sessions_network_namespace_makes_none():
    args = build_bwrap_args(profile(), "bwrap", inner=["true"], shared_net=True)
    assert "--unshare-net" not in args
    assert "--unshare-pid" in args and "--unshare-user" in args


def test_workspace_writable_only_in_workspace_write():
    assert WS in pairs(build_bwrap_args(profile("workspace-write"), "b", inner=[]), "--bind")
    ro = build_bwrap_args(profile("read-only"), "b", inner=[])
    assert WS not in pairs(ro, "--bind") and WS in pairs(ro, "--ro-bind")


def test_hidden_credentials_are_masked_after_writable_binds():
    entries = {"/home/u/.aws": DIR, "/home/u/.netrc": FILE}
    args = build_bwrap_args(profile(entries=entries), "b", inner=[])
    assert "/home/u/.aws" in pairs(args, "--tmpfs")
    i = args.index("/home/u/.netrc")
    assert args[i - 2:i] == ["--ro-bind", "/dev/null"]
    assert args.index("/home/u/.aws") > args.index(WS)


def test_ssh_dir_hidden_only_when_agent_socket_granted():
    entries = {"/home/u/.ssh": DIR, "/run/agent.sock": SOCKET}
    env = {"SSH_AUTH_SOCK": "/run/agent.sock"}
    plain = profile(entries=entries, env=env)
    granted = profile(entries=entries, env=env, granted_sockets=["ssh-agent"])
    assert ("/home/u/.ssh", DIR) in plain.hidden  # its public names are shown back
    assert ("/home/u/.ssh", DIR) in granted.hidden
    args = build_bwrap_args(granted, "b", inner=[])
    assert "/run/agent.sock" in pairs(args, "--bind")


def test_unreadable_setting_replaces_defaults_and_none_hides_nothing():
    entries = {"/home/u/.aws": DIR, "/secret": FILE}
    assert profile(entries=entries, unreadable=["/secret"]).hidden == (("/secret", FILE),)
    assert profile(entries=entries, unreadable="none").hidden == ()


def test_explicit_read_grant_unhides():
    entries = {"/home/u/.aws": DIR}
    caps = capabilities_for_mode("read-only", WS).replace(fs_read=("/home/u/.aws",))
    assert profile("read-only", entries=entries, capabilities=caps).hidden == ()


def test_container_sockets_masked_unless_granted():
    entries = {"/tmp/d.sock": SOCKET, "/run/docker.sock": SOCKET}
    p = profile(entries=entries, env={"DOCKER_HOST": "unix:///tmp/d.sock"})
    assert set(p.sockets) == {"/tmp/d.sock", "/run/docker.sock"}
    p2 = profile(entries=entries, granted_sockets=["/run/docker.sock"])
    assert "/run/docker.sock" not in p2.sockets


def test_protected_metadata_read_only_and_missing_names_unmounted():
    entries = {f"{WS}/.git": DIR, f"{WS}/.git/hooks": DIR, f"{WS}/.git/config": FILE}
    p = profile(entries=entries)
    args = build_bwrap_args(p, "b", inner=[])
    ro = pairs(args, "--ro-bind")
    assert f"{WS}/.git/hooks" in ro and f"{WS}/.git/config" in ro
    assert f"{WS}/.git" not in ro  # objects, index and refs stay writable for git
    # A missing name gets no mount (its mount point would appear on the host):
    # it is watched, and the guard neutralises what the command leaves there.
    assert f"{WS}/.stockade" not in args and f"{WS}/.envrc" not in args
    watched = {x.path for x in p.protected if x.kind == "watch"}
    assert {f"{WS}/.stockade", f"{WS}/.envrc", f"{WS}/.git/commondir"} <= watched
    assert args.index(f"{WS}/.git/hooks") > args.index(WS)


def test_protected_names_not_applied_in_read_only():
    assert profile("read-only").protected == ()


def test_symlinked_protected_name_fails_closed():
    with pytest.raises(SandboxUnavailable, match="symbolic link"):
        profile(entries={f"{WS}/.git": LINK})


def test_strict_scope_binds_only_system_paths_and_workspace():
    p = profile(read_scope="strict")
    args = build_bwrap_args(p, "b", inner=[])
    assert "/" not in pairs(args, "--ro-bind")
    assert "/usr" in pairs(args, "--ro-bind") and "/etc" in pairs(args, "--ro-bind")
    assert "/bin" in pairs(args, "--symlink") or any(
        a == "/bin" for a in args)  # merged-usr link recreated


def test_environment_is_scrubbed_but_explicit_values_win():
    env = {"LD_PRELOAD": "/evil.so", "PYTHONSTARTUP": "/x", "GITHUB_TOKEN": "t",
           "MY_API_KEY": "k", "AWS_REGION": "r", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    p = profile(env=env, command_env={"GITHUB_TOKEN": "explicit"})
    assert "LD_PRELOAD" not in p.env and "PYTHONSTARTUP" not in p.env
    assert "MY_API_KEY" not in p.env and "AWS_REGION" not in p.env
    assert p.env["GITHUB_TOKEN"] == "explicit"
    assert p.env["LANG"] == "C.UTF-8" and p.env["PYTHONUNBUFFERED"] == "1"
    assert p.env["STOCKADE_SANDBOX"] == "bubblewrap" and p.env["TMPDIR"] == "/tmp"


def test_find_bwrap_skips_workspace_and_relative_path_entries(tmp_path):
    planted = tmp_path / "ws" / "bin"
    planted.mkdir(parents=True)
    fake = planted / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    ws = os.path.realpath(tmp_path / "ws")
    assert find_bwrap(f"{planted}:.:bin", ws) is None
    assert find_bwrap(str(planted), "/elsewhere") == str(fake)


def test_session_tmp_bound_or_fresh_tmpfs():
    assert "/tmp" in pairs(build_bwrap_args(profile(), "b", inner=[]), "--tmpfs")
    args = build_bwrap_args(profile(session_tmp="/state/tmp/abc"), "b", inner=[])
    i = args.index("/state/tmp/abc")
    assert args[i - 1] == "--bind" and args[i + 1] == "/tmp"


def test_fs_write_outside_workspace_is_bound_writable():
    caps = capabilities_for_mode("workspace-write", WS).replace(fs_write=(WS, "/data/out"))
    p = profile(capabilities=caps, entries={"/data/out": DIR})
    assert "/data/out" in p.write_roots
    assert "/data/out" in pairs(build_bwrap_args(p, "b", inner=[]), "--bind-try")


def test_capabilities_default():
    assert SandboxCapabilities().network.kind == "none"


def test_extra_ca_bundle_is_readable_in_every_scope():
    entries = {"/home/u/.config/gcloud": DIR, "/home/u/.config/gcloud/ca.pem": FILE}
    env = {"REQUESTS_CA_BUNDLE": "/home/u/.config/gcloud/ca.pem"}
    host = profile(entries=entries, env=env)
    assert "/home/u/.config/gcloud/ca.pem" in host.read_extra
    assert all(path != "/home/u/.config/gcloud" for path, _ in host.hidden)
    strict = profile(entries=entries, env=env, read_scope="strict")
    assert "/home/u/.config/gcloud/ca.pem" in strict.read_roots


def test_fresh_tmp_is_size_capped_when_bwrap_can():
    args = build_bwrap_args(profile(), "b", inner=[], tmp_size_mb=64)
    i = args.index("--size")
    assert args[i + 1] == str(64 << 20) and args[i + 2:i + 4] == ["--tmpfs", "/tmp"]
    assert "--size" not in build_bwrap_args(profile(), "b", inner=[])


def test_areas_with_something_shown_back_are_left_to_landlock_when_asked():
    from stockade.drivers.linux.bwrap import landlock_areas

    entries = {"/home/u/.config": DIR, "/home/u/.config/git": DIR, "/home/u/.aws": DIR,
               "/home/u/.netrc": FILE}

    def listdir(path):
        return {"/home/u/.config": ["git", "gh"]}.get(path, [])

    p = profile(entries=entries, listdir=listdir)
    assert landlock_areas(p) == ("/home/u/.config",)
    masked = build_bwrap_args(p, "b", inner=[])
    assert "/home/u/.config" in pairs(masked, "--tmpfs")
    assert "/home/u/.config/git" in pairs(masked, "--ro-bind-try")
    left = build_bwrap_args(p, "b", inner=[], unmasked=landlock_areas(p))
    assert "/home/u/.config" not in pairs(left, "--tmpfs")
    assert "/home/u/.config/git" not in left
    # What is hidden whole, and a file, keep their mounts beside Landlock's rules.
    assert "/home/u/.aws" in pairs(left, "--tmpfs")
    i = left.index("/home/u/.netrc")
    assert left[i - 2:i] == ["--ro-bind", "/dev/null"]


def test_the_view_a_parked_init_checks_is_what_bwrap_mounts_and_leaves_visible():
    """Each path under a writable root that a mount shows: the host's own object (a
    pin, a read-only bind, a granted socket) or a cover (a mask, a private copy).
    What a mask hides is not looked for (it is not there to see), but a granted
    socket bound again inside it is: swapped around the park, it led elsewhere."""
    from stockade.drivers.linux.bwrap import mounted_over_writable

    entries = {f"{WS}/.git": DIR, f"{WS}/.git/hooks": DIR, f"{WS}/.git/config": FILE,
               f"{WS}/secret": DIR, f"{WS}/secret/app": DIR,
               f"{WS}/secret/app/agent.sock": SOCKET, f"{WS}/secret/d.sock": SOCKET}
    p = profile(entries=entries, unreadable=[f"{WS}/secret"],
                granted_sockets=[f"{WS}/secret/app/agent.sock"],
                env={"DOCKER_HOST": f"unix://{WS}/secret/d.sock"})
    assert dict(mounted_over_writable(p)) == {
        f"{WS}/.git": True, f"{WS}/.git/hooks": True, f"{WS}/.git/config": False,
        f"{WS}/secret": False, f"{WS}/secret/app/agent.sock": True}
    # The covered socket inside the mask gets no mount of its own: its mount
    # point cannot be made in the mask's read-only tmpfs.
    args = build_bwrap_args(p, "b", inner=[])
    assert f"{WS}/secret/d.sock" not in args
    assert mounted_over_writable(profile("read-only", entries=entries)) == []
