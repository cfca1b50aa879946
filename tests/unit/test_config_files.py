"""Settings files are read without waiting, without following the workspace's links, and
within a bound: a FIFO, a link or a huge file planted as `stockade.toml` is a one-line
ConfigError, never a hang, another file's word, or all of memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stockade.config import load_config, read_project_file
from stockade.errors import ConfigError
from stockade.settingsfile import MAX_SETTINGS_BYTES
from stockade.trust import TrustStore
from stockade.trustcmd import list_trusted, trust_file

REPO = Path(__file__).resolve().parents[2]
#: Long enough for a start-up, far shorter than "forever".
HANG = 30


@pytest.fixture
def home(tmp_path: Path) -> tuple[dict[str, str], Path]:
    home = tmp_path / "home"
    (home / ".config" / "stockade").mkdir(parents=True)
    (home / ".config" / "stockade" / "config.toml").write_text(
        '[sandbox]\nmode = "workspace-write"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    return {"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")}, ws


def in_child(code: str, *args: str, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter, so a read that blocks forever fails the test by its
    timeout instead of hanging the run."""
    full = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=HANG, cwd=cwd, env=full)


# -- a FIFO ------------------------------------------------------------------------------

def test_a_fifo_project_file_is_refused_not_waited_on(home: tuple[dict[str, str], Path]) -> None:
    env, ws = home
    os.mkfifo(ws / "stockade.toml")
    with pytest.raises(ConfigError, match=r"stockade\.toml: not a regular file \(a FIFO\)"):
        load_config(env, str(ws))


def test_an_empty_directory_for_a_project_file_is_no_file(home: tuple[dict[str, str], Path]
                                                           ) -> None:
    """The Windows driver's stub for a missing `stockade.toml` (kept while a command
    runs, and after a crash until replayed) made every other start in the workspace
    fail; it holds no settings, so it is none. A directory that holds anything stays
    an error: it is not what the person meant."""
    env, ws = home
    (ws / "stockade.toml").mkdir()
    assert load_config(env, str(ws)).project_sources == []
    assert read_project_file(str(ws / "stockade.toml")) is None
    (ws / "stockade.toml" / "x").write_text("")
    with pytest.raises(ConfigError, match=r"stockade\.toml: not a regular file \(a directory\)"):
        load_config(env, str(ws))


def test_reading_a_project_file_that_became_a_fifo_does_not_block(tmp_path: Path) -> None:
    """`stockade trust` and `load_config` looked (isfile) before they opened: a FIFO put
    there in between was opened for reading, which waits for a writer that never comes."""
    fifo = tmp_path / "stockade.toml"
    os.mkfifo(fifo)
    out = in_child("""
        import sys
        from stockade.config import read_project_file
        from stockade.errors import ConfigError
        try:
            read_project_file(sys.argv[1])
        except ConfigError as exc:
            print(exc)
        """, str(fifo))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{fifo}: not a regular file (a FIFO); remove it"


def test_run_in_a_workspace_with_a_fifo_settings_file_fails_in_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "stockade.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "STOCKADE"))}
    env["HOME"] = str(tmp_path / "home")
    out = subprocess.run([sys.executable, "-m", "stockade", "run", "--", "sh", "-c",
                          "echo ran"], capture_output=True, text=True, cwd=ws, env=env,
                         timeout=HANG)
    assert out.returncode == 78, out.stderr
    assert out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith("stockade: ConfigError: ")
    assert "stockade.toml: not a regular file (a FIFO); remove it" in out.stderr


# -- a symbolic link ---------------------------------------------------------------------

def test_a_symlinked_project_file_is_refused(home: tuple[dict[str, str], Path],
                                             tmp_path: Path) -> None:
    env, ws = home
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("[sandbox]\nmax_pids = 10\n")
    os.symlink(elsewhere, ws / "stockade.toml")
    with pytest.raises(ConfigError, match=r"stockade\.toml: is a symbolic link"):
        load_config(env, str(ws))
    # Dangling, it is no more "no file" than it is a file.
    elsewhere.unlink()
    with pytest.raises(ConfigError, match="symbolic link"):
        load_config(env, str(ws))


