"""The body of stockade-init, the kernel layers behind bubblewrap, applied inside it.

bwrap runs `python -I -S init.py CONFIG -- ARGV...` as the sandbox's first
program, and init.py calls `main` here. In order: no_new_privs, Landlock,
seccomp, then a check that no capability and no stray file descriptor
survived, then execve(ARGV). Each layer must be in place before the next,
and all before the command's first instruction, so nothing is optional or
lazy: on any failure the init refuses with one `stockade-init: ...` line on
stderr.

Exit statuses are env(1)'s: 125 the init refused, 126 the command was found
but could not be executed, 127 it was not found.

This runs before every command, so it imports only built-ins, `landlock`
and `seccomp` (as top-level modules: init.py put this directory on the
path), never the stockade package, and not even `__future__`. The host side, `layers.py`, writes
the CONFIG read here.
"""

import posix
import sys
from time import perf_counter

TYPE_CHECKING = False  # typing costs the init 3 ms; mypy treats this name as True

if TYPE_CHECKING or __package__:  # imported as part of the package (tests, the host)
    from .initschema import PACKED_ARGV, config_problem
else:
    from initschema import PACKED_ARGV, config_problem  # the init: a sibling module
if TYPE_CHECKING:
    import _socket  # local annotations only: never evaluated at run time

    from .landlock import LandlockRules
    from .seccomp import Syscall

REFUSED, CANNOT_EXECUTE, NOT_FOUND = 125, 126, 127
EPERM, ENOENT, ESRCH, ENOEXEC, EACCES, ENOTDIR, EINVAL, ELOOP = 1, 2, 3, 8, 13, 20, 22, 40
SIGKILL = 9
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT = 1, 24, 28, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each
# with its lock: uid 0 gains no capability from execve, now or ever.
SECURE_NOROOT_ALL = 0xEF
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class Refusal(Exception):
    """The command must not run; the message is the reason."""


_INVALID = object()


def scan_json(text: str) -> object:
    """`text` as JSON through the C scanner behind `json`, or `_INVALID`.

    `import json` pulls in re, enum and functools: 10 ms on a small VM, more
    than this whole init may cost. The scanner in `_json` is the same parser.
    """
    try:
        from _json import make_scanner
    except ImportError:  # an interpreter built without the accelerator
        import json

        try:
            return json.loads(text)
        except ValueError:
            return _INVALID

    class Context:
        strict = True
        object_hook = object_pairs_hook = parse_constant = None
        parse_float, parse_int = float, int

    try:
        value, end = make_scanner(Context())(text, 0)  # type: ignore[arg-type]
    except Exception:
        return _INVALID
    return value if end == len(text) else _INVALID


def parse_config(text: str) -> dict[str, object]:
    """The config, refused unless it is this version's schema."""
    value = scan_json(text)
    if value is _INVALID:
        raise Refusal("the config is not valid JSON")
    problem = config_problem(value)
    if problem or not isinstance(value, dict):
        raise Refusal(problem or "the config is not an object")
    return value


