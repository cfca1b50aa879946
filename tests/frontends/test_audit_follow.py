"""`stockade audit --follow` with two stockade processes writing the ledger at once.

The follower is started first, then two writers run real sandboxed commands
side by side (a blocked write, a policy refusal, a neutralised `.vscode`,
a plain success), as root and as an unprivileged user; every start, end and
denial must reach the follower, each exactly once. Proxy and limit records
are written through the ledger's own API by a third writer.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from isolation.conftest import Box

pytestmark = [pytest.mark.isolation, pytest.mark.timeout(120)]


class Follow:
    """A running `stockade audit --follow`, its lines read as they come."""

    def __init__(self, box: Box, *args: str) -> None:
        self.proc = box.runner.popen(
            box.runner.cli_argv(["audit", "--follow", *args]), cwd=str(box.ws), env=box.env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self._buf = b""

    def read_until(self, done: Any, within: float = 30.0) -> list[str]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + within
        while not done(self.lines) and time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                self._buf += chunk
                *whole, self._buf = self._buf.split(b"\n")
                self.lines += [w.decode() for w in whole]
        return self.lines

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def test_follow_shows_two_writers_as_they_happen(box: Box) -> None:
    follow = Follow(box, "--json")
    try:
        time.sleep(1.0)  # the follower has read where the ledger ends
        idle = follow.cpu_seconds()
        time.sleep(1.0)
        assert follow.cpu_seconds() - idle < 0.05, "the follower spends CPU while idle"

        def writer(tag: str, script: list[list[str]]) -> None:
            for argv in script:
                box.run(argv, mode="workspace-write", options=["--session", tag])

        a = [["/bin/sh", "-c", f"echo a{i}; touch {box.sibling}/a{i}"] for i in range(4)]
        b = [["/bin/sh", "-c", f"echo b{i}"] for i in range(3)] + [
            ["rm", "-rf", "--no-preserve-root", "/"],
            ["/bin/sh", "-c", "mkdir -p .vscode && echo {} > .vscode/tasks.json"]]
        threads = [threading.Thread(target=writer, args=("writer-a", a)),
                   threading.Thread(target=writer, args=("writer-b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)

        def complete(lines: list[str]) -> bool:
            ev = _events(lines)
            return (sum(e["event"] == "end" for e in ev) >= 8
                    and any(e["event"] == "neutralised" for e in ev))

        events = _events(follow.read_until(complete))
    finally:
        follow.stop()
    by = {(e["session"], e["event"]) for e in events}
    starts = [e for e in events if e["event"] == "start"]
    ends = [e for e in events if e["event"] == "end"]
    assert len(starts) == len(ends) == 8, events  # 4 + 4 ran, each exactly once
    assert sum(e["event"] == "blocked" and e["session"] == "writer-a" for e in events) == 4
    blocked = next(e for e in events if e["event"] == "blocked")
    assert "is outside the workspace and read-only" in blocked["hint"]
    refused = [e for e in events if e["event"] == "refused"]
    assert len(refused) == 1 and "command policy blocked" in refused[0]["reason"]
    assert ("writer-b", "neutralised") in by
    # Each command's end comes after its start.
    for end in ends:
        start = next(s for s in starts if s["argv"] == end["argv"])
        assert events.index(start) < events.index(end)


def test_follow_names_proxy_refusals_and_limits(box: Box, tmp_path: Path) -> None:
    from stockade.ledger import Ledger

    ledger_path = str(box.state / "data" / "stockade" / "ledger.db")
    follow = Follow(box)
    try:
        time.sleep(1.0)
        ledger = Ledger(ledger_path)
        try:
            ledger.record_network(session="s1", host="evil.example", port=443, address=None,
                                  allowed=False, rule="not in allow_hosts")
            ledger.record(session="s1", program="sh", argv=["sh", "-c", "eat"], cwd="/w",
                          mode="workspace-write", capabilities=None, backend="bubblewrap",
                          exit_code=None, signal=9, duration_ms=5.0, denied=False,
                          outcome="ran", detail={"limit_exceeded": "memory",
                                                 "hint": "killed by the sandbox: out of memory"})
        finally:
            ledger.close()
        if box.runner.switches_user:
            os.chown(ledger_path, box.runner.uid, box.runner.gid)
        lines = follow.read_until(lambda ls: sum("s1" in line for line in ls) >= 3)
    finally:
        follow.stop()
    text = "\n".join(lines)
    assert "PROXY-REFUSED evil.example:443  (not in allow_hosts)" in text
    assert "LIMIT   memory: killed by the sandbox: out of memory" in text
    assert "end     signal=9" in text


def test_follow_refuses_what_it_cannot_do(box: Box) -> None:
    res = box.runner.cli(["audit", "--follow", "--last", "3"], cwd=box.ws, env=box.env())
    assert res.returncode == 2
    assert b"takes no --last" in res.stderr
