"""Fold the spellings a shell would execute verbatim into one canonical text.

Rules are written once, against this text. Without the fold, every rule would
have to anticipate `r""m`, `\\r\\m`, `rm${IFS}-rf`, `r^m`, a zero-width space
or a base64 `-EncodedCommand`, and the one it forgot is the bypass. Anything
the fold cannot prove equivalent (variables, `eval`, string arithmetic) is out
of scope: this is a hard filter in front of the OS sandbox, not a shell.

Every step errs towards joining and revealing: a fold that turns a harmless
command into one a rule matches costs a false positive, a fold that hides a
dangerous one is a bypass. The result is idempotent (`normalize(normalize(t))
== normalize(t)`), so rules and the texts shown to people agree.

Nothing here may be slower than linear in the input: the scan target is
bounded, but a quadratic step on 256 KiB is still a denial of service.

This module is loaded by `normalize.normalize` on first use, so that a check
that never needs it does not import `re` or compile these patterns.
`fastpath.is_plain` lists every character and sequence a step below reacts
to: a step that starts reacting to a new one must be added there too, or the
fast path would skip a fold (`test_policy_fastpath.py` checks the two
against each other).
"""

from __future__ import annotations

import binascii
import functools
import re

#: Stands in for a decoded `-EncodedCommand` payload; the decoded text is
#: appended below. It cannot itself be mistaken for a payload (`[` is not
#: base64), which is what keeps the fold idempotent.
DECODED_MARKER = "[decoded below]"


# Characters a terminal does not show. A person reviewing `r<U+200B>m -rf /`
# reads `rm -rf /`, and so must the filter; removing them can only join
# words, never hide one.
_INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f"
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e"
    "\u206f\u3164\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08\ufe09\ufe0a\ufe0b"
    "\ufe0c\ufe0d\ufe0e\ufe0f\ufeff\uffa0"
)
# PowerShell reads these dashes as `-` and these quotes as quotes, so
# `Remove-Item` followed by an en-dash `Recurse`, or `rm` in curly quotes, is the
# command it looks like.
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"
_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b"
_DOUBLE_QUOTES = "\u201c\u201d\u201e"
_SPACES = ("\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
           "\u202f\u205f\u3000")
_NEWLINES = "\u0085\u2028\u2029"

# Tag characters (U+E0000..U+E007F) render as nothing too.
_TAGS = "\U000e0000-\U000e007f"


@functools.cache
def _unicode_folds() -> tuple[re.Pattern[str], tuple[tuple[re.Pattern[str], str], ...]]:
    # Compiled on first non-ASCII input: most commands never need them, and
    # the character classes are the slowest patterns here to compile.
    anything = re.compile("[" + re.escape(_INVISIBLE + _DASHES + _SINGLE_QUOTES + _DOUBLE_QUOTES
                                          + _SPACES + _NEWLINES) + _TAGS + "]")
    # One constant replacement per class, so a text made of nothing but
    # zero-width spaces costs a few regex passes, not a Python call per character.
    folds = tuple(
        (re.compile("[" + re.escape(chars) + extra + "]"), replacement)
        for chars, extra, replacement in ((_INVISIBLE, _TAGS, ""), (_DASHES, "", "-"),
                                          (_SINGLE_QUOTES, "", "'"), (_DOUBLE_QUOTES, "", '"'),
                                          (_SPACES, "", " "), (_NEWLINES, "", "\n"))
    )
    return anything, folds


# Quotes only group words for the shell, carets only escape for cmd: with
# them gone, `"r"m`, `r''m` and `r^m` all read `rm`. Control characters other
# than tab and newline are dropped for the same reason: bash keeps them as
# word characters, so removing them can only join, never hide. (Vertical tab
# and form feed separate words, so they become spaces.)
_DROP = "\"'^" + "".join(map(chr, (*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F)))
_DROP_TABLE: dict[int, str | None] = {ord(c): None for c in _DROP}
_DROP_TABLE.update({0x0B: " ", 0x0C: " "})
# ASCII bytes never occur inside a multi-byte UTF-8 sequence, so the same
# deletion on the encoded text is exact, and far faster than `str.translate`
# once the text is not pure ASCII.
_DROP_BYTES = _DROP.encode("ascii")
_BYTE_TABLE = bytes(range(256)).replace(b"\x0b", b" ").replace(b"\x0c", b" ")

