"""The corpus in `corpus.toml` against the default rules.

A rule that stops matching one of its spellings, or a fold that stops
working, fails here by name; so does a rule that starts matching an
everyday command.
"""

from __future__ import annotations

import pytest
import re2
from policy_corpus import allowed, rule_cases, stdin_cases

from stockade.command_policy import DEFAULT_RULES, CommandPolicy
from stockade.command_policy.rules import BLOCK, WARN

POLICY = CommandPolicy()
RULES = {rule.name: rule for rule in DEFAULT_RULES}
RULE_CASES = rule_cases()
ALLOWED = allowed()


def _raw_matches(rule_name: str, text: str) -> bool:
    options = re2.Options()
    options.log_errors = False
    return re2.compile(RULES[rule_name].regex, options).search(text) is not None


@pytest.mark.parametrize(("rule", "command", "evasive"), RULE_CASES,
                         ids=[f"{r}:{c[:50]!r}" for r, c, _ in RULE_CASES])
def test_rule_catches_spelling(rule: str, command: str, evasive: bool) -> None:
    verdict = POLICY.check("sh", ["-c", command])
    names = [m.name for m in verdict.matches]
    assert rule in names, f"{rule} missed {command!r}; normalised: {verdict.normalized!r}"
    if evasive:
        # The spelling must defeat the rule as written, or it proves nothing
        # about the normaliser.
        assert not _raw_matches(rule, "sh -c " + command), (
            f"{command!r} already matches {rule} before normalisation; list it as plain")
    assert verdict.blocked == any(m.action == BLOCK for m in verdict.matches)


@pytest.mark.parametrize("command", ALLOWED, ids=[c[:60] for c in ALLOWED])
def test_everyday_command_matches_nothing(command: str) -> None:
    verdict = POLICY.check("sh", ["-c", command])
    assert verdict.matches == (), (
        f"{command!r} matched {[m.name for m in verdict.matches]}; "
        f"normalised: {verdict.normalized!r}")


@pytest.mark.parametrize(("note", "script", "expect"), stdin_cases(),
                         ids=[n for n, _, _ in stdin_cases()])
def test_stdin_script(note: str, script: str, expect: list[str]) -> None:
    verdict = POLICY.check("bash", ["-s"], script.encode())
    assert sorted(m.name for m in verdict.matches) == sorted(expect), verdict.normalized


def test_corpus_covers_every_rule() -> None:
    covered = {rule for rule, _, _ in RULE_CASES}
    assert covered == set(RULES), f"rules without corpus entries: {set(RULES) - covered}"


def test_every_block_rule_has_three_evasions() -> None:
    for rule in DEFAULT_RULES:
        if rule.action != BLOCK:
            continue
        evasions = [c for r, c, evasive in RULE_CASES if r == rule.name and evasive]
        assert len(evasions) >= 3, f"{rule.name} has {len(evasions)} evasive spellings"


def test_corpus_size() -> None:
    total = len(RULE_CASES) + len(ALLOWED) + len(stdin_cases())
    assert total >= 150
    assert len(ALLOWED) >= 50
    assert {r.action for r in DEFAULT_RULES} == {BLOCK, WARN}
