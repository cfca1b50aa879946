"""What a Windows run changed on the host, kept on disk until it is undone.

Two records live in stockade's state directory, under `windows/`:

- `holds/`: one file per stub directory or mandatory label that runs share,
  naming every run (process id, run token, the process's creation time)
  that holds it and the label that was there first. Parallel runs of
  *different* stockade processes on one workspace share the stub for
  `.stockade` and the Low label of the workspace; counted per process, the
  first to finish removed them under the other's running command.
- `journal/`: one file per run, `<pid>.<created>-<run>.jsonl`, each undo
  step written before the change it undoes is made. A stockade that died
  mid-run (killed, a power cut) left the workspace labelled Low, stub
  directories and AppContainer profiles behind; the next driver replays the
  journals of processes that are gone. (Config loading, which comes first,
  reads an empty directory at `stockade.toml` as no file.)

A stockade process is its id *and* its creation time (`Win32.process_started`):
Windows reuses process ids, so a record is live only while a process with
that id runs and was created when the record says.

Every change to either happens under one lock file, taken by every stockade
process on the machine, and a thread lock for the runs of this one.
"""

from __future__ import annotations

import os
import sys
import threading

from ...jsontext import to_json
from ...paths import sha256_hex

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class HoldConflict(Exception):
    """Another live run holds a different label on the same path."""


