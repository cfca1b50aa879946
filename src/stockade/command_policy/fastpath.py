"""Settle "no default rule can match" with two static checks: no `re`, no RE2, no compiling.

A CLI invocation checks one command, and nearly every command an agent runs
(`git status`, `pytest -q tests/`, `make -j4`) matches no rule. The full
path (import `re` for the normaliser, import `re2`, compile the filter)
costs over 20 ms for that answer; these checks give it in microseconds.
They only ever conclude "no rule can match"; whenever they cannot prove
it, the command takes the full path, unchanged.

1. **Plain text.** Every step of the normaliser (`_fold.py`) is guarded by
   a test for a character or sequence before it changes anything. A text
   with none of them (`is_plain`) is its own normal form, exactly, case
   included. A text whose only such characters are quotes, and that has no
   `+`, normalises to itself without the quotes (`plain_form`). The
   exclusions below follow `_fold._normalize_once` step by step;
   `tests/command_policy/test_policy_fastpath.py` checks both relations
   against the real normaliser with property tests.

2. **Guards.** For each default rule, `GUARDS` holds a formula over
   lowercase literals that every plain text the rule matches satisfies
   when the literals are looked for in the lowercased text. A guard is a
   tuple of alternatives (one must hold); an alternative, a tuple of
   clauses (all must hold); a clause, a tuple of literals (one must occur).
   If no rule's guard holds, no rule matches. Lowercasing the text is what
   the case-insensitive rules need; for the case-sensitive ones it only
   makes a guard hold more often.

   The guards are proved, not trusted: the test builds an automaton for
   each rule's regex and shows that for every way the guard can be false
   (one clause from each alternative, none of its literals present) the
   regex has no match over the plain alphabet, and that every literal and
   every alternative is needed. A rule edited so that its guard no longer
   holds fails with a counterexample. Rules that are not in `DEFAULT_RULES`
   (custom rules, or a changed copy) have no guard, and a policy with one
   of them always takes the full path.

RE2's own prefilter (`FilteredRE2`) computes similar literals, but the
Python binding does not expose them, it drops literals shorter than three
characters (which leaves `fork-bomb` and `drive-root-delete` with none: RE2
runs those two on every text), and its atoms flattened into one list
include `bin`, so `/bin/true` could never skip the filter. Hence a table of
our own, proved against the rules instead of copied from RE2.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .rules import Rule

#: Literals one of which must occur; clauses that must all hold; alternatives one of which must.
Clause = tuple[str, ...]
Guard = tuple[tuple[Clause, ...], ...]

# ---- 1. plain text --------------------------------------------------------

# Characters a normaliser step removes or reacts to, in `_normalize_once`'s order:
#   `$`   ANSI-C quoting `$'...'` and `$IFS` (both need the `$`)
#   CR    line endings are folded to LF
#   `\` `^` `` ` ``  line continuations, cmd carets, and both readings of `\` and `` ` ``
#   `"` `'`  quotes are dropped (and `+` only joins strings next to a quote)
#   `{`   brace expansion (needs `{` and `,`; `{` alone is rare enough to refuse)
#   controls other than TAB and LF are dropped or become spaces
# Anything outside ASCII goes to the Unicode folds, so it is refused before this.
_PLAIN_BYTES = b"\t\n" + bytes(range(0x20, 0x7F)).translate(None, b"$\\^`\"'{")
# `_DOT_SEGMENT_RE` folds `/.` when a separator or the end follows it, and
# `_PARENT_RE` resolves `/..` when one follows that; `/.venv`, `~/.config`
# and `./...` are left as written.
_SEGMENT_END = frozenset("/ \t\n;&|<>()")


def is_plain(text: str) -> bool:
    """Whether `text` is provably its own normal form: `normalize(text) == text`."""
    if not text.isascii():
        return False  # the Unicode folds
    if text.encode("ascii").translate(None, _PLAIN_BYTES):
        return False  # a character outside the plain alphabet remains
    # Path folds: `//` runs collapse (and `\\?\`-style prefixes need `//` or
    # `/??/`), `/./` and a trailing `/.` go, `/..` is resolved.
    if "//" in text or "/?" in text:
        return False
    dot = text.find("/.")
    while dot >= 0:
        after = dot + 2
        if after < len(text) and text[after] == ".":
            after += 1
        if after == len(text) or text[after] in _SEGMENT_END:
            return False
        dot = text.find("/.", dot + 2)
    # PowerShell payloads are decoded (and the text then normalised again)
    # on any line that mentions it.
    low = text.lower()
    return "powershell" not in low and "pwsh" not in low


def plain_form(text: str) -> str | None:
    """`normalize(text)` when it can be had without the normaliser, else None.

    A plain text is its own normal form. Quotes are the one thing ordinary
    commands (`git commit -m "fix"`) add: the normaliser deletes them, and
    before that step only the `+` concatenation fold looks at them. So a
    text without `+` whose quote-free remainder is plain normalises to
    that remainder; every later step sees only the remainder.
    """
    if is_plain(text):
        return text
    if "+" not in text and ('"' in text or "'" in text):
        bare = text.replace('"', "").replace("'", "")
        if is_plain(bare):
            return bare
    return None


# ---- 2. guards -------------------------------------------------------------


def _ws(*words: str) -> Clause:
    """`word` followed by `\\s`, which in a plain text is a space, a tab or a newline."""
    return tuple(word + space for word in words for space in " \t\n")


_RM = _ws("rm")
_DEV = ("/dev/",)
# `_DISK` in rules.py, one literal per device family.
_DISKS = ("/dev/sd", "/dev/hd", "/dev/vd", "/dev/xvd", "/dev/nvme", "/dev/mmcblk", "/dev/ada",
          "/dev/da", "/dev/disk", "/dev/rdisk", "/dev/md", "/dev/dm-", "/dev/mapper/",
          "/dev/loop", "/dev/sr", "/dev/fd", "/dev/nbd", "/dev/zd", "/dev/mtd", "/dev/ram",
          "/dev/root", "/dev/block/", "/dev/cciss/")
# `_WIN_DELETE` and `_WIN_RECURSE`.
_WIN_DELETE = _ws("remove-item", "ri", "rm", "rmdir", "rd", "del", "erase")
_WIN_RECURSE = ("/s", "-r")

#: Rule name -> guard, for every rule in `DEFAULT_RULES` (proved in the tests).
GUARDS: dict[str, Guard] = {
    # Plain text has no `{` or `$`, which leaves only cmd's `%0|%0`.
    "fork-bomb": ((("%0",),),),
    "rm-no-preserve-root": ((_RM, ("--n",)),),
    "rm-root-recursive": ((_RM, ("-",), ("/",)),),
    "dd-to-disk": ((("of=/dev/",), _ws("dd")),),
    "mkfs-device": ((_DEV, ("mkfs", "mke2fs", "mkswap", "mkntfs", "mkdosfs", "mkexfatfs",
                            "newfs")),),
    "redirect-to-block-device": ((_DISKS, (">", "tee", "cp")),),
    "wipe-device": ((_DEV, ("wipefs", "blkdiscard", "shred")),),
    "format-drive": ((("format",), (":", "format-volume")),),
    # A delete of a drive or hive root (`:` or `%systemdrive%`) or of the
    # current drive's root (`/`); or a listing of a root piped into a delete.
    "drive-root-delete": ((_WIN_DELETE, _WIN_RECURSE, (":", "%", "/")),
                          (("|",), (":", "%"))),
    "shadow-copy-delete": ((("shadow",),),),
    "backup-catalog-delete": ((("wbadmin",), ("delete",)),),
    "raw-disk-wipe": ((("sel",), ("dis",), ("clean",)),
                      (("clear-disk", "remove-partition", "physicaldrive"),)),
    "bcdedit-delete": ((("bcdedit",), ("/delete",)),),
    "boot-recovery-disable": ((("bcdedit",), ("recoveryenabled", "bootstatuspolicy")),),
    "reg-delete-hive": ((("hk",), ("delete",), ("reg",)),),
    "rm-system-path": ((_RM, ("-",), ("/",)),),
    "rm-home-recursive": ((_RM, ("-",), ("~",)),),
    "curl-pipe-shell": ((("curl", "wget", "fetch"), ("|", "<(")),),
    "chmod-777-system": ((("chmod",), ("777", "+rwx", "=rwx"), ("/",)),),
    "write-auth-files": ((("/etc/passwd", "/etc/shadow", "/etc/gshadow", "/etc/group",
                           "/etc/sudoers"),
                          (">", "tee", "sed", "perl", "cp", "mv", "install", "ln", "rsync",
                           "of=")),),
    "reverse-shell": ((("/dev/tcp/", "/dev/udp/"),),
                      (_ws("nc", "ncat", "netcat"), ("-e", "-c"), ("sh", "cmd")),
                      (("socat",), ("exec:",))),
    "host-shutdown": ((("shutdown", "reboot", "halt", "poweroff", "kexec", "sysrq-trigger",
                        "-computer"),),
                      (("init",), ("0", "6"))),
    "sudo-password-stdin": ((("sudo",), ("-",)),),
    "ssh-authorized-keys-write": ((("authorized_keys",),),),
    "windows-system-path-delete": ((_WIN_DELETE, _WIN_RECURSE, (":/", "%")),),
    # Never true of a plain text, which cannot mention PowerShell.
    "powershell-encoded-command": ((("powershell", "pwsh"),),),
    "download-execute-cradle": ((("iex", "invoke-expression", "[scriptblock]", "mshta",
                                  "regsvr32"),),),
    "defender-disable": ((("mppreference", "windefend", "defender"),),),
    "firewall-disable": ((("netsh", "netfirewallprofile", "mpssvc"),),),
    "execution-policy-bypass": ((("bypass", "unrestricted"),),),
    "amsi-tamper": ((("amsi",),),),
    "event-log-clear": ((("wevtutil", "-eventlog", "fsutil"),),),
    "local-account-backdoor": ((("/add", "new-localuser", "add-localgroupmember"),),),
    # `schtasks /create` and `sc create` both hold `create`.
    "autostart-persistence": ((("/currentversion/", "register-scheduledtask", "new-service",
                                "create", "/programs/startup", "shell:startup"),),),
    "acl-takeover": ((("takeown", "icacls"),),),
}

class Guards:
    """Guards ready to be checked: each distinct literal is looked for once per text."""

    __slots__ = ("_always", "_literals", "_rules")

    def __init__(self, guards: tuple[Guard, ...]) -> None:
        self._rules = guards
        self._literals = tuple({literal: None for guard in guards for alternative in guard
                                for clause in alternative for literal in clause})
        # An alternative without clauses holds for every text (the table has
        # none; this keeps `hold` right if one ever appears).
        self._always = any(not alternative for guard in guards for alternative in guard)

    def __len__(self) -> int:
        return len(self._rules)

    def hold(self, low: str) -> bool:
        """Whether any guard holds for `low`, a lowercased plain text (see `plain_form`)."""
        if self._always:
            return True
        present = {literal for literal in self._literals if literal in low}
        if not present:
            return False  # every alternative has a clause, and no clause can hold
        for guard in self._rules:
            for alternative in guard:
                for clause in alternative:
                    if present.isdisjoint(clause):
                        break
                else:
                    return True
        return False


#: The guards of `DEFAULT_RULES`, in its order (the tests hold the two together):
#: a hook for the default configuration needs neither the rules nor the policy.
DEFAULT_GUARDS = Guards(tuple(GUARDS.values()))
#: No rules at all, or none evaluated: nothing can match.
NO_GUARDS = Guards(())

_by_rule: dict[int, Guard] = {}


def guards_for(rules: tuple[Rule, ...]) -> Guards | None:
    """The guards of `rules`, or None if one of them is not a default rule (no guard)."""
    from .rules import DEFAULT_RULES

    if not rules:
        return NO_GUARDS
    if rules == DEFAULT_RULES:  # `Rule` has no `__eq__`: this compares identities
        return DEFAULT_GUARDS
    if not _by_rule:
        _by_rule.update((id(rule), guard) for rule, guard in zip(DEFAULT_RULES, GUARDS.values(),
                                                                strict=True))
    # By identity: a custom rule may not reuse a default name through the
    # config, but a programmatic `Rule` with a default name and another
    # regex must not borrow that rule's guard. (The default rules live as
    # long as the process, so their ids stay theirs.)
    try:
        return Guards(tuple(_by_rule[id(rule)] for rule in rules))
    except KeyError:
        return None


def settled(raw: str, guards: Guards) -> str | None:
    """`normalize(raw)` if it is provably one no rule with these guards matches, else None."""
    bare = plain_form(raw)
    if bare is None or guards.hold(bare.lower()):
        return None
    return bare
