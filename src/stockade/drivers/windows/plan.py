"""What a Windows run is allowed to be: tiers, refusals, SIDs, job limits, network.

Pure functions of the decided `Profile` and the driver's options. Nothing
here calls Windows; `driver.py` asks these and then talks to the seam.
"""

from __future__ import annotations

import hashlib
import struct

from ...capabilities import FULL_ACCESS, READ_ONLY, NetworkPolicy
from ...errors import ConfigError, SandboxUnavailable

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

#: Tier names, strongest first; the audit record carries one of these.
APPCONTAINER = "appcontainer"
RESTRICTED = "restricted-token"
JOB_ONLY = "job-object"
TIERS = (APPCONTAINER, RESTRICTED, JOB_ONLY)
AUTO = "auto"

#: Win32 error numbers the tier chain branches on.
ERROR_ACCESS_DENIED = 5
ERROR_PRIVILEGE_NOT_HELD = 1314

# -- what each tier enforces -------------------------------------------------------

FILESYSTEM = "filesystem"
NETWORK = "network"

#: What a tier cannot enforce. The restricted token runs at Low integrity,
#: which stops writes to everything not labelled Low, but a Low process opens
#: sockets like any other: without an AppContainer there is no capability to
#: withhold. The job-only tier is the host token at Medium integrity: it
#: bounds processes and memory, and nothing else.
_GAPS: dict[str, tuple[str, ...]] = {
    APPCONTAINER: (),
    RESTRICTED: (NETWORK,),
    JOB_ONLY: (FILESYSTEM, NETWORK),
}


def asked(mode: str, network: NetworkPolicy) -> tuple[str, ...]:
    """The boundaries this run asks for: a filesystem one unless full-access, a network one
    unless the network is open."""
    out: list[str] = []
    if mode != FULL_ACCESS:
        out.append(FILESYSTEM)
    if network.kind != NetworkPolicy.ALL:
        out.append(NETWORK)
    return tuple(out)


def missing(tier: str, mode: str, network: NetworkPolicy) -> tuple[str, ...]:
    """The asked boundaries `tier` would not enforce."""
    return tuple(b for b in asked(mode, network) if b in _GAPS[tier])


def candidate_tiers(mode: str, network: NetworkPolicy, *, pinned: str = AUTO,
                    allow_job_only: bool = False,
                    allow_open_network: bool = False) -> tuple[tuple[str, ...], dict[str, str]]:
    """(tiers to try in order, {tier: why it is not tried}).

    The specified chain degrades AppContainer -> restricted token -> job object.
    A degrade that drops a boundary the run asked for is the harness that
    "silently drops the sandbox", worse than one that never had it: a tier
    is tried only if it enforces everything asked, or the config waived the
    missing part by name (`windows_allow_job_only` for the filesystem,
    `windows_allow_open_network` for the network).
    """
    if pinned != AUTO and pinned not in TIERS:
        raise ConfigError(f"windows_tier {pinned!r} is not a tier: choose auto, "
                          f"{', '.join(TIERS)}")
    order = TIERS if pinned == AUTO else (pinned,)
    tried: list[str] = []
    skipped: dict[str, str] = {}
    for tier in order:
        if tier == RESTRICTED and mode not in (READ_ONLY, FULL_ACCESS):
            skipped[tier] = f"{tier}: {RESTRICTED_WRITES}"
            continue
        if mode == FULL_ACCESS and tier != JOB_ONLY:
            skipped[tier] = f"{tier}: {FULL_ACCESS_TIERS}"
            continue
        gaps = missing(tier, mode, network)
        unwaived = [g for g in gaps if not (
            (g == FILESYSTEM and allow_job_only) or (g == NETWORK and allow_open_network))]
        if unwaived:
            skipped[tier] = _gap_text(tier, unwaived, mode, network)
        else:
            tried.append(tier)
    return tuple(tried), skipped


