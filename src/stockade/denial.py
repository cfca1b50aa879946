"""Was it the sandbox? Turning an errno in stderr into a sentence the model can act on.

The same "Permission denied" means something else entirely under full-access,
where there is no boundary: there it is the workspace's own doing, and saying
"blocked by the sandbox" would send the model after the wrong cause.

stderr only says which call failed and, mostly, on which path; the rule comes
from the `Profile` the command ran with: whether that path is hidden (and
not shown back), writable or protected, whether the command may start
processes, what its network is. A hint guessed from stderr alone called
`cat /etc/shadow` a write, sent a non-executable file to "ask for
workspace-write", and said nothing of a hidden credential, which reads as
"No such file or directory".
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profile import Profile

_MARKERS = (
    (b"Read-only file system", "read-only"),
    # Renaming a file over a read-only mount point: git writes config.lock
    # and renames it onto .git/config.
    (b"Device or resource busy", "read-only"),
    # gdb, strace and LeakSanitizer, whose own words name no errno or a wrong cause.
    (b"does not work under ptrace", "ptrace"),
    (b"ptrace: Operation not permitted", "ptrace"),
    (b"PTRACE_TRACEME", "ptrace"),
    # node's words for a listener refused: lower case, which the next line misses.
    (b"listen EPERM", "network"),
    (b"listen EACCES", "network"),
    (b"Operation not permitted", "eperm"),
    (b"Permission denied", "eacces"),
    (b"Network is unreachable", "network"),
    (b"Could not resolve host", "network"),
    (b"Temporary failure in name resolution", "network"),
    (b"Name or service not known", "network"),
    (b"Connection refused", "refused"),
    # curl's words for a connect that failed (ECONNREFUSED, ENETUNREACH).
    (b"Couldn't connect to server", "refused"),
    (b"Failed to connect to", "refused"),
    (b"No route to host", "network"),
    (b"Bad system call", "seccomp"),
    (b"deny(1)", "seatbelt"),
)

SIGSYS = 31


def likely_sandbox_denied(exit_code: int | None, signal: int | None, stderr: bytes,
                          *, sandboxed: bool, profile: Profile | None = None) -> str | None:
    """The kind of denial that probably happened, or None.

    Only a failed command is examined, and only the tail of stderr, where
    tools print the error that stopped them. With the `profile` the command
    ran under, the answer is the profile's: a path it hides ("hidden", even
    when the error says "No such file or directory"), a process it forbids
    ("subprocess"), a connection its network cannot make ("network"); and an
    error on a path it leaves open (a file that is simply not executable) is
    the command's own, not a denial.
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
    if profile is not None:
        found = _with_profile(tail, profile)
        if found is not None:
            return found or None
    for marker, kind in _MARKERS:
        if marker in tail:
            # Landlock and seccomp refuse a connect() with EACCES/EPERM, which
            # reads like a file error; the call that failed says otherwise.
            if kind in ("eacces", "eperm") and any(
                    word in tail for word in (b"connect", b"socket", b"urlopen", b"Connection")):
                return "network"
            return kind
    return None


_FORK_WORDS = (b"fork", b"spawn", b"Cannot run program", b"clone")
_CONNECT_KINDS = ("network", "refused")


def _with_profile(tail: bytes, profile: Profile) -> str | None:
    """The kind the profile decides, "" for "not the sandbox", None to look at stderr."""
    from .capabilities import NetworkPolicy

    if not profile.spawn_subprocess and any(w in tail for w in _FORK_WORDS):
        return "subprocess"
    kind = next((k for m, k in _MARKERS if m in tail), None)
    path, op = _refused(tail)
    if path:
        full = _resolve(path, profile.cwd)
        if _hidden_by(full, profile):
            return "hidden"
        if kind in ("eacces", "eperm") and op in ("exec", "read") and _readable(full, profile):
            # The sandbox lets it read (and run) this path: the file's own mode refused.
            return ""
        if kind in ("eacces", "eperm") and _writable(full, profile) and op != "connect":
            return ""
    if kind in _CONNECT_KINDS or (kind in ("eacces", "eperm") and any(
            w in tail for w in (b"connect", b"socket", b"urlopen", b"Connection"))):
        if profile.network.kind == NetworkPolicy.ALL:
            # Every address is reachable: a refusal is the server's, unless it
            # names a host socket the sandbox covers (docker.sock).
            return "refused" if any(s.encode() in tail for s in profile.sockets) else ""
        return "network"
    return None