def test_a_link_to_another_projects_trusted_file_widens_nothing(
        home: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    """A command in one workspace links its stockade.toml to a file the person trusted in
    another: that file's widening must not become this workspace's."""
    env, ws = home
    trusted = ws / "stockade.toml"
    trusted.write_text('[sandbox]\nmode = "full-access"\n')
    trust_file(str(trusted), env, str(ws))
    assert load_config(env, str(ws)).mode == "full-access"
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(trusted, other / "stockade.toml")
    with pytest.raises(ConfigError, match="symbolic link"):
        load_config(env, str(other))
    # Nor is a link what the store's record answers for.
    assert TrustStore.for_env(env).recorded(str(other / "stockade.toml")) is None


def test_the_users_own_config_may_be_a_link(home: tuple[dict[str, str], Path],
                                            tmp_path: Path) -> None:
    env, ws = home
    config = Path(env["HOME"]) / ".config" / "stockade" / "config.toml"
    dotfiles = tmp_path / "dotfiles.toml"
    dotfiles.write_text("[sandbox]\nmax_pids = 77\n")
    config.unlink()
    os.symlink(dotfiles, config)
    assert load_config(env, str(ws)).max_pids == 77


def test_trust_refuses_a_symlink(home: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, ws = home
    target = tmp_path / "target.toml"
    target.write_text('[sandbox]\nmode = "full-access"\n')
    os.symlink(target, ws / "stockade.toml")
    with pytest.raises(ConfigError, match="symbolic link"):
        trust_file(str(ws / "stockade.toml"), env, str(ws))
    assert TrustStore.for_env(env).entries() == {}


# -- too large ---------------------------------------------------------------------------

def test_an_oversized_project_file_is_refused(home: tuple[dict[str, str], Path]) -> None:
    env, ws = home
    padding = "#" * 79 + "\n"
    body = "[sandbox]\nmax_pids = 10\n" + padding * (MAX_SETTINGS_BYTES // len(padding) + 1)
    (ws / "stockade.toml").write_text(body)
    with pytest.raises(ConfigError, match=r"stockade\.toml: larger than 1 MiB"):
        load_config(env, str(ws))


def test_a_huge_sparse_project_file_is_not_read(tmp_path: Path) -> None:
    """A terabyte of holes costs nothing to plant; reading it whole did not fit in memory."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with open(ws / "stockade.toml", "wb") as fh:
        fh.truncate(1 << 40)
    out = in_child("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
        from stockade.config import load_config
        from stockade.errors import ConfigError
        try:
            load_config({"HOME": sys.argv[1]}, sys.argv[2])
        except ConfigError as exc:
            print(exc)
        """, str(tmp_path / "home"), str(ws))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{ws / 'stockade.toml'}: larger than 1 MiB"), out.stdout


# -- the trust store and its listing -----------------------------------------------------

def test_listing_does_not_wait_on_a_trusted_file_replaced_by_a_fifo(
        home: tuple[dict[str, str], Path]) -> None:
    env, ws = home
    path = ws / "stockade.toml"
    path.write_text('[sandbox]\nmode = "full-access"\n')
    trust_file(str(path), env, str(ws))
    path.unlink()
    os.mkfifo(path)
    out = in_child("""
        import json, sys
        from stockade.trustcmd import list_trusted
        print("\\n".join(list_trusted(json.loads(sys.argv[1]))))
        """, json.dumps(env))
    assert out.returncode == 0, out.stderr
    assert "not a regular file (a FIFO)" in out.stdout and "untrusted" in out.stdout


def test_listing_reports_a_trusted_file_replaced_by_a_link(
        home: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, ws = home
    path = ws / "stockade.toml"
    text = '[sandbox]\nmode = "full-access"\n'
    path.write_text(text)
    trust_file(str(path), env, str(ws))
    same = tmp_path / "same.toml"
    same.write_text(text)
    path.unlink()
    os.symlink(same, path)
    [line] = list_trusted(env)
    assert "symbolic link" in line and "untrusted" in line


def test_a_fifo_trust_store_is_refused_not_waited_on(
        home: tuple[dict[str, str], Path]) -> None:
    env, ws = home
    (ws / "stockade.toml").write_text('[sandbox]\nmode = "full-access"\n')
    store = Path(env["XDG_STATE_HOME"]) / "stockade" / "trusted.json"
    store.parent.mkdir(parents=True)
    os.mkfifo(store, 0o600)
    out = in_child("""
        import json, sys
        from stockade.config import load_config
        from stockade.errors import ConfigError
        try:
            load_config(json.loads(sys.argv[1]), sys.argv[2])
        except ConfigError as exc:
            print(exc)
        """, json.dumps(env), str(ws))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"{store}: the trust store is not a regular file (a FIFO); "
                                  "remove it and trust the files again")


def test_read_project_file_says_when_there_is_none(tmp_path: Path) -> None:
    assert read_project_file(str(tmp_path / "stockade.toml")) is None


def test_two_stockades_making_the_state_directory_at_once_both_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight overlapping runs: one saw XDG_STATE_HOME missing, another made it first,
    and the first refused to run with "File exists"."""
    from stockade import paths

    state = tmp_path / "state"
    real_isdir = os.path.isdir

    def late(path: object) -> bool:
        if str(path) == str(state) and not real_isdir(state):
            state.mkdir(mode=0o700)  # the other process, between the look and the mkdir
            return False
        return real_isdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(paths.os.path, "isdir", late)
    paths.make_own_dir(str(state / "stockade"), {"XDG_STATE_HOME": str(state)},
                       "XDG_STATE_HOME")
    assert real_isdir(state / "stockade")
