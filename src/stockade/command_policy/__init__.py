"""`[sandbox.command_policy]`: a hard filter for the few commands with no legitimate use.

It runs first in the before-hook chain. The command line and any stdin
script are normalised (`normalize`) so that quoting, escapes, invisible
characters and encoded PowerShell cannot hide a command, then matched in one
RE2 pass against the curated `DEFAULT_RULES` and any custom rules. It is a
filter, not an intent classifier: the OS sandbox stays the real boundary.
"""

from __future__ import annotations

from .config import CommandPolicyConfig
from .engine import CommandPolicy, PolicyVerdict, RuleMatch
from .hook import CommandPolicyHook
from .normalize import normalize
from .rules import DEFAULT_RULES, Rule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_RULES",
    "CommandPolicy",
    "CommandPolicyConfig",
    "CommandPolicyHook",
    "PolicyVerdict",
    "Rule",
    "RuleMatch",
    "normalize",
    "policy_hook_from_config",
]


def policy_hook_from_config(table: Mapping[str, object] | None,
                            source: str = "[sandbox.command_policy]") -> CommandPolicyHook | None:
    """The hook for a `[sandbox.command_policy]` table, or None when `enabled = false`.

    Raises `ConfigError` for unknown keys and wrong types; a malformed custom
    regex is logged and the defaults stay in force.
    """
    cfg = CommandPolicyConfig.from_table(dict(table or {}), source)
    if not cfg.enabled:
        return None
    return CommandPolicyHook(CommandPolicy.from_config(cfg))
