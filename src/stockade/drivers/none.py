"""No boundary: what full-access runs under, when a caller chose it explicitly."""

from __future__ import annotations

from .base import Driver, Launch

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ..profile import Profile


class NoneDriver(Driver):
    """Runs the command as it is. The audit record says `backend=none`, so nobody is misled."""

    name = "none"

    def available(self) -> None:
        return None

    def prepare(self, argv: list[str], profile: Profile) -> Launch:
        from ..process import chdir_argv

        if profile.publish:
            from ..errors import SandboxUnavailable
            from ..publish import NO_BOUNDARY

            raise SandboxUnavailable(NO_BOUNDARY)

        from .writers import WRITERS

        # posix_spawn cannot change directory, and chdir in this process
        # would move every thread; a shell does it in the child.
        launch = Launch(chdir_argv(profile.cwd, list(argv)), dict(profile.env), profile.cwd)
        # It can write anything, under any sandbox parked in this process.
        WRITERS.count(launch, ("/",))
        return launch
