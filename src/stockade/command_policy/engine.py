"""Every rule against the normalised text, with RE2, in time linear in the text.

RE2 runs in time linear in the text whatever the pattern, which is what lets
a user add a custom rule without being able to hang the filter (a Python
`re` pattern such as `(a+)+$` takes exponential time on the wrong input).

The rules are held in an RE2 `FilteredRE2` (`re2.Filter`), not a plain
`re2.Set`. Both report every rule that matched, not only the first. A
`re2.Set` runs one DFA for all rules at once, and its states are the
combinations of every rule's partial matches: on a 256 KiB mix of rule
fragments (`rm `, `-rf `, `| sh`, `of=`...) that is a new state on nearly
every byte, and one check took seconds. The filter instead makes one pass
with a set of the literal atoms the rules require (an Aho-Corasick-like
automaton that cannot blow up), then confirms only the rules whose atoms
occurred, each with its own small DFA: worst case a few milliseconds for all
rules on 256 KiB, and about a microsecond for an ordinary command.

A check first asks `fastpath` whether the text is provably its own normal
form and no default rule's guard holds; then the answer is "no match"
without normalising, importing `re2` or compiling anything. Otherwise (or
with any custom rule) the text is normalised and matched as described
above, and the filter is compiled on that first use. `re2` is imported only
then, or to vet a custom rule: a CLI invocation that checks `git status`
should not pay ~35 ms for imports and compiling.
"""

from __future__ import annotations

import _thread

from .fastpath import NO_GUARDS, guards_for, settled
from .normalize import normalize, scan_target
from .rules import BLOCK, DEFAULT_RULES, WARN, Rule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .config import CommandPolicyConfig

ENFORCEMENTS = ("block", "warn", "off")

# RE2's default budget (8 MiB) covers a regex's program and its DFA cache;
# a larger cache keeps a rule's DFA from thrashing (and falling back to the
# slower NFA) on long adversarial input. Memory is only used as states appear.
_MAX_MEM = 32 << 20
LOGGER_NAME = "stockade.command_policy"


def _options() -> object:
    import re2

    options = re2.Options()
    options.max_mem = _MAX_MEM
    # Otherwise RE2 prints every bad custom pattern to stderr through absl,
    # on top of the error we report ourselves.
    options.log_errors = False
    return options


# Verdicts of `regex_error`: the config parser and `CommandPolicy.from_config`
# both vet each custom rule, and one RE2 compile each is enough.
_REGEX_ERRORS: dict[str, str | None] = {}


def regex_error(pattern: str) -> str | None:
    """Why `pattern` cannot be a rule, or None if it can."""
    if pattern not in _REGEX_ERRORS:
        _REGEX_ERRORS[pattern] = _regex_error(pattern)
    return _REGEX_ERRORS[pattern]


def _regex_error(pattern: str) -> str | None:
    import re2

    if not pattern:
        return "the regex is empty and would match every command"
    try:
        compiled = re2.compile(pattern, _options())
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return f"RE2 rejects it: {detail}"
    if compiled.search("") is not None:
        # `x*` or `(?:)` matches the empty string, so it matches everything:
        # a typo that would block (or flood the audit with) every command.
        return "the regex matches the empty string, so it would match every command"
    return None


class RuleMatch:
    """One rule that matched: its tier as written and as enforced."""

    __slots__ = ("action", "description", "effective", "excerpt", "name", "source")

    def __init__(self, rule: Rule, effective: str, excerpt: str | None = None) -> None:
        self.name = rule.name
        self.action = rule.action
        self.description = rule.description
        self.source = rule.source
        #: "block" or "warn" after `enforcement` is applied.
        self.effective = effective
        #: The part of the normalised text that matched (only when asked to explain).
        self.excerpt = excerpt

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "action": self.action, "effective": self.effective,
                "description": self.description, "source": self.source,
                "excerpt": self.excerpt}

    def __repr__(self) -> str:
        return f"RuleMatch({self.name!r}, action={self.action!r}, effective={self.effective!r})"


