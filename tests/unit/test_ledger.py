"""ledger.py: append-only audit records in SQLite, and what a failure to write does."""

import os
import sqlite3

from stockade.ledger import Ledger, decoded, default_ledger_path


def record(ledger: Ledger, **extra: object) -> None:
    fields: dict[str, object] = dict(
        session="s", program="ls", argv=["ls", "-l"], cwd="/w", mode="read-only",
        capabilities={"fs_read": []}, backend="bubblewrap", exit_code=0, outcome="ran",
        detail={"hint": "h"})
    fields.update(extra)
    ledger.record(**fields)


def test_records_round_trip_with_their_json_fields(tmp_path) -> None:
    path = str(tmp_path / "sub" / "ledger.db")
    ledger = Ledger(path)
    record(ledger)
    record(ledger, session="other", outcome="denied", denied=True)
    rows = ledger.query()
    assert [r["session"] for r in rows] == ["s", "other"]
    first = decoded(rows[0])
    assert first["argv"] == ["ls", "-l"] and first["detail"] == {"hint": "h"}
    assert [r["outcome"] for r in ledger.query(session="other")] == ["denied"]
    assert len(ledger.query(last=1)) == 1
    ledger.close()
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700


def test_network_records_have_their_own_table(tmp_path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.record_network(session="s", host="example.com", port=443, allowed=False,
                          rule="not on the allow list")
    rows = ledger.query(table="network")
    assert rows[0]["host"] == "example.com" and rows[0]["allowed"] == 0
    assert ledger.query() == []
    ledger.close()


def test_network_records_carry_a_detail_like_executions(tmp_path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.record_network(session="s", host="127.0.0.1", port=80, allowed=True,
                          detail={"node": "abc"})
    ledger.record_network(session="s", host="example.com", port=443, allowed=False)
    with_node, without = (decoded(r) for r in ledger.query(table="network"))
    assert with_node["detail"] == {"node": "abc"} and without["detail"] is None
    ledger.close()


def test_a_network_table_from_before_detail_gets_the_column(tmp_path) -> None:
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE network (id INTEGER PRIMARY KEY, ts REAL NOT NULL, session TEXT NOT NULL,"
        " host TEXT NOT NULL, port INTEGER, address TEXT, allowed INTEGER NOT NULL, rule TEXT,"
        " bytes_up INTEGER, bytes_down INTEGER);"
        "INSERT INTO network (ts, session, host, allowed) VALUES (1, 'old', 'a.test', 1);")
    conn.close()
    first, second = Ledger(path), Ledger(path)  # the second opens what the first changed
    first.record_network(session="new", host="b.test", port=443, allowed=True,
                         detail={"node": "n1"})
    second.record_network(session="new", host="c.test", port=443, allowed=True)
    rows = [decoded(r) for r in first.query(table="network")]
    assert [(r["session"], r["host"], r["detail"]) for r in rows] == [
        ("old", "a.test", None), ("new", "b.test", {"node": "n1"}), ("new", "c.test", None)]
    first.close()
    second.close()


def test_a_ledger_that_cannot_be_written_says_so_and_does_not_raise(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ledger = Ledger(str(blocker / "ledger.db"))  # a directory under a regular file
    record(ledger)
    assert "could not write the audit ledger" in capsys.readouterr().err


def test_no_path_keeps_nothing_on_disk(tmp_path) -> None:
    ledger = Ledger(None)
    record(ledger)
    assert ledger.query() == [] and list(tmp_path.iterdir()) == []


def test_records_are_appended_by_independent_writers(tmp_path) -> None:
    path = str(tmp_path / "l.db")
    a, b = Ledger(path), Ledger(path)
    record(a, session="a")
    record(b, session="b")
    a.close()
    b.close()
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute("SELECT session FROM executions ORDER BY id")] == ["a", "b"]


def test_the_default_path_follows_the_injected_env() -> None:
    assert default_ledger_path({"XDG_DATA_HOME": "/d"}) == "/d/stockade/ledger.db"
    assert default_ledger_path({"HOME": "/h"}) == "/h/.local/share/stockade/ledger.db"


def test_secret_values_in_argv_are_redacted_in_the_record(tmp_path) -> None:
    """`env NAME=value cmd` and URLs with passwords: `stockade audit` prints argv."""
    ledger = Ledger(str(tmp_path / "ledger.db"))
    argv = ["env", "GITHUB_TOKEN=ghp_abc", "AWS_SECRET_ACCESS_KEY=wJalr", "PWD=/w", "DEBUG=1",
            "curl", "--api-key=k-123", "https://me:hunter2@example.com/x",
            "http://localhost:4873/@scope/pkg", "sh", "-c",
            "export GH_TOKEN='a b'; DB_URL=postgres://u:pw9@db/x run --token=t0k"]
    record(ledger, argv=argv, env={"STRIPE_KEY": "sk_live_1", "X": "1"})
    row = decoded(ledger.query()[0])
    assert row["argv"] == [
        "env", "GITHUB_TOKEN=[redacted]", "AWS_SECRET_ACCESS_KEY=[redacted]", "PWD=/w",
        "DEBUG=1", "curl", "--api-key=[redacted]", "https://me:[redacted]@example.com/x",
        "http://localhost:4873/@scope/pkg", "sh", "-c",
        "export GH_TOKEN='[redacted]'; DB_URL=postgres://u:[redacted]@db/x run "
        "--token=[redacted]"]
    assert row["detail"] == {"hint": "h", "env": {"STRIPE_KEY": "[redacted]", "X": "[redacted]"}}
    stored = sqlite3.connect(str(tmp_path / "ledger.db")).execute(
        "SELECT argv, detail FROM executions").fetchone()
    for secret in ("ghp_abc", "wJalr", "k-123", "hunter2", "a b", "pw9", "t0k", "sk_live_1"):
        assert secret not in "".join(stored)
    ledger.close()
