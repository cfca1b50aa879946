"""A Windows machine described, not built: the core's profiles for it with Windows paths,
and a recording seam.

`FakeWin32` implements the driver's `Win32` seam. It records every call in
order (`calls`), keeps the DACL and label state per path so a test can check
that a run leaves every path as it found it, and can be told to fail any
call. With `run` set, `create_process` starts a real local process whose
pipes the driver reads, so timeouts and output budgets are exercised for
real; `terminate_job` then kills that process's whole group.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping

from described_machine import OnDisk, laid_out, remembered
from stockade.capabilities import NetworkPolicy, capabilities_for_mode
from stockade.command import SandboxCommand
from stockade.config import SandboxConfig
from stockade.core import SandboxCore
from stockade.drivers.windows import plan
from stockade.drivers.windows.win32 import Started, Win32, Win32Error
from stockade.profile import DIR, FILE, Profile, Protected

WS = "C:\\Users\\dev\\work\\proj"
HOME = "C:\\Users\\dev"
STATE = "C:\\Users\\dev\\AppData\\Local\\stockade"
CMD = "C:\\Windows\\System32\\cmd.exe"
PYEXE = "C:\\Tools\\Python\\python.exe"
ENV = {"PATH": "C:\\Windows\\System32;C:\\Tools\\Python", "PATHEXT": ".COM;.EXE;.BAT;.CMD",
       "SystemRoot": "C:\\Windows", "USERPROFILE": HOME, "STOCKADE_SANDBOX": "windows",
       "TMPDIR": "/tmp"}


#: A few names of each kind, for a test of how the plan translates them: the core
#: protects and hides every name it knows, which an exact list would restate.
FEW_PROTECTED = (Protected(f"{WS}\\.git", "pin"), Protected(f"{WS}\\.git\\hooks", "dir"),
                 Protected(f"{WS}\\.git\\config", "file"),
                 Protected(f"{WS}\\.stockade", "watch"), Protected(f"{WS}\\.vscode", "dir"))
FEW_HIDDEN = ((f"{HOME}\\.aws", "dir"),)
EXACT = {"protected": FEW_PROTECTED, "hidden": FEW_HIDDEN, "shown": ()}

#: The described machine, as Windows paths of the profile's user (kind by path).
MACHINE = {f"{WS}\\.git\\hooks": DIR, f"{WS}\\.git\\config": FILE, f"{WS}\\.vscode": DIR,
           f"{HOME}\\.aws\\credentials": FILE, f"{HOME}\\AppData\\Roaming": DIR,
           f"{HOME}\\AppData\\Local\\Temp": DIR}


def win_profile(mode: str = "workspace-write", *, network: NetworkPolicy | None = None,
                protected: tuple[Protected, ...] | None = None,
                hidden: tuple[tuple[str, str], ...] | None = None,
                read_extra: tuple[str, ...] = (), write_roots: tuple[str, ...] = (),
                max_memory_mb: int | None = None, session_tmp: str | None = None,
                env: dict[str, str] | None = None,
                shown: tuple[tuple[str, str], ...] | None = None,
                workspace: str = WS) -> Profile:
    """The profile `SandboxCore.make_profile` builds on the described Windows machine,
    then what the test sets itself (the areas it hides, the names it protects).

    The machine is laid out on disk and the core runs there with a Windows
    logon's environment (USERPROFILE, APPDATA, LOCALAPPDATA, no HOME); the
    profile comes back spelled as on Windows, `C:\\...`. What exists only on
    this host (`/etc/shadow`) is not on the machine described, and is left out.
    """
    key = repr(("win", mode, network, workspace))
    built = remembered(key, lambda: _built(mode, network, workspace))
    given: dict[str, object] = {"read_extra": read_extra, "write_roots": write_roots,
                                "max_memory_mb": max_memory_mb}
    for name, value in (("protected", protected), ("hidden", hidden), ("shown", shown),
                        ("session_tmp", session_tmp), ("env", env)):
        if value is not None:
            given[name] = dict(value) if name == "env" else value
    if mode == "read-only":
        given["protected"] = ()
    return built.replace(**given)


def _built(mode: str, network: NetworkPolicy | None, workspace: str) -> Profile:
    on_c = {_posix(path): kind for path, kind in MACHINE.items()}
    with laid_out({**on_c, _posix(workspace): DIR}) as root:
        on_disk = OnDisk(root, ("/Users",))
        local = on_disk.path(_posix(f"{HOME}\\AppData\\Local"))
        host_env = {**ENV, "USERPROFILE": on_disk.path(_posix(HOME)),
                    "APPDATA": on_disk.path(_posix(f"{HOME}\\AppData\\Roaming")),
                    "LOCALAPPDATA": local, "TEMP": f"{local}/Temp", "HOMEDRIVE": "C:",
                    "HOMEPATH": "\\Users\\dev", "USERNAME": "dev"}
        caps = capabilities_for_mode(mode, on_disk.path(_posix(workspace)))
        core = SandboxCore(SandboxConfig(backend="windows"), env=host_env)
        try:
            # As `stockade run` opens it: no session TMPDIR, the driver makes one per run
            # (a test of a session's gives `session_tmp`).
            ws = core.new_session("s1", on_disk.path(_posix(workspace)), ephemeral_tmp=True)
            built = core.make_profile(ws, SandboxCommand(CMD, ["/c", "ver"]), mode,
                                      caps.replace(network=network or NetworkPolicy.none()),
                                      ws.cwd, "windows")
        finally:
            core.close()
        return _spelled_on_windows(on_disk.taken_off(built))


def _posix(path: str) -> str:
    """`C:\\Users\\dev` as laid out on disk: `/Users/dev`."""
    assert path[:3].upper() == "C:\\", path
    return "/" + path[3:].replace("\\", "/")


def _spelled_on_windows(profile: Profile) -> Profile:
    """Every path of the machine (those under `/Users`) as Windows spells it; the
    paths of this host alone dropped from the lists that name them."""
    def win(value: str) -> str:
        return "C:" + value.replace("/", "\\")

    def ours(path: str) -> bool:
        return path.startswith("/Users/")

    def each(items: tuple[object, ...]) -> tuple[object, ...]:
        out: list[object] = []
        for item in items:
            path = item.path if isinstance(item, Protected) else (
                item[0] if isinstance(item, tuple) else item)
            if not isinstance(path, str) or not ours(path):
                continue
            if isinstance(item, Protected):
                out.append(Protected(win(item.path), item.kind))
            elif isinstance(item, tuple):
                out.append((win(item[0]), *item[1:]))
            else:
                out.append(win(path))
        return tuple(out)

    lists = {name: each(getattr(profile, name)) for name in (
        "hidden", "shown", "absent", "protected", "read_extra", "write_roots",
        "private_around", "granted_sockets", "sockets")}
    env = {k: win(v) if ours(v) else v for k, v in profile.env.items()}
    tmp = profile.session_tmp
    return profile.replace(
        workspace=win(profile.workspace), cwd=win(profile.cwd), home=win(profile.home),
        session_tmp=win(tmp) if tmp else tmp, env=env,
        caches=tuple((win(a), win(b), v) for a, b, v in profile.caches if ours(a)), **lists)


class FakeWin32(Win32):
    def __init__(self, *, files: tuple[str, ...] = (CMD, PYEXE), links: tuple[str, ...] = (),
                 run: list[str] | None = None) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.fail: dict[str, Win32Error] = {}
        self.files = {f.lower() for f in files}
        self.links = {p.lower() for p in links}
        self.dirs: set[str] = set()
        self.dacl: dict[str, list[tuple[str, str, int, int]]] = {}
        self.labels: dict[str, str] = {}
        self.profiles: set[str] = set()
        self.handles: set[int] = set()
        self.run = run
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.job_of: dict[int, int] = {}
        self.messages: dict[int, list[int]] = {}
        self.exit_code = 0
        self._next = 100
        #: Whether this stockade runs elevated (TokenElevation).
        self.elevated = False
        #: Process ids that still run; a journal of any other pid is a dead stockade's.
        self.alive: set[int] = {os.getpid()}
        #: Creation times of the processes in `alive` (default: one per id); a pid
        #: given a new time here is the id reused by another process.
        self.created: dict[int, int] = {}
        # -- the file system's own rules, kept apart from what the driver decides --
        #: Paths that exist (lower-cased), beyond the stub directories in `dirs`.
        self.tree: set[str] = set()
        #: Junctions: lower-cased path -> lower-cased target. Propagation is modelled
        #: as following them (the pessimistic reading, until a host says otherwise).
        self.junctions: dict[str, str] = {}
        #: Hard links: lower-cased path -> the file's id; names of one id share one
        #: security descriptor, so what is inherited through one name holds for all.
        self.hardlinks: dict[str, str] = {}
        #: Inherited grants: security descriptor -> SIDs that hold an inherited ACE.
        self.inherited: dict[str, set[str]] = {}
        #: Called by create_process with (fake, low): what the command does on disk.
        self.on_process: object = None

    def _call(self, name: str, *args: object) -> None:
        self.calls.append((name, *args))
        if name in self.fail:
            raise self.fail[name]

    def _handle(self) -> int:
        self._next += 1
        self.handles.add(self._next)
        return self._next

    def names(self) -> list[str]:
        return [str(c[0]) for c in self.calls]

    # -- AppContainer and tokens
    def create_appcontainer_profile(self, name: str, capabilities: tuple[str, ...]) -> str:
        self._call("create_appcontainer_profile", name, capabilities)
        self.profiles.add(name)
        return plan.appcontainer_sid(name)

    def delete_appcontainer_profile(self, name: str) -> None:
        self._call("delete_appcontainer_profile", name)
        self.profiles.discard(name)

    def derive_appcontainer_sid(self, name: str) -> str:
        self._call("derive_appcontainer_sid", name)
        return plan.appcontainer_sid(name)

    def create_restricted_token(self, deny_only: tuple[str, ...] = ()) -> int:
        self._call("create_restricted_token", deny_only)
        return self._handle()

    def is_elevated(self) -> bool:
        return self.elevated

    def process_started(self, pid: int) -> int | None:
        if pid not in self.alive:
            return None
        return self.created.get(pid, 133_000_000_000_000_000 + pid)

    # -- the model of NTFS inheritance and labels ------------------------------------
    def descriptor(self, path: str) -> str:
        low = path.lower()
        return "file:" + self.hardlinks[low] if low in self.hardlinks else low

    def below(self, path: str) -> set[str]:
        """Every path propagation from `path` reaches: its tree, through junctions too."""
        out: set[str] = set()
        todo = [path.lower()]
        while todo:
            top = todo.pop()
            for p in self.tree | set(self.hardlinks) | set(self.junctions):
                if (p == top or p.startswith(top.rstrip("\\") + "\\")) and p not in out:
                    out.add(p)
                    if p in self.junctions:
                        todo.append(self.junctions[p])
        return out

    def granted(self, sid: str) -> set[str]:
        """Every existing name whose descriptor holds an inherited ACE for `sid`."""
        return {p for p in self.tree | set(self.hardlinks)
                if sid in self.inherited.get(self.descriptor(p), set())}

    def create_object(self, path: str, *, low: bool) -> None:
        """A file the command creates: a Low process labels it Low, explicitly."""
        self.tree.add(path.lower())
        if low:
            self.labels[path.lower()] = "S:(ML;;NW;;;LW)"

    def reset_low_labels(self, root: str) -> list[str]:
        self._call("reset_low_labels", root)
        top = root.lower().rstrip("\\")
        done = [p for p, sddl in self.labels.items()
                if p.startswith(top + "\\") and ";;;LW)" in sddl and "ID" not in sddl]
        for p in done:
            del self.labels[p]
        return done

    def first_link_under(self, root: str) -> str:
        self._call("first_link_under", root)
        top = root.lower().rstrip("\\") + "\\"
        for p in sorted({*self.junctions, *self.hardlinks, *self.links}):
            if p.startswith(top):
                return p
        return ""

    # -- files
    def add_aces(self, path: str, aces: list) -> None:  # type: ignore[type-arg]
        self._call("add_aces", path, tuple(aces))
        self.dacl.setdefault(path.lower(), []).extend(
            (a.sid, a.access, a.mask, a.inherit) for a in aces)
        for a in aces:
            if a.access == "allow" and a.inherit & 0x3:
                for p in self.below(path) - {path.lower()}:
                    self.inherited.setdefault(self.descriptor(p), set()).add(a.sid)

    def revoke_sid(self, path: str, sid: str) -> None:
        self._call("revoke_sid", path, sid)
        for p in self.below(path):
            self.inherited.get(self.descriptor(p), set()).discard(sid)
        self.inherited = {k: v for k, v in self.inherited.items() if v}
        entries = self.dacl.get(path.lower(), [])
        self.dacl[path.lower()] = [e for e in entries if e[0] != sid]
        if not self.dacl[path.lower()]:
            del self.dacl[path.lower()]

    def get_label(self, path: str) -> str:
        self._call("get_label", path)
        return self.labels.get(path.lower(), "")

    def set_label(self, path: str, label: object) -> None:
        self._call("set_label", path, label)
        self.labels[path.lower()] = repr(label)

    def restore_label(self, path: str, saved: str) -> None:
        self._call("restore_label", path, saved)
        if saved:
            self.labels[path.lower()] = saved
        else:
            self.labels.pop(path.lower(), None)

    def make_directory(self, path: str) -> None:
        self._call("make_directory", path)
        if path.lower() in self.dirs:
            raise Win32Error("CreateDirectoryW", 183)
        self.dirs.add(path.lower())

    def remove_directory(self, path: str) -> bool:
        self._call("remove_directory", path)
        if path.lower() not in self.dirs:
            return False
        self.dirs.discard(path.lower())
        return True

    def remove_tree(self, path: str) -> None:
        self._call("remove_tree", path)
        self.dirs = {d for d in self.dirs if not (d == path.lower()
                                                  or d.startswith(path.lower() + "\\"))}

    def is_link(self, path: str) -> bool:
        return path.lower() in self.links

    def is_file(self, path: str) -> bool:
        return path.lower() in self.files

    # -- jobs and processes
    def create_job(self, limits: plan.JobLimits) -> int:
        self._call("create_job", limits.limit_flags, limits.active_processes,
                   limits.process_memory, limits.ui_restrictions)
        job = self._handle()
        self.messages[job] = []
        return job

    def create_process(self, application: str, command_line: str, environment: str,
                       cwd: str, *, token: int | None, appcontainer_sid: str | None,
                       capabilities: tuple[str, ...], stdin: int | None,
                       capture: bool, stdio: Mapping[int, int] | None = None) -> Started:
        self._call("create_process", application, command_line, environment, cwd, token,
                   appcontainer_sid, capabilities)
        process, thread = self._handle(), self._handle()
        if callable(self.on_process):
            self.on_process(self, token is not None or appcontainer_sid is not None)
        if self.run is None:
            return Started(4242, process, thread)
        proc = subprocess.Popen(self.run, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        self.procs[process] = proc
        assert proc.stdin and proc.stdout and proc.stderr
        # The driver owns the only copies, as it owns the pipe handles on Windows.
        fds = {name: os.dup(getattr(proc, name[:-2]).fileno())
               for name in ("stdin_w", "stdout_r", "stderr_r")}
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
        return Started(proc.pid, process, thread, **fds)

    def assign_to_job(self, job: int, process: int) -> None:
        self._call("assign_to_job", job, process)
        self.job_of[process] = job

    def resume_thread(self, thread: int) -> None:
        self._call("resume_thread", thread)

    def wait_process(self, process: int, timeout: float | None) -> int | None:
        proc = self.procs.get(process)
        if proc is None:
            if ("wait_process", process) not in self.calls:
                self.calls.append(("wait_process", process))
            return self.exit_code
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if ("wait_process", process) not in self.calls:
            self.calls.append(("wait_process", process))
        return code & 0xFFFFFFFF

    def terminate_job(self, job: int, exit_code: int) -> None:
        self._call("terminate_job", job, exit_code)
        for process, owner in self.job_of.items():
            proc = self.procs.get(process)
            if owner == job and proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def job_messages(self, job: int) -> list[int]:
        self._call("job_messages", job)
        return self.messages.pop(job, [])

    def close_handle(self, handle: int) -> None:
        self._call("close_handle", handle)
        self.handles.discard(handle)
        if handle in self.messages or handle in self.job_of.values():
            # Kill-on-job-close: what is still in the job ends with it.
            for process, owner in self.job_of.items():
                running = self.procs.get(process)
                if owner == handle and running is not None and running.poll() is None:
                    os.killpg(running.pid, signal.SIGKILL)
        self.procs.pop(handle, None)
