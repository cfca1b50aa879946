"""`stockade audit --follow`: the ledger's events as they are written.

A person watching an agent sees each command start and end, and what
stockade refused or stopped, without reading a transcript: a path the
sandbox blocked (the record's hint), a host the proxy refused, a command the
policy refused, metadata the guard neutralised, a limit the command hit.

Every stockade process appends to one SQLite file in WAL mode, so the
follower reads it as any reader does and never blocks a writer. It wakes on
inotify events on the ledger's directory (a write to the database or its
WAL), and only then asks SQLite for rows past the last it printed: idle, it
is blocked in `select` and costs no CPU. Where inotify cannot be had (not
Linux, or the per-user limit used up) it looks once a second instead.
"""

from __future__ import annotations

import json
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

#: How often the ledger is looked at where inotify cannot be had.
FALLBACK_SECONDS = 1.0


def events_of_execution(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The events one execution record stands for: its end, then each denial in it."""
    raw = row.get("detail")
    detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
    base = {"ts": row["ts"], "session": row["session"], "argv": row["argv"]}
    out: list[dict[str, Any]] = []
    if row["outcome"] == "started":
        return []  # a background start: its `starts` row was the event
    if row["outcome"] == "denied":
        out.append({**base, "event": "refused", "reason": row.get("reason")})
        return out
    out.append({**base, "event": "end", "outcome": row["outcome"],
                "exit_code": row.get("exit_code"), "signal": row.get("signal"),
                "duration_ms": row.get("duration_ms")})
    if row["outcome"] == "error":
        out.append({**base, "event": "error", "reason": detail.get("error")})
    hint = detail.get("hint")
    if row.get("denied") and hint:
        out.append({**base, "event": "blocked", "hint": hint})
    for item in detail.get("neutralised") or ():
        if isinstance(item, dict):
            out.append({**base, "event": "neutralised", "path": item.get("path"),
                        "what": item.get("what"), "moved_to": item.get("moved_to")})
    if detail.get("limit_exceeded"):
        out.append({**base, "event": "limit", "limit": detail["limit_exceeded"],
                    "hint": hint})
    return out


def events_of_network(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A proxy refusal, or a connection that was allowed and closed."""
    return [{"ts": row["ts"], "session": row["session"],
             "event": "network" if row["allowed"] else "proxy-refused",
             "host": row["host"], "port": row["port"], "address": row.get("address"),
             "rule": row.get("rule")}]


def events_of_start(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"ts": row["ts"], "session": row["session"], "event": "start",
             "argv": row["argv"], "mode": row["mode"], "cwd": row.get("cwd")}]


def render(event: dict[str, Any]) -> str:
    """One event as one line of text."""
    from .cliutil import escape

    when = time.strftime("%H:%M:%S", time.localtime(float(event["ts"])))
    head = f"{when} {event['session']} "
    kind = event["event"]
    argv = " ".join(map(str, event.get("argv") or ()))
    if kind == "start":
        text = f"start   {argv}"
    elif kind == "end":
        status = (f"exit={event['exit_code']}" if event["exit_code"] is not None
                  else f"signal={event['signal']}" if event["signal"] is not None
                  else event["outcome"])
        text = f"end     {status} {event['duration_ms']}ms  {argv}"
    elif kind == "refused":
        text = f"REFUSED {argv}  ({event['reason']})"
    elif kind == "blocked":
        text = f"BLOCKED {event['hint']}"
    elif kind == "neutralised":
        text = f"NEUTRALISED {event['path']}: {event['what']} (moved to {event['moved_to']})"
    elif kind == "limit":
        text = f"LIMIT   {event['limit']}: {event['hint']}"
    elif kind == "error":
        text = f"ERROR   {argv}  ({event['reason']})"
    elif kind == "proxy-refused":
        text = f"PROXY-REFUSED {event['host']}:{event['port']}  ({event['rule']})"
    else:
        text = f"network {event['host']}:{event['port']} {event.get('address') or ''}"
    return escape(head + text)


class Follower:
    """Rows written to the ledger after it started, as events, oldest first."""

    TABLES: tuple[tuple[str, Callable[[dict[str, Any]], list[dict[str, Any]]]], ...] = (
        ("starts", events_of_start), ("executions", events_of_execution),
        ("network", events_of_network))

    def __init__(self, path: str, session: str | None = None) -> None:
        from .ledger import Ledger

        self.path = path
        self.session = session
        # The ledger's own connection: it makes the file and its tables when
        # no stockade has written one yet, so there is something to follow.
        self._ledger = Ledger(path)
        self._conn = self._ledger.connect()
        self._last = {table: self._max(table) for table, _ in self.TABLES}

    def _max(self, table: str) -> int:
        return int(self._conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
                   .fetchone()[0])

    def new_events(self) -> list[dict[str, Any]]:
        from .ledger import decoded, dict_row

        found: list[dict[str, Any]] = []
        for table, to_events in self.TABLES:
            cursor = self._conn.cursor()
            cursor.row_factory = dict_row
            rows = cursor.execute(f"SELECT * FROM {table} WHERE id > ? ORDER BY id",
                                  (self._last[table],)).fetchall()
            for row in rows:
                self._last[table] = max(self._last[table], int(row["id"]))
                if self.session and row["session"] != self.session:
                    continue
                found.extend(to_events(dict(row, argv=json.loads(row["argv"]))
                                       if table == "starts" else decoded(row)))
        found.sort(key=lambda e: float(e["ts"]))
        return found

    def wakeups(self) -> Iterator[None]:
        """Once per change to the ledger's directory; blocks in between."""
        directory = os.path.dirname(self.path) or "."
        fd = -1
        if sys.platform.startswith("linux"):
            from .drivers.linux.host.watch import inotify_add_watch, inotify_init

            try:
                fd = inotify_init()
                # A write to the WAL, the database, or either made anew.
                inotify_add_watch(fd, directory, 0x002 | 0x008 | 0x100 | 0x080)
            except OSError:
                if fd >= 0:
                    os.close(fd)
                fd = -1
        if fd < 0:
            while True:
                time.sleep(FALLBACK_SECONDS)
                yield None
        import select

        try:
            while True:
                select.select([fd], [], [])
                try:
                    os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                yield None
        finally:
            os.close(fd)

    def close(self) -> None:
        self._ledger.close()


def follow(path: str, *, as_json: bool, session: str | None = None,
           out: Callable[[str], None] | None = None) -> int:
    """Print each new event as it is written, until interrupted."""
    write = out or (lambda line: print(line, flush=True))
    follower = Follower(path, session)
    try:
        for _ in follower.wakeups():
            for event in follower.new_events():
                write(json.dumps(event) if as_json else render(event))
    finally:
        follower.close()
    return 0