#: Why the restricted token never runs a writing mode. Its workspace is
#: labelled Low while the user's own DACL grants Full Control, and NTFS grants
#: DELETE on a child through FILE_DELETE_CHILD on its parent: `move .git old`
#: and `mkdir .git\hooks` would replace the hooks and config that the
#: Medium labels were meant to keep. A per-run restricting SID could close
#: that and has not been built; until then only tier 1 writes.
RESTRICTED_WRITES = (
    "a Low-integrity token cannot keep .git and the other protected names in place in a "
    "writable workspace (the user's Full Control lets a child be renamed through its "
    "parent), so this tier runs only read-only commands; workspace-write needs the "
    "AppContainer tier")

#: Why full-access runs only in the job. Its write root is the whole
#: filesystem, which tiers 1 and 2 could grant only by labelling or granting
#: a drive root, inherited by every file on the volume and rewritten again on
#: undo; the job tier asks nothing of the filesystem and bounds the processes.
FULL_ACCESS_TIERS = (
    "full-access writes the whole filesystem, which this tier could allow only by changing "
    "the label or ACL of a drive root and so of every file on it; full-access runs in the "
    f"{JOB_ONLY} tier")

#: What bounds the processes a command starts, per tier. The job holds
#: every process created from inside it, and closing it ends them; but some
#: routes create a process that was never inside: WMI's Win32_Process.Create,
#: the Task Scheduler, COM local servers, ShellExecute through explorer, the
#: console handoff to Windows Terminal. An AppContainer is refused the RPC
#: and COM endpoints behind them unless they admit ALL APPLICATION PACKAGES;
#: the Low token and the job-only tier are refused none of them.
LIFETIME = {
    APPCONTAINER: ("nothing the command starts outlives the run, unless a broker that admits "
                   "AppContainers starts it (to confirm on a host: docs/windows-verify.md)"),
    RESTRICTED: ("processes started through WMI, the Task Scheduler, COM local servers, "
                 "explorer or the terminal handoff run outside the job and outlive the run"),
    JOB_ONLY: ("processes started through WMI, the Task Scheduler, COM local servers, explorer "
               "or the terminal handoff run outside the job, unconfined, and outlive the run"),
}

#: The Administrators group. Elevated, the token a command would get keeps it
#: enabled, and a Low or AppContainer process holding it passes every access
#: check that admits administrators; the restricted token makes it deny-only
#: as well, should an elevated run ever be allowed.
ADMINISTRATORS = "S-1-5-32-544"


def elevated_refusal() -> SandboxUnavailable:
    return SandboxUnavailable(
        "stockade is running elevated (as administrator): a sandboxed command's token would "
        "keep the Administrators group, and every boundary here assumes it does not. Run "
        "stockade from a shell that is not elevated")


def _gap_text(tier: str, gaps: list[str], mode: str, network: NetworkPolicy) -> str:
    parts = []
    if FILESYSTEM in gaps:
        parts.append(f"it enforces no filesystem boundary, and {mode} asks for one "
                     "(windows_allow_job_only = true runs it anyway)")
    if NETWORK in gaps:
        parts.append(f"it cannot close the network, and this run's network is {network.kind} "
                     "(windows_allow_open_network = true runs it anyway)")
    return f"{tier}: " + "; ".join(parts)


def refusal(mode: str, network: NetworkPolicy, failures: dict[str, str],
            skipped: dict[str, str]) -> SandboxUnavailable:
    """The error when no acceptable tier could start: every tier, and why not."""
    lines = [f"{tier}: {why}" for tier, why in failures.items()]
    lines += list(skipped.values())
    return SandboxUnavailable(
        f"no Windows sandbox tier can run this {mode} command: " + " | ".join(lines)
        + ". stockade never runs a command without the boundary it asked for; "
        "`stockade doctor` shows which tiers work on this machine")


# -- SIDs --------------------------------------------------------------------------

