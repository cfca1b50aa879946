"""The LangChain adapter's persistent shell: the process inside the sandbox that
runs each gated command and reports its status.

The adapter runs it as `python -I -S -c <this file's text>` (the sandbox holds
the interpreter and its standard library, not stockade), so it imports the
standard library alone.

The host writes one JSON object a line to its stdin:

    {"run": COMMAND, "token": T}   run COMMAND, then print "T STATUS" on stdout
    {"refuse": HINT, "token": T}   print HINT on stderr, then "T 126"
    {"exit": true}                 end now, whatever still runs

and reads each command's output from its stdout and stderr. A command refused
because its directory moved ends with "T 126 moved" instead, one refused
because the shell cannot put it in a Landlock domain of its own with
"T 126 unconfined", and one the kernel would not start (too large) with
"T 126 unstarted".
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import select
import subprocess
import sys
import tempfile

PR_SET_DUMPABLE = 4
#: landlock_create_ruleset and landlock_restrict_self (the same on every architecture).
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_RESTRICT_SELF = 444, 446
#: The one right the per-command domain handles: making block devices, which
#: nothing in the sandbox can do anyway, so the domain restricts nothing else.
LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 11
LANDLOCK_CREATE_RULESET_VERSION = 1
#: Signals scoped to the domain (Landlock ABI 6): a job one command left cannot
#: kill or stop a later command.
LANDLOCK_SCOPE_SIGNAL = 1 << 1
#: Set (to anything) in the shell's environment, the shell takes the kernel for
#: one without Landlock: how the tests reach the refusal on a kernel that has it.
NO_LANDLOCK_ENV = "STOCKADE_SHELL_NO_LANDLOCK"
#: libc, loaded once: `_own_domain` runs in a forked child, between fork and exec.
LIBC = ctypes.CDLL(None, use_errno=True)
#: One string of a command's environment the kernel takes at most (MAX_ARG_STRLEN).
MAX_ENV_STRING = 32 * 4096
#: The most environment one command hands to the next, as the kernel counts
#: it (`_env_size`): half the smallest ARG_MAX Linux gives (2 MiB with an
#: 8 MiB stack), so the next command's argv and the framing still fit beside
#: it at its exec.
MAX_ENV_TOTAL = 1 << 20

#: Variables a command's export never hands to the next command: each makes a
#: shell (`BASH_ENV`, `PROMPT_COMMAND`, `PS4`, ...) or the loader (`LD_*`) run
#: code that command's record would not show.
CARRY_NOT = frozenset(
    b"BASH_ENV ENV PROMPT_COMMAND PS0 PS1 PS2 PS3 PS4 BASH_XTRACEFD SHELLOPTS BASHOPTS "
    b"IFS POSIXLY_CORRECT SHLVL _".split())
CARRY_NOT_PREFIXES = (b"LD_", b"BASH_FUNC_")

#: The bash that runs one command, in the directory the shell has entered for
#: it (`Shell.enter`): run it, then write where it ended and what it exported
#: to the state descriptor ($2), which the command itself runs without.
#: Nothing runs before the command, and the state is written by builtins
#: alone: a command's PATH names programs for the next command, never for
#: the framing.
CHILD = r"""
__sk_c=$1 __sk_s=$2; shift 2
builtin eval "builtin eval \"\$__sk_c\" $__sk_s>&-"; __sk_rc=$?
builtin set +eu; builtin unset IFS
{ builtin printf 'state\0%s\0' "$PWD"; builtin pwd -P; builtin printf '\0'
  for __sk_n in $(builtin compgen -e); do builtin printf '%s=%s\0' "$__sk_n" "${!__sk_n}"; done
  builtin printf 'end\0'; } >&"$__sk_s"
