"""`stockade run` handed to the per-user service (`stockade.service`), on the per-command path.

The service is a process that has already imported stockade; for each
request it forks a child that takes the caller's stdin, stdout, stderr, cwd,
umask, limits and environment and runs the very code `stockade run` runs in
process. Only the Python start-up and the imports are saved: every request
is judged afresh (config, trust, approvals, the audit record).

This module is imported by every `stockade run`, so it imports only builtin
modules (no `socket`, `signal` or `json`: their enums and `re` cost more
than the service saves). A service is found by a key over everything that
decides what the forked child would be (interpreter, stockade's code, ids,
groups, namespaces, process restrictions, environment), so a caller never
gets a child made for another: a different key is another service.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False

if TYPE_CHECKING:
    from _socket import socket
    from collections.abc import Mapping

#: What a request starts with; a service speaking another version is not used.
MAGIC = b"stockade-service-3"
#: Variables that change with every shell or directory and decide nothing the
#: forked child imported: the child still takes their values from the request.
KEY_IGNORES = frozenset({b"PWD", b"OLDPWD", b"SHLVL", b"_", b"COLUMNS", b"LINES"})
#: Signals the client passes on to the child, which ends the command's tree as
#: `stockade run` in process does on them.
FORWARDED = (2, 1, 15)  # SIGINT, SIGHUP, SIGTERM
#: The service's start: `python -c BOOT SITE DIRECTORY KEY`.
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from stockade.service import main; "
        "sys.exit(main(sys.argv[2:]))")
#: getsockopt's SO_PEERPIDFD (Linux 6.5), not in Python 3.11's socket module.
SO_PEERPIDFD = 77
#: The memfds each end opens through the other's /proc to prove it may
#: (`_handshake`, `_prove`).
PROOF = "stockade-service-proof"
CLIENT_PROOF = "stockade-client-proof"
#: Seconds the client gives a service for each step of the exchange: past them (a
#: stopped or wedged service) the command runs in process. Each step takes
#: milliseconds; a loaded machine must not send commands in process for it.
HANDSHAKE_SECONDS = 10.0
#: Held while a service counts the others and takes its key (service._listen).
START_LOCK = "start.lock"
#: Services one user may have at once (one per key); past it, commands run in process.
MAX_SERVICES = 8
#: The limits the child takes from the caller (RLIMIT_* numbers, Linux).
RLIMITS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)


def wanted(args: list[str], env: dict[str, str]) -> bool:
    """Whether this `run` goes to the service: `--no-service` or `--service` among its
    options, else STOCKADE_SERVICE (0 or 1), else the user config's `service`
    (default: off)."""
    from .clitables import leading_run_options

    flag: bool | None = None
    config = ""
    for name, value in leading_run_options(args):
        if name == "--help":
            return False
        if name in ("--service", "--no-service"):
            flag = name == "--service" if flag is not False else False
        if name == "--config":
            config = value or ""
    if flag is not None:
        return flag
    value = env.get("STOCKADE_SERVICE", "")
    if value in ("0", "1"):
        return value == "1"
    if not config:
        from .paths import user_config

        config = user_config(env)
    return _configured(config)


def _configured(path: str) -> bool:
    """The `service` key of the user's config, read only when the file names it.

    A file stockade cannot read or parse is left to the in-process run, which
    says what is wrong with it.
    """
    import stat

    try:
        # Not waited on (a FIFO) nor read past 1 MiB, as the config itself is not.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        data = os.read(fd, 1 << 20)
    except OSError:
        return False
    finally:
        os.close(fd)
    if b"service" not in data:
        return False
    try:
        import tomllib

        table = tomllib.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return False
    section = table.get("sandbox", table)
    return section.get("service") is True if isinstance(section, dict) else False


def service_dir(env: dict[str, str]) -> str:
    """`<state dir>/service`: hidden from every command like the rest of the state
    directory (the bwrap backend masks it; the Landlock backend refuses every
    unix-socket connect)."""
    from .paths import state_dir

    return os.path.join(state_dir(env), "service")


#: The namespaces a command inherits from the process that starts it.
NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts", "cgroup", "time",
              "pid_for_children", "time_for_children")
#: /proc/PID/status lines that say who the process is and what confines it.
STATUS = (b"Uid", b"Gid", b"Groups", b"Threads", b"NoNewPrivs", b"Seccomp",
          b"Seccomp_filters", b"CapInh", b"CapPrm", b"CapEff", b"CapBnd", b"CapAmb",
          b"Cpus_allowed_list", b"Mems_allowed_list", b"SigBlk", b"SigIgn",
          b"THP_enabled", b"Speculation_Store_Bypass", b"SpeculationIndirectBranch")
#: The status lines that say a thread is confined (no_new_privs, a seccomp filter).
CONFINING = (b"NoNewPrivs", b"Seccomp")
#: SIGUSR1: how a served command learns that its service died (service._child).
SIGUSR1_BIT = 1 << (10 - 1)
#: Signals 32 and 33, which glibc's posix_spawn leaves ignored in the service it
#: starts: the rest, real-time ones included, are the caller's and keyed.
GLIBC_SIGNALS = (1 << 31) | (1 << 32)


def process_facts(pid: str = "self") -> list[bytes] | None:
    """What the kernel keeps for process `pid` that a command it starts inherits, read
    from /proc alike for the caller itself and for the peer of a connection:
    namespaces and the root directory, ids and groups, the number of threads
    (no_new_privs and seccomp are per thread, and /proc/PID shows the main
    one), capabilities, no_new_privs and seccomp, blocked and ignored signals,
    the cgroup (a caller's memory bound), the security label, the audit
    identity, the personality, the OOM score, CPU and memory affinity, the
    nice value, the scheduling policy and the hard resource limits. None when
    any of it cannot be read."""
    base = f"/proc/{pid}"
    out: list[bytes] = []
    try:
        for ns in NAMESPACES:
            out.append(f"{ns}:{os.stat(f'{base}/ns/{ns}').st_ino}".encode())
        # The root directory: a chrooted caller shares the mount namespace.
        root = os.stat(f"{base}/root")
        out.append(f"root:{os.readlink(f'{base}/root')}:{root.st_dev}:{root.st_ino}".encode())
        with open(f"{base}/status", "rb") as f:
            for line in f.read().splitlines():
                field, _, value = line.partition(b":")
                if field in (b"SigBlk", b"SigIgn"):
                    line = b"%s:%x" % (field, int(value, 16) & ~GLIBC_SIGNALS)
                if field in STATUS:
                    out.append(line)
        for name in ("cgroup", "loginuid", "sessionid", "oom_score_adj", "personality",
                     "attr/current"):
            try:
                with open(f"{base}/{name}", "rb") as f:
                    out.append(name.encode() + b":" + f.read())
            except OSError as exc:
                if name != "attr/current":
                    raise
                out.append(f"{name}:{exc.errno}".encode())  # no LSM: the same for both
        with open(f"{base}/stat", "rb") as f:
            stat = f.read().rsplit(b")", 1)[1].split()
        # nice, rt_priority and policy (fields 19, 40 and 41 of proc(5)).
        out.append(b"sched:" + b" ".join((stat[16], stat[37], stat[38])))
        if b"Threads:\t1" not in out:
            # no_new_privs and seccomp are per thread: one confined thread
            # confines the process here.
            out.append(b"Tasks_confined:%d" % _tasks_confined(base))
        with open(f"{base}/limits", "rb") as f:
            # The hard limits: a child lowered to a service's could not raise them
            # back; the soft ones are the caller's, set for each command.
            out += [line[:26] + line[47:68] for line in f.read().splitlines()[1:]]
    except (OSError, IndexError, ValueError):
        return None
    return out


def _tasks_confined(base: str) -> int:
    """1 when a thread of the process is under no_new_privs or a seccomp filter."""
    for task in os.listdir(f"{base}/task"):
        try:
            with open(f"{base}/task/{task}/status", "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        for line in lines:
            key, _, value = line.partition(b":")
            if key in CONFINING and value.strip() != b"0":
                return 1
    return 0


def confined(facts: list[bytes]) -> bool:
    """Never served: under no_new_privs or a seccomp filter (a sandbox, Landlock among
    them), in any thread, whose confinement cannot be compared; or ignoring or
    blocking SIGUSR1, which a served command needs to learn that its service
    died or its client went."""
    for line in facts:
        key, _, value = line.partition(b":")
        value = value.strip()
        if (key in CONFINING or key == b"Tasks_confined") and value != b"0":
            return True
        if key in (b"SigIgn", b"SigBlk") and int(value, 16) & SIGUSR1_BIT:
            return True
    return False


def service_key(environ: Mapping[bytes, bytes] | None = None,
                facts: list[bytes] | None = None) -> str:
    """24 hex chars over everything that decides what the service's child would be:
    the interpreter, stockade's code, `process_facts` and the environment."""
    from . import __file__ as package_init
    from .paths import sha256_hex

    env = os.environb if environ is None else environ
    facts = process_facts() if facts is None else facts
    parts = [MAGIC, os.fsencode(sys.executable), os.fsencode(os.path.dirname(package_init)),
             sys.version.encode(), " ".join(_flags()).encode(), *(facts or [b"?"])]
    parts += sorted(k + b"=" + v for k, v in env.items() if k not in KEY_IGNORES)
    return sha256_hex(b"\0".join(parts))[:24]


def peer_facts(sock: socket) -> tuple[int, list[bytes]] | None:
    """The pid and `process_facts` of the process at the other end of `sock`, or None.

    Read through a pidfd (SO_PEERPIDFD, Linux 6.5): the process is still
    alive after the read, so its pid was not reused meanwhile. Without that
    socket option the answer is None, and the caller does without the service.
    """
    import _socket

    try:
        raw = sock.getsockopt(_socket.SOL_SOCKET, SO_PEERPIDFD, 4)
        pidfd = int.from_bytes(raw, sys.byteorder, signed=True)
    except OSError:
        return None
    try:
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        pid = int.from_bytes(cred[0:4], sys.byteorder)
        facts = process_facts(str(pid)) if pid > 0 else None
        import _signal

        _signal.pidfd_send_signal(pidfd, 0)
        return (pid, facts) if facts is not None else None
    except OSError:
        return None
    finally:
        os.close(pidfd)


class _Gone(Exception):
    """The service closed the connection before it started the command."""


def run(args: list[str]) -> int | None:
    """The exit status of `stockade run ARGS` served by the service, or None when the
    caller should run it in process: no usable service (none started yet, or
    one that fails a check), a terminal (its job control and its approvals
    stay with the process group it starts), or a caller under no_new_privs or
    seccomp, whose confinement a service's child would not carry."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return None
            os.fstat(fd)
        except OSError:
            return None
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
        return None  # a controlling terminal: Ctrl-Z and approvals belong to it
    except OSError:
        pass
    facts = process_facts()
    if facts is None or confined(facts):
        return None
    env = dict(os.environ)
    directory = service_dir(env)
    key = service_key(facts=facts)
    try:
        dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        start(directory, key)
        return None
    try:
        st = os.fstat(dirfd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # not ours alone: `stockade doctor` says so
        peer = _connect(f"/proc/self/fd/{dirfd}/{key}.sock", facts)
    finally:
        os.close(dirfd)
    if peer is None:
        start(directory, key)
        return None
    sock, _pid = peer
    try:
        return _served(sock, args)
    except _Gone:
        start(directory, key)
        return None
    finally:
        sock.close()


def _connect(path: str, facts: list[bytes]) -> tuple[socket, int] | None:
    """A connection to the service at `path`, if the process listening there is one
    this caller could have started: same uid, namespaces, credentials and
    everything else in `process_facts`, and not confined. A command in a
    sandbox that could write the directory and listen in the service's place
    fails this (its namespaces, no_new_privs and seccomp), so it never gets
    the caller's descriptors."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(HANDSHAKE_SECONDS)  # a full backlog would block connect
    try:
        sock.connect(path)
        peer = peer_facts(sock)
        if peer is None or peer[1] != facts:
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock, peer[0]


def request(args: list[str]) -> bytes:
    """The request's bytes: each item length-prefixed, no parser needed at either end."""
    import _signal
    import resource

    ignored = [str(s) for s in FORWARDED if _signal.getsignal(s) == _signal.SIG_IGN]
    umask = os.umask(0o022)
    os.umask(umask)
    limits = []
    for r in RLIMITS:
        try:
            soft, hard = resource.getrlimit(r)
        except (ValueError, OSError):
            continue
        limits.append(f"{r}:{soft}:{hard}")
    env = [k + b"=" + v for k, v in os.environb.items()]
    items = [MAGIC, str(len(args)).encode(), *map(os.fsencode, args),
             str(len(env)).encode(), *env, str(umask).encode(),
             " ".join(ignored).encode(), " ".join(limits).encode()]
    return b"".join(len(i).to_bytes(4, "big") + i for i in items)


def parse_request(data: bytes) -> tuple[list[str], dict[bytes, bytes], int, list[int],
                                          list[tuple[int, int, int]]]:
    """(argv, environment, umask, ignored signals, limits) from `request`'s bytes;
    ValueError for anything else."""
    items = []
    i = 0
    while i < len(data):
        if i + 4 > len(data):
            raise ValueError("truncated request")
        n = int.from_bytes(data[i:i + 4], "big")
        items.append(data[i + 4:i + 4 + n])
        i += 4 + n
        if i > len(data):
            raise ValueError("truncated request")
    if not items or items[0] != MAGIC:
        raise ValueError("not a stockade request")
    try:
        return _fields(items)
    except IndexError:
        raise ValueError("malformed request") from None


def _fields(items: list[bytes]) -> tuple[list[str], dict[bytes, bytes], int, list[int],
                                         list[tuple[int, int, int]]]:
    nargs = int(items[1])
    argv = [os.fsdecode(a) for a in items[2:2 + nargs]]
    nenv = int(items[2 + nargs])
    env: dict[bytes, bytes] = {}
    for entry in items[3 + nargs:3 + nargs + nenv]:
        k, eq, v = entry.partition(b"=")
        if not eq:
            raise ValueError("malformed environment")
        env[k] = v
    rest = items[3 + nargs + nenv:]
    if len(rest) != 3:
        raise ValueError("malformed request")
    umask = int(rest[0])
    ignored = [int(s) for s in rest[1].split()]
    limits = [tuple(int(x) for x in e.split(b":")) for e in rest[2].split()]
    if any(len(t) != 3 for t in limits) or not 0 <= umask <= 0o777:
        raise ValueError("malformed request")
    return argv, env, umask, ignored, limits  # type: ignore[return-value]


def _served(sock: socket, args: list[str]) -> int:
    import _signal
    import _socket

    try:
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        raise _Gone from exc  # in process, the run says what is wrong with it
    try:
        _handshake(sock)
        payload = request(args)
        rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2, cwd))
        sent = sock.sendmsg([len(payload).to_bytes(4, "big"), payload],
                            [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        total = 4 + len(payload)
        while sent < total:
            view = (len(payload).to_bytes(4, "big") + payload)[sent:]
            sent += sock.send(view)
        _prove(sock)
    except (OSError, ValueError) as exc:
        raise _Gone from exc
    finally:
        os.close(cwd)
    sock.settimeout(None)  # proved: the child runs the command
    frames = _Frames(sock)
    first = frames.next()
    if first is None or not first.startswith(b"P"):
        raise _Gone  # nothing was started: the caller runs it in process

    def forward(signum: int, _frame: object) -> None:
        try:
            sock.send(b"S%d\n" % signum)
        except OSError:
            pass

    for sig in FORWARDED:
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            _signal.signal(sig, forward)
    while True:
        frame = frames.next()
        if frame is None:
            # The child died without a word (killed): as a crashed `stockade run`.
            print("stockade: the service's process for this command ended without its "
                  "result; run it again, or with --no-service", file=sys.stderr)
            return 125
        if frame.startswith(b"X"):
            return int(frame[1:])
        if frame.startswith(b"K"):
            # Ended by a signal after its cleanup: end the same way, for whoever waits.
            signum = int(frame[1:])
            _signal.signal(signum, _signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return 128 + signum


def _handshake(sock: socket) -> None:
    """Each end proves it may inspect the other by opening a memfd of the other's
    through /proc/PID/fd, which only such a process can (ptrace access): this
    is the client's memfd, made for this connection, which the listener must
    hand back opened before anything else is sent.

    A Landlock domain shows nowhere in /proc, and root needs no no_new_privs
    to enter one: a listener in a domain this caller is not in cannot open
    it, and gets none of the caller's descriptors. The other way round is
    `_prove`.
    """

    mine = os.memfd_create(CLIENT_PROOF, os.MFD_CLOEXEC)
    try:
        sock.sendall(b"H%d\n" % mine)
        msg, got = _answer(sock)
        try:
            if msg != b"C\n" or len(got) != 1 or not same_file(got[0], mine):
                raise ValueError("the listener could not open this caller's proof")
        finally:
            for fd in got:
                os.close(fd)
    finally:
        os.close(mine)


def _prove(sock: socket) -> None:
    """Open the memfd the service's child made once the request arrived, through its
    /proc/PID/fd, and send it back: made after the request, it cannot have been
    opened before this caller entered a domain."""
    import _socket

    msg, got = _answer(sock)
    for fd in got:
        os.close(fd)
    if got or not (msg.startswith(b"V") and msg.endswith(b"\n")):
        raise ValueError("not a service's answer")
    pid, number = (int(x) for x in msg[1:-1].split(b" "))
    proof = os.open(f"/proc/{pid}/fd/{number}", os.O_PATH | os.O_CLOEXEC)
    try:
        sock.sendmsg([b"p"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                               proof.to_bytes(4, sys.byteorder))])
    finally:
        os.close(proof)


def _answer(sock: socket) -> tuple[bytes, list[int]]:
    """One frame of the handshake and the descriptors that came with it."""
    import _socket

    msg, anc, _flags, _addr = sock.recvmsg(64, _socket.CMSG_SPACE(4))
    return msg, ancillary(anc)[1]


def ancillary(anc: list[tuple[int, int, bytes]]) -> tuple[int | None, list[int]]:
    """What came with a message: the sender's pid (SCM_CREDENTIALS), None without
    it, and the descriptors (SCM_RIGHTS), which are the receiver's to close."""
    import _socket

    sender = None
    fds: list[int] = []
    for level, kind, data in anc:
        if level != _socket.SOL_SOCKET:
            continue
        if kind == _socket.SCM_CREDENTIALS:
            sender = int.from_bytes(data[0:4], sys.byteorder)
        elif kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True)
                    for i in range(0, len(data) - len(data) % 4, 4)]
    return sender, fds


