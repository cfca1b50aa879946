"""What Claude Code's own settings say to the hook: the person's permission rules for
the shell, matched as Claude Code would against the command the agent wrote, and
whether hooks run at all.

Read for what they restrict, from every settings file Claude Code reads: a
file missed, or a rule matched only against the rewritten line, was a rule
the hook's `allow` overrode.
"""

from __future__ import annotations

import json
import os
import re
import shlex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: The tool whose rules are the shell's.
TOOL = "Bash"
#: What a matching rule does to a call.
DENY, ASK = "deny", "ask"
#: An administrator's settings: the file, then each `.json` of the directory beside it.
MANAGED_SETTINGS = "/etc/claude-code/managed-settings.json"


def settings_sources(project: str, env: Mapping[str, str]) -> list[str]:
    """Every settings file Claude Code reads for `project`: managed, the user's, the
    project's shared and local ones. Read for what they restrict, all of them:
    a file the hook missed (a drop-in, CLAUDE_CONFIG_DIR) lost its rules."""
    drop_ins = MANAGED_SETTINGS.removesuffix(".json") + ".d"
    try:
        managed = sorted(os.path.join(drop_ins, n) for n in os.listdir(drop_ins)
                         if n.endswith(".json"))
    except OSError:
        managed = []
    home = env.get("HOME") or os.path.expanduser("~")
    users = [os.path.join(home, ".claude", "settings.json")]
    if env.get("CLAUDE_CONFIG_DIR"):
        users.append(os.path.join(env["CLAUDE_CONFIG_DIR"], "settings.json"))
    return [MANAGED_SETTINGS, *managed, *users,
            os.path.join(project, ".claude", "settings.json"),
            os.path.join(project, ".claude", "settings.local.json")]


def person_rule(command: str, project: str, env: Mapping[str, str]
                ) -> tuple[str, str] | None:
    """(DENY or ASK, why) when the person's Claude Code rules for the shell stop
    `command`, deny first; None when none does.

    Claude Code matches its deny and ask rules against the call it runs,
    which the hook rewrote: `Bash(rm:*)` no longer matched anything, and the
    hook's allow ran what the person had forbidden. So the hook matches them
    against each simple command of the one the agent wrote, its quoting
    undone and its variable assignments and path taken off; a command in a
    form it cannot take apart (a subshell, `$(...)`, `bash -c`, a wrapper
    such as `timeout` or `xargs`, a loop) is asked about when any rule
    exists, since Claude Code may have seen a match inside it.
    """
    rules: dict[str, list[str]] = {DENY: [], ASK: []}
    for path in settings_sources(project, env):
        permissions = _settings_json(path).get("permissions")
        for kind in (DENY, ASK):
            listed = permissions.get(kind) if isinstance(permissions, dict) else None
            rules[kind] += [r for r in listed or ()
                            if isinstance(r, str) and r.strip().startswith(TOOL)]
    if not rules[DENY] and not rules[ASK]:
        return None
    simple = simple_commands(command)
    forms = [command.strip()]
    for words in simple or ():
        forms.append(" ".join(words))
        if "/" in words[0]:
            forms.append(" ".join([os.path.basename(words[0]), *words[1:]]))
    for kind in (DENY, ASK):
        for rule in rules[kind]:
            if any(rule_matches(rule, form) for form in forms if form):
                return kind, f"your Claude Code permission rule {rule} " + (
                    "denies it" if kind == DENY else "asks first")
    if simple is None:
        return ASK, ("stockade cannot take this command apart to match your Claude Code "
                     "permission rules against it, so it asks")
    return None