class _FileLock:
    """An exclusive lock on a file, across processes (msvcrt on Windows, flock elsewhere)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> _FileLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if sys.platform == "win32":
            import msvcrt

            os.lseek(self.fd, 0, 0)
            while True:
                try:
                    msvcrt.locking(self.fd, msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue  # LK_LOCK gives up after ten seconds; a holder is working
        else:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if sys.platform == "win32":
                import msvcrt

                os.lseek(self.fd, 0, 0)
                msvcrt.locking(self.fd, msvcrt.LK_UNLCK, 1)
            else:
                import fcntl

                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = -1


def _read_json(path: str) -> object:
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # a torn write: nothing it says can be trusted


def _write_json(path: str, value: object) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(to_json(value))
    os.replace(tmp, path)


class Store:
    """The holds and journals under `<state>/windows`, for one stockade process.

    `pid` and `started` are this process's id and creation time;
    `started_of(pid)` is the seam's answer for any other id (None: no such
    process runs).
    """

    def __init__(self, state_dir: str, *, pid: int, started: int,
                 started_of: Callable[[int], int | None]) -> None:
        self.root = os.path.join(state_dir, "windows")
        self.holds_dir = os.path.join(self.root, "holds")
        self.journal_dir = os.path.join(self.root, "journal")
        for d in (self.root, self.holds_dir, self.journal_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.pid = pid
        self.started = started
        self.started_of = started_of
        self._thread_lock = threading.Lock()

    def running(self, pid: int, started: int | None) -> bool:
        """Whether the stockade process that wrote a record (its id, its creation time) runs.

        A record written before creation times were kept (`started` None) is
        live while any process has its id, except this process's own id, whose
        records now always carry a time: replaying a live stockade's journal
        would revoke the denies and remove the stubs under its running
        command, while keeping a dead one's only postpones the cleanup until
        the id is free.
        """
        if started is None:
            return pid != self.pid and self.started_of(pid) is not None
        if pid == self.pid:
            return started == self.started
        return self.started_of(pid) == started

    # -- the lock ------------------------------------------------------------------

    class _Both:
        def __init__(self, store: Store) -> None:
            self.store = store
            self.file = _FileLock(os.path.join(store.root, "lock"))

        def __enter__(self) -> None:
            self.store._thread_lock.acquire()
            try:
                self.file.__enter__()
            except BaseException:
                self.store._thread_lock.release()
                raise

        def __exit__(self, *exc: object) -> None:
            try:
                self.file.__exit__()
            finally:
                self.store._thread_lock.release()

    def locked(self) -> Store._Both:
        return Store._Both(self)

    # -- holds -----------------------------------------------------------------------

    def _hold_file(self, kind: str, key: str) -> str:
        return os.path.join(self.holds_dir, sha256_hex(f"{kind}\0{key}".encode())[:32] + ".json")

    def _live(self, holders: list[list[object]]) -> list[list[object]]:
        return [h for h in holders if self.running(*_holder_owner(h))]

    def take(self, kind: str, key: str, path: str, run: str, value: str,
             save: Callable[[], str]) -> bool:
        """Count `run` as a holder of `kind` at `key`; True when it must be applied now.

        Call under `locked()`. The first holder saves what was there (`save()`).
        A record whose holders have all died keeps its saved original: what is
        on the path now is the dead run's change, not the host's.
        """
        file = self._hold_file(kind, key)
        record = _read_json(file)
        holders: list[list[object]] = []
        saved = ""
        apply = True
        if isinstance(record, dict):
            holders = self._live(list(record.get("holders", [])))
            saved = str(record.get("saved", ""))
            if holders and record.get("value") != value:
                raise HoldConflict(
                    f"another stockade command holds {kind} {record.get('value')} on {path}; "
                    f"this one needs {value}, and there is one per path")
            apply = record.get("value") != value
        else:
            saved = save()
        holders.append([self.pid, run, self.started])
        _write_json(file, {"kind": kind, "path": path, "value": value, "saved": saved,
                           "holders": holders})
        return apply

    def release(self, kind: str, key: str, run: str, pid: int | None = None
                ) -> tuple[bool, str, str]:
        """Drop `run` (of `pid`, default this process); (last holder gone, path, saved).

        Call under `locked()`.
        """
        pid = self.pid if pid is None else pid
        file = self._hold_file(kind, key)
        record = _read_json(file)
        if not isinstance(record, dict):
            return False, "", ""
        holders = [h for h in record.get("holders", []) if h[:2] != [pid, run]]
        holders = self._live(holders)
        if holders:
            record["holders"] = holders
            _write_json(file, record)
            return False, str(record.get("path", "")), str(record.get("saved", ""))
        os.remove(file)
        return True, str(record.get("path", "")), str(record.get("saved", ""))

    # -- journals ------------------------------------------------------------------------

    def journal(self, run: str) -> Journal:
        return Journal(os.path.join(self.journal_dir, f"{self.pid}.{self.started}-{run}.jsonl"))

    def orphans(self) -> Iterator[tuple[str, int, str, list[dict[str, str]]]]:
        """(file name, pid, run, steps) of each journal whose process is gone,
        oldest step first."""
        import json

        for name in sorted(os.listdir(self.journal_dir)):
            if not name.endswith(".jsonl"):
                continue
            owner, _, run = name[:-len(".jsonl")].partition("-")
            parsed = _journal_owner(owner)
            if parsed is None:
                continue
            pid, started = parsed
            if self.running(pid, started):
                continue
            steps: list[dict[str, str]] = []
            with open(os.path.join(self.journal_dir, name), encoding="utf-8") as fh:
                for line in fh:
                    try:
                        step = json.loads(line)
                    except ValueError:
                        continue  # the line being written when the process died
                    if isinstance(step, dict):
                        steps.append({str(k): str(v) for k, v in step.items()})
            yield name, pid, run, steps

    def forget(self, name: str) -> None:
        """Remove the replayed journal `name` (as `orphans` gave it)."""
        try:
            os.remove(os.path.join(self.journal_dir, os.path.basename(name)))
        except FileNotFoundError:
            pass


def _journal_owner(text: str) -> tuple[int, int | None] | None:
    """(pid, creation time) from a journal name's owner part: `pid.created`, or a bare
    `pid` from before creation times were kept (time None); None if it is neither."""
    pid, dot, started = text.partition(".")
    if not pid.isdigit() or (dot and not started.isdigit()):
        return None
    return int(pid), int(started) if dot else None


def _holder_owner(holder: list[object]) -> tuple[int, int | None]:
    """(pid, creation time) of a hold's holder: `[pid, run, created]`, or `[pid, run]` from
    before creation times were kept (time None)."""
    started = holder[2] if len(holder) > 2 else None
    return int(str(holder[0])), None if started is None else int(str(started))


class Journal:
    """One run's undo steps, appended and flushed before each change is made."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, **step: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(to_json(step) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def done(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
