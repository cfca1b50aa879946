"""A sandbox session as the drivers see it: one object from its opening to its end.

The core makes a `Session` when a session opens and hands that object to
every driver; a driver keys what it keeps for the session by the object
itself (a parked sandbox, the session's namespaces), so nothing of one
session is found under another's name, and nothing needs a second map of
sessions to be kept in step with the first.
"""

from __future__ import annotations

from .owned import owned_dir, remove_owned

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Protocol

    class Closeable(Protocol):
        def close(self) -> None: ...


class Session:
    """One session: its id, its workspace, and its /tmp, made when it opens and
    removed when it ends, so that no /tmp outlives its session or serves two."""

    __slots__ = ("closed", "id", "namespaces", "tmp", "workspace")

    def __init__(self, session_id: str, workspace: str, tmp: str | None) -> None:
        self.id = session_id
        self.workspace = workspace
        #: The host directory that is /tmp in every command of the session, or
        #: None where each command gets a fresh one.
        self.tmp = tmp
        #: Set once the session ends: nothing is made for it any more.
        self.closed = False
        #: What a driver made for the session's commands to share (the Linux
        #: drivers' namespaces), closed by that driver when the session ends.
        self.namespaces: Closeable | None = None

    @classmethod
    def open(cls, session_id: str, workspace: str, *, tmp_base: str | None) -> Session:
        """A new session, with a /tmp of its own under `tmp_base` (None: no /tmp of its own)."""
        tmp = private_dir(tmp_base, session_id) if tmp_base is not None else None
        return cls(session_id, workspace, tmp)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {self.workspace!r})"

    def remove_tmp(self) -> None:
        """Remove the session's /tmp (after every driver let go of the session)."""
        if self.tmp:
            remove_owned(self.tmp)


def private_dir(base: str, session_id: str) -> str:
    """A new directory of the session's under `base` (see `owned_dir`)."""
    from ..paths import session_key

    return owned_dir(base, session_key(session_id)[:12] + "-")
