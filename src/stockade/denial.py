"""Was it the sandbox? Turning an errno in stderr into a sentence the model can act on.

The same "Permission denied" means something else entirely under full-access,
where there is no boundary: there it is the workspace's own doing, and saying
"blocked by the sandbox" would send the model after the wrong cause.
"""

from __future__ import annotations

import os

_MARKERS = (
    (b"Read-only file system", "read-only"),
    # Renaming a file over a read-only mount point: git writes config.lock
    # and renames it onto .git/config.
    (b"Device or resource busy", "read-only"),
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
    tail = stderr[-4096:]
    if exit_code == 0 and b"could not write config file" in tail:
        # `git submodule add` reports the refused .git/config and still
        # exits 0: an agent reading only the status thinks it worked.
        return "read-only"
    if exit_code == 0 or (exit_code is None and signal is None):
        return None
    for marker, kind in _MARKERS:
        if marker in tail:
            # Landlock and seccomp refuse a connect() with EACCES/EPERM, which
            # reads like a file error; the call that failed says otherwise.
            if kind in ("eacces", "eperm") and any(
                    word in tail for word in (b"connect", b"socket", b"urlopen", b"Connection")):
                return "network"
            return kind
    return None


def denial_hint(kind: str, stderr: bytes, mode: str, *, workspace: str | None = None,
                cwd: str | None = None) -> str:
    """One line the model can act on: the path refused and the rule that refused it.

    `workspace` and `cwd` place a relative path: the error names it as the
    command saw it, and "outside the workspace" is a claim about where it
    resolves, not about how it was spelt.
    """
    if kind in ("read-only", "eacces", "eperm"):
        return _file_hint(kind, _quoted_path(stderr), mode, workspace, cwd)
    if kind == "network":
        return "blocked by the sandbox: network access is off for this command (request it)"
    if kind == "refused":
        return ("blocked by the sandbox: connection refused (network is off for this command, "
                "and host sockets such as docker.sock are not reachable)")
    if kind == "seccomp":
        return "blocked by the sandbox: a forbidden system call was refused"
    return f"blocked by the sandbox ({kind})"


def proxy_hint(host: str, port: int | None, reason: str) -> str:
    where = f"{host}:{port}" if port else host
    if reason.startswith(where):  # the proxy's reasons usually name the target already
        return f"blocked by the sandbox: the network proxy refused {escape(reason)}"
    return f"blocked by the sandbox: the network proxy refused {escape(where)}: {escape(reason)}"


def _file_hint(kind: str, path: str, mode: str, workspace: str | None,
               cwd: str | None) -> str:
    what = "is read-only" if kind == "read-only" else "is not accessible"
    if not path:
        subject = "a write was refused" if kind == "read-only" else "a file access was refused"
        if mode == "read-only":
            return (f"blocked by the sandbox: {subject}: the workspace is read-only in "
                    "read-only mode (ask for workspace-write)")
        return (f"blocked by the sandbox: {subject}: only the workspace is writable in {mode} "
                "mode, and protected metadata stays read-only")
    shown = escape(path)
    inside: bool | None = None
    protected = ""
    if workspace:
        full = os.path.normpath(os.path.join(cwd or workspace, os.path.expanduser(path)))
        inside = full == workspace or full.startswith(workspace.rstrip("/") + "/")
        if inside:
            from .hostpaths import PROTECTED_NAMES

            rel = full[len(workspace):].strip("/").split("/")
            protected = next((p for p in rel if p in PROTECTED_NAMES), "")
        if full != path and not inside:
            shown += f" ({escape(full)})"
    if mode == "read-only" and inside is not False:
        why = "the workspace is read-only in read-only mode (ask for workspace-write)"
        where = " in the workspace" if inside else ""
        return f"blocked by the sandbox: {shown}{where} {what}: {why}"
    if inside is False:
        # EACCES does not say whether it was a read or a write: both rules.
        why = ("only the workspace is writable" if kind == "read-only"
               else "only the workspace is writable, and hidden paths are not readable")
        if mode == "read-only":
            why = "nothing outside the workspace is writable in read-only mode"
        return f"blocked by the sandbox: {shown} is outside the workspace and {what[3:]}: {why}"
    if protected:
        return (f"blocked by the sandbox: {shown} {what}: {escape(protected)} is protected "
                "metadata, and protected metadata stays read-only")
    if inside:
        return (f"blocked by the sandbox: {shown} in the workspace {what}: the configuration "
                "keeps it from commands (unreadable or a host-only path)")
    return (f"blocked by the sandbox: {shown} {what}: only the workspace is writable in {mode} "
            "mode, and protected metadata stays read-only")


def escape(text: str) -> str:
    """`text` with control characters shown as escapes, so a name cannot rewrite the
    terminal or forge a second line of output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


_VERBS = ("could not write config file ", "cannot create ", "can't create ", "cannot open ",
          "can't open ", "cannot remove ", "can't remove ", "cannot touch ", "cannot write ")
_QUOTES = (("\u2018", "\u2019"), ("'", "'"), ('"', '"'), ("`", "'"))


def _quoted_path(stderr: bytes) -> str:
    """The path an error line names.

    Each tool puts it somewhere else: dash `sh: 1: cannot create c.txt: <error>`,
    bash `bash: c.txt: <error>`, coreutils `touch: cannot touch 'x': <error>`,
    Python `PermissionError: [Errno 13] Permission denied: 'x'` (after the
    error). The shell's own name is a field too, never the path.
    """
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    for line in reversed(lines[-5:]):
        # Only the line carrying the error: a traceback's earlier lines quote
        # source files that have nothing to do with what was refused.
        for marker, _ in _MARKERS:
            text = marker.decode()
            at = line.find(text)
            if at > 0:
                break
        else:
            continue
        after = line[at + len(text):].strip()
        if after.startswith(":"):
            found = _unquote(after[1:].strip())
            if found:
                return found
        before = line[:at].rstrip().rstrip(":").rstrip()
        for left, right in _QUOTES:
            if before.endswith(right):
                start = before.rfind(left, 0, len(before) - 1)
                if start >= 0 and len(before) - start > 2:
                    return before[start + 1:-1]
        fields = [f.strip() for f in before.split(": ")]
        if len(fields) < 2:
            continue  # only the program's name, or Python's exception class
        last = fields[-1]
        for verb in _VERBS:
            if verb in last:
                last = last[last.rfind(verb) + len(verb):]
                break
        else:
            if " " in last and not last.startswith(("/", "./", "~")):
                continue  # prose, such as "line 1" or "[Errno 30]"
        if last and not last.isdigit() and not last.startswith("[Errno"):
            return last
    return ""


def _unquote(text: str) -> str:
    for left, right in _QUOTES:
        if len(text) > 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1]
    return ""
