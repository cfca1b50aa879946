"""Command lines for CreateProcessW, checked by round trip through CommandLineToArgvW's rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from win_fakes import CMD, PYEXE

from stockade.drivers.windows.cmdline import (
    command_env,
    command_line,
    environment_block,
    quote_arg,
    resolve_program,
    split_command_line,
)
from stockade.errors import InvalidCommand, SandboxUnavailable


@pytest.mark.parametrize(("line", "argv"), [
    # The documented examples of CommandLineToArgvW / the C runtime.
    ('prog "a b c" d e', ["prog", "a b c", "d", "e"]),
    ('prog "ab\\"c" "\\\\" d', ["prog", 'ab"c', "\\", "d"]),
    ('prog a\\\\\\b d"e f"g h', ["prog", "a\\\\\\b", "de fg", "h"]),
    ('prog a\\\\\\"b c d', ["prog", 'a\\"b', "c", "d"]),
    ('prog a\\\\\\\\"b c" d e', ["prog", "a\\\\b c", "d", "e"]),
    ('prog "a b""c"', ["prog", 'a b"c']),
    ('"C:\\Program Files\\x.exe" y', ["C:\\Program Files\\x.exe", "y"]),
    ('C:\\dir\\"x y', ['C:\\dir\\"x', "y"]),
])
def test_split_follows_the_documented_examples(line: str, argv: list[str]) -> None:
    assert split_command_line(line) == argv


@pytest.mark.parametrize(("arg", "quoted"), [
    ("plain", "plain"),
    ("", '""'),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\path with\\", '"C:\\path with\\\\"'),
    ("back\\slash", "back\\slash"),
    ('tail\\"', '"tail\\\\\\""'),
])
def test_quote_arg(arg: str, quoted: str) -> None:
    assert quote_arg(arg) == quoted


_ARG = st.text(alphabet=st.sampled_from(list('ab \t"\\\n\'^&|<>%!éö')), max_size=12)


@given(st.lists(_ARG, max_size=6))
def test_round_trip(args: list[str]) -> None:
    argv = ["C:\\Program Files\\tool.exe", *args]
    assert split_command_line(command_line(argv)) == argv


@given(st.lists(_ARG, max_size=6))
def test_round_trip_without_spaces_in_the_program(args: list[str]) -> None:
    argv = [PYEXE, *args]
    assert split_command_line(command_line(argv)) == argv


def test_program_names_cannot_hold_quotes_and_nul_is_refused() -> None:
    with pytest.raises(InvalidCommand, match="quote"):
        command_line(['C:\\a"b.exe'])
    with pytest.raises(InvalidCommand, match="NUL"):
        command_line([PYEXE, "a\x00b"])
    with pytest.raises(InvalidCommand):
        command_line([])


def test_cmd_gets_its_command_verbatim() -> None:
    # cmd does not use the C runtime's parser: /s strips the one pair of
    # quotes and runs the rest as written, `&` and `%` included.
    text = 'echo "a & b" %PATH% ^| more'
    assert command_line([CMD, "/c", text]) == f'{CMD} /d /s /c "{text}"'
    assert command_line([CMD, "/d", "/s", "/c", "dir"]) == f'{CMD} /d /s /c "dir"'
    assert command_line(["cmd", "/q", "/c", "ver"]) == 'cmd /d /s /q /c "ver"'


def test_resolve_program_uses_path_and_pathext_never_the_cwd() -> None:
    files = {CMD.lower(), PYEXE.lower(), "c:\\tools\\run.bat"}
    env = {"Path": "C:\\Windows\\System32;relative\\dir;C:\\Tools;C:\\Tools\\Python",
           "PATHEXT": ".COM;.EXE;.BAT"}

    def is_file(path: str) -> bool:
        return path.lower() in files

    assert resolve_program("cmd", env, is_file).lower() == CMD.lower()
    assert resolve_program("python", env, is_file).lower() == PYEXE.lower()
    assert resolve_program(PYEXE, env, is_file) == PYEXE
    with pytest.raises(InvalidCommand, match="batch file"):
        resolve_program("run", env, is_file)
    with pytest.raises(InvalidCommand, match="relative path"):
        resolve_program(".\\python.exe", env, is_file)
    with pytest.raises(SandboxUnavailable, match="cannot find git"):
        resolve_program("git", env, is_file)


def test_env_scrub_is_case_insensitive_and_sets_temp() -> None:
    env = command_env({"Path": "C:\\x", "PythonStartup": "C:\\evil.py", "PYTHONUTF8": "1",
                       "node_options": "--require evil", "COR_ENABLE_PROFILING": "1",
                       "COR_PROFILER_PATH": "C:\\evil.dll", "CORECLR_PROFILER": "{x}",
                       "DOTNET_STARTUP_HOOKS": "C:\\evil.dll", "__COMPAT_LAYER": "RunAsInvoker",
                       "Ld_Preload": "x", "TMPDIR": "/tmp", "temp": "C:\\Users\\dev\\Temp",
                       "PATH": "C:\\dup", "SystemRoot": "C:\\Windows"},
                      temp="C:\\run\\tmp")
    assert env == {"Path": "C:\\x", "PYTHONUTF8": "1", "SystemRoot": "C:\\Windows",
                   "TEMP": "C:\\run\\tmp", "TMP": "C:\\run\\tmp"}


def test_environment_block_is_sorted_and_double_terminated() -> None:
    block = environment_block({"b": "2", "A": "1", "Path": "C:\\x"})
    assert block == "A=1\x00b=2\x00Path=C:\\x\x00\x00"
    with pytest.raises(InvalidCommand):
        environment_block({"A=B": "1"})
    with pytest.raises(InvalidCommand):
        environment_block({"A": "1\x002"})
