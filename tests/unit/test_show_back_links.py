"""What the allowlist shows back inside a hidden area, on a home with links: it
comes back where it really is, only while it is still the area's, and a
person's own layout (a trailing slash, `/./`, a cache moved to another disk)
does not hide what it must show. Profiles are built on a real tree in tmp_path;
the leaks themselves are attacked end to end in tests/isolation/test_iso_secrets.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode


def _profile(home: Path, ws: Path, **env: str):
    ws.mkdir(exist_ok=True)
    host_env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **env}
    caps = capabilities_for_mode("workspace-write", str(ws))
    return build_profile(mode="workspace-write", workspace=str(ws), cwd=str(ws),
                         capabilities=caps, read_scope="host", host_env=host_env,
                         cache_dir=str(ws.parent / "layers"))


def _shown(profile) -> set[str]:
    return {p for p, _k in profile.shown}


def test_a_path_moved_to_another_disk_by_a_link_is_still_shown(tmp_path: Path) -> None:
    home, disk = tmp_path / "home", tmp_path / "disk"
    (home / ".cache").mkdir(parents=True)
    (disk / "hf" / "hub").mkdir(parents=True)
    os.symlink(disk / "hf", home / ".cache" / "huggingface")
    assert str(disk / "hf" / "hub") in _shown(_profile(home, tmp_path / "ws"))


def test_a_trailing_slash_or_a_dot_in_the_homes_names_hides_nothing_more(
        tmp_path: Path) -> None:
    home, cfg = tmp_path / "home", tmp_path / "cfg"
    (cfg / "git").mkdir(parents=True)
    (home / ".ssh").mkdir(parents=True)
    for name in ("config", "id.pub", "id"):
        (home / ".ssh" / name).write_text("x\n")
    plain = _profile(home, tmp_path / "ws", XDG_CONFIG_HOME=str(cfg))
    assert {str(cfg / "git"), str(home / ".ssh" / "id.pub")} <= _shown(plain)
    for spelled in (f"{cfg}/", f"{tmp_path}/./cfg"):
        assert _shown(_profile(home, tmp_path / "ws", XDG_CONFIG_HOME=spelled)) == \
            _shown(plain), spelled
    dotted = _profile(Path(f"{home}/."), tmp_path / "ws", XDG_CONFIG_HOME=str(cfg))
    assert _shown(dotted) == _shown(plain)
    assert str(home / ".ssh" / "id") not in _shown(dotted)


def test_an_area_that_is_a_link_to_another_shows_nothing_by_its_own_list(
        tmp_path: Path) -> None:
    """`~/.cache -> ~/.config`: the cache area's list (`pypoetry`, `composer`, ...)
    once came back inside ~/.config, where only `pypoetry/config.toml` is listed."""
    home = tmp_path / "home"
    for rel in ("pypoetry/auth.toml", "composer/auth.json", "git/config"):
        (home / ".config" / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / ".config" / rel).write_text("x\n")
    os.symlink(".config", home / ".cache")
    shown = _shown(_profile(home, tmp_path / "ws"))
    assert not {str(home / ".config" / d) for d in ("pypoetry", "composer")} & shown, shown


def test_a_cache_linked_into_a_store_gets_no_layer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".cache" / "uv").mkdir(parents=True)
    os.symlink(home / ".aws", home / ".cache" / "pip")
    profile = _profile(home, tmp_path / "ws")
    assert [c for c, _layer, _var in profile.caches] == [str(home / ".cache" / "uv")]
    assert str(home / ".aws") not in _shown(profile)
