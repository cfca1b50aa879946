"""Parked sandboxes: the next command's sandbox, built while the model thinks.

A cold start pays for bwrap's namespaces and mounts, the cgroup, and the
init's interpreter before the command's first instruction. A parked
sandbox has paid all of it, and every layer is in force: it is a complete
cold launch whose init stopped just before `execve`, blocked on a socket
only stockade holds (`initcore.await_command`). Dispatch sends the argv;
the init checks its descriptors and execs. One parked sandbox serves one
command and is gone with it: each command still has its own PID and mount
namespace and its own cgroup.

What makes a parked sandbox stale, and why each check is enough:

- the profile (mode, capabilities, grants, network policy, environment,
  cwd, the protected names that exist) is rebuilt for every command anyway;
  the sandbox is used only when the new one is identical;
- the mounts bind dentries, not names: a protected directory renamed away
  and replaced after bwrap bound it would leave the replacement writable.
  So no sandbox is parked while a command that can write its workspace is
  running (in this process), one is discarded the moment such a command
  starts, and at dispatch the identity (device, inode, type) of every path
  bwrap mounted under a writable root must be what it was when it parked;
  that identity was taken before bwrap mounted, so the init checks too,
  before it runs anything, that each such path is a mount of its own
  holding the object the host has there now (a name swapped in just
  before the mount and back after it passes the host's look, not this);
- the config files are compared by identity, size and times;
- a sandbox is parked from the last command's profile, made before that
  command ran: it is built only while every path the profile mounts over
  is still there, of the kind recorded (`mounts_in_place`), since bwrap
  would otherwise create the mount point on the host.

Anything else -- a different stdio arrangement, a background start, an
argv that cannot travel -- goes cold, exactly as without parking.

The parked process's spawner is a thread that lives as long as the pool:
PR_SET_PDEATHSIG (bwrap's --die-with-parent, the Landlock init's own) fires
when the *thread* that started a process exits, not the process.
"""

from __future__ import annotations

import os
import threading
import time

from ...capabilities import is_under
from ..base import Launch
from ..writers import WRITERS, writable_roots

TYPE_CHECKING = False

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping, Sequence

    from ...process import Process
    from ...profile import Profile
    from ..base import ProcessHandle
    from ..session import Session
    from .host.guard import MetadataGuard

    Build = Callable[..., Launch]

#: Parked sandboxes per session (config `warm_sandboxes`); 0 disables parking.
DEFAULT_SIZE = 1
#: Seconds a parked sandbox may wait unused (config `warm_idle_seconds`).
DEFAULT_IDLE = 300.0
#: How long a dispatch waits for a sandbox still being built: past this a
#: cold start would not have been faster either.
READY_WAIT = 10.0
#: How long a discarded sandbox gets to exit by itself before it is killed.
EXIT_WAIT = 2.0
#: The spawner's longest sleep. An idle timeout of `inf` given in code (past
#: the config's bound) made its wait overflow and the thread die: parking
#: stopped, silently. Waking with nothing to do costs nothing.
MAX_WAKE = 3600.0
#: The argv a parked init is started with; the real one arrives on its socket.
PLACEHOLDER = ["stockade-parked"]
#: After this many parked sandboxes in a row went unused (their profile
#: changed), a session parks only every 2**misses-th command, up to every
#: BACKOFF-th: building one costs a cold start's CPU, which a profile that
#: never repeats only wastes.
MISSES_BEFORE_BACKOFF = 2
BACKOFF = 64

START_WARM = "warm"
START_COLD = "cold"


#: What `WarmPool.take` finds of a parked sandbox: it serves the command; its
#: profile or view changed (or it never parked); it died while it waited.
FIT, UNFIT, DEAD = "fit", "unfit", "dead"


