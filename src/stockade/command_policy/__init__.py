"""`[sandbox.command_policy]`: a hard filter for the few commands with no legitimate use.

It runs first in the before-hook chain. The command line and any stdin
script are normalised (`normalize`) so that quoting, escapes, invisible
characters and encoded PowerShell cannot hide a command, then matched in one
RE2 pass against the curated `DEFAULT_RULES` and any custom rules. It is a
filter, not an intent classifier: the OS sandbox stays the real boundary.

Every `stockade run` imports this package to build the hook, so it loads
only what the hook needs to settle an ordinary command (`hook`, `fastpath`,
`normalize`); the policy, its configuration and the rules are loaded on
first use, through the names below as usual.
"""

from __future__ import annotations

# `normalize` stays an eager import: the package exports a function of the
# same name as that submodule, and importing the submodule later would make
# Python rebind the package attribute to the module.
from .hook import CommandPolicyHook
from .normalize import normalize

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .config import CommandPolicyConfig
    from .engine import CommandPolicy, PolicyVerdict, RuleMatch
    from .rules import DEFAULT_RULES, Rule

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


def __getattr__(name: str) -> object:
    # The names a hook does not need, loaded on first use (PEP 562).
    if name in ("CommandPolicy", "PolicyVerdict", "RuleMatch"):
        from . import engine as module
    elif name == "CommandPolicyConfig":
        from . import config as module  # type: ignore[no-redef]
    elif name in ("DEFAULT_RULES", "Rule"):
        from . import rules as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def policy_hook_from_config(table: Mapping[str, object] | None,
                            source: str = "[sandbox.command_policy]") -> CommandPolicyHook | None:
    """The hook for a `[sandbox.command_policy]` table, or None when `enabled = false`.

    Raises `ConfigError` for unknown keys and wrong types; a malformed custom
    regex is logged and the defaults stay in force.
    """
    if not table:
        # No table is every setting at its default; parsing `{}` would load
        # the config module only to say so.
        return CommandPolicyHook.from_config(None)
    from .config import CommandPolicyConfig

    cfg = CommandPolicyConfig.from_table(dict(table), source)
    if not cfg.enabled:
        return None
    return CommandPolicyHook.from_config(cfg)
