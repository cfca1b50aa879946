"""Was it the sandbox? Turning an errno in stderr into a sentence the model can act on.

The same "Permission denied" means something else entirely under full-access,
where there is no boundary: there it is the workspace's own doing, and saying
"blocked by the sandbox" would send the model after the wrong cause.
"""

from __future__ import annotations

_MARKERS = (
    (b"Read-only file system", "read-only"),
    (b"Operation not permitted", "eperm"),
    (b"Permission denied", "eacces"),
    (b"Network is unreachable", "network"),
    (b"Could not resolve host", "network"),
    (b"Temporary failure in name resolution", "network"),
    (b"Name or service not known", "network"),
    (b"Connection refused", "refused"),
    (b"Bad system call", "seccomp"),
    (b"deny(1)", "seatbelt"),
)

SIGSYS = 31


def likely_sandbox_denied(exit_code: int | None, signal: int | None, stderr: bytes,
                          *, sandboxed: bool) -> str | None:
    """The kind of denial that probably happened, or None.

    Only a failed command is examined, and only the tail of stderr, where
    tools print the error that stopped them.
    """
    if not sandboxed:
        return None
    if signal == SIGSYS or exit_code == 128 + SIGSYS:
        return "seccomp"
    if exit_code == 0 or (exit_code is None and signal is None):
        return None
    tail = stderr[-4096:]
    for marker, kind in _MARKERS:
        if marker in tail:
            # Landlock and seccomp refuse a connect() with EACCES/EPERM, which
            # reads like a file error; the call that failed says otherwise.
            if kind in ("eacces", "eperm") and any(
                    word in tail for word in (b"connect", b"socket", b"urlopen", b"Connection")):
                return "network"
            return kind
    return None


def denial_hint(kind: str, stderr: bytes, mode: str) -> str:
    """One line the model can act on."""
    path = _quoted_path(stderr)
    where = f"{path} " if path else ""
    if kind == "read-only":
        return (f"blocked by the sandbox: {where}is read-only in {mode} "
                "(only the workspace and granted paths are writable)")
    if kind in ("eperm", "eacces"):
        return (f"blocked by the sandbox: {where}is outside what {mode} allows "
                "(hidden credential, protected metadata, or a path outside the workspace)")
    if kind == "network":
        return "blocked by the sandbox: network access is off for this command (request it)"
    if kind == "refused":
        return ("blocked by the sandbox: connection refused (network is off for this command, "
                "and host sockets such as docker.sock are not reachable)")
    if kind == "seccomp":
        return "blocked by the sandbox: a forbidden system call was refused"
    return f"blocked by the sandbox ({kind})"


def _quoted_path(stderr: bytes) -> str:
    """The path an error line names: the one just before the error text, if any.

    `sh: 1: cannot create /etc/hosts: Read-only file system` names the shell
    first and the path last; the path wanted is the one the error is about.
    """
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    for line in reversed(lines[-5:]):
        # Only the line carrying the error: a traceback's earlier lines quote
        # source files that have nothing to do with what was refused.
        for marker, _ in _MARKERS:
            at = line.find(marker.decode())
            if at > 0:
                line = line[:at]
                break
        else:
            continue
        line = line.rstrip(": ")
        for left, right in (("\u2018", "\u2019"), ("'", "'"), ('"', '"')):
            end = line.rfind(right)
            start = line.rfind(left, 0, end)
            if start >= 0 and end > start + 1:
                return line[start + 1:end]
        for part in reversed(line.replace(":", " ").split()):
            if part.startswith(("/", "~/", "./")) and len(part) > 1:
                return part
    return ""