def rule_matches(rule: str, command: str) -> bool:
    """Whether a rule of Claude Code's (`Bash`, `Bash(exact)`, `Bash(prefix:*)`,
    `Bash(with * wildcards)`) covers `command`; a rule for another tool covers none."""
    rule = rule.strip()
    if rule in (TOOL, f"{TOOL}()", f"{TOOL}(*)"):
        return True
    if not (rule.startswith(f"{TOOL}(") and rule.endswith(")")):
        return False
    pattern = rule[len(TOOL) + 1:-1]
    if pattern.endswith(":*"):
        prefix = pattern[:-2]
        return command == prefix or command.startswith(prefix + " ") or (
            command.startswith(prefix) and not prefix[-1:].isalnum())
    wildcard = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(wildcard, command, re.DOTALL) is not None


#: Words that start a simple command stockade does not look inside: shells and
#: what runs its arguments as a command, and the shell's compound syntax.
OPAQUE_WORDS = frozenset({
    "sh", "bash", "zsh", "fish", "csh", "tcsh", "ksh", "mksh", "dash", "ash", "hush", "rbash",
    "rsh", "busybox", "toybox", "wsl", "cmd", "powershell", "pwsh", "eval", "exec", "source",
    ".", "env", "xargs", "command", "builtin", "noglob", "nice", "stdbuf", "nohup", "timeout",
    "time", "watch", "ionice", "chrt", "setsid", "taskset", "strace", "ltrace", "script",
    "flock", "unshare", "nsenter", "sandbox-exec", "sudo", "doas", "pkexec", "su", "runuser",
    "parallel", "chroot",
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "select", "function", "coproc", "{", "}", "!", "[[", "]]", "((", "))"})
#: Text that hides a command inside another: substitution, process substitution,
#: expansions, a line continued by a backslash, and a heredoc (whose body lines
#: would read as commands).
OPAQUE_MARKS = ("$(", "`", "<(", ">(", "${", "$'", "\\\n", "<<")
#: Longer than this, a command is not taken apart: the lexer's time grows with it,
#: and the hook's own timeout would block the call.
MAX_PARSED = 64 << 10
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;", ";&", "(", ")"})
_REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", "&>", "&>>", "<>", ">|"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def simple_commands(command: str) -> list[list[str]] | None:
    """The words of each simple command in `command`, quoting undone, redirections
    and leading variable assignments dropped; None when a part is in a form not taken
    apart."""
    if len(command) > MAX_PARSED or any(mark in command for mark in OPAQUE_MARKS):
        return None
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""  # a `#` inside a word is the word's (`a#b; rm x`)
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote
        return None
    found: list[list[str]] = []
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _SEPARATORS:
            words.append(token)
            continue
        if token in ("(", ")"):
            return None
        words = _without_redirections(words)
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        if words:
            if words[0] in OPAQUE_WORDS or "$" in words[0]:
                return None
            found.append(words)
        words = []
    return found


def _without_redirections(words: list[str]) -> list[str]:
    """`words` less each redirection and its target, and the descriptor number before
    it: `2>/dev/null rm f` is `rm f` (the lexer has split `2>` from its target)."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word in _REDIRECTS:
            skip = True
            if out and out[-1].isdigit():
                out.pop()
        elif not (word.isdigit() and i + 1 < len(words) and words[i + 1] in _REDIRECTS):
            out.append(word)
    return out


def _settings_json(path: str) -> dict[str, Any]:
    """A settings file's object; {} when it is missing or not one (Claude Code reads
    such a file as no settings either). A link is followed, a project's too: what
    is read here only ever restricts, and Claude Code follows it."""
    from ..config import read_settings
    from ..errors import ConfigError

    try:
        raw = read_settings(path, follow=True)
        value = json.loads(raw) if raw else {}
    except (ConfigError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def hooks_turned_off(project: str, env: Mapping[str, str]) -> str:
    """The settings file and key that keep a project's or user's hooks from running, or ""."""
    for path in settings_sources(project, env):
        data = _settings_json(path)
        for key in ("disableAllHooks", "allowManagedHooksOnly"):
            if data.get(key) is True:
                return f"{path} ({key})"
    return ""
