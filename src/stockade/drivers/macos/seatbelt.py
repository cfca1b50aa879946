"""The macOS driver: Seatbelt, through /usr/bin/sandbox-exec and nothing else.

`seatbelt_profile` is a pure function of the decided `Profile`: it returns
the profile text and the `-D` parameters that carry every variable path, so
the tests can parse the text and evaluate what it allows without a Mac.

The profile is written so that its meaning does not depend on how Seatbelt
orders rules. A carve-out from an allow is a `require-not` inside that allow,
never an allow followed by a narrower deny hoping to win; the only denies are
the ones that must win over everything (hidden credentials), and they come
last. Read either way -- "the last matching rule decides" or "a matching deny
decides" -- the profile says the same thing, and the tests check both.
"""

from __future__ import annotations

import os
import sys

from ...capabilities import NetworkPolicy, is_under
from ...errors import ConfigError, SandboxUnavailable
from ...process import chdir_argv
from ...profile import DIR, HOLD, PIN, STRICT
from ..base import Driver, Launch
from .hardening import scrub_env
from .sbpl import (
    ancestors,
    canonical_macos_path,
    data_volume_alias,
    name_regex,
    quote,
    regex_literal,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

    from ...profile import Profile

__all__ = [
    "SANDBOX_EXEC",
    "SeatbeltDriver",
    "canonical_macos_path",
    "check_available",
    "command_argv",
    "command_env",
    "sandbox_exec_argv",
    "seatbelt_profile",
]

#: The only sandbox-exec stockade runs. A PATH lookup would let whoever can
#: write an earlier PATH entry -- the workspace, a package's bin directory --
#: choose the program that builds the boundary.
SANDBOX_EXEC = "/usr/bin/sandbox-exec"

# What the read rules grant: reading, and the operations that are reading by
# another name. Mapping a library executable and exec'ing a program both
# consume a file's contents; a path that cannot be read must not run either.
_READ_OPS = "file-read* file-test-existence file-map-executable process-exec"

# The strict read scope on macOS, beyond what the profile's own read roots
# name. Each is here because something ordinary stops without it.
_STRICT_SYSTEM = (
    # Frameworks, dyld's libraries and the system's own tools.
    "/System",
    "/usr",
    "/bin",
    "/sbin",
    # /etc is a symlink to here: hosts, ssl certificates, shells' rc files.
    "/private/etc",
    # /bin/sh is a shim that reads this directory to pick bash, dash or zsh.
    "/private/var/select",
    # localtime points into it; without it every timestamp is UTC.
    "/private/var/db/timezone",
    # The Apple-provided git, make and cc are xcrun shims that run the tools
    # from the selected developer directory.
    "/Library/Developer/CommandLineTools",
    "/Applications/Xcode.app",
    # Rosetta's runtime and the system's own libraries outside the sealed volume
    # live under /Library/Apple; python.org's Python and other installers put
    # their frameworks in /Library/Frameworks.
    "/Library/Apple",
    "/Library/Frameworks",
    # Homebrew on Apple silicon (/usr/local, the Intel prefix, is under /usr).
    "/opt/homebrew",
)
_STRICT_SYSTEM_FILES = (
    # xcrun finds the developer directory through this symlink.
    "/private/var/db/xcode_select_link",
    # /etc/resolv.conf points here; resolvers that read it directly need it.
    "/private/var/run/resolv.conf",
)
# The data volume's second spelling of every user file stays out of the
# strict scope even though /System is in it.
_STRICT_EXCLUDED = ("/System/Volumes/Data",)

# sysctls ordinary tools read to size thread pools and choose code paths:
# Python's os.cpu_count, Go's and Node's runtimes, Rust's
# available_parallelism, `uname`, `uptime`. kern.proc.* and kern.procargs*
# stay closed: they list the host's processes and hand out their arguments
# and environment, which is where tokens live.
_SYSCTL_PREFIXES = ("hw.", "machdep.cpu.", "kern.os")
_SYSCTL_NAMES = (
    "kern.argmax", "kern.boottime", "kern.clockrate", "kern.hostname", "kern.maxfiles",
    "kern.maxfilesperproc", "kern.maxproc", "kern.ngroups", "kern.secure_kernel",
    "kern.usrstack64", "kern.version", "kern.iossupportversion", "sysctl.proc_translated",
    "vm.loadavg", "vm.pagesize",
)

# Mach services, each for a failure ordinary tools hit without it.
# Left out on purpose: launchservicesd (`open` would start apps outside the
# sandbox), the pasteboard (a channel in and out), securityd (the keychain is
# a credential store like ~/.aws), cfprefsd (it writes preferences on a
# client's behalf, and a written Terminal preference runs code later),
# com.apple.PowerManagement.control (`caffeinate`: powerd acts for any
# client, and keeping the machine awake is not a build's business).
_MACH_SERVICES = (
    # A denied lookup is itself reported as a violation: every command would
    # flood the system log with reports for logging it was entitled to.
    "com.apple.logd",
    "com.apple.system.logger",
    # getpwuid/getpwnam: ssh, git and `~` expansion stop with
    # "No user exists for uid" when they cannot look the user up.
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
)

# Certificate checks through Security.framework (Go's crypto/x509, Swift,
# system curl) ask trustd, and trustd fetches missing intermediates, OCSP
# and CRLs over the network on its caller's behalf: a certificate whose AIA
# URL carries data is a way out that no network rule sees. So trustd comes
# only with network `all`, where the command could connect anyway.
_TRUST_SERVICES = ("com.apple.trustd", "com.apple.trustd.agent")

# Network `all` only: what getaddrinfo's callers and getifaddrs need besides
# mDNSResponder. configd answers DNS configuration and reachability (Node's
# resolver, curl's proxy discovery); the routing-table sysctls list the
# interfaces and their addresses.
_NETWORK_SERVICES = ("com.apple.dnssd.service", "com.apple.SystemConfiguration.configd",
                     "com.apple.SystemConfiguration.DNSConfiguration", *_TRUST_SERVICES)
_NETWORK_SYSCTL_PREFIXES = ("net.routetable",)

# POSIX shared memory: a named object another process of the user reads and
# writes is a channel out of the boundary, so only the names the runtimes
# that need one make: libomp's registration (PyTorch, NumPy with OpenMP),
# Python's multiprocessing.shared_memory, PyTorch's own segments.
_SHM_NAMES = ("^/__KMP_REGISTERED_LIB_[0-9]+$", "^/psm_[0-9a-f]+$",
              "^/torch_[0-9]+_[0-9]+_[0-9]+$")
#: POSIX semaphore names the runtimes that need them make: multiprocessing's
#: `/mp-<random>` and loky's (joblib's workers) `/loky-<pid>-<random>`.
_SEM_NAMES = ("^/mp-[a-z0-9_]+$", "^/loky-[0-9]+-[a-z0-9_]+$")


class _Builder:
    """Profile text plus the parameters it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.params: dict[str, str] = {}

    def param(self, name: str, value: str) -> str:
        if self.params.get(name, value) != value:
            raise AssertionError(f"parameter {name} bound twice")
        self.params[name] = value
        return f"(param {quote(name)})"

    def comment(self, text: str) -> None:
        self.lines.extend(f"; {line}" if line else ";" for line in text.strip().split("\n"))

    def rule(self, action: str, ops: str, filters: list[str] | None = None) -> None:
        if filters is not None and not filters:
            return  # an allow with no filters would allow everything
        if not filters:
            self.lines.append(f"({action} {ops})")
            return
        self.lines.append(f"({action} {ops}")
        self.lines.extend(f"  {line}" for f in filters for line in f.split("\n"))
        self.lines[-1] += ")"

    def blank(self) -> None:
        self.lines.append("")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _form(head: str, items: list[str]) -> str:
    body = "\n".join(f"  {line}" for item in items for line in item.split("\n"))
    return f"({head}\n{body})"


def _any(filters: list[str]) -> str:
    return filters[0] if len(filters) == 1 else _form("require-any", filters)


def _check_ports(ports: Iterable[int]) -> tuple[int, ...]:
    out: list[int] = []
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError(f"proxy port {port!r} is not a TCP port (1-65535)")
        if port not in out:
            out.append(port)
    return tuple(out)


def seatbelt_profile(
    profile: Profile,
    *,
    proxy_ports: Iterable[int] = (),
    scratch: str | None = None,
) -> tuple[str, dict[str, str]]:
    """The SBPL text for `profile` and the `-D` parameters it uses (pure).

    `scratch` is the command's private temporary directory (its TMPDIR);
    without one, `profile.session_tmp` is used when set. `proxy_ports` are
    the managed proxy's loopback ports, required when the network policy is
    a host allowlist.
    """
    ports = _check_ports(proxy_ports)
    net = profile.network.kind
    if net == NetworkPolicy.HOSTS and not ports:
        raise SandboxUnavailable(
            "a host allowlist on macOS is enforced by stockade's network proxy, and the "
            "seatbelt driver was given no proxy port to allow. Start the managed proxy and "
            "pass its port (proxy_ports), or use network none or all"
        )
    b = _Builder()
    ws = canonical_macos_path(profile.workspace)
    home = canonical_macos_path(profile.home) if profile.home.startswith("/") else ""
    tmp_source = scratch or profile.session_tmp
    tmp = canonical_macos_path(tmp_source) if tmp_source else ""

    writable: list[str] = []
    if profile.workspace_writable:
        writable.append(ws)
    writable.extend(canonical_macos_path(w) for w in profile.write_roots)
    writable = list(dict.fromkeys(writable))
    # A pinned directory (.git) is writable; Linux mounts it only so that it
    # cannot be renamed aside, which the ancestor rule below covers here. A
    # watched name (.git/commondir) Linux can only remove afterwards; here a
    # rule simply refuses its creation.
    protected = [canonical_macos_path(p.path) for p in profile.protected
                 if p.kind not in (PIN, HOLD)]

    b.lines.append("(version 1)")
    b.comment("""
stockade's Seatbelt profile, generated for one command. Nothing is allowed
unless a rule below allows it; each rule says what fails without it.
""")
    b.lines.append("(deny default)")
    b.blank()

    ws_ref = b.param("WORKSPACE", ws)
    tmp_ref = b.param("TMP", tmp) if tmp else ""
    write_refs = [ws_ref if path == ws else b.param(f"WRITE_{i}", path)
                  for i, path in enumerate(writable)]
    _processes(b, spawn=profile.spawn_subprocess)
    _system_services(b)
    _reads(b, profile, ws=ws, ws_ref=ws_ref, home=home, writable=writable,
           write_refs=write_refs, tmp=tmp, tmp_ref=tmp_ref)
    _writes(b, writable=writable, write_refs=write_refs, tmp=tmp, tmp_ref=tmp_ref,
            protected=protected)
    _devices(b)
    _network(b, net, ports, [canonical_macos_path(s) for s in profile.granted_sockets])
    _hidden(b, profile, own=[*writable, *([tmp] if tmp else [])])
    _other_scratch(b, tmp, keep=[ws, *writable])
    return b.text(), b.params


def _processes(b: _Builder, *, spawn: bool) -> None:
    if spawn:
        b.comment("""
A shell that cannot fork cannot run a pipeline. exec is granted with reads
below, so only what the command may read can run.
""")
        b.rule("allow", "process-fork")
    else:
        b.comment("""
No process-fork: the capabilities say this command starts no processes.
""")
    b.comment("""
Signals and process inspection reach only this sandbox's own processes:
signalling or inspecting the host's would act outside the boundary.
""")
    b.rule("allow", "signal", ["(target same-sandbox)"])
    b.rule("allow", "process-info*", ["(target same-sandbox)"])
    b.blank()


def _system_services(b: _Builder) -> None:
    b.comment("""
sysctls runtimes read to size thread pools and pick code paths (cpu count,
memory size, OS version). kern.proc and kern.procargs are not among them:
they list the host's processes with their arguments and environment.
""")
    filters = [f"(sysctl-name-prefix {quote(p)})" for p in _SYSCTL_PREFIXES]
    filters += [f"(sysctl-name {quote(n)})" for n in _SYSCTL_NAMES]
    b.rule("allow", "sysctl-read", filters)
    b.comment("""
Mach services: logging (a denied lookup is itself logged, flooding the system
log), opendirectoryd (getpwuid: ssh and git stop with "No user exists for uid").
Not here, on purpose: launchservicesd (`open` starts apps outside the
sandbox), the pasteboard, securityd (the keychain is a credential store),
cfprefsd (it writes preferences on a client's behalf), PowerManagement
(caffeinate), and trustd outside network all (it fetches on its caller's behalf).
""")
    b.rule("allow", "mach-lookup", [f"(global-name {quote(n)})" for n in _MACH_SERVICES])
    b.comment("""
POSIX semaphores and shared memory only under the names the runtimes that need
them make. Python's multiprocessing (and so pytest workers and
ProcessPoolExecutor) cannot create a lock without a semaphore; libomp,
multiprocessing.shared_memory and PyTorch map named segments. A segment
another process of this user maps is a channel in and out, and a semaphore
another program waits on is one the command could hold for ever.
""")
    b.rule("allow", "ipc-posix-sem",
           [f"(ipc-posix-name-regex {quote(n)})" for n in _SEM_NAMES])
    b.rule("allow", "ipc-posix-shm",
           [f"(ipc-posix-name-regex {quote(n)})" for n in _SHM_NAMES])
    b.blank()


def _reads(b: _Builder, profile: Profile, *, ws: str, ws_ref: str, home: str,
           writable: list[str], write_refs: list[str], tmp: str, tmp_ref: str) -> None:
    extra = list(dict.fromkeys(canonical_macos_path(p) for p in profile.read_extra))
    own = [f"(subpath {ws_ref})"]
    own += [f"(subpath {b.param(f'READ_EXTRA_{i}', p)})" for i, p in enumerate(extra)]
    own += [f"(subpath {ref})" for ref in write_refs if ref != ws_ref]
    if tmp_ref:
        own.append(f"(subpath {tmp_ref})")

    if profile.read_scope == STRICT:
        b.comment("""
Reads, strict scope: the system, the developer tools, Homebrew, and what this
command was granted. Everything else is unreadable, as on Linux where it is
not mounted.
""")
        filters = []
        for path in _STRICT_SYSTEM:
            inside = [x for x in _STRICT_EXCLUDED if is_under(x, path)]
            if inside:
                filters.append(f"(require-all (subpath {quote(path)}) (require-not "
                               f"{_any([f'(subpath {quote(x)})' for x in inside])}))")
            else:
                filters.append(f"(subpath {quote(path)})")
        filters += [f"(literal {quote(p)})" for p in _STRICT_SYSTEM_FILES]
        roots = [r for r in dict.fromkeys(canonical_macos_path(r) for r in profile.read_roots)
                 if r not in _STRICT_SYSTEM and r != ws and r not in extra]
        filters += [f"(subpath {b.param(f'READ_{i}', r)})" for i, r in enumerate(roots)]
        b.rule("allow", _READ_OPS, filters)
        b.comment("""
The directories above every readable root, metadata only: realpath() and
getcwd() stat each component, and Node's module resolution fails without it.
""")
        tops: list[str] = []
        for root in [*_STRICT_SYSTEM, *_STRICT_SYSTEM_FILES, *roots, ws, *extra, *writable,
                     *([tmp] if tmp else [])]:
            tops.extend(a for a in ancestors(root) if a not in tops)
        meta = ['(literal "/")', '(literal "/etc")', '(literal "/tmp")', '(literal "/var")']
        meta += [f"(literal {b.param(f'META_{i}', a)})" for i, a in enumerate(sorted(tops))]
        b.rule("allow", "file-read-metadata", meta)
    else:
        masked = ['(subpath "/dev")']
        if profile.mask_other_homes:
            masked += [f"(regex {quote('^/Users/[^/]+(/|$)')})",
                       f"(regex {quote('^/System/Volumes/Data/Users/[^/]+(/|$)')})"]
            if home != "/private/var/root":
                masked.append('(subpath "/private/var/root")')
            if home and is_under(home, "/Users") and home != "/Users":
                own.append(f"(subpath {b.param('HOME', home)})")
            own.append('(subpath "/Users/Shared")')
        b.comment("""
Reads, host scope: the machine as a program run by this user sees it, except
/dev (a terminal the user owns is readable, and reading it takes the
keystrokes of whoever is typing there) and other people's homes. Hidden
credentials are denied at the end of the profile.
""")
        b.rule("allow", _READ_OPS, [_form("require-not", [_any(masked)])])
    b.comment("""
The workspace, granted reads, writable roots and the scratch directory are
readable in every scope (a grant may sit inside a masked home).
""")
    b.rule("allow", _READ_OPS, own)
    b.blank()


def _writes(b: _Builder, *, writable: list[str], write_refs: list[str], tmp: str,
            tmp_ref: str, protected: list[str]) -> None:
    roots = [f"(subpath {ref})" for ref in write_refs]
    if tmp_ref:
        roots.append(f"(subpath {tmp_ref})")
    if not roots:
        b.comment("Writes: none (no writable root and no scratch directory).")
        b.blank()
        return
    grants = [w for w in [*writable, tmp] if w]

    def spelled(path: str) -> str:
        # The name below the writable root is the command's to spell.
        root = max((w for w in grants if is_under(path, w)), key=len, default="")
        return name_regex(path, len(root.rstrip("/")) if root else len(path))

    excluded = [f"(regex {quote('^' + spelled(p) + '(/|$)')})" for p in protected]
    tops: list[str] = []
    for path in protected:
        for a in ancestors(path):
            if a not in tops and any(is_under(a, w) for w in grants):
                tops.append(a)
    excluded += [f"(regex {quote('^' + spelled(a) + '$')})" for a in tops]
    b.comment("""
Writes: the workspace (in workspace-write), granted and toolchain scratch
roots, and this command's private TMPDIR. Not the host's /tmp: it is shared
with every other process and session of this user.
""")
    if excluded:
        b.comment("""
Protected metadata (.git/hooks, .git/config, .stockade, editor and agent
settings) is excluded from the grant, including its first creation: the
match is a regex on the path that takes every spelling APFS and HFS+ treat
as the same name (Unicode case folding, ligatures, HFS+'s ignorable code
points), because `mkdir .GIT` or a long-s `.stockade` makes the directory git and
stockade later read as `.git` and `.stockade`. Their
ancestors inside the writable roots are excluded as whole names: renaming
`.git` aside, editing the copy and renaming it back would change the hooks
without ever writing a protected path.
Hard links are granted nowhere: a link to .git/config made inside the
workspace would be a second, writable name for it.
""")
        b.rule("allow", "file-write*",
               [_form("require-all", [_any(roots), _form("require-not", [_any(excluded)])])])
    else:
        b.rule("allow", "file-write*", roots)
    b.blank()


def _devices(b: _Builder) -> None:
    b.comment("""
Devices. /dev/null and descriptor aliases (/dev/stdout is /dev/fd/1): a
failing `2>/dev/null` fails a command that did nothing wrong. /dev/tty is
allowed so that asking for it answers "no terminal" (the command runs in its
own session, without one) rather than an error tools treat as fatal.
""")
    b.rule("allow", "file-read* file-write* file-ioctl",
           ['(literal "/dev/null")', '(literal "/dev/tty")',
            f"(regex {quote('^/dev/fd/[0-9]+$')})"])
    b.rule("allow", "file-read*",
           ['(literal "/dev/zero")', '(literal "/dev/random")', '(literal "/dev/urandom")'])
    b.rule("allow", "file-read-metadata",
           ['(literal "/dev")', '(literal "/dev/stdin")', '(literal "/dev/stdout")',
            '(literal "/dev/stderr")', '(literal "/dev/fd")'])
    b.comment("""
Pseudo-terminals for tools that drive one (script, expect, pty-based test
runners): the multiplexer, and only the terminals this sandbox opened.
Another terminal of the same user would be writable, and writing escape
sequences into someone's open shell is a way out.
""")
    b.rule("allow", "pseudo-tty")
    b.rule("allow", "file-read* file-write* file-ioctl",
           ['(literal "/dev/ptmx")',
            f"(require-all (regex {quote('^/dev/ttys[0-9]+$')}) "
            '(extension "com.apple.sandbox.pty"))'])
    b.blank()


def _network(b: _Builder, kind: str, ports: tuple[int, ...], granted: list[str]) -> None:
    if kind == NetworkPolicy.ALL:
        b.comment("""
Network: all. Any IP destination, and listening (dev servers, test
fixtures). DNS goes through mDNSResponder, over its mach service and its
socket -- the one unix socket opened here, and it answers name queries only.
""")
        b.rule("allow", "network-outbound", ['(remote ip "*:*")'])
        b.rule("allow", "network-bind network-inbound", ['(local ip "*:*")'])
        b.comment("""
Name resolution, network configuration and certificate checks: mDNSResponder,
configd (Node's DNS, reachability), trustd (it fetches intermediates and OCSP
for its caller, so only here, where the command could fetch them itself), and
the routing-table sysctls getifaddrs reads.
""")
        b.rule("allow", "mach-lookup", [f"(global-name {quote(n)})" for n in _NETWORK_SERVICES])
        b.rule("allow", "sysctl-read",
               [f"(sysctl-name-prefix {quote(n)})" for n in _NETWORK_SYSCTL_PREFIXES])
        b.rule("allow", "network-outbound",
               ['(remote unix-socket (path-literal "/private/var/run/mDNSResponder"))'])
    elif kind == NetworkPolicy.HOSTS:
        b.comment("""
Network: through stockade's proxy only. The proxy decides which hosts; this
makes it the only way out, so a tool that ignores HTTPS_PROXY fails rather
than going around it. No DNS: the proxy resolves names.
""")
        b.rule("allow", "network-outbound", [f'(remote ip "localhost:{p}")' for p in ports])
    else:
        b.comment("Network: none. No rule lets a socket out; deny default holds.")
    b.comment("""
Unix sockets: closed, every one, unless granted by path. A socket is a door
to a process that is not confined -- the Docker daemon will mount / into a
container on request -- so macOS closes them all instead of listing the
known ones.
""")
    b.rule("allow", "network-outbound",
           [f"(remote unix-socket (path-literal {b.param(f'SOCKET_{i}', s)}))"
            for i, s in enumerate(granted)])
    b.blank()


def _hidden(b: _Builder, profile: Profile, *, own: list[str]) -> None:
    filters: list[str] = []
    for i, (path, kind) in enumerate(profile.hidden):
        real = canonical_macos_path(path)
        shape = "subpath" if kind == DIR else "literal"
        # What the profile shows back inside a hidden directory (toolchains'
        # settings in ~/.config, ~/.ssh's public names) is carved out of its deny,
        # and so are this command's own TMPDIR and writable roots: the session's
        # TMPDIR and cache layers live in stockade's hidden state directory, and
        # a deny over them refused every session command its own TMPDIR.
        back = [(canonical_macos_path(p), k) for p, k in profile.shown
                if kind == DIR and p.startswith(path.rstrip("/") + "/")]
        back += [(w, DIR) for w in own
                 if kind == DIR and w.startswith(real.rstrip("/") + "/")
                 and (w, DIR) not in back]
        for where, name in (("", real), ("_DATA", data_volume_alias(real))):
            if not name:
                continue
            deny = f"({shape} {b.param(f'HIDDEN_{i}{where}', name)})"
            if back:
                shown = [f"({'subpath' if k == DIR else 'literal'} "
                         f"{b.param(f'SHOWN_{i}_{j}{where}', name + p[len(real):])})"
                         for j, (p, k) in enumerate(back)]
                deny = _form("require-all", [deny, _form("require-not", [_any(shown)])])
            filters.append(deny)
    if not filters:
        return
    b.comment("""
Hidden credentials, last and as denies, so they win over every grant above
whichever way rule order is read: cloud and registry tokens, keyrings, ssh
private keys (all of ~/.ssh when the agent socket is granted). Named under the
data volume too.
""")
    b.rule("deny", "file-read* file-write* file-map-executable process-exec", filters)


def _other_scratch(b: _Builder, tmp: str, *, keep: list[str]) -> None:
    """Other commands' `stockade-*` TMPDIRs beside this one's, denied, but never
    this command's own TMPDIR or what it was given (`keep`: the workspace and
    writable roots, which a person may well have named `stockade-*` there).

    They sit in the user's per-user temporary directory, which the host scope
    reads, and hold what those commands wrote: another session's work.
    """
    parent, _, name = tmp.rpartition("/")
    if not name.startswith("stockade-") or not parent:
        return
    filters = []
    for spelling in (parent, data_volume_alias(parent)):
        if spelling:
            sibling = "^" + regex_literal(spelling) + "/stockade-[^/]+(/|$)"
            filters.append(f"(regex {quote(sibling)})")
    b.comment("""
Other commands' private TMPDIRs beside this one: what they wrote is theirs.
""")
    own = ["(subpath (param \"TMP\"))"]
    tmp_alias = data_volume_alias(tmp)
    if tmp_alias:
        own.append(f"(subpath {b.param('TMP_DATA', tmp_alias)})")
    for i, path in enumerate(dict.fromkeys(keep)):
        own.append(f"(subpath {b.param(f'KEEP_{i}', path)})")
        alias = data_volume_alias(path)
        if alias:
            own.append(f"(subpath {b.param(f'KEEP_{i}_DATA', alias)})")
    b.rule("deny", "file-read* file-write* file-map-executable process-exec",
           [_form("require-all", [_any(filters), _form("require-not", [_any(own)])])])


# -- the launch ------------------------------------------------------------------

# setrlimit from the child, because posix_spawn has no hook that runs code
# between fork and exec. The shell is already inside the sandbox, and `exec`
# leaves no trace of it. If macOS refuses the limit (it rejects values below
# the address space it reserves), the command does not run: a ceiling asked
# for and silently missing is a promise not kept.
_MEMORY_LIMIT = (
    'ulimit -v "$0" || { echo "stockade: macOS refused an address-space limit of $0 KiB '
    '(RLIMIT_AS); run without max_memory_mb" >&2; exit 125; }; exec "$@"'
)


def command_argv(argv: list[str], profile: Profile) -> list[str]:
    """What sandbox-exec runs: the command in its cwd, under the memory ceiling (pure)."""
    inner = chdir_argv(profile.cwd, list(argv))
    if profile.max_memory_mb:
        inner = ["/bin/sh", "-c", _MEMORY_LIMIT, str(profile.max_memory_mb * 1024), *inner]
    return inner


def sandbox_exec_argv(text: str, params: Mapping[str, str], inner: list[str]) -> list[str]:
    """`/usr/bin/sandbox-exec -p TEXT -DNAME=VALUE ... -- inner` (pure)."""
    return [SANDBOX_EXEC, "-p", text, *(f"-D{k}={v}" for k, v in params.items()), "--", *inner]


def command_env(profile: Profile, *, scratch: str = "",
                proxy_ports: Iterable[int] = ()) -> dict[str, str]:
    """The command's environment on macOS (pure)."""
    env = scrub_env(profile.env)
    if scratch:
        env["TMPDIR"] = scratch
    ports = _check_ports(proxy_ports)
    if profile.network.kind == NetworkPolicy.HOSTS and ports:
        from ...proxy.env import proxy_env

        env.update(proxy_env("127.0.0.1", ports[0], socks_port=ports[0],
                             secret=profile.proxy.secret if profile.proxy else None,
                             grants=profile.network.hosts))
    return env


def check_available(platform: str, is_executable: Callable[[str], bool]) -> None:
    """Raise `SandboxUnavailable` unless this is macOS with /usr/bin/sandbox-exec."""
    if platform != "darwin":
        raise SandboxUnavailable(
            f"the seatbelt backend needs macOS, and this is {platform}. "
            'On Linux use backend = "bubblewrap"'
        )
    if not is_executable(SANDBOX_EXEC):
        raise SandboxUnavailable(
            f"{SANDBOX_EXEC} is missing or not executable. stockade runs Seatbelt only "
            "through that path, never one found on PATH; it ships with macOS, so its absence "
            "means a modified system. Restore it (reinstall macOS), or run in full-access "
            'mode (backend = "none") knowing that commands then run unconfined'
        )


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


class SeatbeltLaunch(Launch):
    """A launch that remembers its profile: Seatbelt's refusals name a path or
    an operation, and only the profile says which rule that was."""

    __slots__ = ("profile", "scratch")

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, *,
                 profile: Profile, scratch: str,
                 cleanup: Callable[[Launch], None] | None = None) -> None:
        super().__init__(argv, env, cwd, cleanup=cleanup)
        self.profile = profile
        self.scratch = scratch


