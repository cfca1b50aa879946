"""A described machine laid out on disk, so that the core builds its profile for real.

The off-platform drivers' tests describe a Mac or a Windows machine as a map
of paths to kinds. The core reads the disk (what exists to hide, the state
directory and session TMPDIR it makes itself), so the map is laid out under
a scratch root, the core runs there, and its profile comes back with the
root taken off: every path spelled as on the machine described.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from stockade.profile import DIR, SOCKET, Profile, Protected

_BUILT: dict[str, Profile] = {}


def remembered(key: str, build: Callable[[], Profile]) -> Profile:
    """The profile `build` makes, made once per `key` (the arguments that decide it):
    a core lays the machine out and opens its ledger each time, which was most of
    these suites' time. Each caller gets its own copy of the environment."""
    if key not in _BUILT:
        _BUILT[key] = build()
    found = _BUILT[key]
    return found.replace(env=dict(found.env))


@contextmanager
def laid_out(fs: Mapping[str, str]) -> Iterator[str]:
    """The scratch root holding `fs` (path -> DIR, FILE or SOCKET), removed after."""
    # Short, under /tmp: a unix socket's whole path must fit in 108 bytes.
    root = os.path.realpath(tempfile.mkdtemp(prefix="dm-", dir="/tmp"))
    try:
        for path, kind in sorted(fs.items()):
            where = root + path
            if kind == DIR:
                os.makedirs(where, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(where), exist_ok=True)
            if kind == SOCKET:
                with socket.socket(socket.AF_UNIX) as s:
                    s.bind(where)
            else:
                with open(where, "w"):
                    pass
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


class OnDisk:
    """The described machine's paths under `root`, and back."""

    def __init__(self, root: str, tops: Sequence[str]) -> None:
        self.root = root
        #: The described machine's own top directories; the rest (/usr, /bin) is
        #: the host's, read where it is.
        self.tops = tuple(tops)

    def path(self, path: str) -> str:
        ours = any(path == top or path.startswith(top + "/") for top in self.tops)
        return self.root + path if ours else path

    def text(self, value: str) -> str:
        """An environment value: each described path in it moved under the root."""
        for top in self.tops:
            value = value.replace(top + "/", self.root + top + "/")
            if value == top:
                value = self.root + top
        return value

    def taken_off(self, profile: Profile) -> Profile:
        fields = {name: self._off(getattr(profile, name)) for name in profile.__slots__
                  if name != "session"}
        # The session's object is the core's, closed with it; its paths are in
        # `session_tmp` and `private_around`.
        return profile.replace(session=None, **fields)

    def _off(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(self.root, "")
        if isinstance(value, tuple):
            return tuple(self._off(v) for v in value)
        if isinstance(value, list):
            return [self._off(v) for v in value]
        if isinstance(value, dict):
            return {self._off(k): self._off(v) for k, v in value.items()}
        if isinstance(value, Protected):
            return Protected(self._off(value.path), value.kind)
        return value
