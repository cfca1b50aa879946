"""stockade leaves nothing in /tmp: not in a sandbox's, not in a session's, not on the host.

bwrap makes a mount point's missing parents in whatever holds them. When the
init's modules were bound at their host path, a stockade living under /tmp
(a checkout a newcomer cloned there, the isolation suite's copy for its
unprivileged user) left a skeleton of that path in every sandbox's /tmp, in
the session's tmpfs, and in a session directory on the host where no tmpfs
could be mounted. These tests put stockade's init -- and, separately, its
interpreter -- under /tmp, in a directory whose name holds a space, whatever
the checkout's own path, and look at /tmp from inside and from outside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.drivers.linux import layers
from stockade.drivers.linux.host import sessionns

pytestmark = [pytest.mark.isolation,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux drivers")]

BACKENDS = ("bubblewrap", "landlock")
LIST_TMP = 'ls -A /tmp; echo "--"; ls -A "$TMPDIR"'


def _system_python_copy(top: Path) -> str:
    """An interpreter whose prefix is under `top`: the system binary, with its standard
    library linked in (a binary that links libpython by absolute path cannot move)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary, stdlib = Path("/usr/bin", version), Path(sysconfig.get_paths()["stdlib"])
    if not binary.is_file() or not Path("/usr/lib", version).is_dir():
        pytest.skip(f"no /usr/bin/{version} with /usr/lib/{version} to copy")
    (top / "bin").mkdir(parents=True)
    (top / "lib").mkdir()
    shutil.copy2(binary, top / "bin" / version)
    (top / "lib" / version).symlink_to(Path("/usr/lib", version))
    python = str(top / "bin" / version)
    works = subprocess.run([python, "-I", "-S", "-c", "import _ctypes, _json"],
                           capture_output=True, check=False)
    if works.returncode != 0:
        pytest.skip(f"{binary} does not run from a copy: {works.stderr.decode()!r} "
                    f"({stdlib})")
    return python


@pytest.fixture(params=["init", "init+python"])
def under_tmp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[Path]:
    """The init (and its interpreter) copied under /tmp/…/a checkout/…, in use."""
    top = Path(tempfile.mkdtemp(prefix="stockade-in-tmp-", dir="/tmp"))
    try:
        init_dir = top / "a checkout" / "src" / "stockade" / "drivers" / "linux"
        init_dir.mkdir(parents=True)
        for name in ("init", *layers.INIT_MODULES):
            shutil.copy2(Path(layers.INIT_DIR) / f"{name}.py", init_dir)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(init_dir)], check=True)
        monkeypatch.setattr(layers, "INIT_DIR", str(init_dir))
        monkeypatch.setattr(layers, "INIT_PATH", str(init_dir / "init.py"))
        if request.param == "init+python":
            python = _system_python_copy(top / "a python")
            monkeypatch.setattr(layers, "init_python", lambda: python)
        for path, _dirs, files in os.walk(top):  # for a session helper run as the user
            os.chmod(path, 0o755)
            for name in files:
                os.chmod(os.path.join(path, name), 0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def root() -> Iterator[Path]:
    # Outside /tmp: a workspace under /tmp is bound at its own path, by design.
    path = Path(tempfile.mkdtemp(prefix="stockade-tmp-clean-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sandbox(root: Path, backend: str, **config: object) -> SyncWorkspaceSandbox:
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    (root / "home").mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(root / "home"), "XDG_STATE_HOME": str(root / "state"),
           "XDG_CONFIG_HOME": str(root / "config"), "XDG_DATA_HOME": str(root / "data")}
    cfg = SandboxConfig(backend=backend, ledger=str(root / "ledger.db"), warm_sandboxes=0,
                        **config)  # type: ignore[arg-type]
    sb = SyncWorkspaceSandbox(cfg, env=env, mode_source=lambda: "workspace-write")
    sb.open_session("s", str(ws))
    return sb


def _sh(sb: SyncWorkspaceSandbox, script: str) -> tuple[list[str], list[str]]:
    out = sb.execute(SandboxCommand("/bin/sh", ["-c", script], session_id="s"))
    assert out.exit_code == 0, out.stderr
    tmp, _, tmpdir = out.stdout.decode().partition("--\n")
    return tmp.split(), tmpdir.split()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sessions_tmp_holds_only_what_its_commands_made(
        under_tmp: Path, root: Path, backend: str) -> None:
    sb = _sandbox(root, backend, tmp_size_mb=16)
    try:
        tmp, tmpdir = _sh(sb, LIST_TMP)
        assert tmpdir == []
        if backend == "bubblewrap":  # /tmp is the session's; the host's is not shown
            assert tmp == []
            mounts = _sh(sb, "grep stockade- /proc/self/mountinfo; echo --")[0]
            assert "/dev/stockade-init" in mounts, mounts  # the copy is the init in use
        tmp, tmpdir = _sh(sb, f'echo x > "$TMPDIR/f"; {LIST_TMP}')
        assert tmpdir == ["f"] and (backend == "landlock" or tmp == ["f"])
        assert os.listdir(sb.core.sessions["s"].tmp_dir or "") == []  # a tmpfs, not the host's
    finally:
        sb.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_tmp_on_the_host_holds_only_what_its_commands_made(
        under_tmp: Path, root: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no tmpfs can be mounted (no nsenter), the session's /tmp is a host directory."""
    monkeypatch.setattr(sessionns, "NSENTER", str(root / "no-nsenter"))
    sb = _sandbox(root, backend, tmp_size_mb=16)
    try:
        tmp, tmpdir = _sh(sb, f'echo x > "$TMPDIR/f"; {LIST_TMP}')
        assert tmpdir == ["f"] and (backend == "landlock" or tmp == ["f"])
        assert os.listdir(sb.core.sessions["s"].tmp_dir or "") == ["f"]
    finally:
        sb.close()


def test_a_sandbox_without_a_session_tmp_has_an_empty_tmp(under_tmp: Path, root: Path) -> None:
    sb = _sandbox(root, "bubblewrap")
    try:
        assert _sh(sb, LIST_TMP)[0] == []
    finally:
        sb.close()
