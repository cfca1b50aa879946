"""Windows' words for a refusal, and the doctor's rows: from text and probes to sentences.

Pure. A command refused by an ACE or a mandatory label sees
ERROR_ACCESS_DENIED, which every layer prints differently: cmd "Access is
denied.", .NET and PowerShell "Access to the path 'X' is denied.", Python
"[WinError 5] Access is denied: 'X'", Rust and Go the constant's name. A
socket an AppContainer has no capability for fails with WSAEACCES (10013).
"""

from __future__ import annotations

from .acl import win_under
from .plan import APPCONTAINER, JOB_ONLY, RESTRICTED, TIERS

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...profile import Profile

_ACCESS = ("Access is denied", "ERROR_ACCESS_DENIED", "is denied.", "UnauthorizedAccess",
           "[WinError 5]", "os error 5")
_NETWORK = ("forbidden by its access permissions", "WSAEACCES", "10013", "[WinError 10013]",
            "No such host is known", "WSAHOST_NOT_FOUND", "[Errno 11001]")
_PRIVILEGE = ("A required privilege is not held by the client", "ERROR_PRIVILEGE_NOT_HELD")

#: STATUS_DLL_INIT_FAILED: a process that cannot reach what its DLLs need at
#: load time (a desktop, a window station, user32's shared sections) dies
#: with this before running a line of its own code. Under a job with UI
#: restrictions or in an AppContainer that is the sandbox, not the command.
STATUS_DLL_INIT_FAILED = 0xC0000142
#: STATUS_ACCESS_DENIED as an exit code: the loader itself was refused.
STATUS_ACCESS_DENIED = 0xC0000022


def _tail(stderr: bytes) -> str:
    data = stderr[-4096:]
    if data.count(b"\x00") > len(data) // 4:
        # PowerShell and some .NET tools write UTF-16 to a pipe.
        return data.decode("utf-16-le", "replace")
    return data.decode("utf-8", "replace")


def refused_path(text: str) -> str:
    """The path named with an access-denied error ("" when none is named)."""
    for line in reversed(text.splitlines()):
        if not any(m in line for m in _ACCESS):
            continue
        for left, right in (("'", "'"), ('"', '"'), ("\u2018", "\u2019")):
            start = line.find(left)
            end = line.find(right, start + 1) if start >= 0 else -1
            if start >= 0 and end > start + 1:
                candidate = line[start + 1:end]
                if len(candidate) > 2 and (candidate[1] == ":" or candidate.startswith("\\\\")):
                    return candidate
        head = line.split(": Access is denied", 1)[0] if ": Access is denied" in line else ""
        head = head.rsplit(": ", 1)[-1].strip()
        if len(head) > 2 and head[1] == ":":
            return head
    return ""


def denial_kind(stderr: bytes) -> str | None:
    """"network", "access" or None for what the tail of stderr shows."""
    text = _tail(stderr)
    if any(m in text for m in _NETWORK):
        return "network"
    if any(m in text for m in _ACCESS):
        return "access"
    return None


def explain_denial(stderr: bytes, *, tier: str, profile: Profile | None) -> str | None:
    """One line naming what refused, or None when stderr shows no refusal."""
    kind = denial_kind(stderr)
    if kind is None:
        return None
    where = {APPCONTAINER: "the AppContainer", RESTRICTED: "Low integrity",
             JOB_ONLY: "the job object"}.get(tier, tier)
    if kind == "network":
        return (f"blocked by the sandbox ({where}): network access is off for this command "
                "(request it)")
    path = refused_path(_tail(stderr))
    if not path:
        return f"blocked by the sandbox ({where}): access is denied"
    if profile is not None:
        for hidden, _ in profile.hidden:
            if win_under(path, hidden):
                return f"blocked by the sandbox ({where}): {path} is a hidden credential store"
        for item in profile.protected:
            if win_under(path, item.path):
                return (f"blocked by the sandbox ({where}): {path} is protected metadata, "
                        "read-only inside the sandbox")
        if win_under(path, profile.workspace) and not profile.workspace_writable:
            return (f"blocked by the sandbox ({where}): {path} is in the workspace, which is "
                    f"read-only in {profile.mode} mode (ask for workspace-write)")
    return (f"blocked by the sandbox ({where}): {path} is outside what this command may "
            "reach (the workspace, granted paths and, for reading, system directories)")


def explain_failure(returncode: int, stderr: bytes) -> str | None:
    """The sandbox's failure to start the command, told from its exit code."""
    code = returncode & 0xFFFFFFFF
    if code == STATUS_DLL_INIT_FAILED:
        return ("the command could not start inside the Windows sandbox: it died while loading "
                "its DLLs (STATUS_DLL_INIT_FAILED, 0xC0000142), usually a program that needs a "
                "desktop or window station the job's UI restrictions or the AppContainer deny. "
                "Run a console program, or one that needs no window")
    if code == STATUS_ACCESS_DENIED:
        return ("the command could not start inside the Windows sandbox: the loader was refused "
                "(STATUS_ACCESS_DENIED, 0xC0000022). The program or a DLL it loads is not "
                "readable by the sandbox; grant its directory (windows_read_paths)")
    if any(m in _tail(stderr) for m in _PRIVILEGE):
        return ("the Windows sandbox could not start the command: a required privilege is not "
                "held (ERROR_PRIVILEGE_NOT_HELD)")
    return None


def doctor_rows(platform: str, probes: Mapping[str, str | None], *, allow_job_only: bool,
                allow_open_network: bool, pinned: str) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for `stockade doctor`: which tiers work here, and why not.

    `probes[tier]` is None when the tier's mechanism started, else the reason.
    """
    if platform != "win32":
        return [("windows", False, f"this is {platform}; the windows backend needs Windows")]
    what = {
        APPCONTAINER: "file access only where ACEs name this run's SID; network only with a "
                      "capability (none or all)",
        RESTRICTED: "no privileges, Low integrity: writes only where labelled Low; reads "
                    "everything the user can except hidden stores; network NOT closed",
        JOB_ONLY: "host token, Medium integrity: process and memory limits only, NO filesystem "
                  "or network boundary",
    }
    rows: list[tuple[str, bool, str]] = []
    for tier in TIERS:
        why = probes.get(tier, "not probed")
        if pinned not in ("auto", tier):
            rows.append((f"windows tier {tier}", False, f"not used: windows_tier = {pinned!r}"))
            continue
        if why is None:
            note = what[tier]
            if tier == JOB_ONLY and not allow_job_only:
                note += "; runs only full-access here (windows_allow_job_only = false)"
            if tier == RESTRICTED and not allow_open_network:
                note += "; runs only network-all commands (windows_allow_open_network = false)"
            rows.append((f"windows tier {tier}", True, note))
        else:
            rows.append((f"windows tier {tier}", False, why))
    rows.append(("windows network allowlist", False,
                 "network hosts hard-fails on Windows: filtering by address needs a Windows "
                 "Filtering Platform filter, which needs an administrator"))
    return rows