def _identity(path: str, *, links: bool = False) -> tuple[int, ...] | None:
    """(device, inode, type), and with `links` the change time, which a name removed
    and linked back moves: the mount over the old name went with it, the inode did not."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if links:
        return (st.st_dev, st.st_ino, st.st_mode & 0o170000, st.st_ctime_ns)
    return (st.st_dev, st.st_ino, st.st_mode & 0o170000)


def _file_stamp(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def profile_key(profile: Profile) -> str:
    """Everything about a profile the sandbox was built from, as one string."""
    from ...jsontext import to_json

    return to_json({"profile": profile.to_json(), "env": sorted(profile.env.items())})


def parked_roots(profile: Profile) -> tuple[str, ...]:
    """Where a writer spoils a sandbox parked from `profile`: its workspace and writable roots."""
    return (profile.workspace, *writable_roots(profile))


def mount_identity(profile: Profile, watch: Sequence[str]) -> tuple[object, ...]:
    """What the sandbox's mounts and the config depend on that the profile does not say.

    The identity of every path bwrap mounts that a command could replace:
    the workspace, the cwd, each protected, hidden and granted path, each
    writable root, the session's /tmp; and the config files' stamps. A few
    dozen lstats, never a walk.
    """
    roots = writable_roots(profile)
    paths = [profile.workspace, profile.cwd, *roots]
    masked = [p.path for p in profile.protected] + [path for path, _kind in profile.hidden]
    paths += [*profile.granted_sockets, *profile.sockets]
    if profile.session_tmp:
        paths.append(profile.session_tmp)
    files = [*watch, os.path.join(profile.workspace, "stockade.toml")]
    # A mask a writer can unlink and link back in place: its change time too.
    return (tuple(_identity(p) for p in paths),
            tuple(_identity(p, links=any(is_under(p, r) for r in roots)) for p in masked),
            tuple(_file_stamp(f) for f in files))


def mounts_in_place(profile: Profile) -> bool:
    """Whether every path bwrap mounts over is still there, of the kind the profile saw.

    A sandbox parks from the last command's profile, made before that
    command ran. When the command had moved away a hidden
    ~/.docker/config.json (a workspace of ~), bwrap made the mount point for
    its `--ro-bind /dev/null` on the host: an empty, read-only file, and its
    directory, in the person's home, which nothing removed. A cold start
    mounts over what its own profile just found; a parked one is built only
    while that still holds. A few lstats, no walk.
    """
    from ...profile import DIR, FILE, HOLD, LINK, MISSING, PIN, SOCKET, path_kind

    def other_than_a_dir(path: str) -> bool:
        # A hidden or protected "file" is anything but a directory (a socket,
        # a fifo); a link now there would lead bwrap's mount point elsewhere.
        return path_kind(path) not in (DIR, LINK, MISSING)

    if path_kind(profile.workspace) != DIR:
        return False
    for path, kind in profile.hidden:
        if not (path_kind(path) == DIR if kind == DIR else other_than_a_dir(path)):
            return False
    for item in profile.protected:
        if item.kind in (DIR, PIN, HOLD) and path_kind(item.path) != DIR:
            return False
        if item.kind == FILE and not other_than_a_dir(item.path):
            return False
    return (all(other_than_a_dir(sock) for sock in profile.sockets)
            and all(path_kind(sock) == SOCKET for sock in profile.granted_sockets))


class Parked:
    """One parked sandbox: its launch, its running process, stockade's end of its socket."""

    __slots__ = ("built", "created", "discarded", "identity", "key", "launch", "proc", "ready",
                 "roots", "session", "sock", "tainted")

    def __init__(self, session: Session, profile: Profile, key: str,
                 identity: tuple[object, ...]) -> None:
        self.session = session
        self.key = key
        self.identity = identity
        self.roots = parked_roots(profile)
        self.created = time.monotonic()
        self.launch: Launch | None = None
        self.proc: Process | None = None
        self.sock: socket.socket | None = None
        self.ready = False
        self.tainted = False
        self.discarded = False
        self.built = threading.Event()

    def wait_ready(self, timeout: float) -> bool:
        """Until the init says it is parked; False if it died or took too long."""
        deadline = time.monotonic() + timeout
        if not self.built.wait(timeout) or self.discarded:
            return False
        if self.ready:
            return True
        timeout = max(0.0, deadline - time.monotonic())
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.settimeout(timeout)
            self.ready = sock.recv(1) == b"R"
        except OSError:
            self.ready = False
        return self.ready

    def alive(self) -> bool:
        proc = self.proc
        return proc is not None and proc.poll() is None

    def dispatch(self, argv: list[str], view: Sequence[tuple[str, bool]]) -> bool:
        """Send the argv, and the host's view of each path mounted over a writable
        root (`view`: path, and whether the mount shows the host's own object);
        True once the init has found every one mounted as the host has it now
        and runs the command, False when it refused. OSError when it is gone.

        The identities compared at `take` were taken before bwrap mounted: a
        name swapped in between and back after left them equal, and the path
        open inside. Only the init sees which object its mount holds.
        """
        import socket

        from ...jsontext import to_json

        sock = self.sock
        assert sock is not None
        self.sock = None
        checks = []
        for path, same in view:
            identity = _identity(path)
            checks.append([path, same, *(identity[:2] if identity else (-1, -1))])
        try:
            sock.settimeout(READY_WAIT)
            sock.sendall(to_json({"argv": list(argv), "view": checks}
                                 ).encode("utf-8", "surrogatepass"))
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(1) == b"G"
        finally:
            sock.close()

    def discard(self) -> None:
        """Stop it and undo its launch: process, cgroup, descriptors, scratch (idempotent)."""
        with WRITERS.lock:
            WRITERS.parked.discard(self)
            self.discarded = True
        if self.sock is not None:
            self.sock.close()  # the init reads end-of-file and refuses
            self.sock = None
        proc, self.proc = self.proc, None
        launch, self.launch = self.launch, None
        try:
            if proc is not None:
                # The init exits by itself on the socket's end-of-file, and
                # bwrap then reaps its own children. Killed from outside,
                # bwrap's PID-1 helper would be orphaned to the host's PID 1,
                # and a zombie still counts as a cgroup member: rmdir would
                # refuse until stockade gave up on it.
                deadline = time.monotonic() + EXIT_WAIT
                while proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.002)
                proc.kill()
                proc.wait()
                proc.close()
        finally:
            if launch is not None:
                launch.cleanup()


