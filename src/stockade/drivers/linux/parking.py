"""What both Linux drivers share around their own cold launch.

Each driver builds a cold launch its own way (`_prepare`); in front of it
sits the same per-session pool of parked sandboxes (warm.py), fed the same
session hooks, which also keep each session's namespaces (sessionns.py,
entered by both launches), and behind it the same metadata guard, which
differs only in whether it keeps copies to put back (`RESTORE_CONTENT`).
"""

from __future__ import annotations

import threading

from ..base import Driver

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import ClassVar

    from ...profile import Profile
    from ..base import Launch
    from ..session import Session
    from .host.guard import MetadataGuard
    from .host.treewatch import TreeWatch
    from .warm import WarmPool


class ParkingDriver(Driver):
    """A Linux driver whose launches may come from a parked sandbox."""

    #: Whether the guard keeps copies of existing protected paths and puts them
    #: back: needed where nothing holds them read-only during the run.
    RESTORE_CONTENT: ClassVar[bool] = False
    _state_dir: str

    def _start_parking(self, size: int, idle_seconds: float, watch: tuple[str, ...]) -> None:
        from .host.sessionns import SessionNamespaces

        #: Per workspace, how many open sessions are on it: its tree watch goes
        #: with the last.
        self._on_workspace: dict[str, int] = {}
        self._session_namespaces = SessionNamespaces()
        self._trees: dict[str, TreeWatch] = {}
        self._trees_lock = threading.Lock()
        self._warm: WarmPool | None = None
        if size > 0:
            from .warm import WarmPool

            self._warm = WarmPool(self._prepare, self._guard, size=size,
                                  idle_timeout=idle_seconds, watch=watch,
                                  view=self._mounted_view)

    @staticmethod
    def _mounted_view(profile: Profile) -> list[tuple[str, bool]]:
        """What a parked sandbox's init checks before it runs a command (see
        `warm.Parked.dispatch`): none where nothing is mounted by name."""
        return []

    def prepare(self, argv: list[str], profile: Profile) -> Launch:
        if self._warm is not None and profile.session is not None and not profile.publish:
            # A published port is bound for this command, and its relay is
            # forked before the layers a parked sandbox has already applied.
            return self._warm.launch(argv, profile)
        launch = self._prepare(argv, profile)
        if profile.workspace_writable or profile.write_roots:  # writers.writable_roots
            from ..writers import WRITERS, writable_roots

            # Another driver's pool in this process may park beside it.
            WRITERS.count(launch, writable_roots(profile))
        # Parking off (the CLI's `run`, warm_sandboxes = 0) is still a start:
        # a record without the key read as neither. warm.START_COLD, spelled
        # here: importing warm.py (socket, enum) cost a read-only `stockade
        # run` several milliseconds for a launch that writes nothing.
        launch.report.audit["start"] = "cold"
        return launch

    def open_session(self, session: Session) -> None:
        with self._trees_lock:
            self._on_workspace[session.workspace] = self._on_workspace.get(
                session.workspace, 0) + 1

    def close_session(self, session: Session) -> None:
        """Stop what was parked for the session now, not at the idle timeout."""
        try:
            if self._warm is not None:
                self._warm.drop(session)
            with self._trees_lock:
                left = self._on_workspace.pop(session.workspace, 0) - 1
                if left > 0:
                    self._on_workspace[session.workspace] = left
                tree = self._trees.pop(session.workspace, None) if left == 0 else None
            if tree is not None:
                tree.close()
        finally:
            self._session_namespaces.close_session(session)

    def close(self) -> None:
        from .host.limits import flush_removals

        try:
            if self._warm is not None:
                self._warm.close()
            flush_removals()
        finally:
            for tree in self._trees.values():
                tree.close()
            self._trees.clear()

    def explain_failure(self, returncode: int, stderr: bytes) -> str | None:
        """Entering a session's namespaces failed (asked only when the init did not start)."""
        from .host.sessionns import explain

        return explain(returncode, stderr)

    def repositories(self, workspace: str) -> tuple[str, ...]:
        return self._tree(workspace).held()

    def matching(self, workspace: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return self._tree(workspace, patterns).matched()

    def _tree(self, workspace: str, patterns: tuple[str, ...] | None = None) -> TreeWatch:
        """The workspace's watch: the first command that needs it walks it once, the
        rest pay for what they change (treewatch.py)."""
        with self._trees_lock:
            tree = self._trees.get(workspace)
            if tree is not None and patterns is not None and (
                    tree.matcher is None or tree.matcher.patterns != patterns):
                tree.close()  # asked with other patterns: walked again for them
                tree = None
            if tree is None:
                from ...patterns import Matcher
                from .host.guard import made_by_commands
                from .host.treewatch import TreeWatch

                tree = self._trees[workspace] = TreeWatch(
                    workspace, Matcher(patterns) if patterns else None)
                tree.adopt(sorted(made_by_commands(self._state_dir, workspace,
                                                   set(tree.existing))))
            return tree

    def _guard(self, profile: Profile) -> MetadataGuard:
        from .host.guard import MetadataGuard

        tree = self._tree(profile.workspace) if profile.workspace_writable else None
        return MetadataGuard(profile, self._state_dir, restore_content=self.RESTORE_CONTENT,
                             tree=tree)

    def _prepare(self, argv: list[str], profile: Profile, *, park_fd: int | None = None,
                 guard: bool | MetadataGuard = True) -> Launch:
        """The cold launch; `park_fd`: park before exec (warm.py), the guard left to dispatch.

        `guard`: take the metadata guard's baseline, or not (parking), or
        this one, already taken for the command (a parked sandbox that could
        not serve it); the launch owns it from here, and releases it with
        its cleanup, or at once if it cannot be built.
        """
        raise NotImplementedError