def _refused(tail: bytes) -> tuple[str, str]:
    """(the path an error line names, what was done to it: exec, read, write or "")."""
    text = tail.decode("utf-8", "replace")
    path = _quoted_path(tail, missing=True)
    if not path:
        return "", ""
    line = next((ln for ln in reversed(text.strip().splitlines()) if path in ln), "")
    if "stockade-init: cannot run" in line or "cannot execute" in line:
        return path, "exec"
    if "for reading" in line or "cannot access" in line:
        return path, "read"
    return path, ""


def _resolve(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hidden_by(full: str, profile: Profile) -> str:
    """The hidden path that covers `full` (itself or a directory above it), or ""."""
    for hidden, _kind in profile.hidden:
        if _under(full, hidden):
            if any(_under(full, shown) for shown, _k in profile.shown):
                return ""
            return hidden
    return ""


def _writable(full: str, profile: Profile) -> bool:
    roots = list(profile.write_roots)
    if profile.workspace_writable:
        roots.append(profile.workspace)
    if not any(_under(full, r) for r in roots):
        return False
    return not any(_under(full, p.path) for p in profile.protected)


def _readable(full: str, profile: Profile) -> bool:
    return not _hidden_by(full, profile)


def denial_hint(kind: str, stderr: bytes, mode: str, *, workspace: str | None = None,
                cwd: str | None = None, profile: Profile | None = None) -> str:
    """One line the model can act on: the path refused and the rule that refused it.

    `workspace` and `cwd` place a relative path: the error names it as the
    command saw it, and "outside the workspace" is a claim about where it
    resolves, not about how it was spelt. With the `profile`, the rule named
    is the profile's: hidden paths, the subprocess setting, the network mode.
    """
    if profile is not None:
        workspace = workspace or profile.workspace
        cwd = cwd or profile.cwd
    if kind == "hidden" and profile is not None:
        path = _quoted_path(stderr, missing=True)
        full = _resolve(path, cwd or profile.cwd)
        cover = _hidden_by(full, profile) or full
        shown = escape(full)
        why = ("is hidden from commands" if cover == full
               else f"is inside {escape(cover)}, which is hidden from commands")
        return (f"blocked by the sandbox: {shown} {why} (the `unreadable` setting; `stockade "
                "doctor` lists what it hides and why), so it reads as missing or unreadable: "
                f"ask for it with --allow-read {escape(full)}")
    if kind == "subprocess":
        return ("blocked by the sandbox: the command may start no process of its own "
                "(--no-subprocess, spawn_subprocess=False): fork, vfork and clone are refused; "
                "run it without --no-subprocess")
    if kind in ("read-only", "eacces", "eperm"):
        return _file_hint(kind, _quoted_path(stderr), mode, workspace, cwd, profile)
    if kind == "network":
        return _network_hint(profile)
    if kind == "refused":
        from .capabilities import NetworkPolicy

        if profile is not None:
            sock = next((s for s in profile.sockets if s.encode() in stderr), "")
            if sock or profile.network.kind == NetworkPolicy.ALL:
                return (f"blocked by the sandbox: {escape(sock) or 'a host socket'} (docker.sock "
                        "and the like) is covered in every mode but full-access")
            return _network_hint(profile)
        return ("blocked by the sandbox: connection refused (network is off for this command, "
                "and host sockets such as docker.sock are not reachable)")
    if kind == "seccomp":
        return "blocked by the sandbox: a forbidden system call was refused"
    if kind == "ptrace":
        return ("blocked by the sandbox: ptrace was refused (gdb, strace, LeakSanitizer): a "
                "command may trace only its own processes, under the bubblewrap backend with "
                "Landlock in force (`stockade doctor`), never under the Landlock backend")
    return f"blocked by the sandbox ({kind})"


def _network_hint(profile: Profile | None) -> str:
    from .capabilities import NetworkPolicy

    if profile is None or profile.network.kind == NetworkPolicy.NONE:
        return ("blocked by the sandbox: network access is off for this command (network "
                "none: its own loopback only, so a server on the host's 127.0.0.1 is out of "
                "reach too); request it, e.g. --allow-host HOST:PORT")
    if profile.network.kind == NetworkPolicy.HOSTS:
        hosts = ", ".join(escape(h) for h in profile.network.hosts) or "none"
        return ("blocked by the sandbox: the network is limited to the allowed hosts, through "
                f"stockade's proxy (allowed: {hosts}); a direct connection, or one to another "
                "host, is refused: request it with --allow-host HOST:PORT")
    return "blocked by the sandbox: network access is off for this command (request it)"


def proxy_hint(host: str, port: int | None, reason: str) -> str:
    where = f"{host}:{port}" if port else host
    if reason.startswith(where):  # the proxy's reasons usually name the target already
        return f"blocked by the sandbox: the network proxy refused {escape(reason)}"
    return f"blocked by the sandbox: the network proxy refused {escape(where)}: {escape(reason)}"


def _file_hint(kind: str, path: str, mode: str, workspace: str | None,
               cwd: str | None, profile: Profile | None = None) -> str:
    what = "is read-only" if kind == "read-only" else "is not accessible"
    if not path:
        if kind == "read-only":
            if mode == "read-only":
                return ("blocked by the sandbox: a write was refused: the workspace is read-only "
                        "in read-only mode (ask for workspace-write)")
            return ("blocked by the sandbox: a write was refused: only the workspace is "
                    f"writable in {mode} mode, and protected metadata stays read-only")
        # EACCES does not say whether it was a read or a write: both rules.
        writes = ("nothing is writable in read-only mode" if mode == "read-only"
                  else f"only the workspace is writable in {mode} mode")
        return (f"blocked by the sandbox: a file access was refused: {writes}, and hidden "
                "paths are not readable")
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
        if profile is not None and not protected and any(
                _under(full, p.path) for p in profile.protected):
            protected = os.path.basename(full)
    if mode == "read-only" and inside is not False and not protected:
        why = "the workspace is read-only in read-only mode (ask for workspace-write)"
        where = " in the workspace" if inside else ""
        if kind == "read-only":
            return f"blocked by the sandbox: {shown}{where} {what}: {why}"
        return (f"blocked by the sandbox: {shown}{where} is read-only: {why}; reading it is "
                "allowed, so a refused read or run is the file's own permissions")
    if inside is False:
        if kind == "read-only":
            why = ("nothing outside the workspace is writable in read-only mode"
                   if mode == "read-only" else "only the workspace is writable")
            return f"blocked by the sandbox: {shown} is outside the workspace and read-only: {why}"
        # EACCES does not say whether it was a read or a write. The path is
        # not hidden (that is its own hint), so the sandbox lets it be read:
        # the refusal was a write, or the file's own permissions.
        why = ("nothing is writable in read-only mode" if mode == "read-only"
               else "only the workspace is writable")
        return (f"blocked by the sandbox: {shown} is outside the workspace and read-only: "
                f"{why}; reading it is allowed, so a refused read is the file's own "
                "permissions" if profile is not None else
                f"blocked by the sandbox: {shown} is outside the workspace and not accessible: "
                f"{why}, and hidden paths are not readable")
    if protected:
        return (f"blocked by the sandbox: {shown} is read-only: {escape(protected)} is protected "
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
          "can't open ", "cannot remove ", "can't remove ", "cannot touch ", "cannot write ",
          "cannot access ", "cannot run ", "cannot execute ")
_QUOTES = (("\u2018", "\u2019"), ("'", "'"), ('"', '"'), ("`", "'"))


_MISSING = b"No such file or directory"


def _quoted_path(stderr: bytes, *, missing: bool = False) -> str:
    """The path an error line names.

    Each tool puts it somewhere else: dash `sh: 1: cannot create c.txt: <error>`,
    bash `bash: c.txt: <error>`, coreutils `touch: cannot touch 'x': <error>`,
    Python `PermissionError: [Errno 13] Permission denied: 'x'` (after the
    error). The shell's own name is a field too, never the path.
    """
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    markers = [m for m, _ in _MARKERS] + ([_MISSING] if missing else [])
    for line in reversed(lines[-5:]):
        # Only the line carrying the error: a traceback's earlier lines quote
        # source files that have nothing to do with what was refused.
        for marker in markers:
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
                # `head: cannot open '/etc/shadow' for reading`: the quoted
                # name, not what follows it.
                for left, right in _QUOTES:
                    if last.startswith(left):
                        end = last.find(right, 1)
                        if end > 1:
                            last = last[1:end]
                        break
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
