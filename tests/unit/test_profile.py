"""profile.py: what a decided `Profile` holds for a mode, a read scope and an env (pure)."""

import os

import pytest

from stockade.boundary import build_profile
from stockade.capabilities import NetworkPolicy, capabilities_for_mode
from stockade.profile import DIR, HOST, STRICT, Profile, ProxyEndpoint


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "id_ed25519").write_text("key")
    (h / "ws").mkdir()
    return h


def profile(home, mode="workspace-write", scope=HOST, **kw) -> Profile:
    ws = str(home / "ws")
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "GITHUB_TOKEN": "t", "LANG": "C.UTF-8"}
    env.update(kw.pop("env", {}))
    return build_profile(mode=mode, workspace=ws, cwd=ws,
                         capabilities=kw.pop("caps", capabilities_for_mode(mode, ws)),
                         read_scope=scope, host_env=env, **kw)


def test_the_workspace_is_writable_only_in_a_writing_mode(home) -> None:
    assert profile(home).workspace_writable
    assert not profile(home, mode="read-only").workspace_writable
    assert profile(home, mode="read-only").write_roots == ()


def test_secrets_in_the_environment_are_dropped_and_the_backend_named(home) -> None:
    env = profile(home, backend="landlock").env
    assert "GITHUB_TOKEN" not in env and env["LANG"] == "C.UTF-8"
    assert env["STOCKADE_SANDBOX"] == "landlock"
    kept = profile(home, secret_env=()).env
    assert kept["GITHUB_TOKEN"] == "t"


def test_credential_stores_are_hidden_unless_granted(home) -> None:
    ssh = os.path.realpath(home / ".ssh")
    assert (ssh, DIR) in profile(home).hidden
    ws = str(home / "ws")
    caps = capabilities_for_mode("workspace-write", ws).replace(fs_read=(ssh,))
    assert not any(p.startswith(ssh) for p, _ in profile(home, caps=caps).hidden)


def test_stockades_own_files_are_hidden_but_never_the_workspace(home, tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    p = profile(home, private=[str(state), str(home)])
    assert (os.path.realpath(state), DIR) in p.hidden
    assert all(path != os.path.realpath(home) for path, _ in p.hidden)  # holds the workspace


def test_the_strict_scope_reads_only_its_roots(home) -> None:
    strict = profile(home, scope=STRICT)
    assert strict.read_scope == STRICT and strict.read_roots
    assert all(not root.startswith(str(home / ".ssh")) for root in strict.read_roots)


def test_network_and_limits_travel_as_given(home) -> None:
    ws = str(home / "ws")
    caps = capabilities_for_mode("workspace-write", ws).replace(
        network=NetworkPolicy.allow_hosts(["example.com"]), max_memory_mb=256)
    p = profile(home, caps=caps, proxy=ProxyEndpoint(port=3128), tmp_size_mb=64)
    assert p.network.kind == NetworkPolicy.HOSTS and p.max_memory_mb == 256
    assert (p.proxy, p.tmp_size_mb) == (ProxyEndpoint(port=3128), 64)
    assert p.proxy is not None and (p.proxy.port, p.proxy.unix_path) == (3128, "")


def test_a_profile_refuses_a_field_it_does_not_have(home) -> None:
    p = profile(home)
    fields = {name: getattr(p, name) for name in Profile.__slots__}
    assert Profile(**fields).workspace == p.workspace
    with pytest.raises(TypeError, match="bogus"):
        Profile(**fields, bogus=1)


def test_a_profile_is_a_value_changed_only_by_replace(home) -> None:
    p = profile(home)
    with pytest.raises(AttributeError, match="frozen"):
        p.cwd = "/elsewhere"  # type: ignore[misc]
    moved = p.replace(cwd="/elsewhere")
    assert (moved.cwd, p.cwd) == ("/elsewhere", p.workspace)
    assert moved.hidden == p.hidden


def test_pips_cache_gets_a_private_layer_offline_too(home, tmp_path) -> None:
    """pip writes its cache offline (a wheel built from `./my-proj`); it was layered
    only with network, so root's pip took the read-only cache for writable."""
    (home / ".cache" / "pip").mkdir(parents=True)
    pip = os.path.realpath(home / ".cache" / "pip")
    layers = str(tmp_path / "layers")
    bwrap = profile(home, cache_dir=layers)
    assert [var for cache, _l, var in bwrap.caches if cache == pip] == ["PIP_CACHE_DIR"]
    assert "PIP_NO_CACHE_DIR" not in bwrap.env
    landlock = profile(home, cache_dir=layers, backend="landlock")
    assert landlock.env["PIP_CACHE_DIR"].startswith(layers)
    assert "PIP_NO_CACHE_DIR" not in landlock.env


def test_pip_is_told_to_do_without_a_cache_it_cannot_write(home, tmp_path) -> None:
    """No layer (no cache yet, `scratch = false`, read-only mode): PIP_NO_CACHE_DIR,
    unless the caller chose pip's cache itself; full access leaves pip alone."""
    layers = str(tmp_path / "layers")
    assert profile(home, cache_dir=layers).env["PIP_NO_CACHE_DIR"] == "1"  # no ~/.cache/pip
    (home / ".cache" / "pip").mkdir(parents=True)
    assert profile(home, cache_dir=layers, use_scratch=False).env["PIP_NO_CACHE_DIR"] == "1"
    assert profile(home, mode="read-only", cache_dir=layers).env["PIP_NO_CACHE_DIR"] == "1"
    chosen = profile(home, command_env={"PIP_CACHE_DIR": "/w/c"}, use_scratch=False).env
    assert chosen["PIP_CACHE_DIR"] == "/w/c" and "PIP_NO_CACHE_DIR" not in chosen
    assert "PIP_NO_CACHE_DIR" not in profile(home, mode="full-access", backend="none").env
