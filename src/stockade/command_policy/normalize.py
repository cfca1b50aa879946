"""The scan target, and `normalize`: the text every rule is matched against.

The folds themselves (quotes, escapes, `$IFS`, brace expansion, invisible
characters, `-EncodedCommand` payloads, path spellings) are in `_fold.py`,
which imports `re` and compiles a few dozen patterns. This module only
loads it when a text is actually normalised: most commands are decided by
`fastpath` without it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: The scan target is cut here. A `bash -s` script can be megabytes; scanning
#: the head keeps a check within milliseconds, and the verdict says it was cut.
SCAN_LIMIT = 256 * 1024


def normalize(text: str) -> str:
    """The canonical reading of `text` that rules are matched against. Never raises.

    Idempotent: `normalize(normalize(t)) == normalize(t)`.
    """
    from ._fold import normalize as fold

    return fold(text)


def scan_target(program: str, args: Sequence[str], stdin: bytes | None) -> tuple[str, bool]:
    """Program, space-joined args and stdin as one text, cut at `SCAN_LIMIT` bytes.

    Returns the (not yet normalised) text and whether it was cut. Stdin is
    read as UTF-8 with undecodable bytes replaced: one stray byte must not
    turn a `bash -s` script into "binary, skipped".
    """
    line = " ".join((program, *args)) if args else program
    if not stdin:
        # A character is at most 4 bytes, so short lines skip the encode.
        if len(line) * 4 <= SCAN_LIMIT:
            return line, False
        raw = line.encode("utf-8", "surrogatepass")
        if len(raw) <= SCAN_LIMIT:
            return line, False
        return raw[:SCAN_LIMIT].decode("utf-8", "replace"), True
    head = line.encode("utf-8", "surrogatepass") + b"\n" if line else b""
    room = SCAN_LIMIT - len(head)
    if room < 0:
        return head[:SCAN_LIMIT].decode("utf-8", "replace"), True
    body = stdin[:room]
    truncated = len(stdin) > room
    return (head + body).decode("utf-8", "replace"), truncated
