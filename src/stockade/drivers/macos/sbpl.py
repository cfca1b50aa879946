"""Spelling values inside a Seatbelt profile: strings, regexes, and macOS paths.

A profile is a program, and a path that reaches it unescaped can change what
the program says: a workspace named `a") (allow file-write*` must stay a
name. Paths therefore travel as `-D` parameters wherever SBPL accepts one;
the only place a path is spelled inside the text is a regex, and
`regex_literal` is the one function that spells it.

Kept free of `re` and `typing` at run time: this module is on the command
path of every sandboxed command on macOS.
"""

from __future__ import annotations

from ...errors import InvalidCommand, SandboxUnavailable

# The spellings macOS resolves through a symlink at the root. Seatbelt matches
# the path the kernel resolved, so a rule written for `/tmp/x` never matches a
# write that lands on `/private/tmp/x` and the command is denied for no
# visible reason.
_ROOT_SYMLINKS = ("/tmp", "/var", "/etc")

# Where the firmlinked data volume shows every user file a second time. A
# credential hidden under one spelling only would be readable under the other
# if Seatbelt ever saw that spelling, so hiding names both.
DATA_VOLUME = "/System/Volumes/Data"

# Characters that mean something to a regex; each becomes a one-character
# bracket expression, which every POSIX-style engine reads literally. `^`,
# `\` and `[` have no unambiguous bracket spelling (`[[]` reads as the start
# of a nested class to some engines) and are escaped with a backslash.
_BRACKETED = frozenset(".*+?(){}|$]")


def canonical_macos_path(path: str) -> str:
    """`path` in the spelling Seatbelt compares against (pure: nothing is looked up).

    `/tmp`, `/var` and `/etc` become `/private/...`; repeated and trailing
    slashes and `.` components go. Symlinks elsewhere must already be
    resolved by the caller (the profile's paths come from `realpath`).
    """
    if "\x00" in path:
        raise InvalidCommand(f"path contains a NUL byte: {path!r}")
    if not path.startswith("/"):
        raise InvalidCommand(f"path must be absolute: {path!r}")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            # `..` after a symlink names a place lexical folding cannot know;
            # a canonical path never contains one, so refuse rather than guess.
            raise InvalidCommand(f"path is not canonical (contains '..'): {path!r}")
        parts.append(part)
    out = "/" + "/".join(parts)
    for link in _ROOT_SYMLINKS:
        if out == link or out.startswith(link + "/"):
            return "/private" + out
    return out


def data_volume_alias(path: str) -> str:
    """The same place spelled through the data volume, or "" when it has no such name."""
    if path == "/" or path == DATA_VOLUME or path.startswith(DATA_VOLUME + "/"):
        return ""
    if path == "/System" or path.startswith("/System/"):
        return ""  # the sealed system volume is not on the data volume
    return DATA_VOLUME + path


def ancestors(path: str) -> list[str]:
    """Every directory above `path`, nearest first, excluding `/`."""
    out: list[str] = []
    head = path.rsplit("/", 1)[0]
    while head:
        out.append(head)
        head = head.rsplit("/", 1)[0]
    return out


