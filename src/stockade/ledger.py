"""The capability ledger: one structured record per execute, in SQLite and to logging.

SQLite in WAL mode, so a reader (`stockade audit`) never blocks a writer and
many stockade processes can append to one file. The logger record is emitted
only when the program already uses `logging`: importing it costs the CLI
more than the whole ledger write, and with nobody configuring handlers the
record would go nowhere anyway.
"""

from __future__ import annotations

import os
import sys
import time

from .jsontext import to_json

TYPE_CHECKING = False


if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping
    from typing import Any

LOGGER = "stockade.capability_ledger"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    session TEXT NOT NULL,
    program TEXT NOT NULL,
    argv TEXT NOT NULL,
    cwd TEXT,
    mode TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    backend TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    duration_ms REAL,
    denied INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS executions_session ON executions(session, id);
CREATE TABLE IF NOT EXISTS network (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    session TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER,
    address TEXT,
    allowed INTEGER NOT NULL,
    rule TEXT,
    bytes_up INTEGER,
    bytes_down INTEGER,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS network_session ON network(session, id);
CREATE TABLE IF NOT EXISTS starts (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    session TEXT NOT NULL,
    argv TEXT NOT NULL,
    cwd TEXT,
    mode TEXT NOT NULL,
    backend TEXT NOT NULL
);
"""

# Outcomes of an execute.
RAN = "ran"
TIMED_OUT = "timeout"
DENIED = "denied"
ERROR = "error"


def decoded(row: Mapping[str, object]) -> dict[str, object]:
    """A stored row as values: the JSON columns parsed, the 0/1 columns as booleans,
    and `verdict`, the one word both `audit` views use for what happened."""
    import json

    out = dict(row)
    for key in ("argv", "capabilities", "detail"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(str(out[key]))
    for key in ("denied", "allowed"):
        if key in out:
            out[key] = bool(out[key])
    if "outcome" in out:
        out["verdict"] = verdict(out)
        detail = out.get("detail")
        out["reason"] = reason(detail) if isinstance(detail, dict) else None
    return out


def verdict(row: Mapping[str, object]) -> str:
    """refused (stockade said no before it ran), error, timeout, or ran; a command that
    ran into the boundary is `ran-denied`."""
    outcome = row.get("outcome")
    if outcome == DENIED:
        return "refused"
    if outcome in (ERROR, TIMED_OUT):
        return str(outcome)
    return f"{outcome}-denied" if row.get("denied") else str(outcome)


def reason(detail: Mapping[str, object]) -> str | None:
    for key in ("reason", "hint", "error"):
        if detail.get(key):
            return str(detail[key])
    return None


REDACTED = "[redacted]"


def redacted(rec: Mapping[str, object]) -> dict[str, object]:
    """An execution record with no secret the command was given.

    `env NAME=value cmd` (or `sh -c "NAME=value cmd"`, `--api-key=value`) put
    the value in argv, and `stockade audit` prints argv to whoever reads the
    ledger: a value is redacted where its name matches the patterns that keep
    a variable out of a sandbox's environment (profile.DEFAULT_SECRET_ENV),
    and the password of any `scheme://user:password@host` URL. The explicit
    environment (`stockade run --env`, `SandboxCommand(env=)`) is recorded by
    name, its values never.
    """
    out = dict(rec)
    argv = out.get("argv")
    if isinstance(argv, (list, tuple)):
        out["argv"] = redact_argv([str(a) for a in argv])
    detail = out.get("detail")
    if isinstance(detail, dict) and isinstance(detail.get("command"), str):
        # The exact text of a command no argv could hold (a NUL in it).
        out["detail"] = {**detail, "command": redact_text(detail["command"])}
    env = out.pop("env", None)
    if env:
        detail = dict(out.get("detail") or {})  # type: ignore[call-overload]
        detail["env"] = {str(name): REDACTED for name in sorted(env)}  # type: ignore[call-overload]
        out["detail"] = detail
    return out


def _text(value: object) -> object:
    """`value` as text SQLite stores: a name that is not UTF-8 (a directory or program
    a command named so) is kept with its bytes as \\xNN; refused, it lost the
    command's record, and with it the trace of whatever ran there."""
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")


def redact_argv(argv: list[str]) -> list[str]:
    """`argv` with secret-looking assignments and URL passwords replaced by REDACTED."""
    if not any("=" in a or "://" in a for a in argv):
        return argv  # nothing to look at: most commands, and no regex compiled
    return [redact_text(a) for a in argv]


def redact_text(text: str) -> str:
    """One argument (or a shell command line) with its secrets redacted."""
    if "=" not in text and "://" not in text:
        return text
    assign, url = _patterns()
    if "=" in text:
        text = assign.sub(_redact_assignment, text)
    if "://" in text:
        text = url.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return text


def _redact_assignment(match: Any) -> str:
    from .envscrub import DEFAULT_SECRET_ENV, NOT_SECRET, secret_name

    dashes, name, value = match.group(1) or "", match.group(2), match.group(3)
    key = name.upper().replace("-", "_")
    if (not value or key in NOT_SECRET
            or not secret_name(DEFAULT_SECRET_ENV)(key)):
        return str(match.group(0))
    quote = value[:1] if value[:1] in ("'", '"') and value.endswith(value[:1]) else ""
    return f"{dashes}{name}={quote}{REDACTED}{quote}"


_COMPILED: tuple[Any, Any] | None = None


def _patterns() -> tuple[Any, Any]:
    """(NAME=value, scheme://user:password@) as regexes, compiled on first use."""
    global _COMPILED
    if _COMPILED is None:
        import re

        # A name at the start of a word (an env assignment, `export NAME=`,
        # a `--flag=`), then a quoted or a bare value.
        assign = re.compile(r"(?<![^\s;&|(`'\"])(--?)?([A-Za-z_][A-Za-z0-9_-]*)="
                            r"('[^']*'|\"[^\"]*\"|[^\s;&|)`]*)")
        # The authority's userinfo: user, a colon, a non-empty password, `@`,
        # before the first `/`, `?`, `#` or blank (as envscrub.has_url_password).
        url = re.compile(r"([A-Za-z0-9][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]+@")
        _COMPILED = assign, url
    return _COMPILED


def default_ledger_path(env: Mapping[str, str], platform: str = "") -> str:
    from .paths import data_dir

    return os.path.join(data_dir(env, platform), "ledger.db")


class Ledger:
    """Append-only audit records. `path=None` keeps only the logging record."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        # The proxy's thread writes network records while commands write
        # theirs; one connection must not be used by both at once.
        import _thread

        self._lock = _thread.allocate_lock()

    def connect(self) -> sqlite3.Connection:
        if self._conn is None:
            sqlite3 = _sqlite()
            assert self.path is not None
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            _add_network_detail(conn, sqlite3)
            self._conn = conn
        return self._conn

    def warm(self) -> None:
        """Open the database ahead of time, e.g. while the command runs."""
        if self.path is not None:
            try:
                self.connect()
            except Exception:
                pass  # `record` reports it

    def record(self, **rec: object) -> None:
        """Write one execution record; never raises into the command's result.

        `env`, the variables passed to the command, is kept as their names
        only; secret-looking values in `argv` are redacted (`redacted`).
        """
        rec = redacted(rec)
        rec.setdefault("ts", time.time())
        self._emit("execute", rec)
        self._insert(
            "INSERT INTO executions (ts, session, program, argv, cwd, mode, capabilities,"
            " backend, exit_code, signal, duration_ms, denied, outcome, detail)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (rec["ts"], _text(rec["session"]), _text(rec["program"]), to_json(rec["argv"]),
             _text(rec.get("cwd")), rec["mode"], to_json(rec["capabilities"]), rec["backend"],
             rec.get("exit_code"), rec.get("signal"), rec.get("duration_ms"),
             int(bool(rec.get("denied"))), rec["outcome"],
             to_json(rec["detail"]) if rec.get("detail") else None),
        )

    def record_start(self, **rec: object) -> None:
        """Note that a command is starting (its execution record comes when it ends):
        what `stockade audit --follow` shows while it runs. argv is redacted as
        an execution record's is."""
        rec = redacted(rec)
        rec.setdefault("ts", time.time())
        self._insert(
            "INSERT INTO starts (ts, session, argv, cwd, mode, backend) VALUES (?,?,?,?,?,?)",
            (rec["ts"], _text(rec["session"]), to_json(rec["argv"]), _text(rec.get("cwd")),
             rec["mode"], rec["backend"]),
        )

    def record_network(self, **rec: object) -> None:
        """Write one proxy decision (a connection allowed and closed, or refused)."""
        rec.setdefault("ts", time.time())
        self._emit("network", rec)
        self._insert(
            "INSERT INTO network (ts, session, host, port, address, allowed, rule,"
            " bytes_up, bytes_down, detail) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (rec["ts"], _text(rec["session"]), rec["host"], rec.get("port"), rec.get("address"),
             int(bool(rec["allowed"])), rec.get("rule"), rec.get("bytes_up"),
             rec.get("bytes_down"), to_json(rec["detail"]) if rec.get("detail") else None),
        )

    @staticmethod
    def _emit(kind: str, rec: dict[str, object]) -> None:
        if "logging" in sys.modules:
            import logging

            logging.getLogger(LOGGER).info(kind, extra={"stockade": rec})

    def _insert(self, sql: str, params: tuple[object, ...]) -> None:
        if self.path is None:
            return
        try:
            with self._lock:
                self.connect().execute(sql, params)
        except Exception as exc:  # an audit failure must be seen, not fatal
            print(f"stockade: could not write the audit ledger {self.path}: {exc}",
                  file=sys.stderr)

    def query(self, *, session: str | None = None, last: int = 20,
              table: str = "executions") -> list[dict[str, object]]:
        if self.path is None or not os.path.exists(self.path):
            return []
        if table not in ("executions", "network"):
            raise ValueError(table)
        conn = self.connect()
        conn.row_factory = dict_row
        where, args = ("WHERE session = ?", [session]) if session else ("", [])
        rows = conn.execute(
            f"SELECT * FROM {table} {where} ORDER BY id DESC LIMIT ?", (*args, last)
        ).fetchall()
        conn.row_factory = None
        return list(reversed(rows))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _add_network_detail(conn: sqlite3.Connection, sqlite3: Any) -> None:
    """Give a network table made before it had one its `detail` column.

    `CREATE TABLE IF NOT EXISTS` leaves an existing table as it was, so on a
    ledger written by an older stockade every network insert would fail on
    the missing column and the proxy's decisions would be lost, each with a
    line on stderr. Two processes may both find it missing: the loser's
    "duplicate column" is the winner's success.
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(network)")}
    if "detail" not in columns:
        try:
            conn.execute("ALTER TABLE network ADD COLUMN detail TEXT")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):
                raise


def _sqlite() -> Any:
    """The SQLite driver without `sqlite3`'s Python layer.

    `sqlite3/dbapi2.py` imports datetime and collections for adapters this
    ledger never uses -- over 7 ms on the CLI's path; `_sqlite3` is the same
    C module the public package wraps.
    """
    try:
        import _sqlite3

        return _sqlite3
    except ImportError:  # pragma: no cover - builds that only ship the package
        import sqlite3

        return sqlite3


def dict_row(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> dict[str, object]:
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}