def read_proc(path: str) -> str:
    """A small /proc file, or Refusal naming it."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            return posix.read(fd, 65536).decode("ascii", "replace")
        finally:
            posix.close(fd)
    except OSError as exc:
        raise Refusal(f"cannot read {path}: {exc.strerror}") from None


def status_fields() -> dict[str, str]:
    fields = {}
    for line in read_proc("/proc/self/status").splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def stdio_files() -> list[str]:
    """/proc/self/fd/N for each of stdin, stdout, stderr that is a regular file.

    `echo x > /dev/stdout` reopens whatever fd 1 points at. When that is a
    log file outside the write roots, Landlock would refuse the command a
    file it is already writing through the descriptor; a rule on exactly
    that inode gives nothing new. Directories never get one: a rule on a
    directory would grant everything beneath it.
    """
    files = []
    for fd in (0, 1, 2):
        try:
            if posix.fstat(fd).st_mode & 0o170000 == 0o100000:
                files.append(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed: nothing to reopen
    return files


def verify(keep_fds: set[int]) -> None:
    """What the command inherits: no capability, no descriptor it was not meant to get.

    A capability in the permitted set survives execve and undoes every
    layer; an inherited descriptor is a door bwrap's view never showed (a
    directory fd opened on the host reaches the whole host filesystem by
    openat). Close-on-exec descriptors are not inherited, so they pass.
    """
    fields = status_fields()
    for name in ("CapEff", "CapPrm", "CapAmb"):
        if int(fields.get(name, "1"), 16):
            raise Refusal(f"the sandbox still holds capabilities ({name} {fields[name]}); "
                          "bwrap must run with --cap-drop ALL or as an unprivileged user")
    if fields.get("NoNewPrivs") != "1" or fields.get("Seccomp") != "2":
        raise Refusal("no_new_privs or the seccomp filter did not take effect")
    for name in posix.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep_fds:
            continue
        try:
            inheritable = posix.get_inheritable(fd)
        except OSError:
            continue  # the descriptor listdir itself used, closed by now
        if not inheritable:
            continue
        try:
            target = posix.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = "unknown"
        raise Refusal(f"file descriptor {fd} ({target}) would leak into the sandbox")


def check_loopback_only() -> None:
    """Refuse unless this network namespace has no interface but `lo`.

    Under bubblewrap the command gets IP sockets with network none and hosts
    (seccomp's loopback and proxy-routed modes, no Landlock TCP rule) because
    its namespace reaches nothing: that is checked here, not assumed, so a
    bwrap that left out --unshare-net (a wrapper, a changed default) cannot
    quietly hand it the host's network. /proc/net/dev is this namespace's
    list, through the /proc bwrap mounted for it.
    """
    data = read_proc("/proc/self/net/dev")
    names = sorted(line.partition(":")[0].strip() for line in data.splitlines()[2:]
                   if ":" in line)
    if names != ["lo"]:
        raise Refusal("the sandbox's network namespace is not its own (interfaces: "
                      f"{', '.join(names) or 'none'}; only lo was expected): bwrap must run "
                      "with --unshare-net")


def check_own_pid_namespace() -> None:
    """Refuse unless this process is the first child of its PID namespace's pid 1.

    bwrap (without --as-pid-1) is pid 1 of the namespace it made and the init
    its first child, pid 2; nothing else runs there yet. The command may
    trace its own processes only on that condition (see seccomp.TRACE_SYSCALLS).
    """
    if posix.getppid() != 1 or posix.getpid() != 2:
        raise Refusal(f"the sandbox's PID namespace is not its own (pid {posix.getpid()}, "
                      f"parent {posix.getppid()}; expected 2 and 1): bwrap must run with "
                      "--unshare-pid")


def die_with_parent(sc: "Syscall", table: dict[str, int], parent: int) -> None:
    """SIGKILL when stockade goes, as bwrap's --die-with-parent; survives execve.

    Checked after it is set: a parent that died a moment earlier has left
    this process orphaned, and the signal would never come.
    """
    sc(table["prctl"], PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if posix.getppid() != parent:
        raise Refusal("stockade exited while the sandbox was starting")


def check_lifeline(fd: int) -> None:
    """Refuse if stockade has gone, and have the sandbox end whenever it goes.

    The pipe's write end is stockade's alone, so end-of-file means it is
    gone. bwrap arms --die-with-parent a moment after it starts -- the outer
    bwrap after its clone, its pid 1 only after it forked this process -- so
    a stockade killed within that moment left bwrap and the command running
    with no one to stop them. A stockade already gone is refused here. One
    killed a little later, while bwrap's pid 1 still waited for the CPU
    (seen about once in a full test run on two busy cores), got past that
    check: so a watcher keeps reading the pipe for the whole run and kills
    this process, the command by then, when it hangs up; bwrap's pid 1 then
    exits and the PID namespace takes everything else with it.

    The watcher is a grandchild that pid 1 adopts, never a child of the
    command: a program that waits for all of its children must not find one
    it did not start. Only under bubblewrap, whose PID namespace ends with
    the command: nothing else passes a lifeline.
    """
    posix.set_blocking(fd, False)
    try:
        gone = posix.read(fd, 1) == b""
    except BlockingIOError:
        gone = False  # open and silent: stockade is alive
    if gone:
        posix.close(fd)
        raise Refusal("stockade exited while the sandbox was starting")
    target = posix.getpid()
    middle = posix.fork()
    if middle == 0:
        try:
            if posix.fork() == 0:
                _watch_lifeline(fd, target)
        finally:
            posix._exit(0)
    posix.close(fd)
    posix.waitpid(middle, 0)


def _watch_lifeline(fd: int, target: int) -> None:
    # Nothing but the lifeline: a copy of the command's stdout here would keep
    # the pipe open past the command, a copy of the park socket would hide a
    # parked sandbox's death from stockade.
    posix.closerange(0, fd)
    posix.closerange(fd + 1, 4096)
    posix.set_blocking(fd, True)
    while True:
        try:
            if posix.read(fd, 1) == b"":
                break
        except InterruptedError:
            continue
        except OSError:
            break
    try:
        posix.kill(target, SIGKILL)
    except OSError:
        pass  # already gone


def drop_capabilities(sc: "Syscall", table: dict[str, int]) -> None:
    """Root without bubblewrap keeps every capability; give them all up for good.

    bwrap's --cap-drop ALL does this in the other backend. The bounding set
    and the securebits need CAP_SETPCAP, which a trimmed container root may
    lack: then no_new_privs and the empty sets still hold, and `verify`
    refuses if anything survived.
    """
    fields = status_fields()
    if not any(int(fields.get(n, "0"), 16) for n in ("CapEff", "CapPrm", "CapInh", "CapAmb")):
        return  # an ordinary user: nothing to give up
    prctl = table["prctl"]
    try:
        sc(prctl, PR_SET_SECUREBITS, SECURE_NOROOT_ALL, 0, 0, 0)
    except OSError as exc:
        if exc.errno != EPERM:
            raise
    for cap in range(64):
        try:
            sc(prctl, PR_CAPBSET_DROP, cap, 0, 0, 0)
        except OSError as exc:
            if exc.errno in (EINVAL, EPERM):
                break  # past the kernel's last capability, or no CAP_SETPCAP
            raise
    sc(prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    # struct __user_cap_header_struct {version, pid 0 = self}, then two
    # {effective, permitted, inheritable} words, all zero.
    header = LINUX_CAPABILITY_VERSION_3.to_bytes(4, "little") + bytes(4)
    sc(table["capset"], header, bytes(24))


def start_reaper(sc: "Syscall", parent: int, done_fd: int = -1) -> None:
    """Leave behind a process that kills the command's whole tree once it exits.

    Without a PID namespace a `setsid` double-forked daemon outlives the
    command's process group. So this process first enters a Landlock domain
    that only scopes signals (ABI 6), then forks the reaper into it and
    detaches it (own session: the group kill that ends the command misses
    it); the command's own Landlock domain, applied next, is nested inside.
    Signal scoping then cuts both ways: the command cannot signal the
    reaper (outside its domain), and the reaper's kill(-1, SIGKILL) reaches
    exactly the processes in its domain or nested ones -- the command and
    everything it ever started, wherever they were reparented -- and nothing
    else on the machine. kill(-1) walks the task list under the lock fork
    needs, so nothing forks its way out of it. `done_fd`, when given, is
    held open by the reaper alone: stockade reads end-of-file on it once the
    reaper is done, and only then restores what the command may have changed.
    """
    if TYPE_CHECKING or __package__:  # imported as part of the package (tests)
        from . import landlock
    else:
        import landlock  # the init: a sibling top-level module, loaded by main already
    if landlock.landlock_abi(sc) < 6:
        raise Refusal("the reaper needs Landlock ABI 6 (signal scoping)")
    # Landlock denies reparenting (a rename or link into another directory)
    # in every layer of a domain that handles any filesystem right, unless
    # that layer grants `refer`, even a layer that handles none (the kernel
    # handles `refer` implicitly). Without the rule below, every
    # `os.rename("a/b/f", "a/f")` under the command's own layer failed with
    # EXDEV: setuptools' wheel build, pip, git's packs. So this layer handles
    # `refer` and grants it everywhere; the command's layer decides.
    refer = landlock.FS_REFER.to_bytes(8, "little")
    attr = refer + bytes(8) + landlock.SCOPE_SIGNAL.to_bytes(8, "little")
    ruleset = sc(landlock.SYS_CREATE_RULESET, attr, len(attr), 0)
    try:
        root = posix.open("/", posix.O_PATH | posix.O_CLOEXEC)
        try:
            sc(landlock.SYS_ADD_RULE, ruleset, landlock.RULE_PATH_BENEATH,
               refer + root.to_bytes(4, "little", signed=True), 0)
        finally:
            posix.close(root)
        sc(landlock.SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        posix.close(ruleset)
    # The proof that kill(-1) will stay inside: stockade -- same uid, alive
    # (die_with_parent just checked), outside this domain -- must be out of
    # reach of even signal 0. Anything else and the command does not run.
    try:
        posix.kill(parent, 0)
        raise Refusal("Landlock signal scoping is not in force; the reaper cannot be used")
    except OSError as exc:
        if exc.errno != EPERM:
            raise Refusal(f"cannot verify Landlock signal scoping: {exc.strerror}") from None
    command = posix.getpid()
    child = posix.fork()
    if child:
        _pid, status = posix.waitpid(child, 0)
        if status:
            raise Refusal("the reaper did not start")
        return
    try:
        pidfd = posix.pidfd_open(command)
        posix.setsid()
        if posix.fork():
            posix._exit(0)
        reap(pidfd, done_fd)
    finally:
        posix._exit(1)


def reap(pidfd: int, done_fd: int = -1) -> None:
    """The reaper's body: wait for the command, then kill its domain."""
    null = posix.open("/dev/null", posix.O_RDWR)
    for fd in (0, 1, 2):
        posix.dup2(null, fd)  # never hold the pipes stockade reads to their end
    for name in posix.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) not in (pidfd, done_fd):
            try:
                posix.close(int(name))
            except OSError:
                pass
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while not poller.poll():
        pass
    # Scoping was proven before this process existed (start_reaper), and a
    # domain cannot be left. One call is the whole job (see start_reaper);
    # the second costs nothing and covers a kernel that let a fork slip by.
    for _ in range(2):
        try:
            posix.kill(-1, SIGKILL)
        except OSError:
            pass


