"""A reader and evaluator for the subset of SBPL stockade emits. Test code only.

It answers "may this process write /path?" or "may it connect to host:port?"
for a profile text and its `-D` parameters, so the profile's meaning is
tested on a machine without Seatbelt. It is deliberately strict: an
operation, filter or syntax it does not know is an error, not a guess, so a
profile that drifts outside the subset fails the tests instead of being
half-understood.

Semantics modelled (and why they are enough):
- `(deny default)` then rules; a rule applies when one of its operations
  matches the request (`x*` matches every `x...`) and any one of its filters
  matches (several filters in a rule are alternatives).
- Precedence is pluggable: "last-match" (a later matching rule overrides an
  earlier one) and "deny-wins" (any matching deny decides). stockade's
  profile is meant to mean the same under both, and the tests check both.
- Paths are compared as strings, after the caller has spelled them the way
  Seatbelt sees them (`/private/tmp`, resolved symlinks).
- rename(a, b) needs file-write-unlink on a and file-write-create on b;
  link(a, b) needs file-link on both and file-write-create on b.

`same_name` is the evaluator's own knowledge of how APFS and HFS+ compare
names, written from Apple's descriptions and not from the profile builder:
a test spells a protected name every way the file system would accept and
asks the profile about each, so the two can disagree.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass, field

#: HFS+ skips these code points when comparing names (Apple TN1150, the
#: "ignorable" characters): ZWNJ, ZWJ, LRM, RLM, the bidi embeddings
#: U+202A-U+202E, the deprecated format characters U+206A-U+206F, and the BOM.
_HFS_SKIPPED = frozenset([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F),
                          *range(0x206A, 0x2070), 0xFEFF])


def disk_key(name: str) -> str:
    """What APFS (case-insensitive, normalisation-insensitive) and HFS+ compare:
    the decomposed name, fully case-folded, without HFS+'s skipped code points."""
    decomposed = unicodedata.normalize("NFD", name)
    return "".join(c for c in decomposed.casefold() if ord(c) not in _HFS_SKIPPED)


def same_name(a: str, b: str) -> bool:
    return disk_key(a) == disk_key(b)

KNOWN_OPERATIONS = frozenset({
    "default",
    "file-read*", "file-read-data", "file-read-metadata", "file-read-xattr",
    "file-write*", "file-write-create", "file-write-data", "file-write-unlink",
    "file-write-mode", "file-write-times", "file-write-xattr", "file-write-flags",
    "file-write-owner", "file-ioctl", "file-test-existence", "file-map-executable",
    "file-link",
    "process-fork", "process-exec", "process-info*", "process-info-pidinfo", "signal",
    "sysctl-read", "mach-lookup", "iokit-open", "ipc-posix-sem", "ipc-posix-shm",
    "pseudo-tty", "network-outbound", "network-inbound", "network-bind",
})
KNOWN_FILTERS = frozenset({
    "literal", "subpath", "regex", "require-all", "require-any", "require-not", "remote",
    "local", "global-name", "sysctl-name", "sysctl-name-prefix", "iokit-user-client-class",
    "target", "extension", "param", "path-literal", "ipc-posix-name-regex",
})


class SBPLError(Exception):
    """The text is outside the subset this evaluator (and stockade) speaks."""


class Sym(str):
    """A symbol, told apart from a string literal."""


# -- reading ---------------------------------------------------------------------


def tokenize(text: str) -> list[object]:
    out: list[object] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n":
            i += 1
        elif c == ";":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "()":
            out.append(c)
            i += 1
        elif c == '"':
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise SBPLError("unterminated string")
                c = text[i]
                if c == "\\":
                    if i + 1 >= n or text[i + 1] not in '\\"':
                        raise SBPLError(f"unknown escape at {i}: {text[i:i + 2]!r}")
                    buf.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                elif c == "\n":
                    raise SBPLError("newline inside a string")
                else:
                    buf.append(c)
                    i += 1
            out.append("".join(buf))
        elif c == "#":
            raise SBPLError(f"'#' syntax is outside the subset (at {i})")
        else:
            j = i
            while j < n and text[j] not in ' \t\n();"':
                j += 1
            out.append(Sym(text[i:j]))
            i = j
    return out


def parse(text: str) -> list[list[object]]:
    """Top-level forms; raises on any imbalance."""
    tokens = tokenize(text)
    forms: list[list[object]] = []
    stack: list[list[object]] = []
    for tok in tokens:
        if tok == "(" and not isinstance(tok, Sym):
            stack.append([])
        elif tok == ")" and not isinstance(tok, Sym):
            if not stack:
                raise SBPLError("unbalanced ')'")
            done = stack.pop()
            (stack[-1] if stack else forms).append(done)
        elif not stack:
            raise SBPLError(f"atom outside a form: {tok!r}")
        else:
            stack[-1].append(tok)
    if stack:
        raise SBPLError("unbalanced '('")
    return forms


