"""Starting, feeding, bounding and ending a confined process.

One implementation for every caller: the CLI, the sync and the async
sandbox all come here. It spawns with `os.posix_spawn` rather than
`subprocess` -- importing subprocess costs more than bwrap itself on the
CLI's path -- and supervises with `poll` on the pipes and a pidfd.

Nothing a command starts may outlive the call that ran it. Under bubblewrap
that is the PID namespace: killing bwrap kills its init and the kernel kills
everything else in the namespace, a `setsid` double-forked daemon included.
Without a namespace (full-access) the process group is the reach of `stop`.
"""

from __future__ import annotations

import _thread
import errno
import os
import select
import sys
import time

# The `signal` module wraps every number in an IntEnum, and importing `enum`
# is a measurable part of the CLI's start-up; the raw numbers are all we need.
from _signal import SIGINT, SIGKILL, SIGPIPE, SIGQUIT, SIGTERM

from .drivers.handle import ProcessHandle
from .errors import SandboxUnavailable

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    R = TypeVar("R")

_SPAWNER_LOCK = _thread.allocate_lock()

DEFAULT_MAX_OUTPUT = 1 << 20
_CHUNK = 1 << 16


def chdir_argv(cwd: str, argv: list[str]) -> list[str]:
    """Run `argv` in `cwd` without chdir in this process (which threads share)."""
    return ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"', cwd, *argv]