# `'Down'+'loadString'` is one string to PowerShell. The pattern starts at the
# `+` (a literal, which `re` can scan for quickly); the quote before it is
# checked by hand.
_CONCAT_RE = re.compile(r"\+[ \t]*[\"']")
_CONCAT_BULK_RE = re.compile(r"[\"'][ \t]*\+[ \t]*[\"']")
# Above this many candidates, a step switches from a scan that is fastest on
# ordinary text (a Python loop over a few hits) to one whose cost does not
# depend on the number of hits; both give the same result.
_MANY = 512
# Picking out the lines with an escape costs about a microsecond a line; past
# this many, scanning the whole text a second time is cheaper.
_MANY_ESCAPES = 8192

# Bash ANSI-C quoting: `$'\x72\x6d'` is `rm`. Possessive so an unterminated
# `$'` costs one linear scan, not a backtracking one.
_ANSI_C_RE = re.compile(r"\$'((?:[^'\\]++|\\.)*+)'", re.DOTALL)
_ANSI_C_ESCAPE_RE = re.compile(
    r"\\(?:x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|([0-7]{1,3})|c(.)|(.))",
    re.DOTALL,
)
_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
                  "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}

# `$IFS` is whitespace after word splitting: `rm${IFS}-rf${IFS}/` is `rm -rf /`.
# The `$9` of the `$IFS$9` idiom is an unset positional parameter: empty.
_IFS_RE = re.compile(r"(?:\$\{IFS[^}\n]*\}|\$IFS(?![A-Za-z0-9_]))(?:\$\{?[1-9@*]\}?)?")

# Bash brace expansion: `{rm,-rf,/}` is `rm -rf /` and `/{,}` is `/ /`. The
# pattern finds the group; `_expand_braces` extends it to the whole word
# (a pattern that started at the word, with a look-behind, would make `re`
# try it at every position, ten times slower on a long script).
_BRACE_RE = re.compile(r"\{([^{}\s,]*(?:,[^{}\s,]*)+)\}")
_BRACE_WORD_END_RE = re.compile(r"[\s;&|()]")
_WORD_BREAK = frozenset(" \t\n;&|()")

# A base64 `-EncodedCommand` payload. PowerShell accepts any unambiguous
# prefix of the parameter (`-e`, `-enc`, `-encodedc`...), `-ec`, and `/` or
# `--` as the dash. The payload is the next word, or the run of words after
# it (quoted, `"SQBF AFgA..."` is one argument, and .NET's base64 decoder
# skips the spaces). The word class includes `.` and `?`, which the path fold
# may remove, so that a word is the same word before and after it (see
# `_decode_payload`).
_POWERSHELL_LINE_RE = re.compile(r"(?i)(?:powershell|pwsh)[^\n]*")
_ENCODED_RE = re.compile(
    r"(?i)(?<![^\s])(?:--?|/)(?:ec|e(?:n(?:c(?:o(?:d(?:e(?:d(?:c(?:o(?:m(?:m(?:a(?:n(?:d)?)?)?)?)?)?)?)?)?)?)?)?)?)"
    r"(?::|[ \t]+)([A-Za-z0-9+/=.?]{4,})((?:[ \t]+[A-Za-z0-9+/=.?]+)*)"
)
_BLANKS_RE = re.compile(r"[ \t]+")

