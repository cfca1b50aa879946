"""The before-hook: the first check in the chain, before anything runs.

It denies with every block rule's name and description, so the agent (and
the person reading its transcript) learns which rule fired and why, not just
"denied". Warnings are allowed through and carried into the audit record.
"""

from __future__ import annotations

import sys

from ..hooks import HookDecision
from .engine import LOGGER_NAME
from .normalize import SCAN_LIMIT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..command import SandboxCommand
    from .engine import CommandPolicy, PolicyVerdict

_TRUNCATED = (f"command policy: only the first {SCAN_LIMIT // 1024} KiB of the command and its "
              "stdin were scanned")


class CommandPolicyHook:
    """Deny on a block match, allow with warnings on a warn match, audit both."""

    name = "command_policy"

    def __init__(self, policy: CommandPolicy) -> None:
        self.policy = policy

    def before(self, command: SandboxCommand, session_id: str) -> HookDecision:
        if not self.policy.enabled:
            return HookDecision.allow()
        verdict = self.policy.check(command.program, command.args, command.stdin)
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

    log = logging.getLogger(LOGGER_NAME)
    level = logging.WARNING if verdict.blocked else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "session %s: %s %s: %s", session_id,
                "blocked" if verdict.blocked else "allowed with warnings", program,
                ", ".join(f"{m.name}={m.effective}" for m in verdict.matches))
