"""`stockade audit --web`: the ledger as pages a person reads, served by Datasette.

A reviewer wants to see what an agent did: what ran, in which order, for
how long, what was refused and why, which hosts were reached. Datasette
already serves a SQLite file as browsable, filterable tables; this module
gives it stockade's titles, column descriptions and canned queries (a
timeline, the denials with their reasons, the sessions, the network
records), binds it to loopback only, answers only requests addressed to
loopback by name, and opens the ledger read-only. Datasette is the `web`
extra.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping
    from typing import Any

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Why each command ended up as it did: stockade's reason, else its hint or error.
_REASON = ("coalesce(json_extract(detail, '$.reason'), json_extract(detail, '$.hint'), "
           "json_extract(detail, '$.error'))")

#: Each page's SQL stays one click away ("show"): the reader came for the rows.
QUERIES: dict[str, dict[str, Any]] = {
    "timeline": {
        "hide_sql": True,
        "title": "Timeline: every command, in order",
        "description": "Each command stockade ran or refused, oldest first, with how long it "
                       "took and why it was refused or stopped.",
        "sql": f"""select id, datetime(ts, 'unixepoch', 'localtime') as time, session,
  case outcome when 'denied' then 'refused' else outcome end
    || case when denied and outcome != 'denied' then ' (blocked)' else '' end as verdict,
  exit_code, round(duration_ms) as ms, mode, backend,
  (select group_concat(value, ' ') from json_each(argv)) as command,
  {_REASON} as reason
from executions
where (:session = '' or session = :session)
order by id""",
    },
    "denials": {
        "hide_sql": True,
        "title": "Denials: what was refused or blocked, and why",
        "description": "Commands stockade refused before they ran (the command policy, a "
                       "missing approval) and commands the sandbox stopped (a blocked path, "
                       "neutralised metadata, a limit).",
        "sql": f"""select id, datetime(ts, 'unixepoch', 'localtime') as time, session,
  case when outcome = 'denied' then 'refused' when json_extract(detail, '$.limit_exceeded')
       is not null then 'limit ' || json_extract(detail, '$.limit_exceeded')
       when json_extract(detail, '$.neutralised') is not null then 'neutralised'
       else 'blocked' end as kind,
  (select group_concat(value, ' ') from json_each(argv)) as command,
  {_REASON} as reason
from executions
where (outcome = 'denied' or denied or json_extract(detail, '$.neutralised') is not null
       or json_extract(detail, '$.limit_exceeded') is not null)
  and (:session = '' or session = :session)
order by id""",
    },
    "sessions": {
        "hide_sql": True,
        "title": "Sessions",
        "description": "Each session: when it started and ended, its commands, and how many "
                       "were refused or blocked.",
        "sql": """select session, datetime(min(ts), 'unixepoch', 'localtime') as first,
  datetime(max(ts), 'unixepoch', 'localtime') as last, count(*) as commands,
  sum(outcome = 'denied') as refused, sum(denied and outcome != 'denied') as blocked,
  round(sum(duration_ms)) as total_ms
from executions group by session order by min(ts)""",
    },
    "hosts": {
        "hide_sql": True,
        "title": "Network: hosts reached and refused",
        "description": "Every connection through stockade's proxy, allowed or refused.",
        "sql": """select datetime(ts, 'unixepoch', 'localtime') as time, session, host, port,
  case when allowed then 'allowed' else 'REFUSED' end as verdict, rule, address,
  bytes_up, bytes_down
from network where (:session = '' or session = :session) order by id""",
    },
}


def metadata(name: str) -> dict[str, Any]:
    """Datasette's metadata for the ledger database called `name`."""
    return {
        "title": "stockade: what the agent ran",
        "description": "The capability ledger, read-only. Start with the timeline or the "
                       "denials; every table can be filtered by session.",
        "databases": {name: {
            "queries": QUERIES,
            "tables": {
                "executions": {"description": "One record per command: its argv, mode, "
                                              "backend, exit status and detail (JSON)."},
                "network": {"description": "One record per proxy connection."},
                "starts": {"description": "When each command started (for --follow)."},
            },
        }},
    }


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host header values the server at `host`:`port` answers: its loopback address
    and `localhost`, with the port (without it too on port 80, where clients drop it)."""
    literal = {"127.0.0.1": ["127.0.0.1"], "::1": ["[::1]"],
               "localhost": ["127.0.0.1", "[::1]"]}[host]
    names = ["localhost", *literal]
    return frozenset([f"{n}:{port}" for n in names] + (names if port == 80 else []))


def host_guard(app: ASGIApp, allowed: frozenset[str]) -> ASGIApp:
    """`app`, answering a request only when its one Host header is in `allowed`.

    Binding to loopback is not enough: a web page whose name an attacker
    re-points at 127.0.0.1 (DNS rebinding) is same-origin with this server in
    the browser and could read the whole ledger, but its requests still carry
    the attacker's name in Host.
    """

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            hosts = [value.decode("latin-1").lower() for name, value in scope["headers"]
                     if name.lower() == b"host"]
            if len(hosts) != 1 or hosts[0] not in allowed:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = (b"stockade audit --web answers only requests addressed to "
                        b"127.0.0.1, [::1] or localhost and its port\n")
                await send({"type": "http.response.start", "status": 403, "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def serve(path: str, *, port: int, host: str = "127.0.0.1") -> int:
    """Serve the ledger at http://HOST:PORT/ until interrupted (loopback only)."""
    from .errors import InvalidCommand, MissingDependency

    if host not in ("127.0.0.1", "::1", "localhost"):
        raise InvalidCommand(f"audit --web binds loopback only, not {host!r}")
    if not os.path.exists(path):
        raise InvalidCommand(f"there is no ledger at {path} yet: run a command first")
    try:
        import uvicorn
        from datasette.app import Datasette
    except ImportError as exc:
        raise MissingDependency("stockade audit --web needs Datasette: pip install "
                                "'stockade[web]'", extra="web") from exc
    name = "ledger"
    ds = Datasette(
        # The ledger's own file, never written: Datasette's connections to a
        # file it is given are read-only, and no write query or plugin is set.
        files=[], metadata=metadata(name),
        settings={"default_page_size": 100, "allow_download": False})
    from datasette.database import Database

    ds.add_database(Database(ds, path=path, is_mutable=True), name=name)
    shown = "[::1]" if host == "::1" else host
    print(f"stockade: the ledger {path}, read-only, at http://{shown}:{port}/{name}",
          flush=True)
    uvicorn.run(host_guard(ds.app(), allowed_hosts(host, port)), host=host, port=port,
                log_level="warning")
    return 0