def start_publish_relay(sc: "Syscall", arch: str, publish: dict[str, object]) -> None:
    """Leave behind the relay of published ports (bridge.relay_published).

    Forked before the command's Landlock and seccomp: under network none
    they forbid the inet socket it dials on the sandbox's own loopback, and
    what the command is allowed must not decide whether the person's
    forward works. It is no freer for that: not dumpable and under
    no_new_privs already (the command can neither trace it nor read its
    descriptors in /proc), it holds nothing but its control socket, and it
    enters a Landlock domain of no file access and TCP connect to the
    published ports only, and the seccomp filter of an unrestricted
    network inside this namespace, whose only interface is `lo`. A
    grandchild that bwrap's pid 1 adopts, like the lifeline's watcher, so
    the command never finds a child it did not start; the PID namespace
    ends it with the command.
    """
    if TYPE_CHECKING or __package__:  # imported as part of the package (tests)
        from . import bridge, landlock, seccomp
    else:
        import bridge  # the init: sibling top-level modules
        import landlock
        import seccomp
    control = publish.get("fd")
    ports = publish.get("ports")
    if type(control) is not int or not isinstance(ports, list) or not all(
            type(p) is int for p in ports):
        raise Refusal("the config's publish entry needs fd and ports")
    middle = posix.fork()
    if middle == 0:
        try:
            if posix.fork() == 0:
                posix.closerange(0, control)
                posix.closerange(control + 1, 4096)
                landlock.apply_landlock(landlock.LandlockRules(
                    (), (), restrict_tcp=True, tcp_connect=ports), sc)
                seccomp.install_seccomp(seccomp.compile_seccomp(seccomp.UNRESTRICTED, arch),
                                        sc, arch)
                bridge.relay_published(control, ports)
        finally:
            posix._exit(0)
    posix.close(control)
    _pid, status = posix.waitpid(middle, 0)
    if status:
        raise Refusal("the relay of published ports did not start")