def quote(value: str) -> str:
    """A Scheme string literal holding `value` exactly."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def regex_literal(path: str, *, fold_case: bool = False) -> str:
    """A regex source matching `path` literally, optionally ignoring ASCII case.

    Case folding is for names that must stay uncreatable: the default APFS
    volume is case-insensitive, so `mkdir .GIT` creates the directory git and
    stockade later read as `.git`, and a rule that spelled only `.git` would
    not have seen it being made.
    """
    out: list[str] = []
    for ch in path:
        if ch < " " or ch == "\x7f":
            raise SandboxUnavailable(
                f"{path!r} contains a control character, which a Seatbelt rule cannot "
                "name safely. Rename the directory, or run in read-only mode."
            )
        if fold_case and ch.isascii() and ch.isalpha():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch in _BRACKETED:
            out.append(f"[{ch}]")
        elif ch in "^\\[":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


# -- names as the file system compares them -----------------------------------------

#: Code points HFS+ leaves out when it compares names (the CVE-2014-9390
#: class: `.g\u200cit` is `.git` there): zero-width joiners and marks,
#: directional embeddings, deprecated format characters, the BOM.
HFS_IGNORABLE = ("\u200c", "\u200d", "\u200e", "\u200f",
                 *(chr(c) for c in range(0x202A, 0x202F)),
                 *(chr(c) for c in range(0x206A, 0x2070)), "\ufeff")

#: The code points outside ASCII whose case folding is ASCII: APFS and HFS+
#: compare names case-insensitively under Unicode folding, so `.\u017ftockade`
#: (U+017F) and `.git/hooKs` (U+212A, the Kelvin sign) name the protected
#: files. Multi-letter folds (`ß` is `ss`, the `ﬆ` ligature `st`) are here
#: too: whether a volume folds fully or simply, the stricter reading holds.
#: tests/macos checks this table against every code point's casefold().
ASCII_FOLDS: dict[str, tuple[str, ...]] = {
    "k": ("\u212a",), "s": ("\u017f",), "ss": ("\u00df", "\u1e9e"), "ff": ("\ufb00",),
    "fi": ("\ufb01",), "fl": ("\ufb02",), "ffi": ("\ufb03",), "ffl": ("\ufb04",),
    "st": ("\ufb05", "\ufb06"),
}


def fold_name(name: str) -> str:
    """`name` as the file system compares it: case-folded, HFS+'s ignorables gone."""
    import unicodedata

    out = unicodedata.normalize("NFD", name).casefold()
    return "".join(ch for ch in out if ch not in HFS_IGNORABLE)


def _alternatives(ch: str) -> list[str]:
    """Every single code point whose fold is `ch` (ASCII) or one of its cases (otherwise)."""
    if ch.isascii():
        low = ch.lower()
        return list(dict.fromkeys([low, ch.upper(), *ASCII_FOLDS.get(low, ())]))
    return list(dict.fromkeys([ch, ch.lower(), ch.upper(), ch.casefold()]))


def _alt(options: list[str]) -> str:
    parts = [regex_literal(o) for o in options]
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def _tokenisations(text: str) -> list[list[str]]:
    """Every way to spell `text` (lower case) as single letters and multi-letter folds."""
    if not text:
        return [[]]
    out: list[list[str]] = []
    for size in (1, 2, 3):
        head = text[:size]
        if len(head) == size and (size == 1 or head in ASCII_FOLDS):
            out.extend([head, *rest] for rest in _tokenisations(text[size:]))
    return out


def name_regex(path: str, fold_from: int) -> str:
    """A regex source for `path` whose part from `fold_from` on matches every spelling
    the file system treats as the same name (pure).

    Below a writable root a command chooses the spelling of the names it
    creates, so there every letter may be any code point that folds to it,
    a run of letters may be one ligature, and HFS+'s ignorable code points may
    stand anywhere. The root itself is spelled as on disk, folding ASCII case
    only. Alternatives are groups, never bracket expressions: a bracket with
    a multi-byte character in it means bytes to an engine that reads bytes.
    """
    head, tail = path[:fold_from], path[fold_from:]
    ignorable = "(" + "|".join(HFS_IGNORABLE) + ")*"
    out = [regex_literal(head, fold_case=True)]
    for i, component in enumerate(tail.split("/")):
        if i:
            out.append("/")
        if not component:
            continue
        out.append(ignorable)
        spelled: list[str] = []
        start = 0
        while start < len(component):
            # A run of ASCII letters where a ligature could stand is spelled as
            # every tokenisation of the run; anything else one letter at a time.
            end = start
            while end < len(component) and component[end].isascii() and component[end].isalpha():
                end += 1
            if end == start:
                spelled.append(_alt(_alternatives(component[start])) + ignorable)
                start += 1
                continue
            run = component[start:end].lower()
            ways = _tokenisations(run)
            if len(ways) > 256:
                raise SandboxUnavailable(
                    f"{path!r} has a name with too many ligature spellings for a Seatbelt rule "
                    "to list. Rename the directory, or run in read-only mode.")
            forms = []
            for way in ways:
                forms.append("".join(
                    (_alt(_alternatives(tok)) if len(tok) == 1 else _alt(list(ASCII_FOLDS[tok])))
                    + ignorable for tok in way))
            spelled.append(forms[0] if len(forms) == 1 else "(" + "|".join(forms) + ")")
            start = end
        out.extend(spelled)
    return "".join(out)
