"""The per-user service: `stockade run` without the Python start-up and the imports.

One process per key (`serviceclient.service_key`), started by the first
`stockade run --service` that finds none, listening on
`<state dir>/service/<key>.sock` in a 0700 directory. For each request it
forks a child that becomes the caller in every way the command can see
(stdin, stdout, stderr, cwd, umask, limits, environment) and runs
`cli.dispatch`, the code `stockade run` runs in process: config, trust and
approvals are judged afresh, and the audit record is the same. A request is
served only to a peer that sent all of it, whose process facts (read once
it has arrived) and environment hash to this service's key, and that proves
it may inspect the child serving it (`serviceclient._prove`): never to
a process in a sandbox. The client gives its descriptors only to a peer
with its own process facts that has proved the same of it. The parent stays
single-threaded and never touches a sandbox, so each fork starts clean.

It ends after `IDLE_SECONDS` without a request and with no command running,
and stops listening as soon as stockade's code on disk changed (an upgrade,
an edit) or it met a caller it may not inspect, then waits for its running
commands: the next `stockade run` starts a new one. A child whose service
died ends its command's tree as `stockade run` does on SIGTERM
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import sys

from .serviceclient import (
    MAGIC,
    MAX_SERVICES,
    PROOF,
    SO_PEERPIDFD,
    START_LOCK,
    ancillary,
    confined,
    live_services,
    parse_request,
    peer_facts,
    process_facts,
    same_file,
    service_key,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    import threading
    from socket import socket

    Request = tuple[list[str], dict[bytes, bytes], int, list[int], list[tuple[int, int, int]]]

#: Seconds without a request, and with no command running, before it exits
#: (STOCKADE_SERVICE_IDLE_SECONDS, which is part of the key like all the
#: environment, sets another).
IDLE_SECONDS = 300.0
#: Seconds a connection may take to send its request.
REQUEST_SECONDS = 5.0
#: Largest request accepted (an environment of several MB is already absurd).
MAX_REQUEST = 16 << 20
#: Descriptors a request carries: stdin, stdout, stderr and the cwd.
FDS = 4
#: A child's exit status when it could not inspect its caller (`Unprovable`).
UNPROVABLE = 3


def code_fingerprint(package: str) -> tuple[tuple[str, int, int, int], ...]:
    """Name, size, mtime and inode of each file of stockade's code: what an upgrade or
    an edit changes, so a service running older code is never used."""
    out = []
    stack = [package]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    stack.append(entry.path)
            elif entry.name.endswith((".py", ".so", ".json", ".sbpl", ".toml")):
                st = entry.stat(follow_symlinks=False)
                out.append((entry.path, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(sorted(out))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: DIRECTORY KEY (started by `stockade run`, serviceclient.start)",
              file=sys.stderr)
        return 2
    directory, key = argv
    facts = process_facts()
    if facts is None or confined(facts) or service_key(facts=facts) != key:
        return 0  # this process would not be the caller's: it runs in process
    os.chdir("/")  # the first caller's directory is not held busy
    from . import __file__ as package_init

    package = os.path.dirname(os.path.abspath(package_init))
    fingerprint = code_fingerprint(package)
    listener = _listen(directory, key)
    if listener is None:
        return 0
    sock, lock = listener
    _preload()
    idle = IDLE_SECONDS
    try:
        idle = min(max(float(os.environ.get("STOCKADE_SERVICE_IDLE_SECONDS", idle)), 0.1),
                   86400.0)
    except ValueError:
        pass
    children: set[int] = set()
    try:
        _serve(sock, lock, key, package, fingerprint, idle, children)
    finally:
        # The socket goes before the lock: a client that connects meanwhile
        # finds nothing, rather than a listener no one will accept from. The
        # lock's file goes while it is held (a starter that opened it sees
        # that it was unlinked and tries again).
        _unlink(directory, key + ".sock")
        _unlink(directory, key + ".lock")
        sock.close()
        os.close(lock)
    # Commands still running (stockade's code changed under them) end as they
    # would have: leaving now would end them through PR_SET_PDEATHSIG.
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return 0


#: What a `stockade run` imports on its way (found by running one in a child of
#: a preloaded service and listing what was new: tests/isolation/test_iso_service.py).
PRELOAD = (
    "ctypes", "fcntl", "json", "pwd", "re", "socket", "sqlite3",
    "stockade.approvers", "stockade.cli", "stockade.command", "stockade.command_policy",
    "stockade.command_policy.fastpath", "stockade.command_policy.hook",
    "stockade.command_policy.normalize", "stockade.config", "stockade.core",
    "stockade.ledger", "stockade.settingsfile", "stockade.sync", "stockade.drivers.none",
    "stockade.drivers.writers", "stockade.drivers.macos.seatbelt",
    "stockade.drivers.windows.options", "stockade.drivers.linux.bwrap",
    "stockade.drivers.linux.landlock_driver", "stockade.drivers.linux.layers",
    "stockade.drivers.linux.host.gitconfig", "stockade.drivers.linux.host.placeholders",
    "stockade.drivers.linux.host.sessionns", "stockade.drivers.linux.host.treewatch",
    "stockade.drivers.linux.init.initschema",
)


def _preload() -> None:
    """Import now what each child would import again for every command."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part this install lacks: the child says so, as in process