def same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


class _Frames:
    """Newline-ended frames from the service: P<pid>, X<status>, K<signal>."""

    def __init__(self, sock: socket) -> None:
        self.sock = sock
        self.buf = b""

    def next(self) -> bytes | None:
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(256)
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        frame, _, self.buf = self.buf.partition(b"\n")
        return frame


def start(directory: str, key: str) -> None:
    """Start the service for `key` in the background; this command runs in process.

    Started with the caller's interpreter flags and this stockade's directory
    first on its path, so that it imports what the caller did; a service that
    finds itself under another key exits. It
    gets none of the caller's descriptors: a harness waiting for the end of
    a pipe it gave `stockade run` would otherwise wait for the service.
    """
    if live_services(directory) >= MAX_SERVICES:
        return  # each differing environment has its own; they idle out
    try:
        held = [int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2]
    except OSError:
        return
    flags = _flags()
    from . import __file__ as package_init

    # The directory this stockade was imported from goes first, so the service
    # imports the same code whatever the caller's sys.path was built from.
    site = os.path.dirname(os.path.dirname(package_init))
    argv = [sys.executable, *flags, "-P", "-c", BOOT, site, directory, key]
    try:
        os.posix_spawn(sys.executable, argv, os.environ, setsid=True, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, 1, 2),
            *[(os.POSIX_SPAWN_CLOSE, fd) for fd in held if _inheritable(fd)]])
    except OSError:
        pass  # no service this time; `stockade doctor` says why