#: Capability SIDs for the network policy. `internetClient` reaches the
#: internet, `privateNetworkClientServer` the home and work networks (a
#: registry or a build cache on the LAN); `internetClientServer` also accepts
#: inbound connections from the internet, which no command needs.
INTERNET_CLIENT = "S-1-15-3-1"
INTERNET_CLIENT_SERVER = "S-1-15-3-2"
PRIVATE_NETWORK_CLIENT_SERVER = "S-1-15-3-3"
#: Integrity levels (the mandatory label SIDs).
LOW_INTEGRITY = "S-1-16-4096"
MEDIUM_INTEGRITY = "S-1-16-8192"
#: Every AppContainer; system directories grant it read and execute.
ALL_APPLICATION_PACKAGES = "S-1-15-2-1"


def capability_sids(network: NetworkPolicy) -> tuple[str, ...]:
    """The AppContainer's capabilities for `network`. A host allowlist has none: it is
    refused before this (see `host_allowlist_refusal`)."""
    if network.kind == NetworkPolicy.ALL:
        return (INTERNET_CLIENT, PRIVATE_NETWORK_CLIENT_SERVER)
    if network.kind == NetworkPolicy.NONE:
        return ()
    raise host_allowlist_refusal(network.hosts, lambda host: ())


def appcontainer_sid(name: str) -> str:
    """The SID Windows gives the AppContainer profile `name`.

    Documented as S-1-15-2 followed by the first 28 bytes of the SHA-256 of
    the lower-cased name (UTF-16LE), as seven 32-bit little-endian numbers.
    The driver compares it with what Windows returns: a mismatch means the
    ACEs would name someone else, and the run stops.
    """
    digest = hashlib.sha256(name.lower().encode("utf-16-le")).digest()
    return "S-1-15-2-" + "-".join(str(n) for n in struct.unpack("<7I", digest[:28]))


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_")


def profile_name(token: str) -> str:
    """A per-execution AppContainer profile name (`token`: random hex from the caller).

    One profile per command, never per session: its SID is what every ACE
    names, so a unique SID makes removing "our" ACEs exact even while other
    commands run with their own, and nothing a finished command was granted
    stays granted to a later one.
    """
    name = f"stockade.run.{token}".lower()
    if len(name) > 64 or not set(name) <= _NAME_CHARS:
        raise ValueError(f"not a usable AppContainer name: {name!r}")
    return name


# -- the job object ----------------------------------------------------------------

JOB_OBJECT_LIMIT_ACTIVE_PROCESS = 0x0008
JOB_OBJECT_LIMIT_PROCESS_MEMORY = 0x0100
JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION = 0x0400
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000

JOB_OBJECT_UILIMIT_HANDLES = 0x01
JOB_OBJECT_UILIMIT_READCLIPBOARD = 0x02
JOB_OBJECT_UILIMIT_WRITECLIPBOARD = 0x04
JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS = 0x08
JOB_OBJECT_UILIMIT_DISPLAYSETTINGS = 0x10
JOB_OBJECT_UILIMIT_GLOBALATOMS = 0x20
JOB_OBJECT_UILIMIT_DESKTOP = 0x40
JOB_OBJECT_UILIMIT_EXITWINDOWS = 0x80
#: Every UI restriction: the clipboard is a channel in and out of the
#: boundary, window handles of other processes let a command drive the
#: user's unconfined programs (a terminal, an editor) by sending them input,
#: and system parameters, display settings and logoff reach past the run.
UI_RESTRICT_ALL = 0xFF


class JobLimits:
    """The job object's configuration for one run (pure data)."""

    __slots__ = ("active_processes", "limit_flags", "process_memory", "ui_restrictions")

    def __init__(self, limit_flags: int, active_processes: int, process_memory: int,
                 ui_restrictions: int) -> None:
        self.limit_flags = limit_flags
        self.active_processes = active_processes
        self.process_memory = process_memory
        self.ui_restrictions = ui_restrictions

    def __repr__(self) -> str:
        return (f"JobLimits(flags={self.limit_flags:#x}, active_processes="
                f"{self.active_processes}, process_memory={self.process_memory}, "
                f"ui={self.ui_restrictions:#x})")


