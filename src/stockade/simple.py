"""Two conveniences for scripts: `run` (like `subprocess.run`) and `wrap` (argv in, argv out)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping, Sequence

    from .profile import Profile


def run(
    args: Sequence[str],
    *,
    mode: str = "read-only",
    cwd: str | None = None,
    input: bytes | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """Run one command confined to `cwd` (default: the current directory).

    Output is captured (within the default 1 MiB budget). Raises
    `CommandTimeout` past `timeout`, `CapabilityDenied` when the request is
    refused, and `subprocess.CalledProcessError` with `check=True`.
    """
    import subprocess

    from .command import SandboxCommand
    from .config import load_config
    from .sync import SyncWorkspaceSandbox

    workspace = os.path.abspath(cwd or os.getcwd())
    config = load_config(cwd=workspace, mode=mode)
    argv = list(args)
    if not argv:
        from .errors import InvalidCommand

        raise InvalidCommand("run() needs a command")
    session = f"run-{os.getpid()}-{os.urandom(4).hex()}"
    with SyncWorkspaceSandbox(config) as sandbox:
        sandbox.session(session, workspace, ephemeral_tmp=True)
        out = sandbox.execute(SandboxCommand(argv[0], argv[1:], session_id=session,
                                             stdin=input, timeout=timeout, env=env))
    result = subprocess.CompletedProcess(argv, out.returncode, out.stdout, out.stderr)
    if check:
        result.check_returncode()
    return result


def namespace_argv(argv: Sequence[str], profile: Profile, *, bwrap: str | None = None
                   ) -> list[str]:
    """bubblewrap's command line for `argv` under `profile`: the namespace and mount layer only.

    Not the whole boundary `execute` builds: there is no init inside, so no
    Landlock, no seccomp filter and no no_new_privs; no cgroup; and nothing
    neutralises protected names the command creates. It exists for callers
    that must spawn bwrap themselves and add their own layers; anything that
    can call `execute` or `run` should. Run it with `profile.env`.
    """
    from .drivers.linux.bwrap import build_bwrap_args
    from .drivers.linux.host.bwrap_binary import locate_bwrap

    path = bwrap or locate_bwrap(os.environ, profile.workspace)
    return build_bwrap_args(profile, path, inner=list(argv))
