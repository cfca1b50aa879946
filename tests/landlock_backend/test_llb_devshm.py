"""/dev/shm under the Landlock backend: no mount namespace, so nothing to bound.

The host's /dev/shm is neither readable nor writable (Landlock grants only
the harmless devices), so a command cannot fill RAM through it, and POSIX
shared memory fails rather than escaping to the host's.
"""

from __future__ import annotations

import pytest

from isolation import test_iso_devshm as iso
from isolation.conftest import Box, text

pytestmark = pytest.mark.isolation


def test_the_hosts_dev_shm_cannot_be_written(box: Box) -> None:
    res = box.sh("head -c 1048576 /dev/zero > /dev/shm/stockade-fill; echo rc=$?; "
                 "echo x > /dev/stockade-planted; echo rc=$?", mode="workspace-write")
    assert "rc=0" not in res.stdout.decode(), text(res)
    assert res.stdout.decode().split() == ["rc=2", "rc=2"], text(res)


def test_posix_shared_memory_fails_here(box: Box) -> None:
    res = box.py(iso.SHARED_MEMORY, mode="workspace-write")
    assert res.returncode != 0 and b"Permission denied" in res.stderr, text(res)