builtin exit $__sk_rc
"""
#: The most state one command hands to the next.
MAX_STATE = 8 << 20


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _carried(env: dict[bytes, bytes]) -> dict[bytes, bytes]:
    # Not one the kernel would refuse at the next exec (E2BIG): that ended
    # the shell, and the next command was recorded as run.
    return {k: v for k, v in env.items()
            if k not in CARRY_NOT and not k.startswith(CARRY_NOT_PREFIXES)
            and len(k) + len(v) + 2 <= MAX_ENV_STRING}


def _env_size(env: dict[bytes, bytes]) -> int:
    """What `env` costs an exec: each string, its NUL and its pointer."""
    return sum(len(k) + len(v) + 2 + 8 for k, v in env.items())


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none."""
    if os.environ.get(NO_LANDLOCK_ENV):
        return 0
    return max(int(LIBC.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0,
                                LANDLOCK_CREATE_RULESET_VERSION)), 0)


def _domain_ruleset(abi: int) -> int:
    """The ruleset of one command's own Landlock domain (see `_own_domain`).

    With ABI 6 its signals are scoped too; before that only ptrace and /proc
    are kept apart, which is what Landlock had.
    """
    attr = (ctypes.c_uint64 * 3)(LANDLOCK_ACCESS_FS_MAKE_BLOCK, 0,
                                 LANDLOCK_SCOPE_SIGNAL if abi >= 6 else 0)
    fd = LIBC.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr),
                      24 if abi >= 6 else 8, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    return int(fd)


def _own_domain(ruleset: int) -> None:
    """Put this (forked) process in a Landlock domain of its own, before exec, or fail.

    Landlock lets a process trace, open the /proc descriptors and memory of,
    and (ABI 6) signal only those in its own domain or beneath it: a job one
    command left running, in that command's domain, can then neither attach
    to a later command's bash and rewrite the command the gate approved, nor
    write into its output, nor kill it. Nothing else is restricted. Raising
    keeps the command from running outside one.
    """
    if LIBC.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")


def _request(line: bytes) -> dict[str, str]:
    try:
        request = json.loads(line)
    except ValueError:
        request = None
    if isinstance(request, dict) and (request.get("exit") or "token" in request):
        return request
    # Only the adapter's gate writes here: anything else went around it, and
    # running it would run a command no policy saw and no record holds.
    _write_all(2, b"stockade: the shell runs only what stockade's gate sends it; "
                  b"this line went around the gate and was not run\n")
    return {}


class _Command:
    def __init__(self, proc: subprocess.Popen[bytes], token: str, state: int,
                 pipes: tuple[int, int]) -> None:
        self.proc, self.token, self.state, self.pipes = proc, token, state, pipes
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None  # polled instead


