"""Which workspace roots a `StockadeSandboxClient` may read from, resume into and delete.

A stored session state is data: whoever holds the store may give it any
session id and any root. A default root is the private workspace of the
session it was made for, and only what the client recorded as made by itself
is ever removed by it. Each attack is checked from the host, next to a
control showing that what it aims at is real: a live session's own root,
readable by that session and removed by its own delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents.sandbox")

from agents.sandbox import Manifest
from agents.sandbox.errors import InvalidManifestPathError, WorkspaceArchiveWriteError

from stockade.adapters.openai_sandbox import (
    StockadeSandboxClient,
)
from stockade.config import SandboxConfig
from stockade.errors import CapabilityDenied

pytestmark = pytest.mark.timeout(120)

SECRET = "DECOY-OTHER-SESSION"


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # /var/tmp: the sandbox has its own /tmp.
    b = Path(tempfile.mkdtemp(prefix="stockade-sdk-owner-", dir="/var/tmp"))
    (b / "home").mkdir()
    (b / "ws").mkdir()
    monkeypatch.setenv("HOME", str(b / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(b / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(b / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(b / "config"))
    yield b
    shutil.rmtree(b, ignore_errors=True)


def _client(**kw: Any) -> StockadeSandboxClient:
    config = SandboxConfig(backend="bubblewrap", ledger=False,
                           default_timeout_seconds=kw.pop("timeout", 60.0))
    return StockadeSandboxClient(config=config, **kw)


def _payload(client: StockadeSandboxClient, session: Any) -> dict[str, Any]:
    return json.loads(json.dumps(client.serialize_session_state(session.state),  # type: ignore[no-any-return]
                                 default=str))


async def _victim(client: StockadeSandboxClient) -> Any:
    """A running session on a default root, with a file only it should read."""
    victim = await client.create(manifest=Manifest())
    await victim.start()
    await victim.write(Path("secret.txt"), io.BytesIO(f"{SECRET}\n".encode()))
    return victim


@pytest.mark.parametrize("who", ["same-client", "another-client", "client-with-root"])
def test_a_state_cannot_take_over_a_live_sessions_default_root(base: Path, who: str) -> None:
    """A stored state given a new id and another running session's root is refused;
    nothing of that session is read, and delete() leaves its workspace alone."""

    async def main() -> tuple[str, str, bool]:
        client = _client()
        victim = await _victim(client)
        root = Path(victim.state.manifest.root)
        try:
            # The attacker's own state, from a session on some other root.
            mine = await client.create(manifest=Manifest(root=str(base / "ws")))
            payload = _payload(client, mine)
            payload["session_id"] = str(uuid.uuid4())
            payload["manifest"]["root"] = str(root)
            resumer = {"same-client": client, "another-client": _client(),
                       "client-with-root": _client(root=root)}[who]
            try:
                session = await resumer.resume(resumer.deserialize_session_state(payload))
            except CapabilityDenied as exc:
                refused = str(exc)
                read = ""
            else:
                refused = ""
                await session.start()
                read = (await session.exec("cat secret.txt")).stdout.decode()
                await session.shutdown()
                await resumer.delete(session)
            # The victim is still running on its workspace.
            still = (await victim.exec("cat secret.txt")).stdout.decode()
            return refused, read, root.is_dir() and SECRET in still
        finally:
            await client.delete(victim)

    refused, read, intact = asyncio.run(main())
    assert SECRET not in read
    assert intact, "delete() removed a live session's workspace"
    assert "private workspace of another session" in refused, refused


def test_control_the_session_that_made_a_root_resumes_and_deletes_it(base: Path) -> None:
    """The precondition of the attack: the root is a live session's, its file is there,
    the client's own state resumes into it, and the client's delete removes it."""

    async def main() -> tuple[str, bool, bool]:
        client = _client()
        victim = await _victim(client)
        root = Path(victim.state.manifest.root)
        payload = _payload(client, victim)
        resumed = await client.resume(client.deserialize_session_state(payload))
        await resumed.start()
        read = (await resumed.exec("cat secret.txt")).stdout.decode()
        await resumed.shutdown()
        await victim.shutdown()
        existed = root.is_dir()
        await client.delete(resumed)
        return read, existed, root.exists()

    read, existed, after = asyncio.run(main())
    assert SECRET in read
    assert existed and not after


def test_a_deleted_default_root_comes_back_on_resume_and_is_removed_again(base: Path) -> None:
    """The SDK deletes a session after each run and resumes its state on the next one."""

    async def main() -> tuple[str, bool]:
        client = _client()
        session = await client.create(manifest=Manifest())
        await session.start()
        await session.exec("echo first > a.txt")
        payload = _payload(client, session)
        await session.shutdown()
        await client.delete(session)
        root = Path(session.state.manifest.root)
        assert not root.exists()
        resumed = await client.resume(client.deserialize_session_state(payload))
        await resumed.start()
        out = (await resumed.exec("echo second > b.txt && ls")).stdout.decode()
        await resumed.shutdown()
        await client.delete(resumed)
        return out, root.exists()

    out, exists = asyncio.run(main())
    assert "b.txt" in out and not exists


def test_a_default_looking_root_from_elsewhere_is_not_owned_for_its_shape(
        base: Path) -> None:
    """A directory in the workspace base, named as a default root is, that no client
    here made (another process's, left behind): not resumed into, not removed."""
    from stockade.adapters.openai_sandbox import _OWNED_PREFIX

    async def main() -> tuple[str, bool]:
        client = _client()
        mine = await client.create(manifest=Manifest(root=str(base / "ws")))
        payload = _payload(client, mine)
        workspaces = Path(client._workspace_base())
        workspaces.mkdir(parents=True, exist_ok=True)
        left = Path(tempfile.mkdtemp(prefix=_OWNED_PREFIX, dir=workspaces))
        (left / "secret.txt").write_text(f"{SECRET}\n")
        payload["session_id"] = str(uuid.uuid4())
        payload["manifest"]["root"] = str(left)
        try:
            resumed = await client.resume(client.deserialize_session_state(payload))
        except CapabilityDenied as exc:
            return str(exc), (left / "secret.txt").exists()
        await client.delete(resumed)
        return "", (left / "secret.txt").exists()

    refused, kept = asyncio.run(main())
    assert kept, "delete() removed a directory no client here made"
    assert "StockadeSandboxClient(root=...)" in refused, refused


def test_delete_removes_the_directory_it_made_not_one_put_in_its_place(base: Path) -> None:
    async def main() -> Path:
        client = _client()
        session = await client.create(manifest=Manifest())
        await session.start()
        await session.shutdown()
        root = Path(session.state.manifest.root)
        moved = base / "moved-aside"
        root.rename(moved)
        root.mkdir()
        (root / "someone-elses").write_text("kept\n")
        await client.delete(session)
        return root

    root = asyncio.run(main())
    assert (root / "someone-elses").read_text() == "kept\n"


def test_delete_does_not_follow_a_link_put_in_place_of_its_root(base: Path) -> None:
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("the person's work\n")

    async def main() -> None:
        client = _client()
        session = await client.create(manifest=Manifest())
        await session.start()
        await session.shutdown()
        root = Path(session.state.manifest.root)
        shutil.rmtree(root)
        root.symlink_to(elsewhere)
        await client.delete(session)

    asyncio.run(main())
    assert (elsewhere / "precious").read_text() == "the person's work\n"


def test_a_write_onto_a_fifo_planted_in_the_workspace_fails_at_once(base: Path) -> None:
    ws = base / "ws"
    os.mkfifo(ws / "pipe")

    async def main() -> tuple[str, float]:
        client = _client(timeout=20.0)
        session = await client.create(manifest=Manifest(root=str(ws)))
        async with session:
            began = time.monotonic()
            try:
                await session.write(Path("pipe"), io.BytesIO(b"data"))
            except WorkspaceArchiveWriteError as exc:
                return str(exc), time.monotonic() - began
            return "written", time.monotonic() - began

    outcome, took = asyncio.run(main())
    assert took < 10, f"the write waited {took:.0f} s on a FIFO"
    assert "not a regular file" in outcome, outcome
    assert (ws / "pipe").is_fifo()


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside", "a/../../outside"])
def test_a_stored_states_manifest_entry_cannot_name_a_path_outside(base: Path,
                                                                   name: str) -> None:
    async def main() -> str:
        client = _client()
        mine = await client.create(manifest=Manifest(root=str(base / "ws")))
        payload = _payload(client, mine)
        payload["manifest"]["entries"] = {name: {"type": "file", "content": "planted\n"}}
        try:
            session = await client.resume(client.deserialize_session_state(payload))
            await session.start()
        except (InvalidManifestPathError, CapabilityDenied, ValueError) as exc:
            return type(exc).__name__
        await session.aclose()
        return "resumed"

    assert asyncio.run(main()) != "resumed"
    assert not (base / "outside").exists()


def test_a_snapshot_member_leaving_the_workspace_is_refused_before_extraction(
        base: Path) -> None:
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"out\n"))
    buf.seek(0)

    async def main() -> str:
        session = await _client().create(manifest=Manifest(root=str(base / "ws")))
        async with session:
            with contextlib.suppress(WorkspaceArchiveWriteError):
                await session.hydrate_workspace(buf)
                return "extracted"
        return "refused"

    assert asyncio.run(main()) == "refused"
    assert not (base / "escaped.txt").exists()