def _close_inherited_fds(keep: tuple[int, ...] = ()) -> None:
    """Make every descriptor this process inherited non-inheritable.

    posix_spawn closes only close-on-exec descriptors, and a parent that
    started us may have left an open file or socket at fd 5: it would reach
    the sandboxed command as an open door to whatever it points at.
    """
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        fds = [str(fd) for fd in range(3, 256)]
    for name in fds:
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _resolve(program: str, env: Mapping[str, str]) -> str:
    if "/" in program:
        return program
    for entry in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(entry or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return program


def _posix_spawn(path: str, argv: list[str], env: dict[str, str],
                 actions: list[tuple[int, ...]], new_session: bool) -> int:
    return os.posix_spawn(path, argv, env, file_actions=actions, setsid=new_session,
                          setsigdef=(SIGPIPE, SIGINT, SIGTERM, SIGQUIT))


_spawner: _Spawner | None = None


def _forget_spawner() -> None:
    # A forked child has no spawner thread, only the parent's object: a start
    # asked of it from a worker thread waited forever (multiprocessing's
    # default start method on Linux forks).
    global _spawner, _SPAWNER_LOCK
    _spawner = None
    _SPAWNER_LOCK = _thread.allocate_lock()


os.register_at_fork(after_in_child=_forget_spawner)


def spawn(path: str, argv: list[str], env: dict[str, str], actions: list[tuple[int, ...]],
          new_session: bool) -> int:
    """posix_spawn, from a thread that lives as long as this process."""
    return from_lasting_thread(_posix_spawn, path, argv, env, actions, new_session)


def from_lasting_thread(start: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """`start(*args, **kwargs)` -- a call that starts a process -- on a thread that never ends.

    A parent-death signal (bwrap's --die-with-parent, the Landlock init's
    watch on its parent) fires when the *thread* that spawned the child
    exits, not the process: a background command started from a worker
    thread (asyncio.to_thread, a thread pool, an agent framework's tool
    thread) was killed the moment that thread ended -- or, when only the
    outer bwrap died, left running where `stop()` could no longer reach it.
    The main thread lives as long as the process, so it starts directly;
    any other thread hands the start to one long-lived daemon thread.
    """
    threading = sys.modules.get("threading")
    if threading is None or threading.current_thread() is threading.main_thread():
        return start(*args, **kwargs)
    global _spawner
    if _spawner is None:
        with _SPAWNER_LOCK:
            if _spawner is None:
                _spawner = _Spawner(threading)
    return _spawner.call(start, args, kwargs)


class _Spawner:
    """One daemon thread that performs the starts asked of it, one at a time."""

    def __init__(self, threading: Any) -> None:
        import queue

        self._requests: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="stockade-spawner", daemon=True).start()
        self._event = threading.Event

    def call(self, start: Callable[..., R], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> R:
        done = self._event()
        box: list[Any] = []
        self._requests.put((start, args, kwargs, box, done))
        done.wait()
        if box[1]:
            raise box[0]
        return box[0]  # type: ignore[no-any-return]

    def _serve(self) -> None:
        while True:
            start, args, kwargs, box, done = self._requests.get()
            try:
                box[:] = [start(*args, **kwargs), False]
            except BaseException as exc:  # handed to the caller, which raises it
                box[:] = [exc, True]
            done.set()


class Process(ProcessHandle):
    """A spawned process with its pipes. `communicate` bounds it; `kill` ends its tree.

    The POSIX implementation of `ProcessHandle`, shared by every driver whose
    confinement travels in an argv.
    """

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        *,
        stdin: int | None = None,
        capture: bool = True,
        extra_fds: Mapping[int, int] | None = None,
        new_session: bool = True,
    ) -> None:
        """`stdin`: an fd to inherit, or None for a pipe. `capture`: pipe stdout/stderr.

        `extra_fds` maps a child fd number to a parent fd to place there.
        """
        self.stdin_w = self.stdout_r = self.stderr_r = -1
        actions: list[tuple[int, ...]] = []
        close_after: list[int] = []
        if stdin is None:
            r, self.stdin_w = os.pipe()
            actions.append((os.POSIX_SPAWN_DUP2, r, 0))
            close_after.append(r)
        elif stdin != 0:
            actions.append((os.POSIX_SPAWN_DUP2, stdin, 0))
        if capture:
            self.stdout_r, w1 = os.pipe()
            self.stderr_r, w2 = os.pipe()
            actions += [(os.POSIX_SPAWN_DUP2, w1, 1), (os.POSIX_SPAWN_DUP2, w2, 2)]
            close_after += [w1, w2]
        if extra_fds:
            import fcntl

            for child_fd, parent_fd in extra_fds.items():
                # A high duplicate first: dup2 onto the same number is a no-op
                # that leaves close-on-exec set, and a low one could be
                # overwritten by another action before it is placed.
                high = fcntl.fcntl(parent_fd, fcntl.F_DUPFD_CLOEXEC, 64)
                close_after.append(high)
                actions.append((os.POSIX_SPAWN_DUP2, high, child_fd))
        _close_inherited_fds()
        try:
            self.pid = spawn(_resolve(argv[0], env), argv, dict(env), actions, new_session)
        except OSError as exc:
            for fd in (*close_after, self.stdin_w, self.stdout_r, self.stderr_r):
                if fd >= 0:
                    os.close(fd)
            raise SandboxUnavailable(f"cannot start {argv[0]}: {exc.strerror}") from exc
        for fd in close_after:
            os.close(fd)
        self.new_session = new_session
        self.returncode: int | None = None
        self._pidfd = -1
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            pass

    # -- ending it -----------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the process and, without a PID namespace, its whole group."""
        if self.returncode is not None:
            return
        try:
            if self.new_session:
                os.killpg(self.pid, SIGKILL)
            else:
                os.kill(self.pid, SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(self.pid, SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = -1
            except InterruptedError:
                continue
        self._close_pidfd()
        return self.returncode

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def close(self) -> None:
        for name in ("stdin_w", "stdout_r", "stderr_r"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        self._close_pidfd()

    # -- running it ----------------------------------------------------------

    def communicate(
        self,
        stdin: bytes | None = None,
        *,
        timeout: float | None = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
        cancelled: Callable[[], bool] | None = None,
        meter: OutputMeter | None = None,
    ) -> Outcome:
        """Feed stdin, collect output within budget, and stop at the deadline.

        `meter`, when given, counts the bytes read so far, for a caller on
        another thread that reports progress while this one blocks.

        The budget is split between stdout and stderr. Over it, or past the
        deadline, the process tree is killed: a 10 GB flood costs a bounded
        buffer, not the machine's memory.
        """
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        cap = max(max_output // 2, 1)
        out_fd, err_fd = self.stdout_r, self.stderr_r
        io = self._streams(stdin, cap, meter)
        timed_out = self._pump(io, deadline, cancelled)
        if self.returncode is None:
            self.kill()
            self.wait()
        else:
            self._close_pidfd()
        self.close()
        out, err = mark_truncated(bytes(io.bufs.get(out_fd, b"")),
                                  bytes(io.bufs.get(err_fd, b"")), cap, io.truncated)
        return Outcome(self.returncode or 0, out, err, io.truncated, timed_out,
                       (time.monotonic() - start) * 1000.0)

    def _streams(self, stdin: bytes | None, cap: int, meter: OutputMeter | None) -> _Streams:
        """The pipes and the pidfd registered for the loop; stdin closed at once when
        there is nothing to write, so the command never waits on an open pipe."""
        io = _Streams(stdin, cap, meter)
        poller = io.poller
        if self.stdout_r >= 0:
            for fd in (self.stdout_r, self.stderr_r):
                io.bufs[fd] = bytearray()
                poller.register(fd, select.POLLIN)
        if self.stdin_w >= 0:
            if io.pending:
                os.set_blocking(self.stdin_w, False)
                poller.register(self.stdin_w, select.POLLOUT)
            else:
                os.close(self.stdin_w)
                self.stdin_w = -1
        if self._pidfd >= 0:
            poller.register(self._pidfd, select.POLLIN)
        io.open_reads = len(io.bufs)
        return io

    def _pump(self, io: _Streams, deadline: float | None,
              cancelled: Callable[[], bool] | None) -> bool:
        """Move bytes until the command and its pipes are done, the budget is passed,
        the deadline comes (True) or the caller cancels; never blocks past the deadline."""
        poller = io.poller
        exited_at: float | None = None
        while True:
            if self.returncode is None and self.poll() is not None:
                exited_at = time.monotonic()
                if self._pidfd >= 0:
                    poller.unregister(self._pidfd)
                    self._close_pidfd()
            if io.open_reads == 0 and self.returncode is not None:
                return False
            now = time.monotonic()
            if exited_at is not None and now - exited_at > 0.5:
                # The command is gone but something it left holds the pipes:
                # without a PID namespace that is a daemon we now end.
                self.kill_group_only()
                return False
            if deadline is not None and now >= deadline:
                return True
            if cancelled is not None and cancelled():
                return False
            wait = 0.05 if exited_at is not None or self._pidfd < 0 else 0.25
            if deadline is not None:
                wait = min(wait, max(deadline - now, 0.0))
            for fd, ev in poller.poll(wait * 1000):
                if fd == self._pidfd:
                    continue
                if fd == self.stdin_w:
                    self._feed(io, fd, ev)
                else:
                    io.read(fd)
            if io.truncated:
                return False

    def _feed(self, io: _Streams, fd: int, ev: int) -> None:
        """Write the next piece of stdin; a reader that went away ends it, not the run."""
        if ev & (select.POLLERR | select.POLLHUP):
            io.pending = memoryview(b"")
        else:
            try:
                n = os.write(fd, io.pending[:_CHUNK])
                io.pending = io.pending[n:]
            except BlockingIOError:
                return
            except BrokenPipeError:
                io.pending = memoryview(b"")
        if not io.pending:
            io.poller.unregister(fd)
            os.close(fd)
            self.stdin_w = -1

    def kill_group_only(self) -> None:
        if self.new_session:
            try:
                os.killpg(self.pid, SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def mark_truncated(out: bytes, err: bytes, cap: int, truncated: bool) -> tuple[bytes, bytes]:
    """Say where a stream was cut at the budget, so a reader does not take it for the end."""
    if truncated:
        marker = f"\n[stockade: output truncated at {cap} bytes per stream]\n".encode()
        if len(out) >= cap:
            out += marker
        if len(err) >= cap:
            err += marker
    return out, err


class _Streams:
    """`communicate`'s state: what each pipe gave within its share of the budget, the
    stdin still to write, and whether the budget was passed."""

    def __init__(self, stdin: bytes | None, cap: int, meter: OutputMeter | None) -> None:
        self.poller = select.poll()
        self.bufs: dict[int, bytearray] = {}
        self.pending = memoryview(stdin or b"")
        self.open_reads = 0
        self.truncated = False
        self.cap = cap
        self.meter = meter

    def read(self, fd: int) -> None:
        """Read what is there into `fd`'s buffer, keeping at most `cap` bytes of it."""
        try:
            data = os.read(fd, _CHUNK)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return
            data = b""
        if not data:
            self.poller.unregister(fd)
            self.open_reads -= 1
            return
        if self.meter is not None:
            self.meter.bytes += len(data)
        buf = self.bufs[fd]
        room = self.cap - len(buf)
        if len(data) > room:
            buf += data[:max(room, 0)]
            self.truncated = True
        else:
            buf += data


class OutputMeter:
    """Bytes of output a running command has produced, read from another thread."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class Outcome:
    """What `communicate` observed: the raw facts, before any interpretation."""

    __slots__ = ("diagnostic", "duration_ms", "returncode", "stderr", "stdout", "timed_out",
                 "truncated")

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes, truncated: bool,
                 timed_out: bool, duration_ms: float, *, diagnostic: bytes | None = None
                 ) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.truncated = truncated
        self.timed_out = timed_out
        self.duration_ms = duration_ms
        # What a driver reads to tell its own start failure from the
        # command's: stderr, unless the caller relayed it elsewhere (a pty,
        # the terminal) and kept only what it saw of the start.
        self.diagnostic = stderr if diagnostic is None else diagnostic

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode >= 0 else None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None


def run_plain(argv: list[str], *, timeout: float = 10.0,
              env: Mapping[str, str] | None = None,
              extra_fds: Mapping[int, int] | None = None) -> tuple[int, bytes, bytes]:
    """Run a helper (bwrap --version, a probe) to completion: (returncode, stdout, stderr)."""
    proc = Process(argv, env if env is not None else os.environ, extra_fds=extra_fds)
    out = proc.communicate(timeout=timeout, max_output=1 << 16)
    return out.returncode, out.stdout, out.stderr


class BackgroundProcess:
    """A command that was started and is not being waited on (the Go seed's `Proc`).

    The session owns it, not the call that started it: a dev server started
    in one turn is meant to be there in the next, and closing the session is
    what stops it. Output is kept in a bounded window with absolute offsets,
    so a reader can ask "what came after byte N" without the buffer growing.
    """

    def __init__(self, proc: ProcessHandle, *, stdin: bytes | None = None,
                 window: int = DEFAULT_MAX_OUTPUT,
                 on_exit: Callable[[BackgroundProcess], None] | None = None) -> None:
        """`proc`: started by `Launch.start()` with piped stdin, stdout and stderr."""
        import threading

        self._proc = proc
        self.pid = self._proc.pid
        self._window = window
        self._bufs = {"stdout": bytearray(), "stderr": bytearray()}
        self._base = {"stdout": 0, "stderr": 0}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._on_exit = on_exit
        self._stdin = stdin
        self._thread = threading.Thread(target=self._pump, name=f"stockade-proc-{self.pid}",
                                        daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        proc = self._proc
        fds = {proc.stdout_r: "stdout", proc.stderr_r: "stderr"}
        if proc.stdin_w >= 0:
            try:
                if self._stdin:
                    os.write(proc.stdin_w, self._stdin)
            except OSError:
                pass
            os.close(proc.stdin_w)
            proc.stdin_w = -1
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        open_fds = len(fds)
        while open_fds:
            for fd, _ev in poller.poll(250):
                try:
                    data = os.read(fd, _CHUNK)
                except OSError:
                    data = b""
                if not data:
                    poller.unregister(fd)
                    open_fds -= 1
                    continue
                with self._lock:
                    name = fds[fd]
                    buf = self._bufs[name]
                    buf += data
                    if len(buf) > self._window:
                        drop = len(buf) - self._window
                        del buf[:drop]
                        self._base[name] += drop
            if proc.poll() is not None and open_fds:
                # Without a PID namespace an orphan may hold the pipes.
                proc.kill_group_only()
        proc.wait()
        proc.close()
        # Done only once the driver has cleaned up: `stop()` and `wait()`
        # return with the guard's sweep finished, so a script that stops its
        # processes and exits leaves nothing unswept.
        try:
            if self._on_exit is not None:
                self._on_exit(self)
        finally:
            self._done.set()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._done.is_set() else None

    def running(self) -> bool:
        return not self._done.is_set()

    def output(self, stream: str = "stdout", offset: int = 0) -> tuple[bytes, int]:
        """Bytes from absolute `offset` on, and the offset to ask from next time.

        Bytes older than the window are gone; asking for them returns what is
        left, starting at the window's beginning.
        """
        with self._lock:
            base = self._base[stream]
            buf = self._bufs[stream]
            start = max(offset - base, 0)
            return bytes(buf[start:]), base + len(buf)

    def wait(self, timeout: float | None = None) -> int | None:
        self._done.wait(timeout)
        return self.returncode

    def stop(self, timeout: float = 5.0) -> int | None:
        """End the command and everything it started; the group, not the process."""
        if not self._done.is_set():
            self._proc.kill()
        self._done.wait(timeout)
        return self.returncode