class WarmPool:
    """Per session, up to `size` parked sandboxes for the profile of its last command.

    `build(argv, profile, park_fd=N, guard=False)` is the driver's own cold
    preparation; `guard(profile)` takes the metadata guard's baseline, at
    dispatch, never at park time: a baseline taken while the previous
    command ran would record what it planted as the way things were.
    Everything kept per session is keyed by its `Session`, never by a name
    another session could share.
    """

    def __init__(self, build: Build, guard: Callable[[Profile], MetadataGuard | None], *,
                 size: int = DEFAULT_SIZE, idle_timeout: float = DEFAULT_IDLE,
                 watch: Sequence[str] = (),
                 view: Callable[[Profile], list[tuple[str, bool]]] | None = None) -> None:
        self._build = build
        self._guard = guard
        self.view = view or (lambda _profile: [])
        self.size = size
        self.idle_timeout = idle_timeout
        self.watch = tuple(watch)
        self._cond = threading.Condition()
        self._parked: dict[Session, list[Parked]] = {}
        self._wanted: dict[Session, Profile] = {}
        self._doomed: list[Parked] = []
        self._misses: dict[Session, int] = {}
        self._skips: dict[Session, int] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self._building = 0
        #: Sessions whose commands come faster than a sandbox parks, when each
        #: last ended, and how long the last park measured took.
        self._hurried: set[Session] = set()
        self._ended: dict[Session, float] = {}
        self._build_time = 0.1
        #: Dispatches served by a parked sandbox, and parked ones found unfit.
        self.hits = 0
        self.misses = 0

    # -- the pipeline's side --------------------------------------------------

    def launch(self, argv: list[str], profile: Profile) -> WarmLaunch:
        """`profile.session` is set: a command without a session never parks."""
        session = profile.session
        assert session is not None
        ended = self._ended.get(session)
        if session in self._hurried and ended is not None and (
                time.monotonic() - ended > 1.5 * self._build_time):
            # The session slowed down to the model's pace again: park once more.
            self._hurried.discard(session)
        return WarmLaunch(WarmSource(self, argv, profile))

    def take(self, profile: Profile) -> Parked | None:
        """A parked sandbox built for exactly this profile and view, or None (go cold)."""
        session = profile.session
        assert session is not None
        with self._cond:
            entries = self._parked.get(session)
            parked = entries.pop(0) if entries else None
        if parked is None:
            return None
        verdict = self._verdict(parked, profile)
        WRITERS.forget(parked)
        if verdict != FIT:
            self.misses += 1
            if verdict == UNFIT:  # a death says nothing of the profile: no back-off
                self._misses[session] = self._misses.get(session, 0) + 1
            self.retire(parked)
            return None
        self.hits += 1
        self._misses[session] = 0
        return parked

    def _verdict(self, parked: Parked, profile: Profile) -> str:
        """`FIT`, `UNFIT` or `DEAD`: whether `parked`, taken off the pool, can serve `profile`."""
        if (parked.tainted or parked.key != profile_key(profile)
                or parked.identity != mount_identity(profile, self.watch)):
            return UNFIT
        was_ready = parked.wait_ready(0.0)
        if not (parked.wait_ready(READY_WAIT) and not parked.tainted and not parked.discarded):
            return UNFIT
        if not parked.alive():
            # Killed while it waited (the OOM killer, a kill from outside):
            # dispatched, it raised BrokenPipeError out of execute(), with no
            # audit record and its pipes left open.
            return DEAD
        if not was_ready:
            # Commands come faster than a sandbox parks (back to back): the
            # next ones start cold, which costs less than a cold start
            # competing with a park in the background for the same cores
            # and the same interpreter lock.
            self._build_time = time.monotonic() - parked.created
            self._hurried.add(parked.session)
        return FIT

    def guard(self, profile: Profile) -> MetadataGuard | None:
        return self._guard(profile)

    def build_cold(self, argv: list[str], profile: Profile,
                   guard: MetadataGuard | None = None) -> Launch:
        """The cold launch; `guard`: one the command already took, which it then owns."""
        return self._build(argv, profile, guard=True if guard is None else guard)

    def unused(self, parked: Parked) -> None:
        """A sandbox `take` handed out that could not serve after all: cold, and torn down."""
        self.hits -= 1
        self.misses += 1
        self.retire(parked)

    def request(self, profile: Profile) -> None:
        """After a command: park the next one for its session, in the background.

        Never for a closed session: one closed while its command ran had a
        sandbox parked for it at the command's end, after `drop`, which
        waited for the idle timeout, a live init or a dead bwrap whose /tmp
        was gone.
        """
        session = profile.session
        if self.size <= 0 or session is None or session.closed:
            return
        self._ended[session] = time.monotonic()
        if session in self._hurried:
            return
        if self._misses.get(session, 0) >= MISSES_BEFORE_BACKOFF:
            skips = self._skips.get(session, 0) + 1
            self._skips[session] = skips
            if skips % min(BACKOFF, 2 ** self._misses[session]):
                return
        with self._cond:
            # Looked at again under the lock `drop` takes after the session
            # is marked closed: a request either sees it closed or is undone.
            if self._closed or session.closed:
                return
            self._wanted[session] = profile
            self._ensure_thread()
            self._cond.notify()

    def drop(self, session: Session) -> None:
        """`session` closed: what is parked for it goes now, not at the idle timeout."""
        with self._cond:
            doomed = self._parked.pop(session, [])
            for kept in (self._wanted, self._misses, self._skips, self._ended):
                kept.pop(session, None)
            self._hurried.discard(session)
        for parked in doomed:
            parked.discard()

    def close(self) -> None:
        """Stop every parked sandbox and the spawner (stockade closes or exits)."""
        with self._cond:
            self._closed = True
            doomed = [p for entries in self._parked.values() for p in entries]
            doomed += self._doomed
            self._parked.clear()
            self._wanted.clear()
            self._doomed = []
            self._cond.notify()
            thread = self._thread
        for parked in doomed:
            parked.discard()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=READY_WAIT)

    def settle(self, timeout: float) -> bool:
        """Wait until nothing is being built and every parked sandbox is ready.

        For benchmarks and tests that must know the next command can be
        served warm; the pipeline never waits here.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._building or self._ready_wants():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            entries = [p for group in self._parked.values() for p in group]
        return all(p.wait_ready(max(0.001, deadline - time.monotonic())) for p in entries)

    def writer_ended(self) -> None:
        """A command that could write a workspace ended in this process.

        A session that asked for a sandbox while it wrote is waiting for it to
        end: without a word it waited until its next command, which then
        started cold.
        """
        with self._cond:
            if self._wanted:
                self._cond.notify()

    def parked_count(self) -> int:
        with self._cond:
            return sum(len(v) for v in self._parked.values())

    # -- the spawner ------------------------------------------------------------

    def retire(self, parked: Parked) -> None:
        """Discard on the spawner's thread: a dispatch must not wait for a teardown."""
        with self._cond:
            if self._closed or self._thread is None:
                retire_now = True
            else:
                retire_now = False
                self._doomed.append(parked)
                self._cond.notify()
        if retire_now:
            parked.discard()

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stockade-warm", daemon=True)
            self._thread.start()
            _close_at_exit(self)
            WRITERS.on_end(self.writer_ended)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._doomed or self._ready_wants()
                           or self._expired()):
                    self._cond.wait(self._next_wake())
                if self._closed:
                    return
                doomed, self._doomed = self._doomed, []
                expired = self._take_expired()
                building = self._start_builds()
            for parked in [*doomed, *expired]:
                parked.discard()
            for parked, profile in building:
                try:
                    self._park(parked, profile)
                finally:
                    with self._cond:
                        self._building -= 1
                        self._cond.notify_all()

    def _take_expired(self) -> list[Parked]:
        """(`_cond` held.) The sandboxes past the idle timeout, off the pool."""
        expired = self._expired()
        for parked in expired:
            self._parked.get(parked.session, []).remove(parked)
        return expired

    def _start_builds(self) -> list[tuple[Parked, Profile]]:
        """(`_cond` held.) Each wanted sandbox that can be built now, listed as built.

        Listed in the step that takes it off the wanted list: a command
        arriving meanwhile waits for it rather than starting a second
        sandbox beside it, and a session closing meanwhile finds it to
        discard.
        """
        building = []
        for session, profile in self._ready_wants().items():
            parked = Parked(session, profile, profile_key(profile), ())
            if not WRITERS.watch(parked):
                continue  # asked again when that command ends
            # Only now, so that a writer starting at any time after this view
            # was taken has tainted it.
            parked.identity = mount_identity(profile, self.watch)
            del self._wanted[session]
            self._parked.setdefault(session, []).append(parked)
            building.append((parked, profile))
        self._building += len(building)
        return building

    def _ready_wants(self) -> dict[Session, Profile]:
        """Wanted sandboxes that can be built now: room left, and no writer in their workspace."""
        out = {}
        for session, profile in self._wanted.items():
            if len(self._parked.get(session, [])) >= self.size:
                continue
            if WRITERS.running_in(parked_roots(profile)):
                continue  # asked again when that command ends
            out[session] = profile
        return out

    def _expired(self) -> list[Parked]:
        now = time.monotonic()
        return [p for entries in self._parked.values() for p in entries
                if now - p.created >= self.idle_timeout]

    def _next_wake(self) -> float | None:
        created = [p.created for entries in self._parked.values() for p in entries]
        if not created:
            return None
        left = min(created) + self.idle_timeout - time.monotonic()
        # (`not left <= MAX_WAKE`: NaN too, which would otherwise spin at 0.)
        return MAX_WAKE if not left <= MAX_WAKE else max(0.0, left)

    def _park(self, parked: Parked, profile: Profile) -> None:
        import socket  # here, not at import: the CLI's cold path imports this module

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        gone = True
        try:
            from ...process import Process

            launch = self._build(PLACEHOLDER, profile, park_fd=theirs.fileno(), guard=False)
            with WRITERS.lock:
                parked.launch = launch
            # Checked last, just before bwrap mounts: what the last command
            # moved away is not parked over (the next command goes cold and
            # parks from its own profile).
            if mounts_in_place(profile):
                fds = dict(launch.extra_fds)
                fds[theirs.fileno()] = theirs.fileno()
                proc = Process(launch.argv, launch.env, extra_fds=fds)
                with WRITERS.lock:
                    parked.proc = proc
                    parked.sock = mine
                    gone = parked.discarded or self._closed
        except Exception:
            # A sandbox that cannot park is no error: the command goes cold,
            # and a cold start reports whatever is really wrong.
            gone = True
        finally:
            theirs.close()
            if parked.sock is not mine:
                mine.close()  # (closing a socket twice, after a discard, is a no-op)
        if gone:
            with self._cond:
                entries = self._parked.get(parked.session, [])
                if parked in entries:
                    entries.remove(parked)
            parked.discarded = False  # discard() again: what was built after it ran
            parked.discard()
        parked.built.set()


