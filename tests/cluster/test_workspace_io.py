"""A node's host-side reads and writes of a session's workspace, against what a command left.

The workspace is the adversary's: a session reopened under its id finds
whatever its commands planted (a FIFO, a link, a file shared by a hard
link with one outside), and a background command may still be swapping
entries while the workspace is exported. Each operation runs in a child
process with a deadline, so one that blocks fails the test instead of
hanging it; every effect is checked from the host. No Ray cluster: this is
the code each node runs, called as a node calls it.
"""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stockade.errors import InvalidCommand

SECRET = b"DECOY-HOST-SECRET-" + b"x" * 64


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(SECRET)
    return tmp_path / "ws"


def _bounded(script: str, *args: Any, timeout: float = 15) -> Any:
    """Run `script` (which sets `result`) in a child with `args`; "blocked" past the deadline."""
    code = ("import pickle, sys\nfrom stockade.cluster import workspace_io as w\n"
            "args = pickle.loads(sys.stdin.buffer.read())\n"
            "try:\n" + textwrap.indent(textwrap.dedent(script), "    ") +
            "\nexcept Exception as exc:\n    result = ('error', type(exc).__name__, str(exc))\n"
            "sys.stdout.buffer.write(pickle.dumps(result))\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(args),
                              capture_output=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return "blocked"
    return pickle.loads(done.stdout)


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- seeding a reopened workspace ------------------------------------------------------


def test_seeding_a_file_where_a_fifo_was_planted_does_not_block(ws: Path) -> None:
    os.mkfifo(ws / "main.py")
    got = _bounded("w.write_files(args[0], {'main.py': b'seeded'}); result = 'ok'", str(ws))
    assert got != "blocked", "write_files waited on a FIFO the workspace held"
    assert got == "ok" and (ws / "main.py").read_bytes() == b"seeded"


def test_seeding_from_a_tarball_where_a_fifo_was_planted_does_not_block(ws: Path) -> None:
    os.mkfifo(ws / "main.py")
    got = _bounded("w.extract_tarball(args[0], args[1]); result = 'ok'", str(ws),
                   _tar({"main.py": b"seeded"}))
    assert got != "blocked", "extract_tarball waited on a FIFO the workspace held"
    assert got == "ok" and (ws / "main.py").read_bytes() == b"seeded"


@pytest.mark.parametrize("how", ["files", "tarball"])
def test_seeding_never_writes_into_a_file_shared_with_one_outside(ws: Path, how: str) -> None:
    outside = ws.parent / "outside" / "secret"
    os.link(outside, ws / "config.py")
    if how == "files":
        got = _bounded("w.write_files(args[0], {'config.py': b'seeded'}); result = 'ok'",
                       str(ws))
    else:
        got = _bounded("w.extract_tarball(args[0], args[1]); result = 'ok'", str(ws),
                       _tar({"config.py": b"seeded"}))
    assert outside.read_bytes() == SECRET, "the seed was written into a file outside"
    assert got == "ok" and (ws / "config.py").read_bytes() == b"seeded"


# -- exporting a workspace a command is still changing ----------------------------------

_SWAPPER = """
import os, threading, time
ws, stage, secret, kind = args[0], args[1], args[2], args[3]
stop = threading.Event()
def swap():
    n = 0
    while not stop.is_set():
        n += 1
        odd = os.path.join(stage, f"odd{n}")
        if kind == "link":
            os.symlink(secret, odd)
        else:
            os.mkfifo(odd)
        os.rename(odd, os.path.join(ws, "f"))
        plain = os.path.join(stage, f"plain{n}")
        with open(plain, "wb") as fh:
            fh.write(b"harmless")
        os.rename(plain, os.path.join(ws, "f"))
threading.Thread(target=swap, daemon=True).start()
result = "clean"
deadline = time.monotonic() + 4
while time.monotonic() < deadline:
    try:
        blob = w.make_tarball(ws)
    except Exception:
        continue
    if b"DECOY-HO" in __import__("gzip").decompress(blob):
        result = "leaked"
        break
stop.set()
"""


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_export_never_follows_or_waits_on_an_entry_swapped_under_it(ws: Path,
                                                                     kind: str) -> None:
    stage = ws.parent / "stage"
    stage.mkdir()
    (ws / "f").write_bytes(b"harmless")
    got = _bounded(_SWAPPER, str(ws), str(stage), str(ws.parent / "outside" / "secret"), kind)
    assert got != "blocked", "make_tarball waited on a FIFO swapped in for a file"
    assert got == "clean", got


def test_export_of_a_huge_sparse_file_is_refused_not_read(ws: Path) -> None:
    with open(ws / "big", "wb") as fh:
        fh.truncate(64 << 30)
    (ws / "small").write_bytes(b"fine")
    got = _bounded("w.make_tarball(args[0]); result = 'exported'", str(ws), timeout=20)
    assert got != "blocked", "make_tarball read a 64 GiB sparse file"
    assert got[:2] == ("error", "InvalidCommand"), got


# -- guards: what the node refused before, and still does ---------------------------------


def test_export_keeps_links_as_links_and_skips_fifos(ws: Path) -> None:
    from stockade.cluster.workspace_io import make_tarball

    (ws / "pkg").mkdir()
    (ws / "pkg" / "a.txt").write_bytes(b"a")
    (ws / "leak").symlink_to(ws.parent / "outside" / "secret")
    os.mkfifo(ws / "pipe")
    with tarfile.open(fileobj=io.BytesIO(make_tarball(str(ws)))) as tar:
        names = tar.getnames()
        assert tar.getmember("leak").issym()
        assert tar.getmember("leak").linkname == str(ws.parent / "outside" / "secret")
        assert tar.extractfile("pkg/a.txt").read() == b"a"  # type: ignore[union-attr]
    assert names == ["leak", "pkg", "pkg/a.txt"]


@pytest.mark.parametrize("rel", ["../outside/secret", "/etc/passwd", "a/../../outside/secret",
                                 "", "a//b", "link/secret", "leak", "pipe"])
def test_read_files_stays_beneath_the_workspace(ws: Path, rel: str) -> None:
    from stockade.cluster.workspace_io import read_files

    (ws / "link").symlink_to(ws.parent / "outside")
    (ws / "leak").symlink_to(ws.parent / "outside" / "secret")
    os.mkfifo(ws / "pipe")
    with pytest.raises(InvalidCommand):
        read_files(str(ws), [rel])


@pytest.mark.parametrize("members", [{"../escaped": b"x"}, {"/abs/escaped": b"x"},
                                     {"link/escaped": b"x"}])
def test_a_tarball_cannot_write_outside(ws: Path, members: dict[str, bytes]) -> None:
    from stockade.cluster.workspace_io import extract_tarball

    (ws / "link").symlink_to(ws.parent / "outside")
    with pytest.raises(InvalidCommand, match="tarball refused"):
        extract_tarball(str(ws), _tar(members))
    assert sorted(os.listdir(ws.parent / "outside")) == ["secret"]
    assert not (ws.parent / "escaped").exists()


def test_a_tarball_round_trips(ws: Path) -> None:
    from stockade.cluster.workspace_io import extract_tarball, make_tarball, read_files

    src = ws.parent / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run").write_bytes(b"#!/bin/sh\n")
    (src / "bin" / "run").chmod(0o755)
    (src / "lib").symlink_to("bin")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=".")
    extract_tarball(str(ws), buf.getvalue())
    assert os.readlink(ws / "lib") == "bin"
    assert os.stat(ws / "bin" / "run").st_mode & 0o100
    assert read_files(str(ws), ["bin/run"]) == {"bin/run": b"#!/bin/sh\n"}
    with tarfile.open(fileobj=io.BytesIO(make_tarball(str(ws)))) as tar:
        assert tar.getnames() == ["bin", "bin/run", "lib"]


@pytest.mark.parametrize("links", [[("d/p", ".."), ("l", "d/p/..")], [("p", "."), ("l", "p/..")]])
def test_a_tarball_cannot_place_links_that_climb_out(ws: Path,
                                                     links: list[tuple[str, str]]) -> None:
    """Each link lexically inside, but `l` resolves through `p` to the workspace's parent."""
    import io
    import tarfile

    from stockade.cluster.workspace_io import extract_tarball

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, target in links:
            if "/" in name:
                info = tarfile.TarInfo(name.split("/")[0])
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    with pytest.raises(InvalidCommand, match="tarball refused"):
        extract_tarball(str(ws), buf.getvalue())
    assert not (ws / "l").is_symlink()
