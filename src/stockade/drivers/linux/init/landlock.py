"""Landlock: the filesystem, TCP and IPC-scope rules the in-sandbox init applies.

bwrap already decides what exists in the sandbox; Landlock decides, inside
that view, what may be done to it, and keeps holding if a mount is ever
undone. `LandlockRules` is pure (paths and ports in, a plan out), so what a
kernel of any ABI would enforce is tested without one; `apply_landlock`
makes the system calls.

Loaded two ways, like `seccomp.py`: as a package module and as a top-level
module of the init, which pays for every import on every command. So the
only imports are the `posix` built-in and, for the default syscall binding,
`seccomp.py` (the init passes its own binding instead) -- not even
`__future__`, which is a module like any other; forward references are quoted.
"""

import posix

TYPE_CHECKING = False  # typing costs the init 3 ms; mypy treats this name as True
if TYPE_CHECKING:
    from .seccomp import Syscall

#: The highest ABI whose rights this module knows. A newer kernel is used at
#: this ABI: a right this code cannot name cannot be granted correctly.
ABI_KNOWN = 7

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same on every arch
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FS_ALL = (1 << 16) - 1
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# The rights a rule on a non-directory may carry; any other is EINVAL.
FS_FILE = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

#: Every right stockade asks for, with the ABI that introduced it: the
#: source of both the handled masks and the report of what a kernel lacks.
RIGHTS: tuple[tuple[str, int, int], ...] = (
    ("fs.refer", FS_REFER, 2),
    ("fs.truncate", FS_TRUNCATE, 3),
    ("net.bind_tcp", NET_BIND_TCP, 4),
    ("net.connect_tcp", NET_CONNECT_TCP, 4),
    ("fs.ioctl_dev", FS_IOCTL_DEV, 5),
    ("scope.abstract_unix_socket", SCOPE_ABSTRACT_UNIX_SOCKET, 6),
    ("scope.signal", SCOPE_SIGNAL, 6),
)

SCOPES = {"abstract-unix-socket": SCOPE_ABSTRACT_UNIX_SOCKET, "signal": SCOPE_SIGNAL}

ENOENT, ENOTDIR, ENOSYS, EOPNOTSUPP = 2, 20, 38, 95


def fs_handled(abi: int) -> int:
    """Filesystem rights a ruleset may handle at `abi`; a right the kernel lacks is EINVAL."""
    if abi < 1:
        return 0
    mask = FS_ALL
    for name, bit, since in RIGHTS:
        if name.startswith("fs.") and since > abi:
            mask &= ~bit
    return mask