def await_command(fd: int) -> list[str]:
    """Park: say ready on `fd`, then block until stockade sends the command's argv.

    Every layer is already in place, so what waits here is as confined as
    the command it will become; only the argv is new (the profile, and with
    it the environment and the working directory, matched when stockade
    chose this sandbox). With it comes the host's view of each path mounted
    over a writable root, checked here (`view_problem`) and answered `G` (go)
    or `N` before anything runs. `fd` is a socket whose other end only
    stockade holds: its end-of-file means stockade is gone or dropped this
    sandbox, and the init refuses rather than run anything. It is closed
    before `verify`, so the command never holds it.
    """
    problem = ""
    try:
        posix.write(fd, b"R")
        chunks = []
        while True:
            data = posix.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
        message = b"".join(chunks)
        if not message:
            raise Refusal("stockade dropped this parked sandbox")
        try:
            value = parse_dispatch(message.decode("utf-8", "surrogateescape"))
        except UnicodeDecodeError:
            value = None
        if value is None:
            raise Refusal("the parked sandbox received no valid command")
        argv, view = value
        problem = view_problem(view)
        posix.write(fd, b"N" if problem else b"G")
    finally:
        posix.close(fd)
    if problem:
        raise Refusal(problem)
    return argv


def parse_dispatch(text: str) -> "tuple[list[str], list[tuple[str, bool, int, int]]] | None":
    """`{"argv": [str, ...], "view": [[path, same, dev, ino], ...]}`, or None."""
    value = scan_json(text)
    if not isinstance(value, dict) or set(value) != {"argv", "view"}:
        return None
    argv, view = value["argv"], value["view"]
    if not argv or not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    if not isinstance(view, list) or not all(
            isinstance(c, list) and len(c) == 4 and isinstance(c[0], str)
            and type(c[1]) is bool and type(c[2]) is int and type(c[3]) is int for c in view):
        return None
    return argv, [(c[0], c[1], c[2], c[3]) for c in view]