# Path spellings. `\\?\C:\`, `\\.\C:` and `\??\C:\` (after `\` became `/`)
# name the same place as `C:/`; `//./PhysicalDrive0` keeps its device name.
_WIN_PREFIX_RE = re.compile(r"(?i)//[?.]/(unc/)?|/\?\?/")
_WIN_PREFIXED_RE = re.compile(r"(?i)[a-z]:|physicaldrive|harddisk|volume\{|globalroot")
_PREFIX_BREAK = frozenset(" \t\n=;&|<>(")
# `/.` as a whole segment.
_DOT_SEGMENT_RE = re.compile(r"/\.(?=[/\s;&|<>()]|$)")
_SLASHES_RE = re.compile(r"//+")
# A URL's `//` is kept (as a NUL, which the earlier steps removed from the
# text, while the other runs collapse) so `https://host` stays readable;
# nothing this filter looks for is spelt with a scheme. `C://` is a drive.
_COLON_SLASHES_RE = re.compile(r":/{2,}")
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
# A `..` path segment, and the characters that end a word.
_PARENT_RE = re.compile(r"/\.\.(?![^/\s;&|<>()])")
_DELIMITERS = frozenset(" \t\n;&|<>()")
_DELIMITER_RE = re.compile(r"[\s;&|<>()]")
_DRIVE_RE = re.compile(r"[A-Za-z]:")


def normalize(text: str) -> str:
    """The canonical reading of `text` that rules are matched against. Never raises."""
    result, powershell = _normalize_once(text)
    # Decoding a payload and folding paths can, in contrived spellings, each
    # expose something for the other (a path fold that turns a word into
    # valid base64). One more pass settles it; only text that mentions
    # PowerShell pays for it.
    for _ in range(4):
        if not powershell:
            break
        again, powershell = _normalize_once(result)
        if again == result:
            break
        result = again
    return result


def _normalize_once(text: str) -> tuple[str, bool]:
    t = text
    if "$'" in t:
        t = _ANSI_C_RE.sub(_decode_ansi_c, t)
    if not t.isascii():
        t = _fold_unicode(t)
    if "\r" in t:
        t = t.replace("\r\n", "\n").replace("\r", "\n")
    # Line continuations of bash, cmd and PowerShell join two lines into one
    # command; left in, `rm -rf \<newline>/` would hide the `/`. (`in` first:
    # it is several times faster than a `replace` that finds nothing.)
    for continuation in ("\\\n", "^\n", "`\n"):
        if continuation in t:
            t = t.replace(continuation, "")
    if "+" in t:
        t = _fold_concatenation(t)
    if t.isascii():
        t = t.translate(_DROP_TABLE)
    else:
        t = (t.encode("utf-8", "surrogatepass").translate(_BYTE_TABLE, _DROP_BYTES)
             .decode("utf-8", "surrogatepass"))

    # `\` is an escape to a POSIX shell and a path separator to Windows; a
    # backtick is a command substitution to bash and an escape to PowerShell.
    # Both readings are scanned rather than guessing which shell will run it.
    # The Windows reading only needs the lines that hold one of the two.
    views = [t]
    if "\\" in t or "`" in t:
        windows = (t if t.count("\\") + t.count("`") > _MANY_ESCAPES
                   else _lines_with_escapes(t))
        views = [t.replace("\\", "").replace("`", " "),
                 windows.replace("`", "").replace("\\", "/")]

    decoded: dict[str, None] = {}
    out: list[str] = []
    powershell = False
    for view in views:
        v, mentions = _fold_view(view, decoded)
        powershell = powershell or mentions
        if v not in out:
            out.append(v)
    for payload in decoded:
        if payload not in out:
            out.append(payload)
    return "\n".join(out), powershell


def _fold_unicode(t: str) -> str:
    anything, folds = _unicode_folds()
    if anything.search(t) is None:
        return t
    for pattern, replacement in folds:
        t = pattern.sub(replacement, t)
    return t


