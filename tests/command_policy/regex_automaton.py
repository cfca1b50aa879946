"""Prove "every match of this regex contains one of these literals" (a test helper).

The command policy's fast path (`stockade.command_policy.fastpath`) allows a
plain command without running RE2 when, for every default rule, some clause
of the rule's guard has none of its literals in the lowercased text. That is
sound only if each clause really is required: every string the rule can
match contains one of the clause's literals. This module decides that
exactly, for the regex as written, by building an automaton for the rule and
searching it for a counterexample:

* The regex is parsed with Python's own parser (`re._parser`, the same tree
  `re.compile` uses) and turned into a Thompson NFA over ASCII. Where RE2
  and Python differ, the NFA takes the larger reading, so its language
  contains the rule's: `\\s`, `\\S`, `\\d` and `\\w` use RE2's ASCII
  classes (plus `\\v` for `\\s`); `^`, `$` and `\\b` are ignored (an empty
  step that always succeeds); every character class is closed under ASCII
  case whatever the flags say.
* Each transition is then read on the lowercased alphabet: a class that
  holds `R` or `r` moves on `r`. A string the rule matches, lowercased, is
  accepted by this automaton.
* `counterexample` walks the product of that automaton with an
  Aho-Corasick automaton of the literals, never entering a state that
  completes a literal. It returns a shortest accepted string that contains
  none of them (the guard is wrong), or None (proved: there is none).

RE2's search is unanchored, so the rule matches a text only through a
substring in its language; that substring, lowercased, contains a literal,
and so does the text. `tests/command_policy/test_policy_fastpath.py` also
checks the parse against RE2 on the corpus, so a construct the two engines
read differently shows up as a failure, not as a silent gap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from re import _constants as C
from re import _parser

ASCII = 128
_ALL = (1 << ASCII) - 1


def _bits(chars: Iterable[int]) -> int:
    mask = 0
    for c in chars:
        mask |= 1 << c
    return mask


def _lower(c: int) -> int:
    return c + 32 if 65 <= c <= 90 else c


def _case_closed(mask: int) -> int:
    out = mask
    for c in range(65, 91):
        if mask >> c & 1 or mask >> (c + 32) & 1:
            out |= 1 << c | 1 << (c + 32)
    return out


# RE2's Perl classes are ASCII-only; `\s` is [\t\n\f\r ] (Python's adds \v,
# kept here so the automaton reads the larger class).
_SPACE = _bits(b"\t\n\x0b\x0c\r ")
_DIGIT = _bits(range(48, 58))
_WORD = _DIGIT | _bits(range(65, 91)) | _bits(range(97, 123)) | 1 << 95
_CATEGORIES = {
    C.CATEGORY_SPACE: _SPACE, C.CATEGORY_NOT_SPACE: _ALL & ~_bits(b"\t\n\x0c\r "),
    C.CATEGORY_DIGIT: _DIGIT, C.CATEGORY_NOT_DIGIT: _ALL & ~_DIGIT,
    C.CATEGORY_WORD: _WORD, C.CATEGORY_NOT_WORD: _ALL & ~_WORD,
}


class Nfa:
    """States are ints; `edges[q]` is a list of (character mask, target), `eps[q]` of targets."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int]]] = []
        self.eps: list[list[int]] = []
        self.start = self.new()
        self.final = -1

    def new(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1


def build(pattern: str) -> Nfa:
    """The over-approximating NFA of `pattern` (see the module docstring)."""
    nfa = Nfa()
    nfa.final = _sequence(nfa, _parser.parse(pattern), nfa.start)
    return nfa


def _sequence(nfa: Nfa, items: Iterable[tuple[object, object]], state: int) -> int:
    for op, av in items:
        state = _item(nfa, op, av, state)
    return state


def _item(nfa: Nfa, op: object, av: object, state: int) -> int:
    if op in (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY):
        mask = _char_mask(op, av)
        end = nfa.new()
        nfa.edges[state].append((_case_closed(mask), end))
        return end
    if op is C.AT:
        return state  # ^, $, \b, \B: over-approximated by "always true"
    if op is C.SUBPATTERN:
        return _sequence(nfa, av[3], state)  # type: ignore[index]
    if op is C.ATOMIC_GROUP:
        return _sequence(nfa, av, state)  # type: ignore[arg-type]
    if op is C.BRANCH:
        end = nfa.new()
        for alternative in av[1]:  # type: ignore[index]
            begin = nfa.new()
            nfa.eps[state].append(begin)
            nfa.eps[_sequence(nfa, alternative, begin)].append(end)
        return end
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        low, high, body = av  # type: ignore[misc]
        for _ in range(low):
            state = _sequence(nfa, body, state)
        if high == C.MAXREPEAT:
            loop = nfa.new()
            nfa.eps[state].append(loop)
            nfa.eps[_sequence(nfa, body, loop)].append(loop)
            return loop
        end = nfa.new()
        for _ in range(high - low):
            nfa.eps[state].append(end)
            state = _sequence(nfa, body, state)
        nfa.eps[state].append(end)
        return end
    raise ValueError(f"regex construct {op} is not supported by the proof")


def _char_mask(op: object, av: object) -> int:
    if op is C.LITERAL:
        return 1 << av if av < ASCII else 0  # type: ignore[operator]
    if op is C.NOT_LITERAL:
        return _ALL & ~(1 << av) if av < ASCII else _ALL  # type: ignore[operator]
    if op is C.ANY:
        return _ALL
    mask = 0
    negate = False
    for kind, value in av:  # type: ignore[attr-defined]
        if kind is C.NEGATE:
            negate = True
        elif kind is C.LITERAL:
            mask |= 1 << value if value < ASCII else 0
        elif kind is C.RANGE:
            lo, hi = value
            mask |= _bits(range(lo, min(hi, ASCII - 1) + 1))
        elif kind is C.CATEGORY:
            mask |= _CATEGORIES[value]
        else:
            raise ValueError(f"class item {kind} is not supported by the proof")
    return _ALL & ~mask if negate else mask


def _closure(nfa: Nfa, states: Iterable[int]) -> frozenset[int]:
    seen = set(states)
    todo = list(seen)
    while todo:
        for nxt in nfa.eps[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return frozenset(seen)


class _Literals:
    """An Aho-Corasick automaton of lowercase literals; state 0 is the root."""

    def __init__(self, literals: Iterable[str]) -> None:
        self.goto: list[dict[int, int]] = [{}]
        self.done: list[bool] = [False]
        for literal in literals:
            node = 0
            for c in literal.encode("ascii"):
                if c not in self.goto[node]:
                    self.goto.append({})
                    self.done.append(False)
                    self.goto[node][c] = len(self.goto) - 1
                node = self.goto[node][c]
            self.done[node] = True
        self.chars = {c for edges in self.goto for c in edges}
        fail = [0] * len(self.goto)
        queue = deque(self.goto[0].values())
        while queue:
            node = queue.popleft()
            for c, child in self.goto[node].items():
                queue.append(child)
                f = fail[node]
                while f and c not in self.goto[f]:
                    f = fail[f]
                # `child` is at depth two or more, so this is a shallower node.
                fail[child] = self.goto[f].get(c, 0)
                self.done[child] = self.done[child] or self.done[fail[child]]
        self.fail = fail
        self._step: dict[tuple[int, int], int] = {}

    def step(self, node: int, c: int) -> int:
        key = (node, c)
        if key not in self._step:
            n = node
            while n and c not in self.goto[n]:
                n = self.fail[n]
            self._step[key] = self.goto[n].get(c, 0)
        return self._step[key]


def counterexample(nfa: Nfa, literals: Iterable[str], alphabet: str) -> str | None:
    """A shortest string of `alphabet` (lowercase) the NFA accepts with no literal in it, or None.

    `alphabet` is the set of characters a text may hold; each NFA
    transition is read through ASCII lowercasing first, so only its
    lowercase characters matter.
    """
    wanted = [lit.lower() for lit in literals]
    if any(not lit for lit in wanted):
        raise ValueError("an empty literal is in every string")
    ac = _Literals(wanted)
    allowed = _bits({_lower(ord(ch)) for ch in alphabet})
    # Characters no literal contains all lead the literal automaton back to
    # its root: one representative of them is enough.
    relevant = sorted(c for c in ac.chars if allowed >> c & 1)
    plain = allowed & ~_bits(relevant)
    lowered: dict[int, list[int]] = {}

    def moves(mask: int) -> list[int]:
        if mask not in lowered:
            low = 0
            for c in range(ASCII):
                if mask >> c & 1:
                    low |= 1 << _lower(c)
            chars = [c for c in relevant if low >> c & 1]
            rest = low & plain
            if rest:
                chars.append((rest & -rest).bit_length() - 1)
            lowered[mask] = chars
        return lowered[mask]

    closures: dict[int, frozenset[int]] = {}

    def closure(q: int) -> frozenset[int]:
        if q not in closures:
            closures[q] = _closure(nfa, (q,))
        return closures[q]

    start = [(q, 0) for q in closure(nfa.start)]
    parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = dict.fromkeys(start)
    queue = deque(start)
    while queue:
        here = queue.popleft()
        q, node = here
        if q == nfa.final:
            out: list[int] = []
            link = parent[here]
            while link is not None:
                here, c = link
                out.append(c)
                link = parent[here]
            return bytes(reversed(out)).decode("ascii")
        for mask, target in nfa.edges[q]:
            for c in moves(mask):
                nxt_node = ac.step(node, c)
                if ac.done[nxt_node]:
                    continue
                for r in closure(target):
                    key = (r, nxt_node)
                    if key not in parent:
                        parent[key] = (here, c)
                        queue.append(key)
    return None


def search(nfa: Nfa, text: str) -> bool:
    """Whether the NFA matches somewhere in `text` (ASCII), as an unanchored search would."""
    start = _closure(nfa, (nfa.start,))
    states = start
    for ch in text:
        if nfa.final in states:
            return True
        c = ord(ch)
        moved = {t for q in states for mask, t in nfa.edges[q] if c < ASCII and mask >> c & 1}
        states = _closure(nfa, moved) | start
    return nfa.final in states