def live_services(directory: str, own: str = "") -> int:
    """Services running in `directory` (each holds its key's lock), `own` not counted."""
    import fcntl
    import stat

    try:
        names = [n for n in os.listdir(directory)
                 if n.endswith(".lock") and n not in (own, START_LOCK)]
    except OSError:
        return 0
    live = 0
    for name in names:
        try:
            # Not blocking on whatever is there (a FIFO would hold every start).
            fd = os.open(os.path.join(directory, name),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            live += 1
        finally:
            os.close(fd)
    return live


def _flags() -> list[str]:
    """This interpreter's flags that change what stockade imports or how it behaves,
    as options: the service is started with them, and they are in the key."""
    f = sys.flags
    return [*(o for o, on in (("-I", f.isolated), ("-E", f.ignore_environment),
                              ("-s", f.no_user_site), ("-S", f.no_site)) if on),
            *["-O"] * f.optimize, "-X", f"utf8={f.utf8_mode}",
            *(["-X", "dev"] if f.dev_mode else [])]


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False


def status(env: dict[str, str]) -> str:
    """One line for `stockade doctor`: whether `run` uses the service, and its state."""
    if not wanted([], env):
        return ("off: `stockade run` starts every command in process (turn it on with "
                "--service, STOCKADE_SERVICE=1 or `service = true` in your config)")
    directory = service_dir(env)
    key = service_key()
    try:
        st = os.lstat(directory)
    except OSError:
        return f"on, not running: the next `stockade run` starts it ({directory})"
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(directory):
        return (f"on, but {directory} is not a directory only you can use (mode "
                f"{st.st_mode & 0o7777:o}): every command runs in process; remove it")
    facts = process_facts()
    if facts is None or confined(facts):
        return ("on, but this process is confined (no_new_privs or seccomp) or ignores "
                "SIGUSR1: runs in process")
    peer = _connect(os.path.join(directory, key + ".sock"), facts)
    if peer is None:
        return f"on, not running: the next `stockade run` starts it ({directory})"
    sock, pid = peer
    sock.close()
    return (f"on: running (pid {pid}, {directory}/{key}.sock); a command with a terminal "
            "on stdin, stdout or stderr still runs in process")
