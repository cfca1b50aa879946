"""Loads `corpus.toml` for the command-policy tests (a helper, not a test module)."""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.toml")
_ENC = re.compile(r"ENC\((.*)\)")


def encoded(text: str) -> str:
    """What PowerShell's -EncodedCommand expects: base64 of UTF-16LE."""
    return base64.b64encode(text.encode("utf-16-le")).decode("ascii")


def expand(command: str) -> str:
    return _ENC.sub(lambda m: encoded(m.group(1)), command)


def load() -> dict[str, object]:
    with CORPUS_PATH.open("rb") as fh:
        return tomllib.load(fh)


def rule_cases() -> list[tuple[str, str, bool]]:
    """(rule name, command, evasive) for every [[rule]] entry."""
    cases: list[tuple[str, str, bool]] = []
    for entry in load()["rule"]:  # type: ignore[union-attr]
        for command in entry.get("plain", []):
            cases.append((entry["name"], expand(command), False))
        for command in entry.get("evasive", []):
            cases.append((entry["name"], expand(command), True))
    return cases


def stdin_cases() -> list[tuple[str, str, list[str]]]:
    return [(e["note"], e["script"], list(e["expect"]))
            for e in load()["stdin"]]  # type: ignore[union-attr]


def allowed() -> list[str]:
    return [expand(c) for c in load()["allow"]["commands"]]  # type: ignore[index]
