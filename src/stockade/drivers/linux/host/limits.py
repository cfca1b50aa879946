"""Resource limits for one execution: a cgroup where stockade may make one, else rlimits.

A sandbox that bounds what a command may touch but not how much it may
consume still lets `:(){ :|:& };:` or a runaway allocation take the machine
down. A per-execution cgroup bounds the whole tree: memory (RSS, so an
mmap trick that slips past RLIMIT_AS is still caught), swap (none, or a
memory limit is just a slower way to fill the disk), pids, cpu. Where no
cgroup is writable, a transient scope of the systemd user manager does the
same; failing that, rlimits bound each process on its own. Which mechanism
holds is decided once per process and `stockade doctor` shows it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ...base import LaunchReport

CGROUP_ROOT = "/sys/fs/cgroup"
#: The leaf of a delegated v2 cgroup that stockade moves its members into.
SUPERVISOR = "stockade-supervisor"
V1_CONTROLLERS = ("memory", "pids", "cpu")


class Limits:
    """What to bound. None means unbounded (for memory and cpu)."""

    __slots__ = ("cpu_percent", "max_pids", "memory_mb")

    def __init__(self, memory_mb: int | None = None, max_pids: int | None = 200,
                 cpu_percent: int | None = None) -> None:
        self.memory_mb = memory_mb
        self.max_pids = max_pids
        self.cpu_percent = cpu_percent

    def any(self) -> bool:
        return bool(self.memory_mb or self.max_pids or self.cpu_percent)


def default_memory_mb(meminfo: str) -> int | None:
    """The bound on a command's tree when nothing sets one, from /proc/meminfo's text.

    Three quarters of physical memory, leaving the host a quarter (at least
    1 GiB, at most half) for the desktop, the agent and stockade: a build of
    ordinary size stays far below it, and a runaway one is killed before the
    host has to swap its own programs out. None where MemTotal cannot be read.
    """
    for line in meminfo.splitlines():
        key, _, value = line.partition(":")
        if key == "MemTotal" and value.split()[:1] and value.split()[0].isdigit():
            total = int(value.split()[0]) >> 10
            return total - min(max(total // 4, 1024), total // 2) or None
    return None


def machine_memory_default() -> int | None:
    """`default_memory_mb` of this machine."""
    return default_memory_mb(_read("/proc/meminfo"))


#: `memory_from` in the audit record: where the memory bound in force came from.
FROM_SETTING = "max_memory_mb"
FROM_DEFAULT = "default"
FROM_NOTHING = "none"


def memory_in_force(explicit: int | None, default: int | None,
                    kind: str) -> tuple[int | None, str]:
    """(MiB or None, where it came from) for one command (pure).

    `explicit` is the profile's max_memory_mb (the config's ceiling or the
    command's own ask): a cgroup bound and RLIMIT_AS, as always. The machine
    default only ever becomes a cgroup's bound: as RLIMIT_AS it would refuse
    the address space node (every WebAssembly memory reserves about 10 GiB),
    sanitizers and the Go race detector reserve without using, and under
    `rlimit` it would bound each process, never the host's sum, so there it
    does not apply.
    """
    if explicit:
        return explicit, FROM_SETTING
    if default and kind != "rlimit":
        return default, FROM_DEFAULT
    return None, FROM_NOTHING


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as {controller: path}; the v2 entry is under ""."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def detect(read: Callable[[str], str] | None = None,
           writable: Callable[[str], bool] | None = None,
           exists: Callable[[str], bool] | None = None,
           runtime_dir: str | None = None) -> tuple[str, dict[str, str], str]:
    """(mechanism, {controller: our cgroup dir}, why) for this process.

    mechanism is "cgroup-v2", "cgroup-v1", "systemd-scope" or "rlimit". For
    systemd-scope the dict is what detection found for ScopeCgroup instead:
    {"": the user manager's cgroup, "run": systemd-run, "runtime": the
    manager's runtime dir}. Pure given its probes, so each host shape is a
    unit test.
    """
    if runtime_dir is None:
        runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    read = read or _read
    writable = writable or (lambda p: os.access(p, os.W_OK))
    exists = exists or os.path.exists
    mine = parse_proc_cgroup(read("/proc/self/cgroup"))
    if exists(f"{CGROUP_ROOT}/cgroup.controllers") and "" in mine:
        own = mine[""].rstrip("/")
        if own.endswith("/" + SUPERVISOR):
            # An earlier stockade (or this one) already moved everything here;
            # the delegated cgroup is the one above.
            own = own.rpartition("/")[0]
        base = CGROUP_ROOT + own
        have = read(f"{base}/cgroup.controllers").split()
        missing = [c for c in V1_CONTROLLERS if c not in have]
        if writable(base) and not missing:
            return "cgroup-v2", {"": base}, f"delegated cgroup {base}"
        why = (f"cgroup v2 at {base} is not writable by this user" if not writable(base)
               else f"cgroup v2 at {base} lacks controllers {', '.join(missing)}")
        scope = _user_manager(read, exists, runtime_dir)
        if scope:
            return ("systemd-scope", scope, why + "; each command runs in a transient scope "
                    f"of the systemd user manager ({scope['']})")
        return "rlimit", {}, why + (
            " and no systemd user manager delegates memory and pids"
            " (run under `systemd-run --user --scope -p Delegate=yes` to give stockade one)")
    dirs: dict[str, str] = {}
    for controller in V1_CONTROLLERS:
        path = f"{CGROUP_ROOT}/{controller}{mine.get(controller, '/').rstrip('/')}"
        if controller in mine and exists(path) and writable(path):
            dirs[controller] = path
    if "memory" in dirs and "pids" in dirs:
        return "cgroup-v1", dirs, "cgroup v1 memory and pids controllers are writable"
    return "rlimit", {}, "no writable cgroup (v1 memory+pids or delegated v2) for this user"


SYSTEMD_RUN = ("/usr/bin/systemd-run", "/bin/systemd-run")
SETPRIV = "/usr/bin/setpriv"  # util-linux: on every system that has systemd


def _user_manager(read: Callable[[str], str], exists: Callable[[str], bool],
                  runtime_dir: str) -> dict[str, str]:
    """{"": the user manager's cgroup, "run": systemd-run, "runtime": its socket dir}, or {}.

    On a pure-v2 desktop (Ubuntu, Fedora) a user's login cgroup belongs to
    systemd and is not theirs to write, but user@UID.service is delegated
    memory, pids and cpu: a transient scope there gets real limits without
    root. The manager is reached on its private socket, so no D-Bus session
    bus is needed. Where the manager lacks a controller, MemoryMax= or
    TasksMax= would be accepted and silently not enforced, so it is not used.
    """
    uid = os.getuid()
    manager = f"{CGROUP_ROOT}/user.slice/user-{uid}.slice/user@{uid}.service"
    run = next((path for path in SYSTEMD_RUN if exists(path)), "")
    if not run or not exists(SETPRIV) or not exists(f"{runtime_dir}/systemd/private"):
        return {}
    have = read(f"{manager}/cgroup.controllers").split()
    if any(c not in have for c in V1_CONTROLLERS):
        return {}
    return {"": manager, "run": run, "runtime": runtime_dir}


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


_MECHANISM: tuple[str, dict[str, str], str] | None = None


def mechanism() -> tuple[str, dict[str, str], str]:
    """The detected mechanism, once per process."""
    global _MECHANISM
    if _MECHANISM is None:
        _MECHANISM = detect()
    return _MECHANISM


class ExecCgroup:
    """One execution's cgroup (v1: one per controller). Create, fill, read, remove."""

    def __init__(self, kind: str, bases: dict[str, str], limits: Limits, name: str) -> None:
        self.kind = kind
        self.limits = limits
        self.dirs: dict[str, str] = {}
        if kind == "cgroup-v2":
            base = bases[""]
            _reap_stale(base)
            self._v2_prepare(base)
            self.dirs[""] = os.path.join(base, name)
            os.mkdir(self.dirs[""])
            _JANITOR.add(self.dirs[""])
            self._v2_limits(self.dirs[""])
        else:
            wanted = {"memory": limits.memory_mb, "pids": limits.max_pids,
                      "cpu": limits.cpu_percent}
            try:
                for controller, base in bases.items():
                    # Each hierarchy joined costs a task migration, so only
                    # the ones with a limit to enforce are used.
                    if not wanted.get(controller):
                        continue
                    _reap_stale(base)
                    path = os.path.join(base, name)
                    os.mkdir(path)
                    _JANITOR.add(path)
                    self.dirs[controller] = path
                self._v1_limits()
            except BaseException:
                self.remove()
                raise

    # v2 forbids processes in a cgroup whose controllers are delegated to
    # children ("no internal processes"), so stockade first moves itself
    # into a leaf of its own cgroup, once.
    def _v2_prepare(self, base: str) -> None:
        leaf = os.path.join(base, SUPERVISOR)
        os.makedirs(leaf, exist_ok=True)
        if not _read("/proc/self/cgroup").strip().endswith("/" + SUPERVISOR):
            for pid in _read(os.path.join(base, "cgroup.procs")).split():
                try:
                    _write(os.path.join(leaf, "cgroup.procs"), pid)
                except OSError:
                    pass
        # Once per delegated cgroup: a later stockade, born in the leaf,
        # finds the controllers on already.
        enabled = _read(os.path.join(base, "cgroup.subtree_control")).split()
        if any(c not in enabled for c in V1_CONTROLLERS):
            _write(os.path.join(base, "cgroup.subtree_control"), "+memory +pids +cpu")

    def _v2_limits(self, path: str) -> None:
        lim = self.limits
        if lim.memory_mb:
            _write(os.path.join(path, "memory.max"), str(lim.memory_mb << 20))
            _write(os.path.join(path, "memory.swap.max"), "0")
        if lim.max_pids:
            _write(os.path.join(path, "pids.max"), str(lim.max_pids))
        if lim.cpu_percent:
            _write(os.path.join(path, "cpu.max"), f"{lim.cpu_percent * 1000} 100000")

    def _v1_limits(self) -> None:
        lim = self.limits
        mem = self.dirs.get("memory")
        if mem and lim.memory_mb:
            _write(os.path.join(mem, "memory.limit_in_bytes"), str(lim.memory_mb << 20))
            swap = os.path.join(mem, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # present only with swap accounting on
                _write(swap, str(lim.memory_mb << 20))
        pids = self.dirs.get("pids")
        if pids and lim.max_pids:
            _write(os.path.join(pids, "pids.max"), str(lim.max_pids))
        cpu = self.dirs.get("cpu")
        if cpu and lim.cpu_percent:
            _write(os.path.join(cpu, "cpu.cfs_period_us"), "100000")
            _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(lim.cpu_percent * 1000))

    def enter_argv(self, argv: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        """`argv`, started from inside this cgroup (`env`: the environment it starts with).

        The process joins before it execs, so everything it ever forks is
        born inside: no child can be listed too late and escape the limits,
        and one migration per hierarchy is all it costs (each is a few ms on
        a v1 kernel, where moving a task waits for an RCU grace period).
        """
        files = [os.path.join(path, "cgroup.procs") for path in self.dirs.values()]
        joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(files)))
        script = f'{joins} || exit 125; shift {len(files)}; exec "$@"'
        return ["/bin/sh", "-c", script, "stockade-cgroup", *files, *argv]

    def started(self) -> bool:
        """Did the command start inside? (The join happens before it can run at all.)"""
        return True

    def oom_killed(self) -> bool:
        if self.kind == "cgroup-v2":
            events = _read(os.path.join(self.dirs[""], "memory.events"))
        else:
            events = _read(os.path.join(self.dirs.get("memory", "/nonexistent"),
                                        "memory.oom_control"))
        for line in events.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() not in ("", "0"):
                return True
        return False

    def pids_exhausted(self) -> bool:
        path = self.dirs.get("" if self.kind == "cgroup-v2" else "pids", "")
        events = _read(os.path.join(path, "pids.events")) if path else ""
        return any(line.startswith("max ") and line.split()[1] != "0"
                   for line in events.splitlines())

    def kill(self) -> None:
        """Kill everything still in the cgroup (cgroup.kill on v2, SIGKILL per pid on v1)."""
        if self.kind == "cgroup-v2":
            try:
                _write(os.path.join(self.dirs[""], "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for path in self.dirs.values():
            for pid in _read(os.path.join(path, "cgroup.procs")).split():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass

    def drain(self) -> bool:
        """Wait until no task is left in any directory, killing stragglers.

        The metadata guard sweeps after this returns: a member still running
        could otherwise rename a hook into place after the sweep looked. An
        empty `cgroup.procs` means every member is past the point of running
        code; it is usually empty already when the command is reaped.
        """
        import time

        delay = 0.0002
        while any(_read(os.path.join(path, "cgroup.procs")).split()
                  for path in self.dirs.values()):
            if delay > 0.5:
                return False  # left for _reap_stale; never hang the caller
            self.kill()
            time.sleep(delay)
            delay *= 2
        return True

    def remove(self) -> None:
        """rmdir each directory, waiting for members that are still exiting.

        Right after the command is reaped, the sandbox's pid 1 is usually
        still being torn down and rmdir says EBUSY for well under a
        millisecond; a fixed 10 ms sleep here was a quarter of each
        command's overhead, so the wait starts at 0.2 ms and doubles.
        """
        import time

        for path in self.dirs.values():
            delay = 0.0002
            while True:
                try:
                    os.rmdir(path)
                    _JANITOR.discard(path)
                    break
                except FileNotFoundError:
                    _JANITOR.discard(path)
                    break
                except OSError:
                    if delay > 0.5:
                        break  # left for _reap_stale; never hang the caller
                    self.kill()
                    time.sleep(delay)
                    delay *= 2

    def dispose(self) -> None:
        """Kill and drain now; rmdir off the caller's path.

        Once `cgroup.procs` is empty a v1 hierarchy still says EBUSY to rmdir
        for up to 7 ms here, until the dead members' references are dropped;
        waiting for that was a sixth of a warm command. Nothing depends on
        when an empty directory goes: `flush_removals` waits for it at close
        and at exit, and the janitor removes one a killed stockade left.
        """
        self.kill()
        if self.drain():
            _REMOVALS.put(self)
        else:
            self.remove()


class _Removals:
    """Empty cgroups waiting for rmdir, on one thread started at first use."""

    def __init__(self) -> None:
        import _thread

        self._lock = _thread.allocate_lock()
        self._queue: list[ExecCgroup] = []
        self._busy = False
        self._at_exit = False
        #: Held while the thread runs: a flush waits by taking it.
        self._idle = _thread.allocate_lock()

    def put(self, cgroup: ExecCgroup) -> None:
        import _thread

        with self._lock:
            self._queue.append(cgroup)
            if self._busy:
                return  # the running thread takes it
            self._busy = True
            self._idle.acquire()  # held by a flush for an instant at most
            at_exit, self._at_exit = self._at_exit, True
        if not at_exit:
            import atexit

            atexit.register(flush_removals)
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    self._idle.release()
                    return
                cgroup = self._queue.pop(0)
            try:
                cgroup.remove()
            except Exception:
                pass  # left for _reap_stale

    def flush(self) -> None:
        with self._idle:
            pass


_REMOVALS = _Removals()


def flush_removals() -> None:
    """Wait until every cgroup handed to `dispose` is gone (close, exit)."""
    _REMOVALS.flush()


#: The janitor's program, for /bin/sh: a Python one cost every `stockade run` about
#: 4 ms, a second interpreter starting beside the sandbox's on two cores. The live
#: cgroups are its arguments ("+path" adds one, "-path" removes it); at end-of-file
#: it kills what is in each (cgroup.kill on v2, each pid on v1) and removes it, for
#: at most about 30 s. It writes to cgroup.kill only where that file exists.
JANITOR = r"""cd / || exit 1
set --
while IFS= read -r l; do
  case $l in
    +*) set -- "$@" "${l#+}" ;;
    -*) p=${l#-}; n=$#; i=0
        while [ "$i" -lt "$n" ]; do
          a=$1; shift; [ "$a" = "$p" ] || set -- "$@" "$a"; i=$((i+1))
        done ;;
  esac
done
tries=600
while [ "$#" -gt 0 ] && [ "$tries" -gt 0 ]; do
  n=$#; i=0
  while [ "$i" -lt "$n" ]; do
    g=$1; shift; i=$((i+1))
    [ -d "$g" ] || continue
    if ! { [ -e "$g/cgroup.kill" ] && echo 1 > "$g/cgroup.kill"; } 2>/dev/null; then
      for pid in $(cat "$g/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    fi
    rmdir "$g" 2>/dev/null || set -- "$@" "$g"
  done
  [ "$#" -gt 0 ] && sleep 0.05
  tries=$((tries-1))
done
"""


class _Janitor:
    """A process that removes this process's cgroups if it dies before it can.

    A stockade killed with SIGKILL runs no cleanup: its commands die with it
    (bwrap's parent-death signal, the init's lifeline, the Landlock reaper),
    but their cgroups stayed on the host until some later stockade happened
    to reap them. Started with the first cgroup; told of each one made and
    removed over a pipe; when the pipe hangs up -- stockade gone, however --
    it kills what is left in them and removes them, then exits. It runs as
    the user, outside any sandbox, and only ever touches the directories it
    was told of.
    """

    def __init__(self) -> None:
        import _thread

        self._lock = _thread.allocate_lock()
        self._fd = -1
        self._pid = 0

    def add(self, path: str) -> None:
        self._send(b"+", path)

    def discard(self, path: str) -> None:
        self._send(b"-", path)

    def _send(self, op: bytes, path: str) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._start()
            if self._fd >= 0:
                try:
                    os.write(self._fd, op + os.fsencode(path) + b"\n")
                except OSError:
                    pass  # the janitor is gone: _reap_stale is the fallback

    def _start(self) -> None:
        self._pid = os.getpid()
        if self._fd >= 0:
            os.close(self._fd)  # a forked child's copy of its parent's pipe
            self._fd = -1
        r, w = os.pipe()
        # Nothing of the caller's beyond stdio: an inherited pipe end held here
        # would keep its reader waiting for as long as the janitor lives.
        actions: list[tuple[object, ...]] = [
            (os.POSIX_SPAWN_DUP2, r, 0),
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
        try:
            inherited = [int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2]
        except OSError:
            inherited = []
        for fd in inherited:
            try:
                if os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:
                pass  # the listing's own descriptor, closed by now
        try:
            os.posix_spawn("/bin/sh", ["/bin/sh", "-c", JANITOR, "stockade-janitor"],
                           {"PATH": "/usr/bin:/bin"}, file_actions=actions, setsid=True)
        except OSError:
            os.close(w)
            return
        finally:
            os.close(r)
        self._fd = w


_JANITOR = _Janitor()


#: Runs inside the scope as the command's parent: records the scope's cgroup
#: (for kill), runs the command, then appends the scope's event counters,
#: which systemd deletes with the scope the moment its last process exits.
#: It names itself to the init, whose die-with-parent must watch it, not
#: stockade; setpriv's --pdeathsig ties it in turn to stockade.
SCOPE_SCRIPT = """r=$1 x=$2; shift 2
if [ "$x" = - ]; then unset XDG_RUNTIME_DIR; else XDG_RUNTIME_DIR=$x; fi
c=; while IFS= read -r l; do case $l in 0::*) c=${l#0::};; esac; done < /proc/self/cgroup
echo "started $c" > "$r" || exit 125
STOCKADE_INIT_PARENT=$$ "$@"; s=$?
cat "%s$c/memory.events" "%s$c/pids.events" >> "$r" 2>/dev/null
[ $s -gt 128 ] && kill -$((s - 128)) $$
exit $s"""


#: A scope systemd refused: the command never ran, and its stderr is systemd-run's reason.
SCOPE_REFUSED = "the command did not run: systemd-run could not start its scope"


class ScopeCgroup(ExecCgroup):
    """One execution in a transient scope of the systemd user manager.

    systemd-run and setpriv exec in place once the scope exists, so nothing
    stays between stockade and the command but the recording shell above.
    """

    def __init__(self, manager: dict[str, str], limits: Limits, name: str,
                 report_dir: str) -> None:
        self.kind = "systemd-scope"
        self.limits = limits
        self.dirs = {}
        self._manager = manager
        self._unit = f"{name}.scope"
        os.makedirs(report_dir, mode=0o700, exist_ok=True)
        self.report = os.path.join(report_dir, f"{name}.scope-report")

    def enter_argv(self, argv: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        lim = self.limits
        props = ["-p", "OOMPolicy=continue"]  # the kernel kills; the report must survive
        if lim.memory_mb:
            props += ["-p", f"MemoryMax={lim.memory_mb}M", "-p", "MemorySwapMax=0"]
        if lim.max_pids:
            props += ["-p", f"TasksMax={lim.max_pids + 1}"]  # +1: the recording shell
        if lim.cpu_percent:
            props += ["-p", f"CPUQuota={lim.cpu_percent}%"]
        keep = (env or {}).get("XDG_RUNTIME_DIR", "-")
        return ["/usr/bin/env", f"XDG_RUNTIME_DIR={self._manager['runtime']}",
                self._manager["run"], "--user", "--scope", "--quiet", "--collect",
                f"--unit={self._unit}", *props, "--", SETPRIV, "--pdeathsig", "KILL",
                "/bin/sh", "-c", SCOPE_SCRIPT % (CGROUP_ROOT, CGROUP_ROOT), "stockade-scope",
                self.report, keep, *argv]

    def _report(self) -> tuple[str, dict[str, int]]:
        """(the scope's cgroup dir or "", the counters the shell recorded)."""
        text = _read(self.report)
        first, _, rest = text.partition("\n")
        where = first.partition(" ")[2] if first.startswith("started ") else ""
        counters: dict[str, int] = {}
        for line in rest.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                counters[key] = counters.get(key, 0) + int(value)
        return (CGROUP_ROOT + where if where else ""), counters

    def started(self) -> bool:
        """Did systemd create the scope and start the command in it?"""
        return bool(self._report()[0])

    def oom_killed(self) -> bool:
        return self._report()[1].get("oom_kill", 0) > 0

    def pids_exhausted(self) -> bool:
        return self._report()[1].get("max", 0) > 0

    def kill(self) -> None:
        where = self._report()[0]
        if where:
            try:
                _write(os.path.join(where, "cgroup.kill"), "1")
            except OSError:
                pass  # gone already: systemd removes an empty scope

    def remove(self) -> None:
        try:
            os.unlink(self.report)
        except OSError:
            pass


def exec_cgroup(memory_mb: int | None, max_pids: int | None, cpu_percent: int | None,
                prefix: str, report_dir: str) -> ExecCgroup | None:
    """A cgroup for one command, or None where only rlimits apply or nothing is limited.

    Named at random, not by pid and counter: a stockade killed before its
    cleanup leaves an empty cgroup behind, and a reused pid must not collide.
    `report_dir` is where a systemd scope's recording shell writes: stockade's
    private state directory, never a shared one like /tmp where another user
    could plant a symlink at the report's name.
    """
    limits = Limits(memory_mb=memory_mb, max_pids=max_pids, cpu_percent=cpu_percent)
    kind, bases, _why = mechanism()
    if kind == "rlimit" or not limits.any():
        return None
    name = f"{prefix}-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        if kind == "systemd-scope":
            return ScopeCgroup(bases, limits, name, report_dir)
        return ExecCgroup(kind, bases, limits, name)
    except OSError as exc:
        from ....errors import SandboxUnavailable

        raise SandboxUnavailable(
            f"cannot create a cgroup for this command ({exc.filename or name}): {exc.strerror}"
        ) from exc


def read_limits(cgroup: ExecCgroup, report: LaunchReport) -> None:
    """After the run: what the cgroup saw, into the launch's report (before `remove`).

    Memory wins over pids when both fired: an allocation storm that also
    forked is reported as the limit that killed it.
    """
    from ...base import MEMORY, PIDS, StartFailure

    if not cgroup.started():
        report.start_failure = StartFailure(SCOPE_REFUSED, stderr_says_why=True)
    if cgroup.oom_killed():
        report.limit_exceeded = MEMORY
    elif cgroup.pids_exhausted():
        report.limit_exceeded = PIDS


def nproc_limit(max_pids: int | None, *, own_user_namespace: bool,
                joined_user_namespace: int = 0) -> int | None:
    """RLIMIT_NPROC for a command no cgroup bounds, or None where it would mean nothing.

    The kernel counts this limit per user and per user namespace, and never
    applies it to real root. In bwrap's fresh user namespace the count is the
    sandbox's own tasks, so max_pids is the limit. Without one (the Landlock
    backend) the count is every task the user has anywhere, so the limit is
    those plus max_pids: a fork bomb still stops, but until the command ends
    the user's other programs share that headroom. In a user namespace the
    command joins (`joined_user_namespace`, its inode: a Landlock session's)
    the count is the tasks already in it: a limit of the user's tasks
    everywhere plus max_pids let a session's fork bomb run to 448 where 50
    were allowed.
    """
    if not max_pids or os.getuid() == 0 or mechanism()[0] != "rlimit":
        return None
    if own_user_namespace:
        return max_pids
    return _user_tasks(os.getuid(), joined_user_namespace) + max_pids


def _user_tasks(uid: int, user_namespace: int = 0) -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) that `uid` runs now,
    in the user namespace of that inode if one is given.

    One stat per process: /proc/PID/task has two links plus one per thread.
    """
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                st = os.stat(f"/proc/{name}/task")
                if st.st_uid != uid or (
                        user_namespace and os.stat(f"/proc/{name}/ns/user").st_ino
                        != user_namespace):
                    continue
            except OSError:
                continue  # exited meanwhile
            count += st.st_nlink - 2
    return count


_REAPED: set[str] = set()


def _reap_stale(base: str) -> None:
    """Remove empty cgroups left by a stockade that was killed before its cleanup.

    Once per base per process: a listing of one directory. Only cgroups whose
    creating process is gone and that hold no task are removed.
    """
    if base in _REAPED:
        return
    _REAPED.add(base)
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith("stockade-"):
            continue
        # stockade-<pid>-<random> (bubblewrap) or stockade-ll-<pid>-... (Landlock)
        pid = next((part for part in name.split("-")[1:3] if part.isdigit()), "")
        if not pid or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            os.rmdir(os.path.join(base, name))  # refuses, harmlessly, if tasks remain
        except OSError:
            pass


def prime_migration() -> None:
    """Start the kernel's wait for a cgroup move now, on a side thread.

    Moving a task into a cgroup takes a lock whose writer first waits out an
    RCU grace period (7 to 13 ms on this project's VM) unless another move
    ended within about one grace period before; the join in `enter_argv`
    paid it in full on every command. The wait cannot be shortened, but it
    need not be idle: moving this process into the cgroup it is already in
    changes nothing, so doing that a few milliseconds ahead lets the wait
    pass while the sandbox is built, and the command's own move finds it
    over. Each call that lands inside the window keeps it open, so the CLI
    calls this as it starts and the driver again just before the launch.
    """
    kind, bases, _why = mechanism()
    if kind not in ("cgroup-v1", "cgroup-v2"):
        return
    if kind == "cgroup-v2":
        # Re-read: the first command moves stockade into the supervisor leaf.
        own = parse_proc_cgroup(_read("/proc/self/cgroup")).get("", "")
        procs = f"{CGROUP_ROOT}{own.rstrip('/')}/cgroup.procs"
    else:
        procs = os.path.join(next(iter(bases.values())), "cgroup.procs")
    import _thread

    _thread.start_new_thread(_move_self, (procs,))


def _move_self(procs: str) -> None:
    try:
        _write(procs, str(os.getpid()))
    except OSError:
        pass  # only a head start was lost
