"""No boundary: what full-access runs under, when a caller chose it explicitly."""

from __future__ import annotations

from . import PreparedLaunch

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ..profile import Profile


class NoneDriver:
    """Runs the command as it is. The audit record says `backend=none`, so nobody is misled."""

    name = "none"

    def available(self) -> None:
        return None

    def prepare(self, argv: list[str], profile: Profile) -> PreparedLaunch:
        return PreparedLaunch(list(argv), dict(profile.env), profile.cwd)
