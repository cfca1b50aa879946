"""Files inside the workspace that `unreadable` hides by pattern (`**/.env`).

A project's `.env` holds API keys and database URLs, and a model that `cat`s
one has put them in its transcript. Hiding every such file by default would
break the app and its tests, which read them, so the person asks: an
`unreadable` entry that is not an absolute or `~` path is a pattern matched,
as a `.gitignore` line is, against paths relative to the workspace; `!`
takes a match back. The driver keeps the matches current as files appear
(drivers/linux/host/treewatch.py) and the profile hides them like any store.
"""

from __future__ import annotations

#: `unreadable = ["default", "dotenv"]`: the default set, and the dotenv
#: files apps read their secrets from, but not the examples committed beside them.
DEFAULT_TOKEN = "default"
PRESETS: dict[str, tuple[str, ...]] = {
    "dotenv": ("**/.env", "**/.env.*", "!**/.env.example", "!**/.env.sample",
               "!**/.env.template", "!**/.env.dist"),
}


def is_pattern(entry: str) -> bool:
    """Whether an `unreadable` entry names workspace files rather than a host path."""
    return not (entry.startswith(("/", "~")) or entry in (DEFAULT_TOKEN, "none")
                or entry.startswith("ssh-agent"))


def expand(entries: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The patterns among `entries`, presets spelled out."""
    out: list[str] = []
    for entry in entries:
        entry = entry.strip()
        if entry in PRESETS:
            out.extend(PRESETS[entry])
        elif entry and is_pattern(entry):
            out.append(entry)
    return tuple(out)


def workspace_patterns(spec: str | list[str] | None) -> tuple[str, ...]:
    """The workspace patterns of a configured `unreadable` (none when it is unset)."""
    if spec is None or spec == "none":
        return ()
    import os

    return expand(spec.split(os.pathsep) if isinstance(spec, str) else spec)


def _regex(pattern: str) -> str:
    """A .gitignore line as a regex over a relative path: `*` and `?` stay in one
    component, `**` crosses them, and a line without a slash matches at any depth."""
    import re  # only where patterns are set: `re` costs the CLI's path milliseconds

    directory = pattern.endswith("/")
    body = pattern.strip("/")
    anchored = "/" in body
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        elif body[i] == "[" and "]" in body[i + 2:]:
            # A class, as fnmatch reads one: `[!...]` negates.
            end = body.index("]", i + 2)
            inner = body[i + 1:end].replace("\\", "\\\\")
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("(?!/)[" + inner + "]")
            i = end + 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    return ("^" if anchored else "^(?:.*/)?") + "".join(out) + ("/$" if directory else "$")


class Matcher:
    """Whether a workspace-relative path is hidden by the patterns it was built from."""

    __slots__ = ("_no", "_yes", "patterns")

    def __init__(self, patterns: tuple[str, ...]) -> None:
        import re

        self.patterns = patterns
        yes = [_regex(p) for p in patterns if not p.startswith("!")]
        no = [_regex(p[1:]) for p in patterns if p.startswith("!")]
        self._yes = re.compile("|".join(yes)) if yes else None
        self._no = re.compile("|".join(no)) if no else None

    def __bool__(self) -> bool:
        return self._yes is not None

    def __call__(self, relative: str, is_dir: bool = False) -> bool:
        """A file matches a pattern; a directory only one that ends in `/`, as in
        .gitignore: `**/.env` must not hide a virtualenv named `.env`."""
        if is_dir:
            relative += "/"
        return bool(self._yes and self._yes.match(relative)
                    and not (self._no and self._no.match(relative)))


def walk_matches(root: str, matcher: Matcher) -> tuple[str, ...]:
    """Every path beneath `root` that `matcher` names, no link followed."""
    import os

    out: list[str] = []
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if matcher(os.path.relpath(entry.path, root), is_dir):
                out.append(entry.path)
            if is_dir:
                stack.append(entry.path)
    return tuple(sorted(out))
