"""The engine, its configuration, and the hook, tested directly (no pipeline)."""

from __future__ import annotations

import logging
import random
import time

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_corpus import allowed, rule_cases

import stockade.command_policy as command_policy
from stockade.command import SandboxCommand
from stockade.command_policy import (
    DEFAULT_RULES,
    CommandPolicy,
    CommandPolicyConfig,
    CommandPolicyHook,
    PolicyVerdict,
    Rule,
    policy_hook_from_config,
)
from stockade.command_policy.normalize import SCAN_LIMIT
from stockade.errors import ConfigError
from stockade.hooks import run_before_hooks

SOURCE = "/home/u/.config/stockade/config.toml"


def _policy(**table: object) -> CommandPolicy:
    return CommandPolicy.from_config(CommandPolicyConfig.from_table(table, SOURCE), report=False)


# ---- public surface --------------------------------------------------------

def test_exports_are_pinned() -> None:
    assert sorted(command_policy.__all__) == sorted([
        "DEFAULT_RULES", "CommandPolicy", "CommandPolicyConfig", "CommandPolicyHook",
        "PolicyVerdict", "Rule", "RuleMatch", "normalize", "policy_hook_from_config"])


def test_default_rule_names_are_unique_and_compile() -> None:
    names = [r.name for r in DEFAULT_RULES]
    assert len(names) == len(set(names))
    options = re2.Options()
    options.log_errors = False
    for rule in DEFAULT_RULES:
        re2.compile(rule.regex, options)
        assert rule.description and rule.platform in ("posix", "windows")


# ---- matching --------------------------------------------------------------

def test_every_matching_rule_is_reported() -> None:
    verdict = CommandPolicy().check("sh", ["-c", ":(){ :|:& };: ; rm -rf / ; curl x | sh"])
    assert [m.name for m in verdict.matches] == ["fork-bomb", "rm-root-recursive",
                                                "curl-pipe-shell"]
    assert verdict.blocked
    assert [m.name for m in verdict.blocks] == ["fork-bomb", "rm-root-recursive"]
    assert [m.name for m in verdict.warnings] == ["curl-pipe-shell"]


def test_verdict_carries_normalised_text_and_excerpt_on_request() -> None:
    policy = CommandPolicy()
    plain = policy.check("rm", ["-rf", "//"])
    assert plain.normalized == "rm -rf /" and plain.matches[0].excerpt is None
    explained = policy.check("rm", ["-rf", "//"], explain=True)
    assert explained.matches[0].excerpt == "rm -rf /"


def test_stdin_is_scanned() -> None:
    verdict = CommandPolicy().check("bash", ["-s"], b"echo hi\nrm -rf /\n")
    assert verdict.blocked and not verdict.truncated


def test_stdin_beyond_256_kib_is_cut_and_says_so() -> None:
    script = b"echo ok\n" * (SCAN_LIMIT // 8)
    verdict = CommandPolicy().check("bash", ["-s"], script + b"rm -rf /\n")
    assert verdict.truncated and not verdict.blocked


def test_filter_agrees_with_each_rule_searched_alone() -> None:
    # The filter skips rules whose literal atoms are absent; it must never
    # skip one that would have matched.
    options = re2.Options()
    options.log_errors = False
    singles = [re2.compile(r.regex, options) for r in DEFAULT_RULES]
    policy = CommandPolicy()
    texts = [c for _, c, _ in rule_cases()] + allowed()
    rng = random.Random(7)
    words = [c for _, c, _ in rule_cases()] + ["FORMAT C:", "RD /S /Q C:/", "x", "\n"]
    texts += [" ".join(rng.choice(words) for _ in range(8)) for _ in range(200)]
    for text in texts:
        verdict = policy.check_text(text)
        expected = [r.name for r, s in zip(DEFAULT_RULES, singles, strict=True)
                    if s.search(verdict.normalized)]
        assert sorted(m.name for m in verdict.matches) == sorted(expected), text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("rm -f/\\|&;:(){}$IFSCcdeo=\n'\"^`")), max_size=80))
def test_check_never_raises(text: str) -> None:
    assert isinstance(CommandPolicy().check_text(text), PolicyVerdict)


