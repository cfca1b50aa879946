"""The config keys the Linux backends read, apart from the drivers themselves.

The registry reads these to validate `[sandbox]` and to write help without
importing the drivers, whose modules pull in the Linux layers: config
validation runs on every CLI start-up, and most commands never need the
backend they are not going to use.
"""

from __future__ import annotations

from ...base import DriverOption

BWRAP = DriverOption(
    "bwrap", "path", "",
    "the bwrap binary to use, by absolute path (default: PATH outside the workspace, "
    "then the bundled one); a configured bwrap is never replaced by Landlock under auto")
MAX_PIDS = DriverOption("max_pids", "int", 200,
                        "processes and threads the command's tree may have at once")
CPU_QUOTA = DriverOption("cpu_quota_percent", "int-or-none", None,
                         "CPU the command's tree may use, in percent of one core (unset: no cap)")
REQUIRE_LANDLOCK = DriverOption(
    "require_landlock", "bool", False,
    "refuse to run when the kernel has no Landlock, rather than report it and rely on "
    "bwrap's mounts alone")
#: The lowest Landlock ABI the backend accepts unless `landlock_min_abi`
#: says otherwise: ABI 3 is the first that can refuse truncate(2), without
#: which a read-only file can still be emptied.
DEFAULT_MIN_ABI = 3
LANDLOCK_MIN_ABI = DriverOption(
    "landlock_min_abi", "int", DEFAULT_MIN_ABI,
    "the oldest Landlock ABI the landlock backend (and auto falling back to it) accepts")

WARM_SANDBOXES = DriverOption(
    "warm_sandboxes", "count", 1,
    "sandboxes built ahead of need per session, each serving the next command "
    "(see docs/warm.md); 0: every command starts cold")
#: The longest `warm_idle_seconds` accepted. `inf` (or 1e300) passed the
#: positive-number check and killed the spawner thread with OverflowError
#: at its first timed wait: parking stopped, silently, for good.
MAX_WARM_IDLE = 86400.0
WARM_IDLE = DriverOption("warm_idle_seconds", "number", 300.0,
                         "seconds a parked sandbox may wait unused before it is stopped "
                         f"(at most {MAX_WARM_IDLE:g})", maximum=MAX_WARM_IDLE)

BUBBLEWRAP_OPTIONS = (BWRAP, MAX_PIDS, CPU_QUOTA, REQUIRE_LANDLOCK, WARM_SANDBOXES, WARM_IDLE)
# `auto` may fall back to Landlock, so its minimum is read whichever backend is named.
LANDLOCK_OPTIONS = (MAX_PIDS, CPU_QUOTA, LANDLOCK_MIN_ABI, WARM_SANDBOXES, WARM_IDLE)
