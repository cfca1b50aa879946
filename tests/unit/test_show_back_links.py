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


def test_a_cache_that_holds_a_hidden_path_gets_no_layer(tmp_path: Path) -> None:
    """A layer over a cache is a window over everything in it: `~/.cache/pip -> .` laid
    it over the whole cache area (`huggingface/token`), `GOCACHE=~/.local` over the
    keyrings."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("x\n")
    (home / ".local" / "share" / "keyrings").mkdir(parents=True)
    os.symlink(".", home / ".cache" / "pip")
    for env in ({}, {"GOCACHE": str(home / ".local")}):
        caches = [c for c, _layer, _var in _profile(home, tmp_path / "ws", **env).caches]
        assert not [c for c in caches if not c.startswith(str(home / ".cache") + "/")], env
        assert str(home / ".cache") not in caches, env


def test_an_area_moved_into_another_keeps_its_list(tmp_path: Path) -> None:
    """`~/.cargo -> ~/.local/share/cargo`, as people link it after moving cargo into
    their data directory: cargo's binaries and registry still come back."""
    home = tmp_path / "home"
    for rel in ("bin", "registry"):
        (home / ".local" / "share" / "cargo" / rel).mkdir(parents=True)
    os.symlink(home / ".local" / "share" / "cargo", home / ".cargo")
    shown = _shown(_profile(home, tmp_path / "ws"))
    assert str(home / ".local" / "share" / "cargo" / "bin") in shown, shown


def test_a_cache_named_by_its_variable_in_an_area_spelled_twice_keeps_its_layer(
        tmp_path: Path) -> None:
    home, disk = tmp_path / "home", tmp_path / "disk"
    (disk / "cache" / "gobuild").mkdir(parents=True)
    home.mkdir()
    os.symlink(disk / "cache", home / ".cache")
    profile = _profile(home, tmp_path / "ws", XDG_CACHE_HOME=str(disk / "cache"),
                       GOCACHE=str(disk / "cache" / "gobuild"))
    assert str(disk / "cache" / "gobuild") in [c for c, _l, _v in profile.caches]


def test_odd_spellings_of_the_home_hide_nothing_more_and_never_fail(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    plain = _shown(_profile(home, tmp_path / "ws"))
    assert str(home / ".config" / "git") in plain
    assert _shown(_profile(Path("/" + str(home)), tmp_path / "ws")) == plain
    deep = "/x" + "/." * 1200
    _profile(home, tmp_path / "ws", XDG_CONFIG_HOME=deep, XDG_CACHE_HOME="/x" + "/d" * 1000)


def test_an_area_kept_elsewhere_by_a_link_stays_hidden_around_the_workspace(
        tmp_path: Path) -> None:
    """`~/.config -> ~/dotfiles/config` with the workspace in `~/.config/nvim`: a link at
    an area's name that led to a directory holding the workspace hid nothing, and
    `gh`'s token beside the workspace was readable (meant for `ln -s ~ ~/.azure`)."""
    home = tmp_path / "home"
    (home / "dotfiles" / "config" / "gh").mkdir(parents=True)
    (home / "dotfiles" / "config" / "nvim").mkdir()
    os.symlink(home / "dotfiles" / "config", home / ".config")
    profile = _profile(home, home / "dotfiles" / "config" / "nvim")
    hidden = {p for p, _k in profile.hidden}
    assert str(home / "dotfiles" / "config" / "gh") in hidden, hidden
    # A link to the home itself still hides nothing (the whole home would go).
    home2 = tmp_path / "home2"
    home2.mkdir()
    os.symlink(home2, home2 / ".azure")
    assert str(home2) not in {p for p, _k in _profile(home2, home2 / "ws").hidden}


def test_two_areas_of_one_name_show_only_what_both_list(tmp_path: Path) -> None:
    """`XDG_CACHE_HOME=~/.config`: the cache area's list once came back inside ~/.config
    (`pypoetry`, `composer`: their logins)."""
    home = tmp_path / "home"
    for rel in ("pypoetry", "composer", "pip"):
        (home / ".config" / rel).mkdir(parents=True)
    for spelled in (str(home / ".config"), f"{home}/.config/"):
        shown = _shown(_profile(home, tmp_path / "ws", XDG_CACHE_HOME=spelled))
        assert not {str(home / ".config" / d) for d in ("pypoetry", "composer")} & shown
        assert str(home / ".config" / "pip") in shown  # on both lists


def test_a_cache_named_inside_a_store_gets_no_layer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".aws" / "cli" / "cache").mkdir(parents=True)
    profile = _profile(home, tmp_path / "ws", GOCACHE=str(home / ".aws" / "cli" / "cache"))
    assert not [c for c, _l, _v in profile.caches if c.startswith(str(home / ".aws"))]
    assert not [p for p, _k in profile.shown if p.startswith(str(home / ".aws"))]


def test_an_area_kept_elsewhere_keeps_its_list_around_the_workspace(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for rel in ("gh", "git", "nvim/proj"):
        (home / "dotfiles" / "config" / rel).mkdir(parents=True)
    os.symlink("dotfiles/config", home / ".config")
    profile = _profile(home, home / "dotfiles" / "config" / "nvim" / "proj")
    hidden = {p for p, _k in profile.hidden}
    config = home / "dotfiles" / "config"
    assert str(config / "gh") in hidden and str(config / "git") not in hidden, hidden


def test_a_link_at_a_stores_name_to_the_workspace_leaves_the_workspace_alone(
        tmp_path: Path) -> None:
    """`~/.azure -> ~/proj` with the workspace `~/proj` (a link an earlier command in a
    workspace of ~ could plant): the workspace was masked whole."""
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "main.c").write_text("int main;\n")
    os.symlink("proj", home / ".azure")
    hidden = {p for p, _k in _profile(home, home / "proj").hidden}
    assert not [p for p in hidden if p.startswith(str(home / "proj"))], hidden


def test_a_cache_where_two_areas_share_a_name_gets_no_layer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "go-build").mkdir(parents=True)
    (home / ".aws" / "pip").mkdir(parents=True)
    for spelled in (str(home / ".config"), f"{home}/.aws/"):
        profile = _profile(home, tmp_path / "ws", XDG_CACHE_HOME=spelled)
        assert not [c for c, _l, _v in profile.caches], (spelled, profile.caches)


def test_an_area_named_again_by_its_own_variable_keeps_its_caches(tmp_path: Path) -> None:
    """`XDG_CACHE_HOME=~/.cache`, as many set it: the same list twice, not two lists."""
    home = tmp_path / "home"
    (home / ".cache" / "pip").mkdir(parents=True)
    for spelled in (str(home / ".cache"), f"{home}/.cache/"):
        profile = _profile(home, tmp_path / "ws", XDG_CACHE_HOME=spelled)
        assert [c for c, _l, _v in profile.caches] == [str(home / ".cache" / "pip")], spelled