def _listen(directory: str, key: str) -> tuple[socket, int] | None:
    """The listening socket and the key's lock, or None when another service holds
    the key, or `MAX_SERVICES` run already. `start.lock` makes the count and
    the taking of a key one step, so that starters at once do not all count
    the same others."""
    import contextlib
    import fcntl
    import socket
    import stat
    import time

    from .paths import make_own_dir

    try:
        make_own_dir(directory, os.environ, "XDG_STATE_HOME")
        dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except Exception:
        return None
    # Not waited on, whatever is at the name (a FIFO opens, and flocks, too).
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        st = os.fstat(dirfd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        base = f"/proc/self/fd/{dirfd}/"
        start = os.open(base + START_LOCK, flags, 0o600)
        # One that is leaving lets go of the key; one that holds the start
        # longer is not waited for (starters would pile up behind it).
        deadline = time.monotonic() + 3.0
        try:
            if not stat.S_ISREG(os.fstat(start).st_mode):
                return None
            while True:
                lock = None
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(start, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    lock = _take(base + key + ".lock", flags)
                    if lock is None:
                        fcntl.flock(start, fcntl.LOCK_UN)
                if lock is not None:
                    break
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.02)
            if live_services(base, own=key + ".lock") >= MAX_SERVICES:
                os.close(lock)
                return None
            try:
                # A socket left by a service that was killed: the lock says none listens.
                os.unlink(base + key + ".sock")
            except FileNotFoundError:
                pass
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Each part of a request says which process sent it (SCM_CREDENTIALS).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            old = os.umask(0o177)
            try:
                sock.bind(base + key + ".sock")
            finally:
                os.umask(old)
            sock.listen(64)
            return sock, lock
        finally:
            os.close(start)
    except OSError:
        return None
    finally:
        os.close(dirfd)


def _take(path: str, flags: int) -> int | None:
    """The key's lock, held, if no one holds it and its file is still the one named: a
    regular file, as `live_services` counts only those."""
    import fcntl
    import stat

    lock = os.open(path, flags, 0o600)
    try:
        st = os.fstat(lock)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if stat.S_ISREG(st.st_mode) and st.st_ino == os.stat(path,
                                                             follow_symlinks=False).st_ino:
            return lock
    except OSError:
        pass
    os.close(lock)
    return None


def _unlink(directory: str, name: str) -> None:
    try:
        os.unlink(os.path.join(directory, name))
    except OSError:
        pass


def _serve(sock: socket, lock: int, key: str, package: str, fingerprint: object,
           idle: float, children: set[int]) -> None:
    """Fork a child for each connection until idle, stockade's code changed, or a child
    found that this service may not inspect its caller (`Unprovable`)."""
    import select
    import time

    idle_since = time.monotonic()
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while True:
        if _reap(children):
            return
        if children:
            idle_since = time.monotonic()
        left = idle - (time.monotonic() - idle_since)
        if left <= 0:
            return
        if not poller.poll(min(left, 1.0) * 1000):
            continue
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        idle_since = time.monotonic()
        if code_fingerprint(package) != fingerprint:
            conn.close()  # the client runs it in process and starts a new service
            return
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.close(lock)  # held by the service alone, not by its commands
                _child(conn, key)
            except Unprovable:
                os._exit(UNPROVABLE)
            finally:
                os._exit(125)
        children.add(pid)
        conn.close()


def _reap(children: set[int]) -> bool:
    """Forget the children that ended; True when one could not inspect its caller."""
    unprovable = False
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            children.discard(pid)
            unprovable |= os.WIFEXITED(status) and os.WEXITSTATUS(status) == UNPROVABLE
    return unprovable


def _child(conn: socket, key: str) -> None:
    """Become the caller and run its `stockade run`; report the status as `X`, or
    the signal it ended by as `K`.

    Served only as the module says: a process in a sandbox (other namespaces,
    no_new_privs, seccomp, a Landlock domain) that reached the socket of a
    service it is not hidden from gets nothing run.
    """
    import ctypes
    import signal

    from . import cli

    def ended(_signum: int, _frame: object) -> None:
        raise cli.Terminated(signal.SIGTERM)

    parent = os.getppid()
    # SIGUSR1, not SIGTERM: a caller that ignores SIGTERM passes that on, and
    # the service's end must still end the command (PR_SET_PDEATHSIG).
    signal.signal(signal.SIGUSR1, ended)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGUSR1, 0, 0, 0)
    if os.getppid() != parent:
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    greeter = _greet(conn)
    if greeter is None:
        return
    got = _receive(conn)
    if got is None:
        return
    (argv, env, umask, ignored, limits), fds, senders = got
    # Proved, and the facts read, once the whole request is here, of the
    # process that sent all of it: one that confined itself after connecting,
    # or handed the connection to a confined child, is seen as it is now
    # (confinement only tightens).
    prover = _proven(conn)
    if prover is None:
        return
    senders |= {greeter, prover}
    peer = peer_facts(conn)
    if peer is None or senders != {peer[0]} or confined(peer[1]):
        return
    if service_key(env, peer[1]) != key:
        return  # another context's caller: not served, it runs in process
    if not _take_io_priority(peer[0]):
        return
    os.setsid()
    _become(fds, env, umask, ignored, limits)
    conn.sendall(b"P%d\n" % os.getpid())
    ending = _watch(conn)
    try:
        status = cli.dispatch(["run", *argv])
    except cli.Terminated as exc:
        if os.getppid() != parent:
            print("stockade: the service that ran this command ended; the command was "
                  "stopped", file=sys.stderr)
        _flush()
        ending.set()
        _send(conn, b"K%d\n" % exc.signum)
        return
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        import traceback

        traceback.print_exc()  # as the interpreter does for `stockade run`, exit 1
        status = 1
    import atexit

    atexit._run_exitfuncs()
    _flush()
    ending.set()
    _send(conn, b"X%d\n" % status)
    os._exit(0)