def view_problem(view: "list[tuple[str, bool, int, int]]") -> str:
    """Why a mount the host expects is not where it expects it, or "".

    Each path must be reached with no link followed (the profile's paths are
    real ones: a link on the way now leads elsewhere) and be the root of a
    mount of its own, which a name swapped before bwrap mounted and back after
    is not: the mount went with the other object. Where the mount shows the
    host's own object (`same`), it must be the object the host has there now.
    """
    for path, same, dev, ino in view:
        try:
            parent_mount, mount, st = walk_mounts(path)
        except OSError:
            return f"{path} is not reachable as when this sandbox was parked"
        if mount == parent_mount:
            return f"{path} is not mounted as when this sandbox was parked"
        if same and (st.st_dev, st.st_ino) != (dev, ino):
            return f"{path} is another file than the one the host has there"
    return ""


def walk_mounts(path: str) -> "tuple[int, int, posix.stat_result]":
    """The mount ids of `path`'s directory and of `path`, and its status, reached one
    name at a time from `/` with no link followed (ELOOP at a link)."""
    names = [n for n in path.split("/") if n]
    if not path.startswith("/") or not names or "." in names or ".." in names:
        raise OSError(EINVAL, "not a plain absolute path", path)
    flags = posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC
    fd = posix.open("/", flags | posix.O_DIRECTORY)
    try:
        for name in names[:-1]:
            nxt = posix.open(name, flags | posix.O_DIRECTORY, dir_fd=fd)
            posix.close(fd)
            fd = nxt
        last = posix.open(names[-1], flags, dir_fd=fd)
        try:
            st = posix.fstat(last)
            if (st.st_mode & 0o170000) == 0o120000:
                raise OSError(ELOOP, "a link", path)
            return mount_id(fd), mount_id(last), st
        finally:
            posix.close(last)
    finally:
        posix.close(fd)


