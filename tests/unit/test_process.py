"""process.py: start, feed, bound and end a process; the POSIX `ProcessHandle`."""

import os
import time

from stockade.process import BackgroundProcess, Outcome, Process, chdir_argv, run_plain


def test_communicate_feeds_stdin_and_collects_both_streams() -> None:
    proc = Process(["/bin/sh", "-c", "cat; echo err >&2; exit 3"], {"PATH": "/bin:/usr/bin"})
    out = proc.communicate(b"fed\n", timeout=10)
    assert (out.returncode, out.stdout, out.stderr) == (3, b"fed\n", b"err\n")
    assert out.exit_code == 3 and out.signal is None and not out.timed_out


def test_a_flood_is_cut_at_the_budget_and_marked() -> None:
    proc = Process(["/bin/sh", "-c", "yes x"], {"PATH": "/bin:/usr/bin"})
    out = proc.communicate(timeout=10, max_output=1000)
    assert out.truncated and len(out.stdout) < 1000 + 100
    assert b"output truncated at 500 bytes" in out.stdout
    assert out.signal == 9  # the tree was killed, not left writing


def test_the_deadline_kills_the_whole_group(tmp_path) -> None:
    marker = tmp_path / "late"
    # A child in the same group that would write after the deadline.
    script = f"(sleep 2; touch {marker}) & sleep 30"
    start = time.monotonic()
    out = Process(["/bin/sh", "-c", script], {"PATH": "/bin:/usr/bin"}).communicate(timeout=0.5)
    assert out.timed_out and time.monotonic() - start < 5
    time.sleep(2.5)
    assert not marker.exists()
    # Control: without the kill the child does write.
    control = Process(["/bin/sh", "-c", f"(sleep 0.2; touch {marker}) & wait"],
                      {"PATH": "/bin:/usr/bin"}).communicate(timeout=10)
    assert control.returncode == 0 and marker.exists()


def test_extra_fds_arrive_at_their_number_and_nothing_else_leaks(tmp_path) -> None:
    r, w = os.pipe()
    leaked = os.open(str(tmp_path), os.O_RDONLY)  # inheritable by accident
    os.set_inheritable(leaked, True)
    try:
        proc = Process(["/bin/sh", "-c", "echo via >&5; ls /proc/self/fd"],
                       {"PATH": "/bin:/usr/bin"}, extra_fds={5: w})
        out = proc.communicate(timeout=10)
        os.close(w)
        assert os.read(r, 100) == b"via\n"
        fds = set(out.stdout.decode().split())
        assert "5" in fds and (leaked == 5 or str(leaked) not in fds)
    finally:
        os.close(r)
        os.close(leaked)


def test_a_missing_program_is_a_sandbox_error_not_a_crash() -> None:
    import pytest

    from stockade.errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="cannot start /nonexistent"):
        Process(["/nonexistent"], {})


def test_chdir_argv_runs_in_the_directory_without_moving_this_process(tmp_path) -> None:
    here = os.getcwd()
    code, out, _ = run_plain(chdir_argv(str(tmp_path), ["/bin/pwd"]))
    assert (code, out.decode().strip(), os.getcwd()) == (0, str(tmp_path), here)


def test_a_background_process_keeps_a_window_with_absolute_offsets() -> None:
    done: list[int | None] = []
    proc = Process(["/bin/sh", "-c", "printf 0123456789"], {"PATH": "/bin:/usr/bin"})
    bg = BackgroundProcess(proc, window=4, on_exit=lambda p: done.append(p.pid))
    assert bg.wait(10) == 0 and done == [bg.pid]
    data, end = bg.output("stdout", 0)
    assert (data, end) == (b"6789", 10)
    assert bg.output("stdout", 8) == (b"89", 10)


def test_stop_ends_what_the_background_command_started(tmp_path) -> None:
    marker = tmp_path / "late"
    proc = Process(["/bin/sh", "-c", f"(sleep 1; touch {marker}) & sleep 30"],
                   {"PATH": "/bin:/usr/bin"})
    bg = BackgroundProcess(proc)
    assert bg.running()
    bg.stop()
    time.sleep(1.5)
    assert not bg.running() and not marker.exists()