# -- requests --------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    op: str
    path: str | None = None
    remote: tuple[str, str, int | None] | None = None  # ("ip", addr, port) / ("unix", path, None)
    local: tuple[str, str, int | None] | None = None
    name: str | None = None  # mach service, sysctl, IOKit class
    target: str | None = None  # "same-sandbox" or "other"
    extensions: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Rule:
    action: str
    ops: tuple[str, ...]
    filters: tuple[object, ...]


class Policy:
    def __init__(self, text: str, params: dict[str, str], *,
                 precedence: str = "last-match") -> None:
        if precedence not in ("last-match", "deny-wins"):
            raise ValueError(precedence)
        self.precedence = precedence
        self.params = dict(params)
        self.used_params: set[str] = set()
        forms = parse(text)
        if not forms or [str(x) for x in forms[0]] != ["version", "1"]:
            raise SBPLError("the first form must be (version 1)")
        self.default = ""
        self.rules: list[Rule] = []
        for form in forms[1:]:
            head = form[0]
            if head not in ("allow", "deny") or not isinstance(head, Sym):
                raise SBPLError(f"unknown top-level form {form[:1]!r}")
            ops = []
            rest = form[1:]
            while rest and isinstance(rest[0], Sym):
                ops.append(str(rest[0]))
                rest = rest[1:]
            if not ops:
                raise SBPLError(f"rule without an operation: {form!r}")
            for op in ops:
                if op not in KNOWN_OPERATIONS:
                    raise SBPLError(f"unknown operation {op!r}")
            for f in rest:
                self._check_filter(f)
            if ops == ["default"]:
                if rest or self.rules or self.default:
                    raise SBPLError("default must come first and alone")
                self.default = str(head)
                continue
            self.rules.append(Rule(str(head), tuple(ops), tuple(rest)))
        if self.default != "deny":
            raise SBPLError("the profile must start from (deny default)")
        self._regex: dict[str, re.Pattern[str]] = {}

    # -- static checks -----------------------------------------------------------

    def _check_filter(self, f: object) -> None:
        if not isinstance(f, list) or not f or not isinstance(f[0], Sym):
            raise SBPLError(f"a filter must be a form: {f!r}")
        if f[0] not in KNOWN_FILTERS:
            raise SBPLError(f"unknown filter {f[0]!r}")
        if f[0] in ("require-all", "require-any", "require-not"):
            if f[0] == "require-not" and len(f) != 2:
                raise SBPLError("require-not takes one filter")
            for sub in f[1:]:
                self._check_filter(sub)

    def operations(self) -> set[str]:
        return {op for r in self.rules for op in r.ops}

    def filter_heads(self) -> set[str]:
        heads: set[str] = set()

        def walk(f: object) -> None:
            if isinstance(f, list) and f and isinstance(f[0], Sym):
                heads.add(str(f[0]))
                for sub in f[1:]:
                    walk(sub)

        for r in self.rules:
            for f in r.filters:
                walk(f)
        return heads

    def regexes(self) -> list[str]:
        found: list[str] = []

        def walk(f: object) -> None:
            if isinstance(f, list) and f:
                if f[0] == "regex":
                    found.append(self._string(f[1]))
                for sub in f[1:]:
                    walk(sub)

        for r in self.rules:
            for f in r.filters:
                walk(f)
        return found

    # -- evaluation ---------------------------------------------------------------

    def _string(self, expr: object) -> str:
        if isinstance(expr, Sym):
            raise SBPLError(f"expected a string, got symbol {expr!r}")
        if isinstance(expr, str):
            return expr
        if isinstance(expr, list) and len(expr) == 2 and expr[0] == "param":
            name = self._string(expr[1])
            if name not in self.params:
                raise SBPLError(f"parameter {name} is used but not passed with -D")
            self.used_params.add(name)
            return self.params[name]
        raise SBPLError(f"not a string expression: {expr!r}")

    def _compiled(self, source: str) -> re.Pattern[str]:
        if source not in self._regex:
            self._regex[source] = re.compile(source)
        return self._regex[source]

    def _match(self, f: object, req: Request) -> bool:
        assert isinstance(f, list)
        head, args = f[0], f[1:]
        if head == "require-all":
            return all(self._match(a, req) for a in args)
        if head == "require-any":
            return any(self._match(a, req) for a in args)
        if head == "require-not":
            return not self._match(args[0], req)
        if head in ("literal", "subpath", "regex"):
            value = self._string(args[0])
            if req.path is None:
                return False
            if head == "literal":
                return req.path == value
            if head == "subpath":
                return value == "/" or req.path == value or req.path.startswith(value + "/")
            return self._compiled(value).search(req.path) is not None
        if head == "remote":
            return self._address(args, req.remote)
        if head == "local":
            return self._address(args, req.local)
        if head == "global-name":
            return req.op == "mach-lookup" and req.name == self._string(args[0])
        if head == "sysctl-name":
            return req.op == "sysctl-read" and req.name == self._string(args[0])
        if head == "sysctl-name-prefix":
            return req.op == "sysctl-read" and (req.name or "").startswith(self._string(args[0]))
        if head == "ipc-posix-name-regex":
            return req.op.startswith("ipc-posix") and req.name is not None and (
                self._compiled(self._string(args[0])).search(req.name) is not None)
        if head == "iokit-user-client-class":
            return req.op == "iokit-open" and req.name == self._string(args[0])
        if head == "target":
            if args != [Sym("same-sandbox")]:
                raise SBPLError(f"unknown target {args!r}")
            return req.target == "same-sandbox"
        if head == "extension":
            return self._string(args[0]) in req.extensions
        raise SBPLError(f"filter {head!r} cannot be evaluated")

    def _address(self, args: list[object], have: tuple[str, str, int | None] | None) -> bool:
        kind = args[0]
        if kind == "ip":
            spec = self._string(args[1])
            host, _, port = spec.rpartition(":")
            if host not in ("*", "localhost") or not (port == "*" or port.isdigit()):
                raise SBPLError(f"Seatbelt addresses are '*' or 'localhost' with a port: {spec}")
            if have is None or have[0] != "ip":
                return False
            if host == "localhost" and not ipaddress.ip_address(have[1]).is_loopback:
                return False
            return port == "*" or int(port) == have[2]
        if kind == "unix-socket":
            inner = args[1]
            if not (isinstance(inner, list) and inner[0] == "path-literal"):
                raise SBPLError(f"unix-socket takes (path-literal ...): {inner!r}")
            return have is not None and have[0] == "unix" and have[1] == self._string(inner[1])
        raise SBPLError(f"unknown address kind {kind!r}")

    @staticmethod
    def _op_matches(rule_op: str, op: str) -> bool:
        return rule_op == op or (rule_op.endswith("*") and op.startswith(rule_op[:-1]))

    def decide(self, req: Request) -> str:
        matched: list[str] = []
        for rule in self.rules:
            if not any(self._op_matches(o, req.op) for o in rule.ops):
                continue
            if not rule.filters or any(self._match(f, req) for f in rule.filters):
                matched.append(rule.action)
        if not matched:
            return self.default
        if self.precedence == "deny-wins":
            return "deny" if "deny" in matched else "allow"
        return matched[-1]

    def allows(self, req: Request) -> bool:
        return self.decide(req) == "allow"

    # -- questions the tests ask ----------------------------------------------------

    def file(self, op: str, path: str, extensions: frozenset[str] = frozenset()) -> bool:
        return self.allows(Request(op, path=path, extensions=extensions))

    def read(self, path: str) -> bool:
        return self.file("file-read-data", path)

    def write(self, path: str) -> bool:
        """May an existing file be overwritten?"""
        return self.file("file-write-data", path)

    def create(self, path: str) -> bool:
        return self.file("file-write-create", path)

    def unlink(self, path: str) -> bool:
        return self.file("file-write-unlink", path)

    def rename(self, src: str, dst: str) -> bool:
        return self.unlink(src) and self.create(dst)

    def link(self, src: str, dst: str) -> bool:
        return (self.file("file-link", src) and self.file("file-link", dst)
                and self.create(dst))

    def execute(self, path: str) -> bool:
        return self.file("process-exec", path)

    def connect(self, host: str, port: int) -> bool:
        return self.allows(Request("network-outbound", remote=("ip", host, port)))

    def connect_unix(self, path: str) -> bool:
        return self.allows(Request("network-outbound", remote=("unix", path, None)))

    def listen(self, host: str, port: int) -> bool:
        return (self.allows(Request("network-bind", local=("ip", host, port)))
                and self.allows(Request("network-inbound", local=("ip", host, port))))

    def lookup(self, service: str) -> bool:
        return self.allows(Request("mach-lookup", name=service))

    def sysctl(self, name: str) -> bool:
        return self.allows(Request("sysctl-read", name=name))

    def shm(self, name: str) -> bool:
        """May the command open (or create) the POSIX shared memory object `name`?"""
        return self.allows(Request("ipc-posix-shm", name=name))

    def sem(self, name: str) -> bool:
        return self.allows(Request("ipc-posix-sem", name=name))

    def signal(self, target: str) -> bool:
        return self.allows(Request("signal", target=target))