class WarmSource:
    """What a warm launch's process comes from: its pool, its command and its profile.

    A parked sandbox when one fits, else the cold launch, built the first
    time anything asks for it.
    """

    __slots__ = ("command", "pool", "profile")

    def __init__(self, pool: WarmPool, argv: list[str], profile: Profile) -> None:
        self.pool = pool
        self.command = list(argv)
        self.profile = profile

    def cold(self, guard: MetadataGuard | None) -> Launch:
        return self.pool.build_cold(self.command, self.profile, guard)


class WarmLaunch(Launch):
    """A launch that becomes a parked sandbox at `start()` when one fits, else a cold one.

    Until then nothing exists. `argv`, `env` and `extra_fds` are the cold
    launch's, built when first read: a caller that reads them to spawn by
    hand gets exactly today's path.
    """

    __slots__ = ("_guard", "_inner", "_source", "_writing")

    def __init__(self, source: WarmSource) -> None:
        # Not Launch.__init__: what to spawn is the source's, not known yet.
        self.begin(source.profile.cwd, _finish)
        self._source = source
        self._inner: Launch | None = None
        self._guard: MetadataGuard | None = None
        self._writing = False

    @property
    def argv(self) -> list[str]:  # type: ignore[override]  # read-only: the source's
        return self._cold().argv

    @property
    def env(self) -> dict[str, str]:  # type: ignore[override]  # read-only: the source's
        return self._cold().env

    @property
    def extra_fds(self) -> dict[int, int]:  # type: ignore[override]  # read-only: the source's
        return self._cold().extra_fds

    def _cold(self) -> Launch:
        if self._inner is None:
            # A guard taken for a parked sandbox that could not serve goes
            # with the command to its cold launch: one baseline per command,
            # taken before it ran, released once, with the launch.
            guard, self._guard = self._guard, None
            self._inner = self._source.cold(guard)
            self.report.audit.update(self._inner.report.audit, start=START_COLD)
            self._writes()
        return self._inner

    def _writes(self) -> None:
        if not self._writing:
            self._writing = True
            WRITERS.start(id(self), writable_roots(self._source.profile))

    def start(self, *, stdin: int | None = None, capture: bool = True,
              new_session: bool = True, stdio: Mapping[int, int] | None = None
              ) -> ProcessHandle:
        if self._inner is None and stdin is None and capture and new_session and not stdio:
            proc = self._warm()
            if proc is not None:
                return proc
        return self._cold().start(stdin=stdin, capture=capture, new_session=new_session,
                                  stdio=stdio)

    def _warm(self) -> ProcessHandle | None:
        """The command in a parked sandbox, under the guard taken now; None: go cold."""
        pool, profile = self._source.pool, self._source.profile
        parked = pool.take(profile)
        if parked is None:
            return None
        try:
            # Whatever the mode, read-only too: taking it sweeps what a killed
            # run left (one stat when nothing), which a dispatch without it
            # left live for the person's next `git commit`.
            self._guard = pool.guard(profile)
        except BaseException:
            pool.retire(parked)
            raise
        return self._dispatch(parked)

    def _dispatch(self, parked: Parked) -> ProcessHandle | None:
        """The parked sandbox, running the command; None: it cannot, go cold."""
        guard, pool = self._guard, self._source.pool
        if guard is not None and guard.stale:
            # The guard just swept what a killed stockade's command left:
            # the sandbox was parked over the view before that sweep.
            pool.unused(parked)
            return None
        self._writes()
        proc = parked.proc
        if guard is not None and parked.launch is not None and parked.launch.private is not None:
            # Bound when it was parked, filled now: the configs as they are.
            guard.adopt(parked.launch.private)
        try:
            running = parked.dispatch(self._source.command, pool.view(self._source.profile))
        except TimeoutError:
            # No answer: it may yet have said go, so a cold start could run
            # the command twice. Stopped, and said.
            pool.unused(parked)
            from ...errors import SandboxUnavailable

            raise SandboxUnavailable(
                f"a parked sandbox did not answer within {READY_WAIT:g} s: it was stopped, "
                "and the command may have begun in it; run it again") from None
        except OSError:
            running = False
        if not running:
            # It died between the look `take` had and now, or its mounts are
            # not on what the host has: the command has not started, and
            # starts cold, under the guard already taken.
            pool.unused(parked)
            return None
        self._inner, parked.launch = parked.launch, None
        assert self._inner is not None and proc is not None
        self.report.audit.update(self._inner.report.audit, start=START_WARM)
        if guard is not None and guard.unwatched:
            self.report.audit["guard_watch"] = guard.unwatched
        return proc


def _finish(launch: Launch) -> None:
    assert isinstance(launch, WarmLaunch)
    inner, launch._inner = launch._inner, None
    report = launch.report
    try:
        if inner is not None:
            try:
                inner.cleanup()
            finally:
                report.merge(inner.report)
    finally:
        guard, launch._guard = launch._guard, None
        try:
            if guard is not None:
                report.neutralised += guard.release()
        finally:
            if launch._writing:
                launch._writing = False
                WRITERS.end(id(launch))
            launch._source.pool.request(launch._source.profile)


_POOLS: list[WarmPool] = []


def _close_at_exit(pool: WarmPool) -> None:
    if not _POOLS:
        import atexit

        atexit.register(_close_all)
    _POOLS.append(pool)


def _close_all() -> None:
    for pool in list(_POOLS):
        try:
            pool.close()
        except Exception:  # exiting: one pool's failure must not keep the rest parked
            pass