def net_handled(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scope_handled(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class LandlockReport:
    """What Landlock enforced, for the audit record and `stockade doctor`.

    `abi` is the ABI the ruleset was built for (0: no Landlock),
    `kernel_abi` what the kernel reported, `dropped` the rights stockade
    wanted that this kernel cannot enforce, `skipped` the rule paths that did
    not exist when the rules were applied, `reason` why nothing was
    enforced when `enforced` is false.
    """

    __slots__ = ("abi", "dropped", "enforced", "kernel_abi", "reason", "skipped")

    def __init__(self, *, abi: int, kernel_abi: int, enforced: bool, dropped: tuple[str, ...],
                 skipped: tuple[str, ...] = (), reason: str = "") -> None:
        self.abi = abi
        self.kernel_abi = kernel_abi
        self.enforced = enforced
        self.dropped = dropped
        self.skipped = skipped
        self.reason = reason

    def to_json(self) -> dict[str, object]:
        return {"abi": self.abi, "kernel_abi": self.kernel_abi, "enforced": self.enforced,
                "dropped": list(self.dropped), "skipped": list(self.skipped),
                "reason": self.reason}

    def __repr__(self) -> str:
        return f"LandlockReport({self.to_json()!r})"


class LandlockRules:
    """The rule set, decided: read paths, write paths, TCP ports and IPC scopes.

    `restrict_tcp` handles TCP bind and connect, so only the listed ports
    are allowed (none listed: no TCP at all). Paths are as seen inside the
    sandbox; a path in both lists gets the union.
    """

    __slots__ = ("read", "restrict_tcp", "scopes", "tcp_bind", "tcp_connect", "write")

    def __init__(self, read: tuple[str, ...] | list[str] = (),
                 write: tuple[str, ...] | list[str] = (), *,
                 restrict_tcp: bool = True, tcp_connect: tuple[int, ...] | list[int] = (),
                 tcp_bind: tuple[int, ...] | list[int] = (),
                 scopes: tuple[str, ...] | list[str] = tuple(SCOPES)) -> None:
        for scope in scopes:
            if scope not in SCOPES:
                raise ValueError(f"unknown Landlock scope {scope!r}: choose from "
                                 f"{', '.join(SCOPES)}")
        for path in (*read, *write):
            if not path.startswith("/"):
                # Relative to whatever directory the init happens to run in.
                raise ValueError(f"Landlock rule paths must be absolute: {path!r}")
        for port in (*tcp_connect, *tcp_bind):
            if not 0 <= port <= 65535:
                raise ValueError(f"TCP port {port} is out of range")
        self.read = tuple(dict.fromkeys(read))
        self.write = tuple(dict.fromkeys(write))
        self.restrict_tcp = restrict_tcp
        self.tcp_connect = tuple(sorted(set(tcp_connect)))
        self.tcp_bind = tuple(sorted(set(tcp_bind)))
        self.scopes = tuple(s for s in SCOPES if s in scopes)

    def to_json(self) -> dict[str, object]:
        return {"read": list(self.read), "write": list(self.write),
                "restrict_tcp": self.restrict_tcp, "tcp_connect": list(self.tcp_connect),
                "tcp_bind": list(self.tcp_bind), "scopes": list(self.scopes)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "LandlockRules":
        def strings(key: str) -> list[str]:
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"landlock.{key} must be a list of strings")
            return value

        def ports(key: str) -> list[int]:
            value = data.get(key, [])
            if not isinstance(value, list) or not all(type(v) is int for v in value):
                raise ValueError(f"landlock.{key} must be a list of port numbers")
            return value

        restrict = data.get("restrict_tcp", True)
        if not isinstance(restrict, bool):
            raise ValueError("landlock.restrict_tcp must be true or false")
        return cls(strings("read"), strings("write"), restrict_tcp=restrict,
                   tcp_connect=ports("tcp_connect"), tcp_bind=ports("tcp_bind"),
                   scopes=strings("scopes") if "scopes" in data else tuple(SCOPES))

    def path_rules(self) -> list[tuple[str, int]]:
        """(path, rights) in a stable order, before masking to a kernel's ABI."""
        rules: dict[str, int] = {}
        for path in self.read:
            rules[path] = rules.get(path, 0) | FS_READ
        for path in self.write:
            rules[path] = rules.get(path, 0) | FS_ALL
        return list(rules.items())

    def scope_mask(self) -> int:
        mask = 0
        for scope in self.scopes:
            mask |= SCOPES[scope]
        return mask

    def wanted(self) -> list[str]:
        """Names of the ABI-dependent rights this rule set asks for."""
        out = []
        scopes = self.scope_mask()
        for name, bit, _since in RIGHTS:
            if (name.startswith("fs.")
                    or (name.startswith("net.") and self.restrict_tcp)
                    or (name.startswith("scope.") and scopes & bit)):
                out.append(name)
        return out

    def plan(self, kernel_abi: int, reason: str = "") -> LandlockReport:
        """The report `apply_landlock` would return on a kernel of `kernel_abi` (pure)."""
        abi = min(kernel_abi, ABI_KNOWN)
        since = {name: version for name, _bit, version in RIGHTS}
        if abi < 1:
            return LandlockReport(abi=0, kernel_abi=kernel_abi, enforced=False,
                                  dropped=("landlock",),
                                  reason=reason or "this kernel has no Landlock")
        dropped = tuple(name for name in self.wanted() if since[name] > abi)
        return LandlockReport(abi=abi, kernel_abi=kernel_abi, enforced=True, dropped=dropped)


def _default_syscall() -> "Syscall":
    from .seccomp import libc_syscall  # the init passes its own binding and never gets here

    return libc_syscall()


def unavailable_reason(errno: int) -> str:
    if errno == EOPNOTSUPP:
        return ("Landlock is built into this kernel but not enabled: add landlock to the "
                "lsm= kernel boot parameter")
    if errno == ENOSYS:
        return "this kernel has no Landlock (it needs Linux 5.13 with CONFIG_SECURITY_LANDLOCK)"
    return f"Landlock is unavailable: {posix.strerror(errno)}"


def landlock_abi(syscall: "Syscall | None" = None) -> int:
    """The running kernel's Landlock ABI; 0 when it has none or has it disabled."""
    sc = syscall or _default_syscall()
    try:
        return sc(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except OSError:
        return 0


def apply_landlock(rules: LandlockRules, syscall: "Syscall | None" = None) -> LandlockReport:
    """Restrict the calling process (and its future children) to `rules`.

    no_new_privs must already be set. A kernel without Landlock is not an
    error -- the report says so and the caller decides; any failure after
    Landlock answered raises OSError, because a half-built ruleset must
    never be mistaken for an enforced one.
    """
    sc = syscall or _default_syscall()
    try:
        kernel_abi = sc(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except OSError as exc:
        return rules.plan(0, unavailable_reason(exc.errno or 0))
    report = rules.plan(kernel_abi)
    abi = report.abi
    handled_fs = fs_handled(abi)
    handled_net = net_handled(abi) if rules.restrict_tcp else 0
    # struct landlock_ruleset_attr grew with the ABI; an older kernel
    # rejects a struct longer than it knows unless the tail is zero, so
    # send exactly the fields it has.
    attr = handled_fs.to_bytes(8, "little")
    if abi >= 4:
        attr += handled_net.to_bytes(8, "little")
    if abi >= 6:
        attr += (rules.scope_mask() & scope_handled(abi)).to_bytes(8, "little")
    ruleset = sc(SYS_CREATE_RULESET, attr, len(attr), 0)
    skipped: list[str] = []
    try:
        for path, rights in rules.path_rules():
            try:
                fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (ENOENT, ENOTDIR):
                    # bwrap's --bind-try leaves an optional root out when the
                    # host lacks it; there is nothing to grant on.
                    skipped.append(path)
                    continue
                raise OSError(exc.errno, f"cannot open {path} for a Landlock rule: "
                                         f"{exc.strerror}") from None
            try:
                access = rights & handled_fs
                if posix.fstat(fd).st_mode & 0o170000 != 0o040000:
                    access &= FS_FILE
                beneath = access.to_bytes(8, "little") + fd.to_bytes(4, "little", signed=True)
                sc(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, beneath, 0)
            except OSError as exc:
                raise OSError(exc.errno, f"Landlock rule for {path} failed: "
                                         f"{exc.strerror}") from None
            finally:
                posix.close(fd)
        if handled_net:
            for rights, ports in ((NET_CONNECT_TCP, rules.tcp_connect),
                                  (NET_BIND_TCP, rules.tcp_bind)):
                for port in ports:
                    net = rights.to_bytes(8, "little") + port.to_bytes(8, "little")
                    sc(SYS_ADD_RULE, ruleset, RULE_NET_PORT, net, 0)
        try:
            sc(SYS_RESTRICT_SELF, ruleset, 0)
        except OSError as exc:
            hint = " (no_new_privs is not set)" if exc.errno == 1 else ""
            raise OSError(exc.errno, f"landlock_restrict_self failed: {exc.strerror}{hint}"
                          ) from None
    finally:
        posix.close(ruleset)
    report.skipped = tuple(skipped)
    return report
