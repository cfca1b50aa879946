import re

import pytest

from stockade.config import SandboxConfig, load_config
from stockade.errors import ConfigError


def write(tmp_path, text):
    path = tmp_path / "stockade.toml"
    path.write_text(text)
    return str(path)


def test_defaults():
    c = SandboxConfig()
    assert c.enabled and c.default_timeout_seconds == 60.0 and c.max_output_bytes == 1 << 20
    assert c.mode == "read-only" and c.backend == "auto" and c.unreadable is None


def test_file_then_overrides(tmp_path):
    path = write(tmp_path, '[sandbox]\nmode = "workspace-write"\nwritable = ["~/out"]\n'
                 'default_timeout_seconds = 5\n')
    c = load_config({}, str(tmp_path), paths=[path], mode=None, backend="none")
    assert c.mode == "workspace-write" and c.writable == ["~/out"]
    assert c.default_timeout_seconds == 5 and c.backend == "none" and c.sources == [path]


def test_project_file_is_found_in_cwd(tmp_path):
    user = tmp_path / "home" / ".config" / "stockade"
    user.mkdir(parents=True)
    (user / "config.toml").write_text('[sandbox]\nmode = "workspace-write"\n')
    project = write(tmp_path, '[sandbox]\nmode = "read-only"\n')
    config = load_config({"HOME": str(tmp_path / "home")}, str(tmp_path))
    assert config.mode == "read-only" and config.project_sources == [project]


@pytest.mark.parametrize("text, message", [
    ("[sandbox\nmode=1", "malformed TOML"),
    ('[sandbox]\nmdoe = "read-only"\n', "unknown key [sandbox] 'mdoe'"),
    ('[sandbox]\nmode = "yolo"\n', "mode = 'yolo' is not one of"),
    ("[sandbox]\ndefault_timeout_seconds = -1\n", "default_timeout_seconds must be"),
    ('[sandbox]\nwritable = "not-a-list"\n', "writable must be"),
    ('[other]\nx = 1\n', "unknown table or key 'other'"),
    ("[sandbox]\nenabled = \"yes\"\n", "enabled must be a bool"),
])
def test_bad_files_name_the_key_and_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_config({}, str(tmp_path), paths=[path])
    assert path in str(info.value)


def test_unknown_keyword_is_an_error():
    with pytest.raises(ConfigError, match="unknown sandbox setting"):
        SandboxConfig(colour="blue")


def test_unreadable_accepts_none_string_or_list(tmp_path):
    for value in ('"none"', '["~/.aws"]', '"~/.aws:~/.kube"'):
        path = write(tmp_path, f"[sandbox]\nunreadable = {value}\n")
        load_config({}, str(tmp_path), paths=[path])


def test_settings_are_keywords_and_an_unknown_one_is_a_config_error() -> None:
    """`SandboxConfig(mode="yolo", bogus=1)` is refused by mypy (no such keyword) and here."""
    with pytest.raises(ConfigError, match=r"unknown sandbox setting.*bogus"):
        SandboxConfig(mode="read-only", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="mode = 'yolo' is not one of"):
        SandboxConfig(mode="yolo")
    with pytest.raises(ConfigError, match="writable must be a list of strings"):
        SandboxConfig(writable="/tmp")
    assert SandboxConfig(writable=("/a",)).writable == ["/a"]


@pytest.mark.parametrize("key", ["default_timeout_seconds", "approval_timeout_seconds"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0, -1.5])
def test_a_timeout_must_be_a_positive_finite_number(key: str, value: float) -> None:
    # inf passed the old check and overflowed the first timed wait it reached
    with pytest.raises(ConfigError, match=f"{key} must be a positive finite number"):
        SandboxConfig(**{key: value})