def _fold_concatenation(t: str) -> str:
    if t.count("+") > _MANY:
        # No Python per `+`: the quotes this also removes go in the next step.
        return _CONCAT_BULK_RE.sub("", t)
    cuts: list[tuple[int, int]] = []
    for m in _CONCAT_RE.finditer(t):
        i = m.start() - 1
        while i >= 0 and t[i] in " \t":
            i -= 1
        if i >= 0 and t[i] in "\"'" and (not cuts or i >= cuts[-1][1]):
            cuts.append((i, m.end()))
    if not cuts:
        return t
    out: list[str] = []
    pos = 0
    for start, end in cuts:
        out.append(t[pos:start])
        pos = end
    out.append(t[pos:])
    return "".join(out)


def _lines_with_escapes(t: str) -> str:
    """The lines of `t` that contain a backslash or a backtick, in order."""
    n = len(t)
    lines: list[str] = []
    pos = 0
    # Cached next positions: re-finding both characters from every line
    # would be quadratic when one of them never occurs.
    next_backslash = t.find("\\")
    next_backtick = t.find("`")
    while True:
        if 0 <= next_backslash < pos:
            next_backslash = t.find("\\", pos)
        if 0 <= next_backtick < pos:
            next_backtick = t.find("`", pos)
        hits = [i for i in (next_backslash, next_backtick) if i >= 0]
        if not hits:
            break
        i = min(hits)
        start = t.rfind("\n", pos, i) + 1 or pos
        end = t.find("\n", i)
        if end == -1:
            end = n
        lines.append(t[start:end])
        pos = end + 1
    return "\n".join(lines)


def _decode_ansi_c(m: re.Match[str]) -> str:
    body = m.group(1)
    return _ANSI_C_ESCAPE_RE.sub(_ansi_c_escape, body) if "\\" in body else body


def _ansi_c_escape(m: re.Match[str]) -> str:
    hex2, hex4, hex8, octal, control, other = m.groups()
    if other is not None:
        # Bash keeps the backslash of an unknown escape.
        return _ANSI_C_SIMPLE.get(other, "\\" + other)
    if control is not None:
        return chr(ord(control) & 0x1F)
    number = hex2 or hex4 or hex8
    code = int(number, 16) if number else int(octal, 8) & 0xFF
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "?"
    return chr(code)


def _fold_view(t: str, decoded: dict[str, None]) -> tuple[str, bool]:
    if "IFS" in t:
        t = _IFS_RE.sub(" ", t)
    if "{" in t and "," in t:
        t = _expand_braces(t)
    powershell = ("-" in t or "/" in t) and _mentions_powershell(t)
    if powershell:
        t = _POWERSHELL_LINE_RE.sub(lambda m: _ENCODED_RE.sub(
            lambda e: _replace_payload(e, decoded), m.group()), t)
    if "/" in t:
        t = _fold_paths(t)
    return t, powershell


def _mentions_powershell(t: str) -> bool:
    low = t.lower()
    return "powershell" in low or "pwsh" in low


def _expand_braces(t: str) -> str:
    """Expand words with one brace group, `pre{a,b}post` to `prea preb` + `post`s.

    A word with several groups is left as written: their product grows
    exponentially, and a filter that expanded `{a,b}` forty times would be
    the denial of service.
    """
    out: list[str] = []
    pos = 0  # copied to `out` up to here
    seen = 0  # words before here are done
    for m in _BRACE_RE.finditer(t):
        if m.start() < seen:
            continue
        start = m.start()
        while start > seen and t[start - 1] not in _WORD_BREAK:
            start -= 1
        stop = _BRACE_WORD_END_RE.search(t, m.end())
        end = stop.start() if stop else len(t)
        seen = end
        prefix, suffix = t[start:m.start()], t[m.end():end]
        if "{" in prefix or "{" in suffix or "}" in prefix or "}" in suffix:
            continue
        out.append(t[pos:start])
        out.append(" ".join(prefix + alternative + suffix
                            for alternative in m.group(1).split(",")))
        pos = end
    out.append(t[pos:])
    return "".join(out)