class SeatbeltDriver(Driver):
    """Commands confined by a per-command Seatbelt profile."""

    name = "seatbelt"

    @classmethod
    def from_config(cls, config: Any, *, env: Mapping[str, str], workspace: str,
                    state_dir: str, **overrides: Any) -> SeatbeltDriver:
        # Reads no Linux key: one configuration file serves a team's Linux
        # and macOS machines alike, and the registry accepts every
        # backend's keys on every platform.
        from ..base import accepted

        return cls(env=env, workspace=workspace, **accepted(cls, overrides))

    def __init__(self, *, env: Mapping[str, str] | None = None, workspace: str = "",
                 proxy_ports: Iterable[int] = ()) -> None:
        self._env = dict(env) if env is not None else dict(os.environ)
        self._workspace = workspace
        self._proxy_ports = _check_ports(proxy_ports)

    def available(self) -> None:
        check_available(sys.platform, _is_executable)

    def prepare(self, argv: list[str], profile: Profile, *,
                proxy_ports: Iterable[int] | None = None) -> Launch:
        if proxy_ports is None:
            # The session's proxy port, when the pipeline started one for it.
            proxy_ports = ((profile.proxy.port,) if profile.proxy and profile.proxy.port
                           else self._proxy_ports)
        ports = _check_ports(proxy_ports)
        scratch, created = self._scratch(profile)
        try:
            text, params = seatbelt_profile(profile, proxy_ports=ports, scratch=scratch)
            args = sandbox_exec_argv(text, params, command_argv(argv, profile))
            env = command_env(profile, scratch=scratch, proxy_ports=ports)
        except BaseException:
            _remove(created)
            raise
        if not created:
            return SeatbeltLaunch(args, env, profile.cwd, profile=profile, scratch=scratch)

        def cleanup(_launch: object = None) -> None:
            _remove(created)

        return SeatbeltLaunch(args, env, profile.cwd, cleanup=cleanup, profile=profile,
                              scratch=scratch)

    def explain_run(self, launch: Launch, stderr: bytes) -> str | None:
        """The rule that refused, named from the profile this launch was built for."""
        if not isinstance(launch, SeatbeltLaunch):
            return self.explain_denial(stderr)
        from .diagnose import explain_denial

        return explain_denial(launch.profile, stderr, scratch=launch.scratch)

    def _scratch(self, profile: Profile) -> tuple[str, str]:
        """The command's TMPDIR, and the directory to remove afterwards ("" for none).

        Linux gives every command a fresh /tmp; macOS cannot remount /tmp, so
        the equivalent is a directory of its own that TMPDIR names.
        """
        if profile.session_tmp:
            return canonical_macos_path(os.path.realpath(profile.session_tmp)), ""
        import tempfile

        base = os.path.realpath(self._env.get("TMPDIR") or "/tmp")
        try:
            made = tempfile.mkdtemp(prefix="stockade-", dir=base)
        except OSError as exc:
            raise SandboxUnavailable(
                f"cannot create the command's temporary directory in {base}: {exc.strerror}. "
                "Set TMPDIR to a writable directory"
            ) from exc
        return canonical_macos_path(made), made


def _remove(path: str) -> None:
    if path:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
