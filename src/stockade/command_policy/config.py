"""`[sandbox.command_policy]`: parse the table, keep its errors, never run unfiltered.

Unknown keys and wrong types raise `ConfigError` naming the key and the file:
a misspelt `enforcment = "warn"` that silently kept blocking (or a misspelt
`enabled`) would be a surprise in either direction. A custom regex RE2
rejects is different: it is reported, the rule is dropped, and the defaults
stay in force (see `CommandPolicy.from_config`), because refusing to start
would take the whole sandbox down over one rule, and starting without a
filter would be worse.
"""

from __future__ import annotations

from ..errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .rules import Rule

_TABLE = "[sandbox.command_policy]"
_KEYS = ("enabled", "enforcement", "use_default_rules", "custom_rules")
_RULE_KEYS = ("name", "regex", "action", "description")
_ENFORCEMENTS = ("block", "warn", "off")
# Names appear in deny reasons and audit lines; keeping them to one token
# keeps those parseable: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`, checked by hand
# because importing `re` would cost every CLI invocation a few milliseconds.
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
#: `stockade.config.load_config` records the file a table came from under this key.
SOURCE_KEY = "_source"


class CommandPolicyConfig:
    """The settings of `[sandbox.command_policy]`; `errors` lists survivable problems."""

    __slots__ = ("custom_rules", "enabled", "enforcement", "errors", "source",
                 "use_default_rules")

    def __init__(self, *, enabled: bool = True, enforcement: str = "block",
                 use_default_rules: bool = True, custom_rules: Iterable[Rule] = (),
                 errors: Iterable[str] = (), source: str = "") -> None:
        if enforcement not in _ENFORCEMENTS:
            raise ConfigError(f"{source or 'arguments'}: {_TABLE} enforcement = {enforcement!r} "
                              f"is not one of {', '.join(_ENFORCEMENTS)}")
        self.enabled = enabled
        self.enforcement = enforcement
        self.use_default_rules = use_default_rules
        self.custom_rules: tuple[Rule, ...] = tuple(custom_rules)
        self.errors: tuple[str, ...] = tuple(errors)
        self.source = source

    @classmethod
    def from_table(cls, table: Mapping[str, object], source: str) -> CommandPolicyConfig:
        """Parse a `[sandbox.command_policy]` table read from `source`."""
        source = str(table.get(SOURCE_KEY) or source)
        for key in table:
            if key != SOURCE_KEY and key not in _KEYS:
                raise ConfigError(f"{source}: unknown key {_TABLE} {key!r} "
                                  f"(known: {', '.join(_KEYS)})")
        enabled = _bool(table, "enabled", True, source)
        use_default_rules = _bool(table, "use_default_rules", True, source)
        enforcement = table.get("enforcement", "block")
        if enforcement not in _ENFORCEMENTS:
            raise ConfigError(f"{source}: {_TABLE} enforcement = {enforcement!r} is not one of "
                              f"{', '.join(_ENFORCEMENTS)}")
        raw_rules = table.get("custom_rules", [])
        if not isinstance(raw_rules, list):
            raise ConfigError(f"{source}: {_TABLE} custom_rules must be an array of tables "
                              f"({{name, regex, action, description}}), got {raw_rules!r}")
        rules: list[Rule] = []
        errors: list[str] = []
        taken: set[str] = set()
        if raw_rules:
            # Only custom rules need the default rules' names and RE2.
            from .engine import regex_error
            from .rules import DEFAULT_RULES

            taken.update(rule.name for rule in DEFAULT_RULES)
        for position, entry in enumerate(raw_rules, 1):
            rule = _parse_rule(entry, position, source)
            if rule.name in taken:
                raise ConfigError(
                    f"{source}: {_TABLE} custom rule {rule.name!r} "
                    + ("is defined twice" if any(r.name == rule.name for r in rules)
                       else "has the name of a default rule")
                    + "; give it another name")
            taken.add(rule.name)
            problem = regex_error(rule.regex)
            if problem is not None:
                from .engine import bad_rule_message

                errors.append(bad_rule_message(rule.name, source, problem))
            rules.append(rule)
        return cls(enabled=bool(enabled), enforcement=str(enforcement),
                   use_default_rules=bool(use_default_rules), custom_rules=rules,
                   errors=errors, source=source)


def valid_name(name: str) -> bool:
    """Whether `name` can name a custom rule: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`."""
    return (0 < len(name) <= 64 and name[0] not in "._-"
            and all(c in _NAME_CHARS for c in name))


def _bool(table: Mapping[str, object], key: str, default: bool, source: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: {_TABLE} {key} must be true or false, got {value!r}")
    return value


def _parse_rule(entry: object, position: int, source: str) -> Rule:
    from .rules import ACTIONS, BLOCK, Rule

    where = f"{source}: {_TABLE} custom_rules[{position}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table {{name, regex, action, description}}, "
                          f"got {entry!r}")
    for key in entry:
        if key not in _RULE_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(_RULE_KEYS)})")
    name = entry.get("name")
    if not isinstance(name, str) or not valid_name(name):
        raise ConfigError(f"{where}: name must be a word of letters, digits, '.', '_' or '-' "
                          f"(at most 64), got {name!r}")
    where = f"{source}: {_TABLE} custom rule {name!r}"
    regex = entry.get("regex")
    if not isinstance(regex, str):
        raise ConfigError(f"{where}: regex must be a string, got {regex!r}")
    action = entry.get("action", BLOCK)
    if action not in ACTIONS:
        raise ConfigError(f"{where}: action = {action!r} is not one of {', '.join(ACTIONS)}")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string, got {description!r}")
    return Rule(name, regex, str(action), description or f"custom rule {name}",
                platform="custom", source=source)
