"""A Mac laid out on disk and a real `SandboxCore` building its profiles.

Like the described machine in `macos_fakes`, this one goes through
`SandboxCore.make_profile`, the path every command takes, with what only the
core adds: stockade's private state and
data directories, the session's TMPDIR inside the state directory, the
toolchain cache layers. The environment is a Mac's: HOME and a per-user
TMPDIR under /var/folders, no XDG variables.

The tree lives under pytest's temporary directory, so its paths are spelled
`/private/tmp/...` in the profile (Seatbelt's spelling) and every question
goes through `canonical_macos_path` first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sbpl_eval import Policy

from stockade.command import SandboxCommand
from stockade.config import SandboxConfig
from stockade.core import SandboxCore
from stockade.drivers.macos.sbpl import canonical_macos_path
from stockade.drivers.macos.seatbelt import seatbelt_profile
from stockade.profile import Profile

#: Files a Mac keeps secrets in, as the home plants them (all decoys).
SECRETS = (
    ".aws/credentials",
    ".ssh/id_ed25519",
    "Library/Keychains/login.keychain-db",
    "Library/Application Support/Firefox/Profiles/ab12.default-release/logins.json",
    "Library/Application Support/Firefox/Profiles/ab12.default-release/key4.db",
    "Library/Application Support/Firefox/Profiles/ab12.default-release/cookies.sqlite",
    "Library/Application Support/Google/Chrome/Default/Login Data",
    "Library/Application Support/some-cli/token.json",
    "Library/Messages/chat.db",
)
#: What builds read under ~/Library, and must keep reading.
TOOLING = (
    "Library/Caches/go-build/00/abc-d",
    "Library/Caches/pip/http/x",
    "Library/Python/3.12/lib/python/site-packages/mod.py",
    "Library/Developer/Xcode/DerivedData/x",
    "Library/Application Support/go/env",
)
#: What the desktop or an editor runs later, present on this machine.
RUN_LATER = (
    "Library/LaunchAgents/com.example.updater.plist",
    "Library/Preferences/com.apple.Terminal.plist",
    "Library/Application Support/Code/User/settings.json",
    "Library/Application Support/Claude/claude_desktop_config.json",
    "Library/Application Support/iTerm2/Scripts/AutoLaunch/x.py",
)


def C(path: str) -> str:
    """`path` as Seatbelt sees it."""
    return canonical_macos_path(path)


class MacHost:
    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.home = os.path.join(self.root, "Users", "dev")
        self.ws = os.path.join(self.home, "work", "proj")
        self.tmpdir = os.path.join(self.root, "var", "folders", "zz", "abc123", "T")
        for d in (f"{self.ws}/.git/hooks", self.tmpdir):
            os.makedirs(d, exist_ok=True)
        with open(f"{self.ws}/.git/config", "w") as fh:
            fh.write("[core]\n")
        for rel in (*SECRETS, *TOOLING, *RUN_LATER):
            path = os.path.join(self.home, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write("decoy\n")
        self.env = {"HOME": self.home, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                    "TMPDIR": self.tmpdir + "/", "USER": "dev", "SHELL": "/bin/zsh"}

    @contextmanager
    def core(self, **config: object) -> Iterator[SandboxCore]:
        core = SandboxCore(SandboxConfig(backend="seatbelt", **config),  # type: ignore[arg-type]
                           env=self.env)
        try:
            yield core
        finally:
            core.close()

    def profile(self, core: SandboxCore, mode: str = "workspace-write", *,
                workspace: str | None = None, session: str = "s1",
                ephemeral_tmp: bool = False) -> Profile:
        ws = core.sessions.get(session) or core.new_session(
            session, workspace or self.ws, ephemeral_tmp=ephemeral_tmp)
        return core.make_profile(ws, SandboxCommand("/bin/sh", ["-c", "true"]), mode,
                                 core.baseline(mode, ws), ws.cwd, "seatbelt")

    def policy(self, profile: Profile, precedence: str = "last-match", *,
               scratch: str | None = None) -> Policy:
        text, params = seatbelt_profile(profile, scratch=scratch)
        return Policy(text, params, precedence=precedence)