def job_limits(max_pids: int | None, max_memory_mb: int | None) -> JobLimits:
    """Limits for `max_pids` and `max_memory_mb` (None: that limit off).

    Kill-on-close ends, when stockade closes the job (or dies), every process
    in it, a detached `start /b` server included. It reaches only what is in
    the job: `LIFETIME` says, per tier, what starts outside it. Die-on-unhandled-
    exception stops the Windows Error Reporting dialog, which would otherwise
    hold a crashed command (and its job) open until someone clicks it away.
    """
    flags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
    active = 0
    memory = 0
    if max_pids is not None:
        if isinstance(max_pids, bool) or max_pids <= 0:
            raise ConfigError(f"max_pids must be a positive number, got {max_pids!r}")
        flags |= JOB_OBJECT_LIMIT_ACTIVE_PROCESS
        active = max_pids
    if max_memory_mb is not None:
        if isinstance(max_memory_mb, bool) or max_memory_mb <= 0:
            raise ConfigError(f"max_memory_mb must be positive, got {max_memory_mb!r}")
        flags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY
        memory = max_memory_mb * 1024 * 1024
    return JobLimits(flags, active, memory, UI_RESTRICT_ALL)


#: Job notifications (JOB_OBJECT_MSG_*) that say a limit was hit.
JOB_OBJECT_MSG_ACTIVE_PROCESS_LIMIT = 3
JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT = 9
JOB_OBJECT_MSG_JOB_MEMORY_LIMIT = 10


def limit_hit(messages: Iterable[int]) -> str | None:
    """`LaunchReport.limit_exceeded` from the job's notifications (memory wins)."""
    from ..base import MEMORY, PIDS

    seen = set(messages)
    if seen & {JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT, JOB_OBJECT_MSG_JOB_MEMORY_LIMIT}:
        return MEMORY
    if JOB_OBJECT_MSG_ACTIVE_PROCESS_LIMIT in seen:
        return PIDS
    return None


# -- the network -------------------------------------------------------------------


def host_allowlist_refusal(hosts: Iterable[str],
                           resolve: Callable[[str], Iterable[str]]) -> SandboxUnavailable:
    """Why a host allowlist cannot run on Windows, with the exact addresses it would allow.

    An AppContainer's network capabilities are all-or-nothing; allowing some
    addresses and not others needs a Windows Filtering Platform filter, and
    adding one needs an administrator. stockade does not run elevated, and
    a proxy the command may simply ignore is not a boundary. Listing the
    addresses (resolved here, now) lets the person decide with the facts:
    grant the network, or run elsewhere.
    """
    lines = []
    for host in hosts:
        if host.startswith("*."):
            lines.append(f"{host} (a wildcard: no fixed address)")
            continue
        try:
            addresses = sorted(dict.fromkeys(resolve(host)))
        except OSError as exc:
            lines.append(f"{host} (does not resolve: {exc})")
            continue
        lines.append(f"{host} -> {', '.join(addresses)}" if addresses
                     else f"{host} (does not resolve)")
    listed = "; ".join(lines) or "no hosts"
    return SandboxUnavailable(
        "a host allowlist cannot be enforced on Windows: limiting an AppContainer to some "
        "addresses needs a Windows Filtering Platform filter, which only an administrator "
        "can install, and stockade does not run elevated. The allowlist would allow exactly: "
        f"{listed}. Use network none or all for this command, or run it on Linux or macOS")


def resolve_addresses(host: str) -> list[str]:
    """The host's addresses as the system resolver gives them now (the edge, not a decision)."""
    import socket

    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]