def test_outcome_reads_signals_and_exit_codes() -> None:
    assert Outcome(-9, b"", b"", False, False, 1.0).signal == 9
    assert Outcome(-9, b"", b"", False, False, 1.0).exit_code is None
    assert Outcome(2, b"", b"e", False, False, 1.0).diagnostic == b"e"
    assert Outcome(2, b"", b"", False, False, 1.0, diagnostic=b"tail").diagnostic == b"tail"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _started_from_a_thread_that_ends(start):  # type: ignore[no-untyped-def]
    import threading

    box: list[object] = []

    def run() -> None:
        try:
            box.append(start())
        except BaseException as exc:
            box.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


# Arms a parent-death signal, says so on fd 3, then waits to be killed.
ARMED = ("import ctypes, os, time; ctypes.CDLL(None).prctl(1, 9); os.write(3, b'x'); "
         "time.sleep(30)")


def _armed(spawn):  # type: ignore[no-untyped-def]
    """Spawn ARMED and return only once its signal is armed, so that the
    thread's end -- right after -- is what the child sees."""
    r, w = os.pipe()
    try:
        child = spawn(w)
        assert os.read(r, 1) == b"x"
        return child
    finally:
        os.close(r)
        os.close(w)


def test_a_child_outlives_the_thread_that_spawned_it() -> None:
    # prctl's own contract first, without stockade: the signal follows the
    # spawning *thread*, so a child of a thread that ends is killed.
    def raw(w: int) -> int:
        return os.posix_spawn("/usr/bin/python3", ["python3", "-c", ARMED], dict(os.environ),
                              file_actions=[(os.POSIX_SPAWN_DUP2, w, 3)])

    pid = _started_from_a_thread_that_ends(lambda: _armed(raw))
    start = time.monotonic()
    os.waitpid(pid, 0)
    assert time.monotonic() - start < 10, "the control child was not killed"

    def ours(w: int) -> Process:
        return Process(["/usr/bin/python3", "-c", ARMED], dict(os.environ), extra_fds={3: w})

    proc = _started_from_a_thread_that_ends(lambda: _armed(ours))
    try:
        time.sleep(0.5)
        assert _alive(proc.pid), "the child died with the thread that started it"
    finally:
        proc.kill()
        proc.wait()
        proc.close()


def test_a_sandboxed_background_command_outlives_the_thread_that_started_it() -> None:
    import shutil
    import tempfile

    from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox

    # Under /var/tmp: the sandbox has a /tmp of its own.
    top = tempfile.mkdtemp(prefix="stockade-thread-", dir="/var/tmp")
    try:
        for backend in ("bubblewrap", "landlock"):
            env = {**os.environ, "XDG_STATE_HOME": f"{top}/state", "XDG_DATA_HOME": f"{top}/data"}
            with SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write", backend=backend),
                                      env=env) as sb:
                os.makedirs(f"{top}/ws", exist_ok=True)
                sb.open_session("s", f"{top}/ws")
                proc = _started_from_a_thread_that_ends(lambda sb=sb: sb.start(SandboxCommand(
                    "/bin/sh", ["-c", "sleep 30"], session_id="s")))
                time.sleep(1.0)  # a parent-death signal would have arrived by now
                assert proc.running(), f"{backend}: ended with the thread that started it"
                assert proc.stop() is not None
                assert not proc.running()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_forked_child_can_start_from_a_worker_thread() -> None:
    """The spawner thread does not survive fork; its object did, and a child that
    started a process from a worker thread waited on it forever."""
    import threading

    from stockade.process import from_lasting_thread

    def from_worker() -> int:
        box: list[int] = []
        worker = threading.Thread(target=lambda: box.append(from_lasting_thread(os.getpid)))
        worker.start()
        worker.join(timeout=5)
        return box[0] if box else -1

    assert from_worker() == os.getpid()  # the parent's spawner now exists
    pid = os.fork()
    if pid == 0:
        os._exit(0 if from_worker() == os.getpid() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's start never ran"