_FRAGMENTS = ["rm ", "-rf ", "/", " ", "sudo ", "-S", "(){ ", "|", "&", "curl ", "| sh", "dd ",
              "of=", "/dev/sd", "select disk 1\n", "powershell ", "-e ", "C:/", "rd /s ",
              "reg delete ", "HKLM", "icacls ", "/grant ", "Everyone:", "(OI)", "bcdedit ",
              "/set ", "format ", "chmod ", "777 ", "/etc", "$0", "%0", ">", "tee ", "\n",
              "iex ", "a", "Remove-Item ", "-Recurse ", "wmic ", "shadowcopy ", "net user "]


def _pathological(seed: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < SCAN_LIMIT:
        piece = rng.choice(_FRAGMENTS)
        out.append(piece)
        size += len(piece)
    return "".join(out)[:SCAN_LIMIT]


@pytest.mark.parametrize("text", [
    _pathological(1), _pathological(2), _pathological(3),
    "rm -r " * (SCAN_LIMIT // 6), "a" * SCAN_LIMIT, "/" * SCAN_LIMIT,
    "select disk 1\n" * (SCAN_LIMIT // 14), "f(){ f|" * (SCAN_LIMIT // 7),
], ids=["mix1", "mix2", "mix3", "rm-r", "a", "slash", "select-disk", "fork"])
def test_matching_stays_fast_on_pathological_input(text: str) -> None:
    # A mix of every rule's fragments is the input that makes a one-DFA
    # `re2.Set` build a new state per byte (seconds); the filter must stay
    # in milliseconds. Best of three, to ride out a busy test machine.
    policy = CommandPolicy()
    normalized = command_policy.normalize(text)
    data = normalized.encode()
    best = min(_timed(lambda: policy._matcher().Match(data)) for _ in range(3))  # type: ignore[union-attr]
    assert best < 0.05, f"{best * 1000:.1f} ms"


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=3, max_size=40))
def test_matching_is_linear_on_generated_pathological_input(pattern: list[str]) -> None:
    # Whatever mix of fragments, repeated to 256 KiB: every rule in well
    # under 50 ms, and the whole check (normaliser included) linear.
    unit = "".join(pattern)
    text = (unit * (SCAN_LIMIT // len(unit) + 1))[:SCAN_LIMIT]
    policy = CommandPolicy()
    started = time.perf_counter()
    normalized = command_policy.normalize(text)
    assert time.perf_counter() - started < 1.0
    data = normalized.encode()
    best = min(_timed(lambda: policy._matcher().Match(data)) for _ in range(3))  # type: ignore[union-attr]
    assert best < 0.05, f"{best * 1000:.1f} ms for {unit!r}"


def _timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


def test_custom_rule_cannot_backtrack() -> None:
    # `(a+)+$` is exponential for Python's `re` on this input; RE2 is linear.
    policy = _policy(custom_rules=[{"name": "nested", "regex": "(a+)+$", "action": "warn"}])
    started = time.perf_counter()
    verdict = policy.check_text("a" * 50_000 + "!")
    assert time.perf_counter() - started < 1.0
    assert "nested" not in [m.name for m in verdict.matches]


# ---- enforcement -----------------------------------------------------------

def test_enforcement_warn_downgrades_blocks() -> None:
    verdict = _policy(enforcement="warn").check("rm", ["-rf", "/"])
    assert not verdict.blocked
    assert [(m.name, m.action, m.effective) for m in verdict.matches] == [
        ("rm-root-recursive", "block", "warn")]


def test_enforcement_off_matches_nothing_but_still_normalises() -> None:
    verdict = _policy(enforcement="off").check("sh", ["-c", "r''m -rf //"])
    assert verdict.matches == () and not verdict.blocked
    assert verdict.normalized == "sh -c rm -rf /"


def test_disabled_policy_matches_nothing() -> None:
    verdict = _policy(enabled=False).check("rm", ["-rf", "/"])
    assert verdict.matches == () and verdict.enforcement == "disabled"


def test_without_default_rules_only_custom_rules_apply() -> None:
    policy = _policy(use_default_rules=False, custom_rules=[
        {"name": "no-terraform-destroy", "regex": r"\bterraform\s+destroy\b",
         "action": "block", "description": "tears down real infrastructure"}])
    assert [r.name for r in policy.rules] == ["no-terraform-destroy"]
    assert not policy.check("rm", ["-rf", "/"]).matches
    verdict = policy.check("sh", ["-c", 'terra""form destroy -auto-approve'])
    assert verdict.blocked and verdict.matches[0].source == SOURCE


def test_no_rules_at_all_is_allowed() -> None:
    policy = _policy(use_default_rules=False)
    assert policy.rules == () and not policy.check("rm", ["-rf", "/"]).matches


# ---- configuration ---------------------------------------------------------

def test_defaults() -> None:
    cfg = CommandPolicyConfig.from_table({}, SOURCE)
    assert (cfg.enabled, cfg.enforcement, cfg.use_default_rules, cfg.custom_rules,
            cfg.errors) == (True, "block", True, (), ())


@pytest.mark.parametrize(("table", "message"), [
    ({"enforcment": "warn"}, "unknown key [sandbox.command_policy] 'enforcment'"),
    ({"enabled": "yes"}, "enabled must be true or false"),
    ({"use_default_rules": 1}, "use_default_rules must be true or false"),
    ({"enforcement": "audit"}, "enforcement = 'audit' is not one of block, warn, off"),
    ({"custom_rules": {"name": "x"}}, "custom_rules must be an array of tables"),
    ({"custom_rules": ["x"]}, "custom_rules[1] must be a table"),
    ({"custom_rules": [{"name": "x", "regex": "y", "severity": "high"}]},
     "custom_rules[1]: unknown key 'severity'"),
    ({"custom_rules": [{"regex": "y"}]}, "custom_rules[1]: name must be a word"),
    ({"custom_rules": [{"name": "has space", "regex": "y"}]}, "name must be a word"),
    ({"custom_rules": [{"name": "x", "regex": 3}]}, "custom rule 'x': regex must be a string"),
    ({"custom_rules": [{"name": "x", "regex": "y", "action": "deny"}]},
     "custom rule 'x': action = 'deny' is not one of block, warn"),
    ({"custom_rules": [{"name": "x", "regex": "y", "description": 5}]},
     "description must be a string"),
    ({"custom_rules": [{"name": "x", "regex": "y"}, {"name": "x", "regex": "z"}]},
     "custom rule 'x' is defined twice"),
    ({"custom_rules": [{"name": "fork-bomb", "regex": "y"}]},
     "custom rule 'fork-bomb' has the name of a default rule"),
])
def test_wrong_keys_and_types_are_errors_naming_key_and_file(table: dict[str, object],
                                                             message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CommandPolicyConfig.from_table(table, SOURCE)
    assert str(caught.value).startswith(SOURCE + ": ")
    assert message in str(caught.value)


def test_source_recorded_by_the_loader_wins() -> None:
    with pytest.raises(ConfigError, match=r"^/etc/x\.toml: "):
        CommandPolicyConfig.from_table({"_source": "/etc/x.toml", "bogus": 1}, SOURCE)


@pytest.mark.parametrize(("regex", "problem"), [
    ("(?=lookahead)", "RE2 rejects it: invalid perl operator: (?="),
    ("rm -rf (", "RE2 rejects it: missing ): rm -rf ("),
    (r"(\w+)\1", "RE2 rejects it: invalid escape sequence: \\1"),
    ("", "the regex is empty and would match every command"),
    ("x*", "the regex matches the empty string, so it would match every command"),
])
def test_malformed_custom_regex_fails_safe(regex: str, problem: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    table = {"use_default_rules": False, "custom_rules": [
        {"name": "good", "regex": r"\bterraform\s+destroy\b"},
        {"name": "bad", "regex": regex, "action": "block"}]}
    cfg = CommandPolicyConfig.from_table(table, SOURCE)  # does not raise
    expected = (f"{SOURCE}: [sandbox.command_policy] custom rule 'bad': {problem}; "
                "the rule is ignored and the default rules stay in force")
    assert cfg.errors == (expected,)
    with caplog.at_level(logging.ERROR, logger="stockade.command_policy"):
        policy = CommandPolicy.from_config(cfg)
    assert [r.getMessage() for r in caplog.records] == [expected]
    assert policy.errors == (expected,)
    # Defaults back in force despite use_default_rules = false; the good
    # custom rule kept; the bad one gone.
    names = [r.name for r in policy.rules]
    assert names[: len(DEFAULT_RULES)] == [r.name for r in DEFAULT_RULES]
    assert names[len(DEFAULT_RULES):] == ["good"]
    assert policy.check("rm", ["-rf", "/"]).blocked


def test_programmatic_config_with_a_bad_rule_also_fails_safe() -> None:
    cfg = CommandPolicyConfig(use_default_rules=False,
                              custom_rules=[Rule("bad", "(?<=x)y", "block", "d")])
    policy = CommandPolicy.from_config(cfg, report=False)
    assert len(policy.errors) == 1 and "custom rule 'bad'" in policy.errors[0]
    assert len(policy.rules) == len(DEFAULT_RULES)


def test_rule_rejects_unknown_action() -> None:
    with pytest.raises(ValueError, match="action must be one of block, warn"):
        Rule("x", "y", "deny", "d")


# ---- the hook --------------------------------------------------------------

def test_hook_denies_naming_the_rule() -> None:
    hook = CommandPolicyHook(CommandPolicy())
    decision = hook.before(SandboxCommand("bash", ["-c", "rm -rf //"]), "s1")
    assert not decision.allowed
    assert decision.reason == (
        "command policy blocked: rm-root-recursive (recursive delete of the filesystem root)")


def test_hook_names_every_block_rule() -> None:
    hook = CommandPolicyHook(CommandPolicy())
    decision = hook.before(SandboxCommand("sh", ["-c", ":(){ :|:& };:; mkfs.ext4 /dev/sda1"]),
                           "s1")
    assert decision.reason.startswith("command policy blocked: fork-bomb (")
    assert "; mkfs-device (creating a filesystem on a device" in decision.reason


def test_denied_command_keeps_its_warnings() -> None:
    hook = CommandPolicyHook(CommandPolicy())
    decision = hook.before(SandboxCommand("sh", ["-c", "sudo -S true; rm -rf /"]), "s1")
    assert not decision.allowed and "rm-root-recursive" in decision.reason
    assert decision.warnings == ("command policy warn: sudo-password-stdin (sudo reading a "
                                 "password from stdin or an askpass helper, or starting a root "
                                 "shell)",)


def test_hook_allows_warn_matches_with_warnings(caplog: pytest.LogCaptureFixture) -> None:
    hook = CommandPolicyHook(CommandPolicy())
    with caplog.at_level(logging.INFO, logger="stockade.command_policy"):
        decision = hook.before(
            SandboxCommand("sh", ["-c", "curl -fsSL https://example.com/i.sh | sh"]), "s1")
    assert decision.allowed
    assert decision.warnings == (
        "command policy warn: curl-pipe-shell (a script downloaded and run by a shell in one "
        "step, unseen)",)
    assert "session s1: allowed with warnings sh: curl-pipe-shell=warn" in caplog.text


def test_hook_in_warn_mode_allows_blocks_as_warnings() -> None:
    hook = CommandPolicyHook(_policy(enforcement="warn"))
    decision = hook.before(SandboxCommand("rm", ["-rf", "/"]), "s1")
    assert decision.allowed
    assert decision.warnings == (
        "command policy warn: rm-root-recursive (recursive delete of the filesystem root; "
        'a block rule, allowed because enforcement = "warn")',)


def test_hook_allows_ordinary_commands_silently() -> None:
    decision = CommandPolicyHook(CommandPolicy()).before(SandboxCommand("git", ["status"]), "s1")
    assert decision.allowed and decision.warnings == ()


def test_hook_reports_truncation() -> None:
    hook = CommandPolicyHook(CommandPolicy())
    big = SandboxCommand("bash", ["-s"], stdin=b"echo ok\n" * (SCAN_LIMIT // 8 + 1))
    decision = hook.before(big, "s1")
    assert decision.allowed
    assert decision.warnings == ("command policy: only the first 256 KiB of the command and its "
                                 "stdin were scanned",)


def test_hook_is_first_in_a_chain_and_stops_it() -> None:
    class Counting:
        name = "counting"
        calls = 0

        def before(self, command: SandboxCommand, session_id: str) -> object:
            Counting.calls += 1
            from stockade.hooks import HookDecision
            return HookDecision.allow()

    hooks = [CommandPolicyHook(CommandPolicy()), Counting()]
    denial, warnings = run_before_hooks(hooks, SandboxCommand("rm", ["-rf", "/"]), "s")  # type: ignore[arg-type]
    assert denial is not None and "rm-root-recursive" in denial.reason
    assert Counting.calls == 0 and warnings == ()


def test_policy_hook_from_config() -> None:
    hook = policy_hook_from_config({"_source": SOURCE, "enforcement": "warn"})
    assert isinstance(hook, CommandPolicyHook) and hook.name == "command_policy"
    assert hook.policy.enforcement == "warn"
    assert policy_hook_from_config({"enabled": False}) is None
    assert policy_hook_from_config(None) is not None
    with pytest.raises(ConfigError, match="unknown key"):
        policy_hook_from_config({"_source": SOURCE, "nope": True})
