"""`unreadable`'s workspace patterns: .gitignore-like globs over relative paths."""

import pytest

from stockade import hostpaths
from stockade.patterns import Matcher, expand, walk_matches, workspace_patterns

DOTENV = Matcher(expand(["dotenv"]))


@pytest.mark.parametrize("path", [".env", "app/.env", "a/b/.env.local", ".env.production"])
def test_the_dotenv_preset_hides_env_files_at_any_depth(path):
    assert DOTENV(path)


@pytest.mark.parametrize("path", [".env.example", "app/.env.sample", ".env.template",
                                  "env", "app/env.py", ".envrc", "x.env"])
def test_the_dotenv_preset_leaves_examples_and_lookalikes(path):
    assert not DOTENV(path)


def test_a_pattern_with_a_slash_is_anchored_and_star_stays_in_one_component():
    m = Matcher(("config/*.key",))
    assert m("config/a.key") and not m("x/config/a.key") and not m("config/d/a.key")
    assert Matcher(("**/keys/**",))("a/keys/b/c.pem")


def test_host_paths_and_tokens_are_not_patterns():
    spec = ["default", "dotenv", "~/.aws", "/srv/keys", "*.pem", "none"]
    assert workspace_patterns(spec) == (*expand(["dotenv"]), "*.pem")
    assert workspace_patterns(None) == () and workspace_patterns("none") == ()


def test_default_token_keeps_the_default_set_beside_the_rest():
    env = {"HOME": "/home/u"}
    hidden, _shown = hostpaths.unreadable(["default", "dotenv", "/srv/keys"], env, [],
                                         lambda p: [])
    assert "/home/u/.config" in hidden and "/srv/keys" in hidden
    assert "/home/u/.ssh" in hidden
    only, _ = hostpaths.unreadable(["/srv/keys", "dotenv"], env, [], lambda p: [])
    assert only == ["/srv/keys"]


def test_a_walk_finds_matches_and_follows_no_link(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".env").write_text("x")
    (tmp_path / ".env.example").write_text("x")
    (tmp_path / "out").symlink_to("/etc")
    assert walk_matches(str(tmp_path), DOTENV) == (str(tmp_path / "a" / ".env"),)