class Shell:
    def __init__(self) -> None:
        self.start_physical = os.getcwd()
        pwd = os.environ.get("PWD", "")
        same = bool(pwd) and os.path.realpath(pwd) == self.start_physical
        self.start_logical = pwd if same else self.start_physical
        self.logical, self.physical = self.start_logical, self.start_physical
        self.env = self.start_env = _carried(dict(os.environb))
        self.env.pop(os.fsencode(NO_LANDLOCK_ENV), None)
        self.landlock_abi = _landlock_abi()
        #: Whether the last byte written to stderr ended a line: a call's stderr
        #: ends with the call, so a fragment is never shown as the next call's.
        self.stderr_at_line_start = True
        self.states = tempfile.mkdtemp(prefix="stockade-shell-")
        #: Read end of a command's stdout or stderr -> where its bytes go. A
        #: background job keeps its command's pipes, so they outlive the command.
        self.pipes: dict[int, int] = {}
        self.running: _Command | None = None

    def serve(self) -> int:
        requests: list[dict[str, str]] = []
        buf, host_open = b"", True
        while True:
            for request in requests:
                if request.get("exit"):
                    return 0
            while self.running is None and requests:
                request = requests.pop(0)
                if request:
                    self.begin(request)
            if not host_open and self.running is None:
                return 0  # the host is gone
            # Between commands no pipe is read: a job an earlier command left
            # then blocks on a full pipe instead of filling the host's queue.
            watched = list(self.pipes) if self.running is not None else []
            if host_open:
                watched.append(0)
            running = self.running
            if running is not None and running.pidfd is not None:
                watched.append(running.pidfd)
            poll = running is not None and running.pidfd is None
            ready, _, _ = select.select(watched, [], [], 0.05 if poll else None)
            for fd in ready:
                if fd == 0 and host_open:
                    data = os.read(0, 65536)
                    if not data:
                        host_open = False
                        continue
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    requests += [_request(line) for line in lines if line.strip()]
                elif fd in self.pipes:
                    self.forward(fd)
            if running is not None and running.proc.poll() is not None:
                self.end(running)

    def begin(self, request: dict[str, str]) -> None:
        token = request["token"]
        if "refuse" in request:
            self.write(2, request["refuse"].encode() + b"\n")
            _write_all(1, f"{token} 126\n".encode())
            return
        moved_to = self.enter()
        if moved_to is not None:
            self.write(2, (
                "stockade refused this command: the directory the last command ended in, "
                f"{self.physical}, is now {moved_to} (moved, or a symlink put in its "
                f"place); the shell is back in {self.start_logical}. Run the command again, "
                "with a cd first if it needs that directory.\n").encode())
            self.logical, self.physical = self.start_logical, self.start_physical
            _write_all(1, f"{token} 126 moved\n".encode())
            return
        try:
            if self.landlock_abi < 1:
                raise OSError("this kernel has no Landlock")
            ruleset = _domain_ruleset(self.landlock_abi)
        except OSError as exc:
            self.unconfined(token, exc)
            return
        try:
            self.start(token, request["run"], ruleset)
        finally:
            os.close(ruleset)

    def start(self, token: str, command: str, ruleset: int) -> None:
        env = {**self.env, b"PWD": os.fsencode(self.logical)}
        try:
            state = self.state_file()
        except OSError as exc:
            self.cannot_start(token, exc)
            return
        try:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
        except OSError as exc:
            os.close(state)
            self.cannot_start(token, exc)
            return
        try:
            proc = subprocess.Popen(
                ["/bin/bash", "--norc", "--noprofile", "-c", CHILD, "bash", command,
                 str(state)],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, env=env,
                close_fds=True, pass_fds=(state,), start_new_session=True,
                preexec_fn=lambda: _own_domain(ruleset))
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            for fd in (out_r, err_r, state):
                os.close(fd)
            # The one thing done between fork and exec is entering the domain.
            if isinstance(exc, subprocess.SubprocessError):
                self.unconfined(token, OSError("landlock_restrict_self failed"))
            else:
                self.cannot_start(token, exc)
                if isinstance(exc, OSError) and exc.errno == errno.E2BIG:
                    # What the commands before left must not keep every later one out.
                    self.restart_state()
            return
        finally:
            os.close(out_w)
            os.close(err_w)
        for fd, to in ((out_r, 1), (err_r, 2)):
            os.set_blocking(fd, False)
            self.pipes[fd] = to
        self.running = _Command(proc, token, state, (out_r, err_r))

    def state_file(self) -> int:
        """A file with no name for the next command's state, open on a descriptor.

        Nameless, so that the only way in is a descriptor: the shell's, and
        the one the command's bash inherits, which neither the command nor a
        job an earlier command left (another Landlock domain, `_own_domain`)
        can reach. A named file in /tmp was the way a job of one command set
        the PATH of the ones after it.
        """
        try:
            return os.open(self.states, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:  # a file system without O_TMPFILE: named for a moment
            name = os.path.join(self.states, os.urandom(8).hex())
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            os.unlink(name)
            return fd

    def restart_state(self) -> None:
        """The next command starts where the shell started, with its variables."""
        self.logical, self.physical = self.start_logical, self.start_physical
        self.env = self.start_env

    def cannot_start(self, token: str, exc: BaseException) -> None:
        """The command could not be started (a limit a command set on this shell, an
        environment too large): it did not run, and says so."""
        self.write(2, f"stockade: the shell could not start this command ({exc}); it did "
                      "not run\n".encode())
        _write_all(1, f"{token} 126 unstarted\n".encode())

    def unconfined(self, token: str, exc: BaseException) -> None:
        """No Landlock domain of its own for the command: refused, since without one
        a job an earlier command left could trace it and change what it runs."""
        self.write(2, (
            "stockade refused this command: the persistent shell runs each command in a "
            "Landlock domain of its own, so that a background job one command leaves "
            "cannot trace, write into or kill a later one, and it could not make one here "
            f"({exc}). It did not run. Landlock needs Linux 5.13 or later with landlock "
            "in the kernel's lsm= list; without it, run commands with `stockade run`, "
            "each in a sandbox of its own.\n").encode())
        _write_all(1, f"{token} 126 unconfined\n".encode())

    def write(self, fd: int, data: bytes) -> None:
        _write_all(fd, data)
        if fd == 2 and data:
            self.stderr_at_line_start = data.endswith(b"\n")

    def enter(self) -> str | None:
        """Enter the directory the last command ended in, for the next one to
        inherit; where it led instead when that is somewhere else.

        The check is the kernel's own (getcwd, after the chdir), and the
        command inherits the directory it checked: a symlink a background job
        swaps in for a path on the way after the check cannot move the command.
        """
        for path in (self.logical, self.physical):
            try:
                os.chdir(path)
                here = os.getcwd()
            except OSError:
                here = "gone"
            if here == self.physical:
                return None
        return here

    def forward(self, fd: int, reads: int = 1) -> None:
        for _ in range(reads):
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not data:
                del self.pipes[fd]
                os.close(fd)
                return
            self.write(self.pipes[fd], data)

    def end(self, command: _Command) -> None:
        self.running = None
        if command.pidfd is not None:
            os.close(command.pidfd)
        # What the command wrote before it ended is in its pipes now; read it
        # before the status line, so its output is shown as its own. (Bounded:
        # a background job that keeps writing gets no say in when the status comes.)
        for fd in command.pipes:
            if fd in self.pipes:
                self.forward(fd, reads=64)
        code = command.proc.returncode
        status = code if code >= 0 else 128 - code
        try:
            size = min(os.fstat(command.state).st_size, MAX_STATE)
            parts = os.pread(command.state, size, 0).split(b"\0")
        except OSError:
            parts = []
        finally:
            os.close(command.state)
        if parts[:1] == [b"state"] and parts[-2:] == [b"end", b""] and len(parts) >= 5:
            env = _carried(dict(p.partition(b"=")[::2] for p in parts[3:-2]))
            size = _env_size({**env, b"PWD": parts[1]})
            if size <= MAX_ENV_TOTAL and len(parts[1]) + 5 <= MAX_ENV_STRING:
                self.logical = os.fsdecode(parts[1])
                self.physical = os.fsdecode(parts[2].rstrip(b"\n"))
                self.env = env
            else:
                # Carried, it would keep every later command from starting (E2BIG).
                self.restart_state()
                self.write(2, (
                    f"stockade: the directory and variables this command left ({size} "
                    "bytes) are more than a command can start with; the next command "
                    "starts where the shell started, with the variables it started "
                    "with.\n").encode())
        else:
            self.write(2, (
                f"stockade: this command ended its shell (status {status}); the next "
                "command starts where this one started, with the variables it started "
                "with.\n").encode())
        if not self.stderr_at_line_start:
            self.write(2, b"\n")
        _write_all(1, f"{command.token} {status}\n".encode())


def main() -> int:
    # Not dumpable: no process a command starts -- same user, no capabilities
    # -- can open /proc/<this>/fd or /mem, so the host's pipes and the tokens
    # they carry stay this process's alone; without it a background job could
    # read the next command's token and forge its status or write commands of
    # its own.
    if LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.stderr.write("stockade: the shell could not make itself undumpable "
                         f"({os.strerror(ctypes.get_errno())}); it runs no commands\n")
        return 125
    try:
        return Shell().serve()
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
