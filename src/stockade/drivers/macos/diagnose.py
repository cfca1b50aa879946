"""Which part of the Seatbelt profile refused: from stderr to a sentence.

`stockade.denial` already says *that* the sandbox probably refused
("Operation not permitted", "deny(1)"). Here the profile that was applied is
known, so the refused path can be placed: a hidden credential, protected
metadata, the host's /tmp, or simply outside the writable roots. The model
reading the transcript then goes after the right cause.
"""

from __future__ import annotations

from ...capabilities import NetworkPolicy, is_under
from ...profile import HOLD, PIN
from .sbpl import canonical_macos_path, fold_name

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ...profile import Profile

_EPERM = b"Operation not permitted"
_SEATBELT = b"deny(1)"


def seatbelt_violation(stderr: bytes) -> tuple[str, str] | None:
    """(operation, target) from the last `deny(1) OPERATION TARGET` line, if any.

    That is the shape of a Seatbelt violation report ("Sandbox: sh(123)
    deny(1) file-write-create /Users/u/.zshrc"); it reaches stderr when a
    tool or harness relays the system log.
    """
    for line in reversed(stderr.decode("utf-8", "replace").splitlines()[-20:]):
        at = line.find("deny(1) ")
        if at < 0:
            continue
        rest = line[at + len("deny(1) "):].strip().split(" ", 1)
        return rest[0], (rest[1].strip() if len(rest) > 1 else "")
    return None


def refused_path(stderr: bytes) -> str:
    """The path named on the last "Operation not permitted" line ("" if none)."""
    for line in reversed(stderr.decode("utf-8", "replace").splitlines()[-20:]):
        if "Operation not permitted" not in line:
            continue
        for part in line.replace("'", " ").replace('"', " ").replace("`", " ").replace(
                "\u2018", " ").replace("\u2019", " ").split():
            part = part.rstrip(":,")
            if part.startswith("/") and len(part) > 1:
                return part
    return ""


def sandbox_exec_failure(stderr: bytes) -> str | None:
    """A sentence when sandbox-exec itself refused to start the command.

    sandbox-exec reports a profile it cannot compile as "sandbox-exec: ..."
    before the command ever runs; that is a stockade problem, not a denial.
    """
    for line in stderr.decode("utf-8", "replace").splitlines()[:5]:
        if line.startswith("sandbox-exec:"):
            return (
                f"sandbox-exec did not accept stockade's profile ({line.strip()}). "
                "This macOS may not know an operation the profile uses; please report it "
                "with the output of `sw_vers`"
            )
    return None


def explain_denial(profile: Profile, stderr: bytes, *, scratch: str = "") -> str | None:
    """One line naming the rule that refused, or None when stderr shows no refusal."""
    violation = seatbelt_violation(stderr)
    if violation is not None:
        operation, target = violation
        if operation.startswith("network"):
            return _network(profile, target)
        if operation in ("mach-lookup", "iokit-open", "sysctl-read"):
            return (f"blocked by the sandbox: {operation} {target} is not among the system "
                    "services a sandboxed command may use on macOS")
        path = target
    elif _EPERM in stderr[-4096:]:
        path = refused_path(stderr)
    else:
        return None
    if not path.startswith("/"):
        return "blocked by the sandbox (Seatbelt refused an operation)"
    return _place(profile, canonical_macos_path(path), scratch)


def _network(profile: Profile, target: str) -> str:
    if profile.network.kind == NetworkPolicy.NONE:
        return "blocked by the sandbox: network access is off for this command (request it)"
    if target.startswith("/"):
        return (f"blocked by the sandbox: the unix socket {target} leads out of the sandbox "
                "and is not granted")
    if profile.network.kind == NetworkPolicy.HOSTS:
        return (f"blocked by the sandbox: {target or 'that connection'} did not go through "
                "stockade's proxy (use HTTPS_PROXY, which is set for this command)")
    return f"blocked by the sandbox: connection to {target or 'that address'} refused"


def _place(profile: Profile, path: str, scratch: str) -> str:
    for hidden, _kind in profile.hidden:
        if is_under(path, canonical_macos_path(hidden)):
            return f"blocked by the sandbox: {path} is a hidden credential store"
    # Compared as the file system compares names: a long s (U+017F) folds to s there.
    folded = fold_name(path)
    # A pinned directory (.git) is writable itself.
    guarded = [p for p in profile.protected if p.kind not in (PIN, HOLD)]
    for item in guarded:
        protected = fold_name(canonical_macos_path(item.path))
        if folded == protected or folded.startswith(protected + "/"):
            return (f"blocked by the sandbox: {path} is protected metadata, read-only inside "
                    "the sandbox (it would run code or change settings on the host later)")
    for item in guarded:
        protected = fold_name(canonical_macos_path(item.path))
        if protected.startswith(folded + "/"):
            return (f"blocked by the sandbox: {path} holds protected metadata, so it cannot "
                    "be renamed, removed or re-permissioned inside the sandbox")
    if is_under(path, "/private/tmp"):
        where = f" ({scratch})" if scratch else ""
        return (f"blocked by the sandbox: {path} is in the host's shared /tmp; on macOS a "
                f"command writes temporary files under $TMPDIR{where}")
    return (f"blocked by the sandbox: {path} is outside what {profile.mode} allows "
            "(only the workspace and granted paths are writable)")
