"""/dev and /dev/shm cannot fill the host's RAM: both are tmpfs inside bubblewrap.

Attacks run inside the real sandbox; what they filled is read back from the
command's own output (the tmpfs dies with the sandbox) and the controls run
the same writes unconfined, so a bound that never bit cannot pass.
"""

from __future__ import annotations

import os
import secrets

import pytest

from stockade.drivers.linux.host.bwrap_binary import bundled_bwrap

from .conftest import FORCED_BWRAP, Box, text

pytestmark = pytest.mark.isolation

MIB = 1 << 20
SHM_CAP_MB = 16
#: Twice the cap: the write that would have succeeded unbounded.
FILL = 2 * SHM_CAP_MB * MIB
FILL_SHM = (f"head -c {FILL} /dev/zero > /dev/shm/fill; echo rc=$?; "
            "wc -c < /dev/shm/fill")


def test_dev_shm_is_bounded_by_tmp_size_mb(box: Box) -> None:
    """Any bwrap stockade accepts (0.8 up) caps it: --size predates --disable-userns."""
    box.user_config(f"tmp_size_mb = {SHM_CAP_MB}")
    res = box.sh(FILL_SHM, mode="workspace-write")
    rc, size = res.stdout.decode().split()
    assert rc != "rc=0", text(res)
    assert 0 < int(size) <= SHM_CAP_MB * MIB, text(res)
    assert b"No space left on device" in res.stderr, text(res)


def test_control_the_same_write_fills_an_unbounded_dev_shm(box: Box) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.fail("the host has no /dev/shm to run the control on")
    name = f"/dev/shm/stockade-control-{secrets.token_hex(4)}"
    try:
        res = box.host(["/bin/sh", "-c", f'head -c {FILL} /dev/zero > "$1" && wc -c < "$1"',
                        "sh", name])
        assert res.stdout.decode().split() == [str(FILL)], text(res)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def test_dev_itself_is_read_only_and_its_devices_work(box: Box) -> None:
    script = ("head -c 1048576 /dev/zero > /dev/planted; echo rc=$?; "
              "echo x > /dev/null && head -c 4 /dev/urandom | wc -c")
    res = box.sh(script, mode="workspace-write")
    rc, devices = res.stdout.decode().split()
    assert rc != "rc=0" and devices == "4", text(res)
    assert b"Read-only file system" in res.stderr, text(res)


def test_control_bwraps_own_dev_is_writable(box: Box) -> None:
    """What stockade changes: a bare `--dev /dev` takes the same megabyte."""
    bwrap = FORCED_BWRAP or bundled_bwrap()
    assert bwrap, "no bwrap to run the control with"
    res = box.host([bwrap, "--unshare-user", "--ro-bind", "/", "/", "--dev", "/dev", "--",
                    "/bin/sh", "-c", "head -c 1048576 /dev/zero > /dev/planted && "
                    "wc -c < /dev/planted"])
    assert res.stdout.decode().split() == ["1048576"], text(res)


SHARED_MEMORY = """
import multiprocessing
from multiprocessing import shared_memory
block = shared_memory.SharedMemory(create=True, size=1 << 20)
block.buf[:2] = b"ok"
print(bytes(block.buf[:2]).decode(), end=" ")
block.close()
block.unlink()
with multiprocessing.Lock():
    print("locked")
"""


def test_posix_shared_memory_and_semaphores_still_work(box: Box) -> None:
    res = box.py(SHARED_MEMORY, mode="workspace-write")
    assert res.stdout.decode().split() == ["ok", "locked"], text(res)