#: ioprio_get and ioprio_set by machine: the I/O priority is in no /proc file.
IOPRIO_CALLS = {"x86_64": (252, 251), "aarch64": (31, 30)}


def _take_io_priority(pid: int) -> bool:
    """Give this child the I/O priority of process `pid` (`ionice`), as a command it
    started would have; False when it cannot be read or taken (then the caller
    runs the command itself)."""
    import ctypes

    calls = IOPRIO_CALLS.get(os.uname().machine)
    if calls is None:
        return False
    get, put = calls
    libc = ctypes.CDLL(None, use_errno=True)
    theirs = libc.syscall(get, 1, pid)  # IOPRIO_WHO_PROCESS
    if theirs < 0:
        return False
    return bool(theirs == libc.syscall(get, 1, 0) or libc.syscall(put, 1, 0, theirs) == 0)


class Unprovable(Exception):
    """This service may not inspect a caller of its own key: it runs inside a
    confinement the caller is not in (started by a caller in a Landlock domain),
    so it gives its key up for one that can serve."""


def _greet(conn: socket) -> int | None:
    """The service's half of `serviceclient._handshake`: the client's memfd, opened
    through its /proc/PID/fd, goes back. The pid that sent the greeting, or None.

    Opened O_PATH: whatever the descriptor is (a FIFO, a device), nothing
    waits on it and nothing is read.
    """
    import _signal
    import socket

    conn.settimeout(REQUEST_SECONDS)
    try:
        msg, anc, _flags, _ = conn.recvmsg(64, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(4))
        sender, fds = ancillary(anc)
        for fd in fds:
            os.close(fd)
        if fds or sender is None or not (msg.startswith(b"H") and msg.endswith(b"\n")):
            return None
        number = int(msg[1:-1])
        raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4)
        pidfd = int.from_bytes(raw, sys.byteorder, signed=True)
        try:
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            pid, uid = (int.from_bytes(cred[i:i + 4], sys.byteorder) for i in (0, 4))
            try:
                theirs = os.open(f"/proc/{pid}/fd/{number}", os.O_PATH | os.O_CLOEXEC)
            except PermissionError:
                # Its status, which needs no ptrace access (the namespaces would),
                # read while the pidfd shows the connecting process still alive:
                # a confined sender must not make a service give up through
                # the unconfined process that got its pid.
                with open(f"/proc/{pid}/status", "rb") as f:
                    status = f.read().splitlines()
                _signal.pidfd_send_signal(pidfd, 0)
                uids = next((line.split()[1:] for line in status if line.startswith(b"Uid:")),
                            [])
                if (sender == pid and uid == os.getuid() and not confined(status)
                        and uids and all(int(u) == uid for u in uids)):
                    raise Unprovable from None  # no sandbox, yet out of this one's reach
                return None
            try:
                _signal.pidfd_send_signal(pidfd, 0)  # still that process: no pid reused
                conn.sendmsg([b"C\n"],
                             [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                               theirs.to_bytes(4, sys.byteorder))])
            finally:
                os.close(theirs)
        finally:
            os.close(pidfd)
        return sender
    except (OSError, ValueError):
        return None