class PolicyVerdict:
    """The outcome of one check. `blocked` is true when any match is enforced as a block."""

    __slots__ = ("blocked", "enforcement", "matches", "normalized", "truncated")

    def __init__(self, matches: tuple[RuleMatch, ...], normalized: str, truncated: bool,
                 enforcement: str) -> None:
        self.matches = matches
        self.blocked = any(m.effective == BLOCK for m in matches)
        self.normalized = normalized
        #: The scan target was longer than 256 KiB; only its head was checked.
        self.truncated = truncated
        self.enforcement = enforcement

    @property
    def blocks(self) -> tuple[RuleMatch, ...]:
        return tuple(m for m in self.matches if m.effective == BLOCK)

    @property
    def warnings(self) -> tuple[RuleMatch, ...]:
        return tuple(m for m in self.matches if m.effective == WARN)

    def to_json(self) -> dict[str, object]:
        return {"blocked": self.blocked, "enforcement": self.enforcement,
                "truncated": self.truncated, "normalized": self.normalized,
                "matches": [m.to_json() for m in self.matches]}

    def __repr__(self) -> str:
        return (f"PolicyVerdict(blocked={self.blocked}, matches={[m.name for m in self.matches]},"
                f" truncated={self.truncated})")


class CommandPolicy:
    """A rule set plus how to enforce it. Build once; `check` is thread-safe.

    The RE2 filter is compiled on the first check that needs it, not here:
    most checks of default rules are settled by `fastpath` without it.
    """

    __slots__ = ("_filter", "_guards", "_lock", "enabled", "enforcement", "errors", "rules")

    def __init__(self, rules: Sequence[Rule] = DEFAULT_RULES, *, enabled: bool = True,
                 enforcement: str = "block", errors: Sequence[str] = ()) -> None:
        if enforcement not in ENFORCEMENTS:
            raise ValueError(f"enforcement must be one of {', '.join(ENFORCEMENTS)}, "
                             f"got {enforcement!r}")
        self.enabled = enabled
        self.enforcement = enforcement
        self.rules: tuple[Rule, ...] = tuple(rules)
        #: Configuration problems that were survived by falling back (see `from_config`).
        self.errors: tuple[str, ...] = tuple(errors)
        self._filter: object | None = None
        self._lock = _thread.allocate_lock()
        #: One guard per rule when every rule is a default rule, else None.
        self._guards = guards_for(self.rules)
        if self._guards is None:
            # A rule RE2 rejects is reported where the policy is built, as it
            # was before compiling became lazy; only non-default rules can be
            # wrong, and with one of them every check takes the full path anyway.
            for rule in self.rules:
                problem = _compile_error(rule.regex)
                if problem is not None:
                    raise ValueError(f"command policy rule {rule.name!r} does not compile: "
                                     f"{problem}")

    @classmethod
    def from_config(cls, cfg: CommandPolicyConfig, *, report: bool = True) -> CommandPolicy:
        """Compile `cfg`. A broken custom rule never leaves the process without a filter.

        Each custom regex RE2 rejects is dropped and named in `errors`; the
        curated defaults are then in force whatever `use_default_rules` says,
        because the user's intent was *more* filtering, not none. With
        `report`, each error is logged once to `stockade.command_policy`.
        """
        errors = list(cfg.errors)
        custom: list[Rule] = []
        for rule in cfg.custom_rules:
            problem = regex_error(rule.regex)
            if problem is None:
                custom.append(rule)
                continue
            message = bad_rule_message(rule.name, rule.source or cfg.source, problem)
            if message not in errors:
                errors.append(message)
        defaults = DEFAULT_RULES if (cfg.use_default_rules or errors) else ()
        policy = cls((*defaults, *custom), enabled=cfg.enabled, enforcement=cfg.enforcement,
                     errors=errors)
        if report and errors:
            import logging

            log = logging.getLogger(LOGGER_NAME)
            for message in errors:
                log.error("%s", message)
        return policy

    def check(self, program: str, args: Sequence[str] = (), stdin: bytes | None = None, *,
              explain: bool = False) -> PolicyVerdict:
        """Normalise program + args + stdin (first 256 KiB) and match every rule once.

        With `explain`, each match carries the excerpt of the normalised text
        that matched (an extra search per matching rule, for people, not hooks).
        """
        raw, truncated = scan_target(program, args, stdin)
        return self.check_text(raw, truncated=truncated, explain=explain)

    def check_text(self, raw: str, *, truncated: bool = False,
                   explain: bool = False) -> PolicyVerdict:
        """`check` for text that is already one scan target (not cut here)."""
        evaluates = self.enabled and self.enforcement != "off" and bool(self.rules)
        guards = self._guards if evaluates else NO_GUARDS
        # The fast path saves loading the normaliser and compiling the
        # filter. Once the filter is compiled, RE2 answers a typical command
        # faster than the guards do (about 7 us against 14), so it serves
        # only until then; either way the verdict is the same.
        bare = settled(raw, guards) if guards is not None and self._filter is None else None
        if bare is not None:
            # `bare` is what `normalize(raw)` returns, and no rule can match
            # it (both proved in the tests): the full path's verdict, without it.
            return PolicyVerdict((), bare, truncated,
                                 self.enforcement if evaluates else self._state())
        return self._full_check(raw, truncated, explain)

    def _full_check(self, raw: str, truncated: bool, explain: bool) -> PolicyVerdict:
        """Normalise, then match with RE2: the path every text took before `fastpath`."""
        evaluates = self.enabled and self.enforcement != "off" and bool(self.rules)
        normalized = normalize(raw)
        if not evaluates:
            # Normalisation still ran: "off" stops rules from acting, it does
            # not change what the text is taken to say.
            return PolicyVerdict((), normalized, truncated, self._state())
        data = normalized.encode("utf-8", "surrogatepass")
        hits = self._matcher().Match(data)  # type: ignore[attr-defined]
        if not hits:
            return PolicyVerdict((), normalized, truncated, self.enforcement)
        downgrade = self.enforcement == "warn"
        matches = []
        for index in sorted(hits):
            rule = self.rules[index]
            effective = WARN if downgrade else rule.action
            excerpt = self._excerpt(index, data) if explain else None
            matches.append(RuleMatch(rule, effective, excerpt))
        return PolicyVerdict(tuple(matches), normalized, truncated, self.enforcement)

    def _state(self) -> str:
        return self.enforcement if self.enabled else "disabled"

    def _matcher(self) -> object:
        """The RE2 filter of `rules`, compiled on first use (there is at least one rule)."""
        matcher = self._filter
        if matcher is None:
            with self._lock:
                matcher = self._filter
                if matcher is None:
                    matcher = self._filter = _compile_filter(self.rules)
        return matcher

    def _excerpt(self, index: int, data: bytes) -> str | None:
        # Bytes, as matched: the text may hold a lone surrogate (from an
        # argument decoded with surrogateescape) that strict UTF-8 refuses.
        found = self._matcher().re(index).search(data)  # type: ignore[attr-defined]
        if found is None:
            return None
        excerpt: str = found.group(0).decode("utf-8", "replace").strip()
        return excerpt if len(excerpt) <= 200 else excerpt[:197] + "..."


def _compile_error(pattern: str) -> str | None:
    """RE2's complaint about `pattern`, if it has one (unlike `regex_error`, `x*` is fine)."""
    problem = regex_error(pattern)
    return problem if problem is not None and problem.startswith("RE2 rejects") else None


def _compile_filter(rules: Sequence[Rule]) -> object:
    import re2

    matcher = re2.Filter()
    options = _options()
    for rule in rules:
        try:
            matcher.Add(rule.regex, options)
        except re2.error as exc:
            # Custom rules were vetted when the policy was built; a default
            # rule that fails here is a bug in this package, and running
            # without the filter is not an option.
            raise ValueError(f"command policy rule {rule.name!r} does not compile: {exc}") from exc
    matcher.Compile()
    return matcher


def bad_rule_message(name: str, source: str, problem: str) -> str:
    return (f"{source}: [sandbox.command_policy] custom rule {name!r}: {problem}; "
            "the rule is ignored and the default rules stay in force")
