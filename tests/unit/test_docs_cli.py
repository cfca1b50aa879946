"""Every command line the docs show is one the parsers accept.

Each `stockade SUB ...` in README.md and docs/*.md, in a code block or inline,
is cut at the end of its code span, a `#` comment or a bare `--` (after which
flags belong to the command), and every `--flag` in it must be an option of
SUB's parser; a `--flag A|B|C` must list exactly the values the parser takes.
The other way round, each option of run, shell, audit, doctor and mcp must
appear in some synopsis of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stockade.clitables import RUN_OPTIONS
from stockade.completion import command_options

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SUBS = "run|explain|shell|doctor|audit|config|policy|proxy|mcp|completion"
START = re.compile(rf"\bstockade ({SUBS})\b")
SAME_AS_RUN = re.compile(r"\[the same options, but ([^\]]*)\]")


def documented() -> list[tuple[str, int, str, str, bool]]:
    """(file, line, subcommand, the command line's text, is a synopsis)."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fenced = False
        for no, line in enumerate(lines, 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            for match in START.finditer(line):
                text = line[match.end():]
                if not fenced:
                    text = text.split("`")[0]
                synopsis = fenced and line.startswith("stockade ") and text.startswith(" [")
                follow = no
                while fenced and follow < len(lines) and (
                        text.rstrip().endswith("\\")
                        or re.match(r"\s+[\[-]", lines[follow])):
                    text += " " + lines[follow].strip()
                    follow += 1
                text = text.split(" #")[0]
                text = re.split(r"(?:^|\s)--(?:\s|$)", text)[0]
                found.append((path.name, no, match.group(1), text, synopsis))
    return found


DOCUMENTED = documented()
OPTIONS = command_options()


def test_the_docs_show_command_lines_at_all():
    subs = {sub for _, _, sub, _, _ in DOCUMENTED}
    assert {"run", "shell", "audit", "doctor", "mcp", "policy", "proxy", "completion"} <= subs


@pytest.mark.parametrize("where, sub, text", [
    (f"{f}:{n}", sub, text) for f, n, sub, text, _ in DOCUMENTED])
def test_each_documented_flag_exists_with_its_values(where, sub, text):
    table = {opt: choices for opt, _, choices in OPTIONS[sub]}
    same = SAME_AS_RUN.search(text)
    if same:
        left_out = set(re.findall(r"--[a-z][a-z-]*", same.group(1)))
        assert left_out == set(RUN_OPTIONS) - set(table), where
        text = SAME_AS_RUN.sub("", text)
    for flag, values in re.findall(r"(--[a-z][a-z-]*)(?:[ =]([^\s\]]+))?", text):
        assert flag in table, f"{where}: `stockade {sub}` has no {flag}"
        if values and "|" in values and table[flag]:
            assert set(values.split("|")) == set(table[flag]), (
                f"{where}: {flag} {values}, but the parser takes {'|'.join(table[flag])}")


@pytest.mark.parametrize("sub", ["run", "shell", "audit", "doctor", "mcp"])
def test_every_option_is_in_a_synopsis(sub):
    shown: set[str] = set()
    for _, _, s, text, synopsis in DOCUMENTED:
        if s == sub and synopsis:
            shown |= set(re.findall(r"--[a-z][a-z-]*", SAME_AS_RUN.sub("", text)))
    missing = {opt for opt, _, _ in OPTIONS[sub]} - shown - {"--help"}
    assert not missing, f"stockade {sub}: no synopsis shows {', '.join(sorted(missing))}"


def test_the_run_json_field_list_is_complete():
    from stockade.command import SandboxOutput

    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("captures output and prints one JSON object"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    fields = set(re.findall(r"`([a-z_]+)`", paragraph))
    keys = set(SandboxOutput(0, None, b"", b"").to_json())
    assert keys <= fields, f"README's --json list lacks {', '.join(sorted(keys - fields))}"
