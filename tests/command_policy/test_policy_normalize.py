"""The normaliser: each fold on its own, the scan target bound, and its invariants."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_corpus import encoded

from stockade.command_policy import normalize
from stockade.command_policy._fold import DECODED_MARKER
from stockade.command_policy.normalize import SCAN_LIMIT, scan_target


@pytest.mark.parametrize(("raw", "expected"), [
    # Quotes that only group or join words.
    ('r""m -rf /', "rm -rf /"),
    ("r''m -rf /", "rm -rf /"),
    ('"r"m -rf /', "rm -rf /"),
    ("'rm' '-rf' '/'", "rm -rf /"),
    # cmd carets (and their line continuation), PowerShell backticks.
    ("f^o^r^m^a^t C:", "format C:"),
    ("rd /s ^\n/q x", "rd /s /q x"),
    ("Get-Item `\n-Force", "Get-Item -Force"),
    # $IFS word splitting, with and without braces, and the $IFS$9 idiom.
    ("rm${IFS}-rf${IFS}/", "rm -rf /"),
    ("rm$IFS-rf$IFS/", "rm -rf /"),
    ("cat$IFS$9/etc/passwd", "cat /etc/passwd"),
    ("a$IFSX", "a$IFSX"),
    # Bash ANSI-C quoting and brace expansion.
    ("$'\\x72\\x6d' -rf /", "rm -rf /"),
    ("$'\\162\\155' x", "rm x"),
    ("{rm,-rf,/}", "rm -rf /"),
    ("rm -rf /{,}", "rm -rf / /"),
    ("x{a,b}y z", "xay xby z"),
    ("a{b,c}{d,e}", "a{b,c}{d,e}"),
    # Path spellings.
    ("rm -rf //", "rm -rf /"),
    ("rm -rf /./", "rm -rf /"),
    ("rm -rf /.", "rm -rf /"),
    ("rm -rf /usr/../*", "rm -rf /*"),
    ("dd of=/dev/../dev/sda", "dd of=/dev/sda"),
    ("ls build/../x", "ls build/../x"),
    ("cat ~/.bashrc /a/.hidden", "cat ~/.bashrc /a/.hidden"),
    ("curl https://example.com//a", "curl https://example.com/a"),
    ("C://Windows", "C:/Windows"),
    # Invisible characters and PowerShell's dashes and quotes.
    ("r\u200bm -rf /", "rm -rf /"),
    ("\ufeffrm\u00ad -rf /", "rm -rf /"),
    ("rm\u202e -rf /", "rm -rf /"),
    ("Remove-Item \u2013Recurse", "Remove-Item -Recurse"),
    ("\u2018rm\u2019 -rf /", "rm -rf /"),
    ("rm\u00a0-rf /", "rm -rf /"),
    # PowerShell string concatenation.
    ("'Am'+'siUtils'", "AmsiUtils"),
    ('"Down" + "loadString"', "DownloadString"),
    ("a + b", "a + b"),
])
def test_fold(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_backslash_is_read_both_ways() -> None:
    # POSIX: an escape (`\r\m` is `rm`); Windows: a path separator.
    text = normalize(r"rd /s /q C:\Windows\..\ & \r\m -rf \/")
    lines = text.split("\n")
    assert "rm -rf /" in lines[0]
    assert "rd /s /q C:/ " in lines[1]


def test_only_lines_with_escapes_get_a_windows_reading() -> None:
    text = normalize("echo one\ndel C:\\x\necho three")
    assert text.split("\n") == ["echo one", "del C:x", "echo three", "del C:/x"]


@pytest.mark.parametrize("raw", [r"rd /s /q \\?\C:\ ", r"rd /s /q \\.\C:\ ", r"rd /s /q \??\C:\ "])
def test_windows_path_prefixes_name_the_drive(raw: str) -> None:
    assert "rd /s /q C:/ " in normalize(raw).split("\n")


def test_encoded_command_is_decoded_and_appended() -> None:
    text = normalize("powershell -NoP -enc " + encoded("Format-Volume -DriveLetter C"))
    assert text == f"powershell -NoP -enc {DECODED_MARKER}\nFormat-Volume -DriveLetter C"


@pytest.mark.parametrize("flag", ["-e", "-ec", "-en", "-enc", "-EncodedCommand", "-ENCODEDCOMMAND",
                                  "/enc", "--encodedcommand", "-encodedc"])
def test_every_spelling_of_the_encoded_flag(flag: str) -> None:
    text = normalize(f"pwsh {flag} {encoded('Clear-Disk -Number 1')}")
    assert text.endswith("\nClear-Disk -Number 1")


def test_nested_encoded_commands_are_all_decoded() -> None:
    inner = "powershell -e " + encoded("vssadmin delete shadows /all")
    text = normalize("powershell -enc " + encoded(inner))
    assert text.split("\n")[-1] == "vssadmin delete shadows /all"


def test_encoded_payload_split_by_backtick_is_decoded() -> None:
    payload = encoded("Clear-Disk -Number 1")
    text = normalize(f"powershell -enc {payload[:6]}`{payload[6:]}")
    assert "Clear-Disk -Number 1" in text.split("\n")


def test_encoded_payload_with_spaces_is_decoded() -> None:
    # Quoted, the payload is one argument, and .NET's decoder skips blanks.
    payload = encoded("Clear-Disk -Number 1")
    spaced = " ".join(payload[i:i + 8] for i in range(0, len(payload), 8))
    lines = normalize(f'powershell -enc "{spaced}" -NoProfile').split("\n")
    assert lines[0] == f"powershell -enc {DECODED_MARKER} -NoProfile"
    # Unquoted, only the first word would be the payload: both are scanned.
    assert lines[1:] == ["Cle", "Clear-Disk -Number 1"]


def test_not_base64_is_left_alone() -> None:
    assert normalize("powershell -e notbase64!") == "powershell -e notbase64!"
    # `-e` of other commands is only decoded on a PowerShell line.
    assert normalize("grep -e " + encoded("abcd")) == "grep -e " + encoded("abcd")


def test_scan_target_joins_program_args_and_stdin() -> None:
    assert scan_target("rm", ["-rf", "/"], None) == ("rm -rf /", False)
    assert scan_target("bash", ["-s"], b"echo hi\n") == ("bash -s\necho hi\n", False)
    assert scan_target("ls", [], None) == ("ls", False)


def test_scan_target_is_cut_at_256_kib() -> None:
    script = b"echo ok\n" * (SCAN_LIMIT // 8) + b"rm -rf /\n"
    text, truncated = scan_target("bash", ["-s"], script)
    assert truncated
    assert len(text.encode()) == SCAN_LIMIT
    assert "rm -rf /" not in text


def test_scan_target_cuts_a_huge_command_line() -> None:
    text, truncated = scan_target("echo", ["x" * (SCAN_LIMIT + 10)], None)
    assert truncated and len(text) == SCAN_LIMIT


def test_undecodable_stdin_bytes_do_not_hide_the_script() -> None:
    text, _ = scan_target("bash", ["-s"], b"\xff\xfe rm -rf / \x80")
    assert "rm -rf /" in normalize(text)


# ---- invariants ----------------------------------------------------------

_TRICKY = st.sampled_from([
    "/", ".", "\\", "`", "^", "'", '"', "$", "IFS", "{", "}", ",", ":", "?", "-", " ", "\n",
    "\r", "\t", ";", "&", "|", "(", ")", "<", ">", "=", "+", "A", "a", "Q", "0", "C", "e",
    "\u200b", "\u2013", "\u2018", "\u00a0", "\x00", "\x0b", "powershell ", "pwsh ", "-enc ",
    "-e ", "$IFS", "${IFS}", "$'", "\\x", "//?/", "\\\\.\\", "..", "/..", "C:", "UNC",
    "PhysicalDrive", "AAAA", "YQA=", "bABzAA==", "://", "https", "\ud800",
])


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_TRICKY, max_size=40).map("".join))
def test_idempotent_on_shell_like_text(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


@settings(max_examples=1500, deadline=None)
@given(st.text())
def test_idempotent_and_total_on_any_text(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=512))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    text, _ = scan_target("bash", ["-s"], data)
    normalize(text)
    normalize(data.decode("latin-1"))


@settings(max_examples=500, deadline=None)
@given(st.text(), st.lists(st.text(), max_size=4), st.binary(max_size=64) | st.none())
def test_scan_target_takes_any_argument_text(program: str, args: list[str],
                                             stdin: bytes | None) -> None:
    # Arguments decoded with surrogateescape (or carrying lone surrogates)
    # must not crash the hook that reads them.
    text, _ = scan_target(program, args, stdin)
    normalize(text).encode("utf-8", "surrogatepass")
    scan_target(program, [*args, "\ud800" * (SCAN_LIMIT // 2)], stdin)


@pytest.mark.parametrize("piece", ["$'\\'", "/..", "a/..", "{a,", "powershell -e AAAA ",
                                   "//?/", "/./", "$IFS", "\\", "`", "'+'", "\u200b", "$'",
                                   "{,}", "/", "a//", "\\\n"])
def test_normalising_is_linear_on_adversarial_text(piece: str) -> None:
    # A quadratic step would take seconds here; a linear one, milliseconds.
    # The bound is loose because the machine running the tests may be busy.
    text = (piece * (SCAN_LIMIT // len(piece) + 1))[:SCAN_LIMIT]
    started = time.perf_counter()
    normalize(text)
    assert time.perf_counter() - started < 1.0
