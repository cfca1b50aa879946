"""CLI parsing and exit statuses (the isolation suite runs the real thing)."""

import json
import subprocess
import sys

import pytest

from stockade.cli import RUN_OPTIONS, UsageError, main, parse_options


def test_parse_options_values_flags_repeats_and_command():
    values, cmd = parse_options(
        ["--mode", "workspace-write", "--allow-read=/a", "--allow-read", "/b", "--json", "--",
         "ls", "--bind"], RUN_OPTIONS, "u")
    assert values == {"mode": "workspace-write", "allow_read": ["/a", "/b"], "json": True}
    assert cmd == ["ls", "--bind"]


@pytest.mark.parametrize("argv", [["--nope"], ["--mode"], ["--json=1"]])
def test_parse_errors(argv):
    with pytest.raises(UsageError):
        parse_options(argv, RUN_OPTIONS, "u")


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "stockade", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def test_help_everywhere(tmp_path):
    for args in ([], ["run", "--help"], ["audit", "--help"], ["doctor", "--help"]):
        out = run_cli(*(args or ["--help"]), cwd=tmp_path)
        assert out.returncode == 0 and "usage: stockade" in out.stdout


def test_usage_errors_exit_2_with_one_line(tmp_path):
    out = run_cli("run", cwd=tmp_path)
    assert out.returncode == 2 and "no command given" in out.stderr
    assert run_cli("frobnicate", cwd=tmp_path).returncode == 2


def test_unknown_mode_is_a_usage_error(tmp_path):
    out = run_cli("run", "--mode", "yolo", "--", "true", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("stockade: --mode must be one of read-only, workspace-write, "
                                 "full-access, got 'yolo'\n")


def test_json_result_and_exit_status(tmp_path):
    out = run_cli("run", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 7",
                  cwd=tmp_path)
    result = json.loads(out.stdout)
    assert out.returncode == 7 and result["exit_code"] == 7
    assert result["stdout"] == "out\n" and result["stderr"] == "err\n"
    assert result["backend"] == "bubblewrap"


def test_main_returns_status_in_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--", "true"]) == 0
    assert main(["run", "--", "sh", "-c", "exit 5"]) == 5