def _proven(conn: socket) -> int | None:
    """The pid that proved it may inspect this child, or None: a memfd made now, after
    the whole request, which it must send back opened through /proc/PID/fd
    (so it cannot have been opened before the caller entered a domain)."""
    import socket

    proof = os.memfd_create(PROOF, os.MFD_CLOEXEC)
    got: list[int] = []
    conn.settimeout(REQUEST_SECONDS)
    try:
        conn.sendall(b"V%d %d\n" % (os.getpid(), proof))
        msg, anc, _flags, _ = conn.recvmsg(8, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(4))
        sender, got = ancillary(anc)
        if msg != b"p" or len(got) != 1 or not same_file(got[0], proof):
            return None
        conn.settimeout(None)
        return sender
    except OSError:
        return None
    finally:
        for fd in (proof, *got):
            os.close(fd)


def _receive(conn: socket) -> tuple[Request, list[int], set[int]] | None:
    """The request, its descriptors (from its first message only), and the pid of
    each process that sent a part of it (SCM_CREDENTIALS)."""
    import socket

    conn.settimeout(REQUEST_SECONDS)
    space = socket.CMSG_SPACE(FDS * 4) + socket.CMSG_SPACE(12)
    fds: list[int] = []
    senders: set[int] = set()
    data = b""
    size = -1
    try:
        while size < 0 or len(data) < 4 + size:
            want = (1 << 16) if size < 0 else min(1 << 20, 4 + size - len(data))
            msg, anc, _flags, _ = conn.recvmsg(want, space)
            if not msg:
                return None
            sender, got = ancillary(anc)
            if data and got:  # descriptors come with the first part only
                for fd in got:
                    os.close(fd)
                return None
            fds += got
            if sender is None:
                return None
            senders.add(sender)
            data += msg
            if size < 0 and len(data) >= 4:
                size = int.from_bytes(data[:4], "big")
                if size > MAX_REQUEST:
                    return None
        if len(fds) != FDS or not data[4:].startswith(len(MAGIC).to_bytes(4, "big") + MAGIC):
            return None
        conn.settimeout(None)
        return parse_request(data[4:]), fds, senders
    except (OSError, ValueError):
        return None


def _become(fds: list[int], env: dict[bytes, bytes], umask: int, ignored: list[int],
            limits: list[tuple[int, int, int]]) -> None:
    import resource
    import signal

    for fd in fds:
        os.set_inheritable(fd, False)  # SCM_RIGHTS gives them without close-on-exec
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    os.umask(umask)
    os.environb.clear()
    os.environb.update(env)
    for sig in ignored:
        signal.signal(sig, signal.SIG_IGN)
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass  # above this process's hard limit: ours, the lower, stays
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        stream = open(fd, mode, closefd=False, encoding=old.encoding,  # noqa: SIM115
                      errors=old.errors, buffering=1 if name == "stderr" else -1)
        setattr(sys, name, stream)


def _watch(conn: socket) -> threading.Event:
    """Signals the client forwards are raised here; its end (killed, its pipe
    closed) ends the command as SIGTERM would (through SIGUSR1, which the
    caller cannot have ignored), until the returned event is set: then the
    result is on its way and the client's end is its reading it."""
    import signal
    import threading

    ending = threading.Event()

    def run() -> None:
        buf = b""
        while True:
            try:
                chunk = conn.recv(64)
            except OSError:
                chunk = b""
            if not chunk:
                if not ending.is_set():
                    os.kill(os.getpid(), signal.SIGUSR1)
                return
            buf += chunk
            while b"\n" in buf:
                frame, _, buf = buf.partition(b"\n")
                if frame[:1] == b"S" and frame[1:].isdigit():
                    number = int(frame[1:])
                    if number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
                        os.kill(os.getpid(), number)

    threading.Thread(target=run, daemon=True).start()
    return ending


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _send(conn: socket, frame: bytes) -> None:
    try:
        conn.sendall(frame)
    except OSError:
        pass

