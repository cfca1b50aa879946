"""The before-hook: the first check in the chain, before anything runs.

It denies with every block rule's name and description, so the agent (and
the person reading its transcript) learns which rule fired and why, not just
"denied". Warnings are allowed through and carried into the audit record.

Every `stockade run` builds this hook and checks one command, so the hook
built from a configuration without custom rules compiles nothing and does
not even load the policy: it settles a plain command that no default rule
can match with `fastpath` alone, and builds the `CommandPolicy` (RE2 filter
and normaliser included) on the first command it cannot settle.
"""

from __future__ import annotations

import _thread
import sys

from ..hooks import HookDecision
from .fastpath import DEFAULT_GUARDS, NO_GUARDS, settled
from .normalize import SCAN_LIMIT, scan_target

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..command import SandboxCommand
    from .config import CommandPolicyConfig
    from .engine import CommandPolicy, PolicyVerdict
    from .fastpath import Guards

_TRUNCATED = (f"command policy: only the first {SCAN_LIMIT // 1024} KiB of the command and its "
              "stdin were scanned")


class CommandPolicyHook:
    """Deny on a block match, allow with warnings on a warn match, audit both."""

    name = "command_policy"

    def __init__(self, policy: CommandPolicy) -> None:
        self._policy: CommandPolicy | None = policy
        self._config: CommandPolicyConfig | None = None
        # Only a hook that has no policy yet settles commands itself; the
        # policy's own `check` has the same fast path.
        self._guards: Guards | None = None
        self._lock = _thread.allocate_lock()

    @classmethod
    def from_config(cls, config: CommandPolicyConfig | None) -> CommandPolicyHook:
        """The hook for `config` (None: every setting at its default), its policy built on demand.

        With custom rules (or problems to report) the policy is built now:
        a bad custom regex is reported at start-up, and every check needs
        the full path anyway.
        """
        if config is not None and (config.custom_rules or config.errors):
            from .engine import CommandPolicy

            return cls(CommandPolicy.from_config(config))
        hook = cls.__new__(cls)
        hook._policy = None
        hook._config = config
        if config is not None and (not config.enabled or config.enforcement == "off"):
            hook._guards = NO_GUARDS  # no rule is evaluated, so none can match
        elif config is None or config.use_default_rules:
            hook._guards = DEFAULT_GUARDS
        else:
            hook._guards = NO_GUARDS  # no rules at all
        hook._lock = _thread.allocate_lock()
        return hook

    @property
    def policy(self) -> CommandPolicy:
        """The policy this hook enforces, built (not compiled) on first use."""
        policy = self._policy
        if policy is None:
            with self._lock:
                policy = self._policy
                if policy is None:
                    from .config import CommandPolicyConfig
                    from .engine import CommandPolicy

                    policy = CommandPolicy.from_config(self._config or CommandPolicyConfig())
                    self._policy = policy
        return policy

    def before(self, command: SandboxCommand, session_id: str) -> HookDecision:
        raw, truncated = scan_target(command.program, command.args, command.stdin)
        # Until the policy exists; then its `check_text` has the same fast path.
        if (self._policy is None and self._guards is not None and not truncated
                and settled(raw, self._guards) is not None):
            return HookDecision.allow()
        policy = self.policy
        if not policy.enabled:
            return HookDecision.allow()
        verdict = policy.check_text(raw, truncated=truncated)
        if not verdict.matches and not verdict.truncated:
            return HookDecision.allow()
        if verdict.matches:
            _audit(verdict, session_id, command.program)
        warnings = [warning_text(m.name, m.description, m.action) for m in verdict.warnings]
        if verdict.blocked:
            reason = "command policy blocked: " + "; ".join(
                f"{m.name} ({m.description})" for m in verdict.blocks)
            if verdict.truncated:
                reason += f" [{_TRUNCATED}]"
            # The warn matches of a denied command still belong in its audit record.
            return HookDecision(False, reason, tuple(warnings))
        if verdict.truncated:
            warnings.append(_TRUNCATED)
        return HookDecision.allow(warnings=tuple(warnings))


def warning_text(name: str, description: str, action: str) -> str:
    """The audit line for a match that was allowed through."""
    if action == "block":
        return (f"command policy warn: {name} ({description}; a block rule, "
                'allowed because enforcement = "warn")')
    return f"command policy warn: {name} ({description})"


def _audit(verdict: PolicyVerdict, session_id: str, program: str) -> None:
    # As the capability ledger does: a program that never imported logging
    # has nowhere to send the record (the ledger has it), and importing
    # logging would cost every CLI run that hits a rule.
    if "logging" not in sys.modules:
        return
    import logging

    from .engine import LOGGER_NAME

    log = logging.getLogger(LOGGER_NAME)
    level = logging.WARNING if verdict.blocked else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "session %s: %s %s: %s", session_id,
                "blocked" if verdict.blocked else "allowed with warnings", program,
                ", ".join(f"{m.name}={m.effective}" for m in verdict.matches))
