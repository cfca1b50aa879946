"""`stockade trust`: record a project's settings file as trusted, list, revoke.

Apart from trust.py because it reads a project file as `load_config` does
(config.py), and `load_config` asks trust.py whether a project file may
widen the user's config.
"""

from __future__ import annotations

from .errors import InvalidCommand
from .trust import TrustStore, digest, real_path, widenings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def trust_file(path: str, env: Mapping[str, str], cwd: str) -> list[str]:
    """Record `path` as trusted; the lines say what it now allows beyond the user's config."""
    from .config import allowed_settings, read_project_file

    read = read_project_file(path)
    if read is None:
        raise InvalidCommand(f"{path}: no such file to trust")
    data, table = read
    found = widenings(allowed_settings(env), table, env)
    TrustStore.for_env(env).trust(path, digest(data))
    real = real_path(path)
    lines = [f"trusted {real} (sha256 {digest(data)[:16]}…)"]
    if not found:
        lines.append("it asks for nothing wider than your own config")
    else:
        lines.append("it may now widen your own config:")
        lines += [f"  {setting}  (yours: {have})" for setting, _value, have in found]
    return lines


def list_trusted(env: Mapping[str, str]) -> list[str]:
    from .fsroot import read_file
    from .settingsfile import MAX_SETTINGS_BYTES, settings_problem

    store = TrustStore.for_env(env)
    lines = []
    for path, sha in sorted(store.entries().items()):
        # Read as `load_config` reads it: each is in a workspace a command can write.
        try:
            data = read_file(path, MAX_SETTINGS_BYTES)
        except FileNotFoundError:
            state = "missing"
        except OSError as exc:
            state = f"untrusted: {settings_problem(path, exc, follow=False)}"
        else:
            state = "trusted" if digest(data) == sha else "changed: untrusted again"
        lines.append(f"{path}  {sha[:16]}…  {state}")
    return lines or [f"no trusted files ({store.path})"]


def revoke_file(path: str, env: Mapping[str, str]) -> list[str]:
    if not TrustStore.for_env(env).revoke(path):
        raise InvalidCommand(f"{path}: not a trusted file (see: stockade trust --list)")
    return [f"revoked {real_path(path)}"]