def mount_id(fd: int) -> int:
    """The id of the mount that open descriptor `fd` is on."""
    info = posix.open(f"/proc/self/fdinfo/{fd}", posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        data = posix.read(info, 4096)
    finally:
        posix.close(info)
    for line in data.split(b"\n"):
        if line.startswith(b"mnt_id:"):
            return int(line.split()[1])
    raise OSError(ENOENT, "no mnt_id in fdinfo")


def parse_command(text: str) -> "list[str] | None":
    """A JSON list of strings (the argv), or None."""
    value = scan_json(text)
    if not isinstance(value, list) or not all(isinstance(arg, str) for arg in value):
        return None
    return value


def with_listing(rules: dict[str, object], listed: list[str]) -> "LandlockRules":
    """`rules` plus READ_DIR alone on `listed` (the Landlock backend's split directories).

    The backend grants the host minus hidden paths by granting the siblings
    of each; the directories split on the way may be listed, never read.
    """
    if TYPE_CHECKING or __package__:  # imported as part of the package (tests)
        from . import landlock
    else:
        import landlock  # the init: a sibling top-level module, loaded by main already

    class Listing(landlock.LandlockRules):
        __slots__ = ()

        def path_rules(self) -> list[tuple[str, int]]:
            out = super().path_rules()
            granted = {path for path, _rights in out}
            return out + [(p, landlock.FS_READ_DIR) for p in listed if p not in granted]

    return Listing.from_json(rules)


def execute(argv: list[str], env: dict[bytes, bytes]) -> int:
    """execvp(3)'s search, with env(1)'s exit statuses; returns only on failure."""
    name = argv[0]
    if "/" in name:
        candidates = [name]
    else:
        path = env.get(b"PATH", b"/bin:/usr/bin").decode(sys.getfilesystemencoding(),
                                                         "surrogateescape")
        candidates = [f"{d or '.'}/{name}" for d in path.split(":")]
    failure = OSError(ENOENT, posix.strerror(ENOENT))
    denied: OSError | None = None
    for candidate in candidates:
        try:
            posix.execve(candidate, argv, env)
        except OSError as exc:
            failure = exc
        if failure.errno == ENOEXEC:
            # A script without #!: execvp, which bwrap would have used, runs it with sh.
            try:
                posix.execve("/bin/sh", ["/bin/sh", candidate, *argv[1:]], env)
            except OSError as exc:
                failure = exc
            break
        if failure.errno == EACCES:
            denied = failure  # keep looking; report it if nothing else runs
        elif failure.errno not in (ENOENT, ENOTDIR):
            break
    else:
        failure = denied or failure
    status = NOT_FOUND if failure.errno == ENOENT else CANNOT_EXECUTE
    # Escaped: the name is the model's, and the terminal that shows it is a person's.
    shown = name if name.isprintable() else repr(name)[1:-1]
    posix.write(2, f"stockade-init: cannot run {shown}: {failure.strerror}\n".encode())
    return status


class InitRun:
    """What the steps of `main` hand each other, filled in the order they run."""

    __slots__ = ("arch", "argv", "bridge", "command", "config", "env", "landlock_enforced",
                 "listeners", "sc", "started", "timing")

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.started = perf_counter()
        self.timing: list[tuple[str, float]] = []
        self.config: dict[str, object] = {}
        self.command: list[str] = []
        self.bridge: dict[str, object] | None = None
        self.listeners: list[_socket.socket] = []
        self.arch = ""
        self.sc: Syscall | None = None
        self.landlock_enforced = False
        self.env: dict[bytes, bytes] = {}

    def mark(self, stage: str) -> None:
        self.timing.append((stage, (perf_counter() - self.started) * 1000))

    def syscall(self) -> "Syscall":
        assert self.sc is not None  # set_no_new_privs ran
        return self.sc


def read_config(run: InitRun) -> None:
    """The config is this version's schema and the command well formed, before anything happens."""
    argv = run.argv
    if len(argv) < 4 or argv[2] not in ("--", PACKED_ARGV):
        raise Refusal("usage: init.py CONFIG -- COMMAND [ARG...]")
    config = run.config = parse_config(argv[1])
    ready = config.get("ready_fd")
    if type(ready) is int:
        # bwrap got as far as running this init: the sandbox is up. Said on
        # a descriptor closed before the command exists, so a command's own
        # "bwrap: ..." on stderr cannot pass for a failed start.
        try:
            posix.write(ready, b"R")
        finally:
            posix.close(ready)
    run.command = argv[3:]
    if argv[2] == PACKED_ARGV:
        # A long argv, packed past bwrap's count of arguments (see initschema).
        run.command = parse_command("".join(run.command)) or []
        if not run.command:
            raise Refusal("the packed command is not a JSON list of strings")
    cwd = config.get("cwd")
    if cwd is not None:
        # The Landlock backend has no bwrap --chdir; stockade's own
        # working directory is not the command's.
        if not isinstance(cwd, str):
            raise Refusal("the config's cwd is not a path")
        posix.chdir(cwd)
    run.mark("config")


def load_layers(run: InitRun) -> None:
    """Every module a layer needs is loaded while loading is still allowed."""
    if not TYPE_CHECKING:
        import landlock  # noqa: F401
        import seccomp  # noqa: F401
    run.mark("imports")


def bind_bridge(run: InitRun) -> None:
    """The proxy bridge's ports are bound now: Landlock (network "hosts") forbids binding later."""
    bridge = run.config.get("bridge")
    if isinstance(bridge, dict):
        if TYPE_CHECKING:
            from . import bridge as bridge_mod
        else:
            import bridge as bridge_mod
        run.bridge = bridge
        run.listeners = bridge_mod.listen([p for p in bridge.get("ports", []) if type(p) is int])
        run.mark("bridge")


def set_no_new_privs(run: InitRun) -> None:
    """Nothing this process or the command executes can gain a privilege, nor dump core."""
    if TYPE_CHECKING:
        from . import seccomp
    else:
        import seccomp
    run.arch = seccomp.native_arch()
    if not run.arch:
        raise Refusal(f"no seccomp policy for this architecture ({posix.uname().machine})")
    sc = run.sc = seccomp.Syscall()
    # RLIMIT_CORE 0 carries over to the command: a crash inside must not
    # hand its memory to a core file or to the host's core_pattern pipe.
    seccomp.harden_process(sc, run.arch)
    seccomp.set_no_new_privs(sc, run.arch)
    run.mark("no_new_privs")


def start_publish(run: InitRun) -> None:
    """The relay of published ports exists before the command's layers decide its network."""
    publish = run.config.get("publish")
    if isinstance(publish, dict):
        start_publish_relay(run.syscall(), run.arch, publish)
        run.mark("publish")


def bind_to_parent(run: InitRun) -> None:
    """The command dies with stockade, holds no capability, and leaves no process behind.

    Set by the Landlock backend only: bwrap already dies with its parent,
    drops capabilities and tears down its PID namespace.
    """
    if TYPE_CHECKING:
        from . import seccomp
    else:
        import seccomp
    config, sc = run.config, run.syscall()
    parent = config.get("parent")
    if parent == "scope":
        # A systemd scope's recording shell stands between stockade and
        # this process, and names itself (see limits.SCOPE_SCRIPT).
        named = posix.environ.get(b"STOCKADE_INIT_PARENT", b"")
        if not named.isdigit():
            raise Refusal("the scope's shell did not name itself (STOCKADE_INIT_PARENT)")
        parent = int(named)
    if type(parent) is int:
        die_with_parent(sc, seccomp.SYSCALLS[run.arch], parent)
    if config.get("drop_caps") is True:
        drop_capabilities(sc, seccomp.SYSCALLS[run.arch])
    done_fd = config.get("reaper_fd")
    if config.get("reaper") is True:
        if type(parent) is not int:
            raise Refusal("the reaper needs stockade's pid (config key parent)")
        start_reaper(sc, parent, done_fd if type(done_fd) is int else -1)
        run.mark("reaper")
    if type(done_fd) is int:
        try:
            posix.close(done_fd)  # the reaper's alone: the command must not hold it
        except OSError:
            pass  # a caller that passed no such descriptor


def enter_landlock(run: InitRun) -> None:
    """The filesystem (and TCP, by the rules) is what the config grants, or nothing runs."""
    if TYPE_CHECKING:
        from . import landlock
    else:
        import landlock
    config = run.config
    rules = config.get("landlock")
    if not isinstance(rules, dict):
        raise Refusal("the config has no landlock rules")
    rules = {**rules, "write": [*rules.get("write", []), *stdio_files()]}
    listed = config.get("landlock_list")
    ruleset = (with_listing(rules, [p for p in listed if isinstance(p, str)])
               if isinstance(listed, list) and listed
               else landlock.LandlockRules.from_json(rules))
    report = landlock.apply_landlock(ruleset, run.syscall())
    if not report.enforced and config.get("require_landlock") is True:
        raise Refusal(f"Landlock is required but not enforced: {report.reason}")
    run.landlock_enforced = report.enforced
    run.mark("landlock")


def enter_seccomp(run: InitRun) -> None:
    """The namespaces are what the host was told, and the network mode's filter is in force."""
    if TYPE_CHECKING:
        from . import seccomp
    else:
        import seccomp
    mode = run.config.get("seccomp")
    if not isinstance(mode, str):
        raise Refusal("the config names no seccomp network mode")
    namespaces = run.config.get("namespaces", [])
    if not isinstance(namespaces, list):
        raise Refusal("the config's namespaces is not a list")
    if "net" in namespaces:
        check_loopback_only()
    if "pid" in namespaces:
        check_own_pid_namespace()
    # Tracing the command's own processes: in its own PID namespace, and
    # only with Landlock in force, whose ptrace rule keeps bwrap's pid 1
    # (outside the command's domain, and under no seccomp filter) out of
    # reach (see seccomp.TRACE_SYSCALLS).
    trace = "pid" in namespaces and run.landlock_enforced
    prog = seccomp.compile_seccomp(mode, run.arch, trace=trace)
    run.mark("seccomp_compile")
    seccomp.install_seccomp(prog, run.syscall(), run.arch)
    run.mark("seccomp_install")


def set_rlimits(run: InitRun) -> None:
    """The command's address space, file size and process count are bounded as configured."""
    rlimits = run.config.get("rlimits")
    if isinstance(rlimits, dict):
        import resource

        for name, value in rlimits.items():
            which = getattr(resource, f"RLIMIT_{name.upper()}", None)
            if which is not None and type(value) is int:
                resource.setrlimit(which, (value, value))


def hold_lifeline(run: InitRun) -> None:
    """The command ends when stockade's lifeline does."""
    lifeline = run.config.get("lifeline_fd")
    if type(lifeline) is int:
        check_lifeline(lifeline)


def wait_if_parked(run: InitRun) -> None:
    """A parked sandbox runs nothing until stockade sends it the command's argv."""
    park = run.config.get("park_fd")
    if type(park) is int:
        run.mark("parked")
        run.command = await_command(park)
        run.started = perf_counter()


def fork_bridge(run: InitRun) -> None:
    """The bridge stays as the command's parent, under every layer above, until it exits."""
    if not run.listeners:
        return
    if TYPE_CHECKING:
        from . import bridge as bridge_mod
    else:
        import bridge as bridge_mod
    child = posix.fork()
    if child:
        assert run.bridge is not None
        try:
            status = bridge_mod.serve(run.listeners, str(run.bridge.get("unix")), child)
        except Exception as exc:
            posix.write(2, f"stockade-init: bridge failed: {exc}\n".encode())
            status = REFUSED
        posix._exit(status if status >= 0 else 128 - status)
    for sock in run.listeners:
        sock.close()


def supervise_renames(run: InitRun) -> None:
    """git's renames onto a private config's mount are done in place by a parent."""
    private = run.config.get("private_files")
    if isinstance(private, list) and private:
        if TYPE_CHECKING:
            from . import renames, seccomp
        else:
            import renames
            import seccomp
        renames.supervise(run.syscall(), seccomp.SYSCALLS[run.arch], seccomp.AUDIT_ARCH[run.arch],
                          [p for p in private if isinstance(p, str)])
        run.mark("renames")


def seal(run: InitRun) -> None:
    """The command holds only the descriptors it was meant to, its exact environment, and,
    under no_spawn, cannot start another process."""
    if TYPE_CHECKING:
        from . import seccomp
    else:
        import seccomp
    config = run.config
    keep = config.get("keep_fds", [])
    verify({fd for fd in keep if type(fd) is int} if isinstance(keep, list) else set())
    env = dict(posix.environ)
    env.pop(b"STOCKADE_INIT_PARENT", None)
    changes = config.get("env", {})
    encoding = sys.getfilesystemencoding()
    for key, value in (changes.items() if isinstance(changes, dict) else ()):
        # The host moved these out of the init's own environment (LD_*
        # would load code into it before any layer existed) and records
        # what Python's locale coercion rewrites (LC_CTYPE); the command
        # gets them exactly as the caller set them.
        name = key.encode(encoding, "surrogateescape")
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str):
            env[name] = value.encode(encoding, "surrogateescape")
    run.env = env
    if config.get("no_spawn") is True:
        # Last, once the bridge and the reaper have forked: from here on
        # no process can be started, the command's own exec aside.
        seccomp.install_seccomp(seccomp.compile_no_spawn(run.arch), run.syscall(), run.arch)
    run.mark("verify")


