"""A Windows user's profile laid out on disk, and a real `SandboxCore` building profiles.

The environment is what a Windows logon sets: USERPROFILE, APPDATA,
LOCALAPPDATA, SystemRoot, and no HOME. The tree is under pytest's
temporary directory, so its paths are this machine's spelling; what is
Windows about the profile is which variables it was built from
(`win_fakes.win_profile` builds the same way, then spells the paths as
Windows does).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from stockade.command import SandboxCommand
from stockade.config import SandboxConfig
from stockade.core import SandboxCore
from stockade.profile import Profile

SECRETS = (
    ".aws/credentials",
    ".ssh/id_ed25519",
    ".azure/msal_token_cache.json",
    "_netrc",
    "AppData/Roaming/gcloud/credentials.db",
    "AppData/Roaming/GitHub CLI/hosts.yml",
    "AppData/Roaming/Mozilla/Firefox/Profiles/ab12.default/logins.json",
    "AppData/Local/Google/Chrome/User Data/Default/Login Data",
)
TOOLING = (
    "AppData/Local/Programs/Python/Python312/python.exe",
    "AppData/Roaming/npm/node_modules/x/index.js",
    "AppData/Local/pip/cache/x",
)


class WinHost:
    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.home = os.path.join(self.root, "Users", "dev")
        self.ws = os.path.join(self.home, "work", "proj")
        self.appdata = os.path.join(self.home, "AppData", "Roaming")
        self.local = os.path.join(self.home, "AppData", "Local")
        os.makedirs(os.path.join(self.ws, ".git", "hooks"))
        with open(os.path.join(self.ws, ".git", "config"), "w") as fh:
            fh.write("[core]\n")
        for rel in (*SECRETS, *TOOLING):
            path = os.path.join(self.home, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write("decoy\n")
        self.env = {"USERPROFILE": self.home, "APPDATA": self.appdata,
                    "LOCALAPPDATA": self.local, "HOMEDRIVE": "C:", "HOMEPATH": "\\Users\\dev",
                    "SystemRoot": "C:\\Windows", "PATH": "C:\\Windows\\System32",
                    "PATHEXT": ".COM;.EXE;.BAT;.CMD", "TEMP": os.path.join(self.local, "Temp"),
                    "USERNAME": "dev"}

    @contextmanager
    def core(self, **config: object) -> Iterator[SandboxCore]:
        core = SandboxCore(SandboxConfig(backend="windows", **config),  # type: ignore[arg-type]
                           env=self.env)
        try:
            yield core
        finally:
            core.close()

    @contextmanager
    def core_from_environ(self) -> Iterator[SandboxCore]:
        """A core that reads os.environ itself, as the command line's does."""
        core = SandboxCore(SandboxConfig(backend="windows"))
        try:
            yield core
        finally:
            core.close()

    def profile(self, core: SandboxCore, mode: str = "workspace-write", *,
                session: str = "s1") -> Profile:
        ws = core.sessions.get(session) or core.new_session(session, self.ws)
        return core.make_profile(ws, SandboxCommand("cmd", ["/c", "ver"]), mode,
                                 core.baseline(mode, ws), ws.cwd, "windows")
