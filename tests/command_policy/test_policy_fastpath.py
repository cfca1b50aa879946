"""The fast path: sound (plain text is its own normal form, every guard proved), lazy and lean.

`fastpath` may conclude "no rule can match" without the normaliser or RE2.
These tests hold it to that:

* the plain-text relations (`is_plain`, `plain_form`) against the real
  normaliser, by property tests and by one example per excluded character
  or sequence;
* every default rule's guard against the rule's regex, by an automaton
  proof (`regex_automaton`), with every literal and alternative necessary;
* the fast path against the full path on the whole corpus and on random
  mixes of rule fragments;
* the laziness (nothing compiled, the policy not even built) and the lean
  import, in a fresh interpreter.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import subprocess
import sys

import pytest
import re2
import regex_automaton
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_corpus import allowed, rule_cases, stdin_cases

from stockade.command import SandboxCommand
from stockade.command_policy import (
    DEFAULT_RULES,
    CommandPolicy,
    CommandPolicyConfig,
    CommandPolicyHook,
    Rule,
    normalize,
    policy_hook_from_config,
)
from stockade.command_policy import fastpath as fp
from stockade.command_policy.config import valid_name
from stockade.command_policy.normalize import scan_target

PLAIN_CHARS = fp._PLAIN_BYTES.decode("ascii")

# ---- plain text is its own normal form --------------------------------------

# Pieces that put each normaliser step's trigger next to plain text: path
# segments, `+`, `?`, `,` and `}` (harmless without their partners), `IFS`
# without `$`, and the PowerShell names split up.
_FRAGMENTS = ["/", ".", "..", "/.", "./", "/..", "...", "+", " + ", "?", ",", "}", "%", ":", "-",
              "~", "=", "IFS", "pws", "h", "power", "shell", "-e", " ", "\t", "\n", "rm", "C:",
              "a", "Z", "0", "|", "&", ";", "<", ">", "(", ")", "*", "!", "#", "@", "[", "]"]
_QUOTED = [*_FRAGMENTS, '"', "'"]
# And everything the plain alphabet leaves out, for the implication's other side.
_SPECIAL = [*_QUOTED, "$", "\\", "^", "`", "{", "\r", "\x0b", "\x0c", "\x00", "\x7f", "\u200b",
            "\u2013", "\u00e9", "$'", "${IFS}", "//", "/?", "\\\n", "^\n"]


def _joined(pieces: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=30).map("".join)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(_joined(_FRAGMENTS), st.text(alphabet=PLAIN_CHARS, max_size=40)))
def test_plain_text_is_its_own_normal_form(text: str) -> None:
    if fp.is_plain(text):
        assert normalize(text) == text


@settings(max_examples=3000, deadline=None)
@given(_joined(_QUOTED))
def test_plain_form_of_quoted_text_is_its_normal_form(text: str) -> None:
    bare = fp.plain_form(text)
    if bare is not None:
        assert normalize(text) == bare


@settings(max_examples=3000, deadline=None)
@given(st.one_of(_joined(_SPECIAL), st.text(max_size=30)))
def test_plain_form_never_disagrees_with_the_normaliser(text: str) -> None:
    bare = fp.plain_form(text)
    if bare is not None:
        assert normalize(text) == bare


@pytest.mark.parametrize("text", [
    "/bin/true", "git status --short", "pytest -q tests/", "make -j4", "ls -la src", "npm test",
    "cargo build --release", "python3 -m pip install -e .", "go test ./...", "ls ~/.config",
    "/work/main/.venv/bin/python -m pytest", "c++ -O2 a.cc", "a,b}", "x=IFS", "echo 100%",
    "git log | head -n 5 && echo done; ls > out.txt 2>&1", "a/...b", "line one\n\tline two",
])
def test_ordinary_commands_are_plain(text: str) -> None:
    assert fp.is_plain(text)
    assert normalize(text) == text


# Each exclusion of `is_plain`, with a text the normaliser does change.
@pytest.mark.parametrize("text", [
    "echo $'\\x72m'",             # ANSI-C quoting
    "rm${IFS}-rf",                # $IFS
    "a\rb",                       # CR
    "rm -rf \\\n/",               # line continuation (and `\`)
    "r^m",                        # cmd caret
    "Format`-Volume",             # backtick
    'r""m',                       # quotes
    "{rm,-rf,/}",                 # brace expansion
    "a\x0bb", "a\x00b", "a\x7fb",  # control characters
    "r\u200bm", "\u2013Recurse",  # Unicode folds
    "rm -rf //",                  # slash runs
    "rd /s \\\\?\\C:\\",          # Windows prefixes
    "ls /./x", "ls /.", "ls /.;", "ls /usr/..", "ls /usr/../x",  # dot segments, parents
    "pwsh -e " + "QQBCAEMA",      # a decodable PowerShell payload
])
def test_every_exclusion_is_needed(text: str) -> None:
    assert normalize(text) != text
    assert not fp.is_plain(text)


def test_quotes_are_dropped_only_without_plus() -> None:
    quoted = 'git commit -m "fix reboot handling"'
    assert fp.plain_form(quoted) == normalize(quoted) == "git commit -m fix reboot handling"
    # `+` between quotes joins strings first: the normaliser is needed.
    assert fp.plain_form("'Am' + 'siUtils'") is None
    assert normalize("'Am' + 'siUtils'") == "AmsiUtils"
    # The remainder must be plain too.
    assert fp.plain_form("echo '$HOME'") is None
    assert fp.plain_form("ls '/.'") is None


# ---- every guard is proved against its rule ---------------------------------

RULES = {rule.name: rule for rule in DEFAULT_RULES}
_NFAS: dict[str, regex_automaton.Nfa] = {}


def _nfa(name: str) -> regex_automaton.Nfa:
    if name not in _NFAS:
        _NFAS[name] = regex_automaton.build(RULES[name].regex)
    return _NFAS[name]


def _counterexample(name: str, guard: fp.Guard) -> tuple[str, tuple[fp.Clause, ...]] | None:
    """A plain text the rule matches although `guard` is false, or None: the guard is sound.

    The guard is false exactly when some clause of each alternative has none
    of its literals; so it is sound when, for every choice of one clause per
    alternative, every match contains a literal of one of the chosen clauses.
    """
    for chosen in itertools.product(*guard):
        literals = [literal for clause in chosen for literal in clause]
        found = regex_automaton.counterexample(_nfa(name), literals, PLAIN_CHARS)
        if found is not None:
            return found, chosen
    return None


def test_guard_table_covers_the_default_rules_in_order() -> None:
    assert list(fp.GUARDS) == [rule.name for rule in DEFAULT_RULES]
    assert len(fp.DEFAULT_GUARDS) == len(DEFAULT_RULES)
    for name, guard in fp.GUARDS.items():
        # Every rule has a guard that can be false, and every literal can occur in a plain text.
        assert guard and all(alternative and all(alternative) for alternative in guard), name
        for literal in (lit for alternative in guard for clause in alternative for lit in clause):
            assert literal == literal.lower() and literal, (name, literal)
            assert set(literal) <= set(PLAIN_CHARS), (name, literal)


@pytest.mark.parametrize("name", list(fp.GUARDS))
def test_guard_is_sound(name: str) -> None:
    found = _counterexample(name, fp.GUARDS[name])
    assert found is None, (f"{name} matches {found[0]!r} (plain, lowercased) although none of "
                           f"{found[1]} occurs in it: its guard in fastpath.py is wrong")


@pytest.mark.parametrize("name", list(fp.GUARDS))
def test_guard_has_nothing_to_spare(name: str) -> None:
    # Dropping any literal, or any alternative, makes the guard unsound: the
    # table says exactly what each rule needs, no more (which would cost
    # fast-path hits) and no less (which the soundness test rules out).
    guard = fp.GUARDS[name]
    if len(guard) > 1:
        for a in range(len(guard)):
            assert _counterexample(name, guard[:a] + guard[a + 1:]) is not None, (
                f"{name}: alternative {guard[a]} is not needed")
    for a, alternative in enumerate(guard):
        for c, clause in enumerate(alternative):
            for i, literal in enumerate(clause):
                smaller = (*alternative[:c], clause[:i] + clause[i + 1:], *alternative[c + 1:])
                weaker = (*guard[:a], smaller, *guard[a + 1:])
                assert _counterexample(name, weaker) is not None, (
                    f"{name}: literal {literal!r} is not needed")


def _corpus_texts() -> list[str]:
    texts = [scan_target("sh", ["-c", command], None)[0] for _, command, _ in rule_cases()]
    texts += [scan_target("sh", ["-c", command], None)[0] for command in allowed()]
    texts += [scan_target("bash", ["-s"], script.encode())[0] for _, script, _ in stdin_cases()]
    return texts


def _fragment_mixes(count: int) -> list[str]:
    rng = random.Random(11)
    words = [command for _, command, _ in rule_cases()] + allowed() + [
        "FORMAT C:", "RD /S /Q C:/", "x", "\n", "%0|%0", "init 0", "nc -e sh", "a=rwx"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) for _ in range(count)]


def test_automaton_reads_each_rule_at_least_as_widely_as_re2() -> None:
    # The proof is about the automaton's language; it covers the rule only
    # if everything RE2 matches, the automaton matches too. A construct the
    # two parsers read differently would show up here.
    options = re2.Options()
    options.log_errors = False
    checked = 0
    for text in _corpus_texts() + _fragment_mixes(300):
        normalized = normalize(text)
        if not normalized.isascii():
            continue
        for rule in DEFAULT_RULES:
            if re2.compile(rule.regex, options).search(normalized) is not None:
                checked += 1
                assert regex_automaton.search(_nfa(rule.name), normalized), (rule.name, normalized)
    assert checked > 300


def _genuine(pattern: str, literals: list[str], alphabet: str) -> str | None:
    """The prover's counterexample, checked: it avoids every literal, and RE2 matches it.

    It is the lowercased reading of a match, so RE2 is asked case-insensitively.
    """
    found = regex_automaton.counterexample(regex_automaton.build(pattern), literals, alphabet)
    if found is not None:
        assert re2.search("(?i)" + pattern, found) is not None, (pattern, found)
        assert not any(literal in found for literal in literals), (literals, found)
        assert set(found) <= set(alphabet), found
    return found


def test_prover_finds_counterexamples() -> None:
    rm = r"(?i)\brm\s+-[a-z]*r[a-z]*\s+/"
    assert _genuine(rm, ["rm"], PLAIN_CHARS) is None
    assert _genuine(rm, ["rm "], PLAIN_CHARS) is not None  # `rm\t-r /`
    assert _genuine(rm, ["rm ", "rm\t", "rm\n"], PLAIN_CHARS) is None
    assert _genuine(rm, ["-r"], PLAIN_CHARS) is not None  # `rm -fr /`
    # Case: `RM` matches `(?i)rm`, and is found as `rm` in the lowercased text.
    assert regex_automaton.counterexample(regex_automaton.build("(?i)rm"), ["rm"], "RMrm") is None
    # Alphabet: without `$`, `\$HOME` cannot be part of a match.
    assert _genuine(r"rm (?:~|\$HOME)", ["~"], PLAIN_CHARS) is None
    assert _genuine(r"rm (?:~|\$HOME)", ["~"], PLAIN_CHARS + "$") is not None
    # Bounded and unbounded repeats, alternation inside them.
    assert _genuine(r"a(?:b|c){2,3}d+", ["bb", "bc", "cb", "cc"], "abcd") is None
    assert _genuine(r"a(?:b|c){2,3}d+", ["bb", "bc", "cb"], "abcd") == "accd"


# ---- the fast path agrees with the full path ---------------------------------

def test_fast_path_agrees_with_full_path_on_the_whole_corpus() -> None:
    # Every corpus text (and random mixes of rule fragments): wherever the
    # fast path settles a text, the full path finds no match and the same
    # normal form; wherever `plain_form` gives a normal form, it is the one.
    full_policy = CommandPolicy()
    cold = CommandPolicy()  # never compiled: it is only given texts the fast path settles
    settled = 0
    for text in _corpus_texts() + _fragment_mixes(500):
        full = full_policy._full_check(text, False, False)
        bare = fp.plain_form(text)
        if bare is not None:
            assert bare == full.normalized, text
        if fp.settled(text, fp.DEFAULT_GUARDS) is None:
            continue
        settled += 1
        assert (full.blocked, full.matches) == (False, ()), text
        fast = cold.check_text(text)
        assert (fast.blocked, fast.matches, fast.normalized, fast.enforcement) == (
            False, (), full.normalized, full.enforcement), text
    assert cold._filter is None
    # Most everyday commands in the corpus are settled without RE2.
    assert settled >= 40


@pytest.mark.parametrize("command", allowed()[:40])
def test_hook_decides_the_same_either_way(command: str) -> None:
    cmd = SandboxCommand("sh", ["-c", command])
    lazy = policy_hook_from_config({}).before(cmd, "s")  # type: ignore[union-attr]
    eager = CommandPolicyHook(CommandPolicy()).before(cmd, "s")
    assert (lazy.allowed, lazy.reason, lazy.warnings) == (eager.allowed, eager.reason,
                                                          eager.warnings)


# ---- lazy: nothing compiled, nothing built, until needed -------------------------

def test_policy_compiles_on_first_full_check() -> None:
    policy = CommandPolicy()
    assert policy._filter is None
    assert not policy.check("git", ["status"]).matches
    assert policy._filter is None
    assert policy.check("rm", ["-rf", "/"]).blocked
    assert policy._filter is not None


def test_hook_builds_its_policy_on_first_unsettled_command() -> None:
    hook = policy_hook_from_config({})
    assert hook is not None and hook._policy is None
    assert hook.before(SandboxCommand("git", ["status"]), "s").allowed
    assert hook._policy is None
    assert not hook.before(SandboxCommand("rm", ["-rf", "/"]), "s").allowed
    assert hook._policy is not None and hook.policy.rules == DEFAULT_RULES


@pytest.mark.parametrize(("table", "denied"), [
    ({"enforcement": "warn"}, False),
    ({"enforcement": "off"}, False),
    ({"use_default_rules": False}, False),
    ({"_source": "/x.toml"}, True),
])
def test_hook_from_a_table_without_custom_rules_is_lazy(table: dict[str, object],
                                                        denied: bool) -> None:
    hook = policy_hook_from_config(table)
    assert hook is not None and hook._policy is None
    assert hook.before(SandboxCommand("ls", ["-la"]), "s").allowed
    assert hook._policy is None
    assert hook.before(SandboxCommand("rm", ["-rf", "/"]), "s").allowed is not denied


def test_truncated_scan_target_takes_the_full_path() -> None:
    hook = policy_hook_from_config({})
    assert hook is not None
    decision = hook.before(SandboxCommand("bash", ["-s"], stdin=b"echo ok\n" * 40000), "s")
    assert decision.allowed and decision.warnings and "256 KiB" in decision.warnings[0]


def test_custom_rules_take_the_full_path_and_bad_ones_are_reported_at_start_up(
        caplog: pytest.LogCaptureFixture) -> None:
    table = {"custom_rules": [{"name": "no-ls", "regex": r"\bls\b", "action": "warn"},
                              {"name": "bad", "regex": "(", "action": "block"}]}
    with caplog.at_level(logging.ERROR, logger="stockade.command_policy"):
        hook = policy_hook_from_config(table)
    assert [r.getMessage() for r in caplog.records] == [
        "[sandbox.command_policy]: [sandbox.command_policy] custom rule 'bad': RE2 rejects it: "
        "missing ): (; the rule is ignored and the default rules stay in force"]
    assert hook is not None and hook._policy is not None and hook.policy._guards is None
    decision = hook.before(SandboxCommand("ls", ["-la"]), "s")
    assert decision.allowed and decision.warnings == ("command policy warn: no-ls (custom rule "
                                                      "no-ls)",)


def test_a_rule_that_only_shares_a_default_name_gets_no_guard() -> None:
    policy = CommandPolicy([Rule("fork-bomb", r"\bgit\b", "block", "d")])
    assert policy._guards is None
    assert policy.check("git", ["status"]).blocked


def test_a_subset_of_the_default_rules_keeps_guards() -> None:
    policy = CommandPolicy(DEFAULT_RULES[:3])
    assert policy._guards is not None and len(policy._guards) == 3
    assert not policy.check("git", ["status"]).matches and policy._filter is None
    assert policy.check("rm", ["-rf", "/"]).blocked


def test_once_compiled_the_filter_answers_everything() -> None:
    # RE2 is faster than the guards once compiled; the verdicts are the same.
    policy = CommandPolicy()
    policy._matcher()
    assert policy.check("git", ["status"]).normalized == "git status"
    hook = policy_hook_from_config({})
    assert hook is not None
    hook.before(SandboxCommand("rm", ["-rf", "/"]), "s")
    assert hook._policy is not None and hook._policy._filter is not None
    assert hook.before(SandboxCommand("git", ["status"]), "s").allowed


def test_a_programmatic_rule_re2_rejects_still_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="rule 'x' does not compile: RE2 rejects it"):
        CommandPolicy([Rule("x", "(?<=a)b", "block", "d")])


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aZ09._- ~é\n")), max_size=70))
def test_rule_names_are_checked_as_the_old_regex_did(name: str) -> None:
    assert valid_name(name) == bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name))


def test_empty_table_and_defaults_agree() -> None:
    defaults = CommandPolicyConfig.from_table({}, "x")
    hook = policy_hook_from_config({})
    assert hook is not None
    assert (hook.policy.enabled, hook.policy.enforcement, hook.policy.rules) == (
        defaults.enabled, defaults.enforcement, DEFAULT_RULES)


# ---- lean: what a `stockade run` imports to check an ordinary command ------------

_HEAVY = ("re", "re2", "json", "typing", "enum")
ORDINARY = ["/bin/true", "git status", "pytest -q tests/", "make -j4", "ls -la src", "npm test",
            "cargo build --release", "python3 -m pip install -e .", "go test ./...",
            'git commit -m "fix the build"']


@pytest.mark.parametrize("table", [{}, {"enforcement": "warn", "_source": "/etc/x.toml"}])
def test_checking_ordinary_commands_imports_nothing_heavy(table: dict[str, object]) -> None:
    code = f"""
import sys
import stockade.command_policy as command_policy
from stockade.command import SandboxCommand
hook = command_policy.policy_hook_from_config({table!r})
for words in {[command.split(" ") for command in ORDINARY]!r}:
    assert hook.before(SandboxCommand(words[0], words[1:]), "s").allowed, words
print(" ".join(sorted(m for m in {_HEAVY!r} if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []


def test_a_blocked_command_still_takes_the_full_path_in_a_fresh_process() -> None:
    code = """
import sys
import stockade.command_policy as command_policy
from stockade.command import SandboxCommand
hook = command_policy.policy_hook_from_config({})
print(hook.before(SandboxCommand("rm", ["-rf", "/"]), "s").allowed, "re2" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "True"]