#: The init, in order: each layer in place before the next, all before the
#: command's first instruction. Nothing is optional or lazy; a step that
#: cannot establish its invariant refuses, and the command never runs.
STEPS = (
    read_config,        # the config and the command are well formed; the sandbox said it is up
    load_layers,        # every layer's module loaded while loading is allowed
    bind_bridge,        # the proxy bridge's ports bound before Landlock forbids it
    set_no_new_privs,   # no privilege gained by any exec, no core dump
    start_publish,      # the published ports' relay forked before the command's layers
    bind_to_parent,     # (Landlock backend) dies with stockade, no capability, the reaper
    enter_landlock,     # the filesystem as granted
    enter_seccomp,      # the namespaces checked, the syscall filter in force
    set_rlimits,        # address space, file size, process count
    hold_lifeline,      # ends with stockade's lifeline
    wait_if_parked,     # a parked sandbox waits here, every layer applied, for its argv
    fork_bridge,        # the bridge stays behind as the command's parent
    supervise_renames,  # a parent does git's renames onto private configs
    seal,               # only the kept descriptors, the exact environment, no_spawn
)


def main(argv: list[str]) -> int:
    run = InitRun(argv)
    try:
        for step in STEPS:
            step(run)
    except (Refusal, OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.filename:
            reason = f"{exc.filename}: {reason}"
        posix.write(2, f"stockade-init: {reason}\n".encode())
        return REFUSED
    except Exception as exc:  # a bug here must still refuse in one line, never run the command
        posix.write(2, f"stockade-init: internal error: {type(exc).__name__}: {exc}\n".encode())
        return REFUSED

    if run.config.get("timing") is True:  # bench/init_overhead.py's per-stage breakdown
        line = " ".join(f"{stage}={ms:.3f}" for stage, ms in run.timing)
        posix.write(2, f"stockade-init timing: {line}\n".encode())
    # Python ignores SIGPIPE and SIGXFSZ for itself, and an ignored signal
    # stays ignored across execve: `yes | head -1` would never end.
    import _signal

    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    return execute(run.command, run.env)
