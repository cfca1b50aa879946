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