def _replace_payload(m: re.Match[str], decoded: dict[str, None]) -> str:
    # Unquoted, PowerShell takes the first word; quoted, the whole run. The
    # quotes are gone by now, so both readings are decoded and scanned.
    flag, word, rest = m.group()[: m.start(1) - m.start()], m.group(1), m.group(2)
    first = _decode_payload(word)
    run = _decode_payload(_BLANKS_RE.sub("", word + rest)) if rest else None
    for text in (first, run):
        if text is not None:
            decoded[normalize(text)] = None
    if run is not None:
        return flag + DECODED_MARKER
    if first is not None:
        return flag + DECODED_MARKER + rest
    return m.group()


def _decode_payload(word: str) -> str | None:
    # The path fold runs after this step and may rewrite a word that
    # contains `//` or `/.`; trying the folded spelling too (folded as it is
    # in the text, after a separator) means a second `normalize` sees the
    # same payloads as the first.
    folded = _fold_paths(" " + word)[1:] if "/" in word else word
    for candidate in (word, folded) if folded != word else (word,):
        if len(candidate) % 4:
            continue  # strict base64 is whole quads; cheaper than the exception
        try:
            raw = binascii.a2b_base64(candidate, strict_mode=True)
            if len(raw) % 2 == 0:
                return raw.decode("utf-16-le")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
    return None


def _fold_paths(t: str) -> str:
    if ("/?" in t or "//." in t) and ("//?/" in t or "//./" in t or "/??/" in t):
        t = _WIN_PREFIX_RE.sub(_strip_win_prefix, t)
    if "/." in t:
        t = _DOT_SEGMENT_RE.sub("/", t)
    if "//" in t:
        if "://" in t:
            t = _COLON_SLASHES_RE.sub(_keep_scheme, t)
        t = _SLASHES_RE.sub("/", t)
        if "\x00" in t:
            t = t.replace("\x00", "//")
    if "/.." in t:
        t = _resolve_parents(t)
    return t


def _strip_win_prefix(m: re.Match[str]) -> str:
    t = m.string
    if m.start() > 0 and t[m.start() - 1] not in _PREFIX_BREAK:
        return m.group()
    if m.group(1):
        return "//"  # `\\?\UNC\server\share` is `\\server\share`
    if _WIN_PREFIXED_RE.match(t, m.end()) is None:
        return m.group()
    return ""


def _keep_scheme(m: re.Match[str]) -> str:
    t = m.string
    i = m.start()
    if i >= 1 and t[i - 1].isalpha() and (i < 2 or t[i - 2] not in _SCHEME_CHARS):
        return ":/"
    return ":\x00"


def _resolve_parents(t: str) -> str:
    """Resolve `..` in absolute paths lexically: `/usr/../*` is `/*`.

    Each word is visited once however many `..` it holds, so this is linear.
    Only absolute paths change; a relative `build/..` cannot reach the root.
    """
    out: list[str] = []
    pos = 0  # copied to `out` up to here
    seen = 0  # words before here are done
    for m in _PARENT_RE.finditer(t):
        if m.start() < seen:
            continue
        start = m.start()
        while start > seen and t[start - 1] not in _DELIMITERS:
            start -= 1
        stop = _DELIMITER_RE.search(t, m.end())
        end = stop.start() if stop else len(t)
        seen = end
        word = t[start:end]
        resolved = _resolve_word(word)
        if resolved != word:
            out.append(t[pos:start])
            out.append(resolved)
            pos = end
    out.append(t[pos:])
    return "".join(out)


def _resolve_word(word: str) -> str:
    slash = word.find("/")
    prefix = word[:slash]
    # `/usr/..`, `C:/x/..` and `of=/dev/../sda` are absolute; `build/..` is not.
    if prefix and not prefix.endswith("=") and not _DRIVE_RE.fullmatch(prefix):
        return word
    parts = word[slash + 1:].split("/")
    stack: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
            continue
        stack.append(part)
    path = prefix + "/" + "/".join(stack)
    if stack and parts and parts[-1] in ("", ".", ".."):
        path += "/"
    return path
