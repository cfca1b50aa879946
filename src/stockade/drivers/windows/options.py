"""The Windows backend's config keys, apart from its driver.

The registry reads them to validate a config on any platform: a team's
one file serves every machine, and reading it must not import the driver.
"""

from __future__ import annotations

from ..base import DriverOption

WINDOWS_OPTIONS = (
    DriverOption("windows_allow_job_only", "bool", False,
                 "let read-only and workspace-write commands run on the job-object tier, "
                 "which enforces no filesystem boundary, when no stronger tier starts"),
    DriverOption("windows_allow_open_network", "bool", False,
                 "let commands whose network is none run on the restricted-token or "
                 "job-object tier, neither of which can close the network"),
    DriverOption("windows_read_paths", "str", "",
                 "directories an AppContainer command may read beyond the system's and the "
                 "workspace (toolchains installed outside Program Files), separated by ';'"),
    DriverOption("windows_tier", "str", "auto",
                 "auto (AppContainer, then restricted token, then job object) or one tier "
                 "by name, with no fallback"),
)
