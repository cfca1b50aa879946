"""`stockade explain` and `stockade config show`: what a command would get, and why.

`explain` takes `run`'s options and a command, and walks the pipeline's
decisions up to the profile -- mode, grants, the driver, the profile a
driver would be given -- without asking for approval, starting a proxy,
preparing a launch or writing an audit record. What would need approval is
said, not asked. `config show` prints each setting in force and the file or
flag it came from.
"""

from __future__ import annotations

import os
import sys

from .clitables import CONFIG_OPTIONS, CONFIG_USAGE, EXPLAIN_OPTIONS, EXPLAIN_USAGE
from .cliutil import (
    UsageError,
    check_host_flags,
    command_help,
    open_session,
    parse_options,
    positive_number,
    requested_capabilities,
)
from .drivers.registry import declared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .capabilities import SandboxCapabilities
    from .command import SandboxCommand
    from .config import SandboxConfig
    from .core import SessionWorkspace
    from .profile import Profile
    from .sync import SyncWorkspaceSandbox

#: Run's flags that set a config key, and the key.
FLAG_KEYS = {"mode": "mode", "backend": "backend", "deny_host": "deny_hosts"}


def setting_sources(config: SandboxConfig, flags: dict[str, object] | None = None
                    ) -> dict[str, str]:
    """key -> where its value came from: a flag, the last file that set it, or "default"."""
    from .config import FIELDS, parse_settings, read_settings

    origin = dict.fromkeys(FIELDS, "default")
    for path in config.sources:
        data = read_settings(path, follow=path not in config.project_sources)
        if data is None:
            continue
        for setting in parse_settings(data, path):
            origin[setting] = path
    for flag, value in (flags or {}).items():
        key = FLAG_KEYS.get(flag)
        if key is not None and value:
            name = f"--{flag.replace('_', '-')}"
            origin[key] = name if origin[key] == "default" else f"{origin[key]} and {name}"
    return origin


def settings(config: SandboxConfig) -> dict[str, object]:
    from .config import FIELDS

    out: dict[str, object] = {}
    for key in FIELDS:
        if hasattr(config, key):
            out[key] = getattr(config, key)
        else:
            out[key] = config.option(key)
    if config.command_policy:
        out["command_policy"] = {k: v for k, v in config.command_policy.items()
                                 if not k.startswith("_")}
    return out


def _show(value: object) -> str:
    from .trust import toml_value

    if value is None:
        return "(unset)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    return toml_value(value)


def config_main(argv: list[str]) -> int:
    values, rest = parse_options(argv, CONFIG_OPTIONS, CONFIG_USAGE)
    if values.get("help") or rest[:1] in (["-h"], ["--help"]):
        print(command_help("config"))
        return 0
    if rest != ["show"]:
        raise UsageError("config needs one action: show", CONFIG_USAGE)
    from .config import load_config

    path = values.get("config")
    config = load_config(os.environ, str(values.get("workspace") or os.getcwd()),
                         paths=[str(path)] if path else None)
    shown = settings(config)
    origin = setting_sources(config)
    if "command_policy" in shown:
        origin["command_policy"] = str(config.command_policy.get("_source", "default"))
    if values.get("json"):
        import json

        print(json.dumps({"sources": config.sources,
                          "settings": {k: {"value": v, "from": origin.get(k, "default")}
                                       for k, v in shown.items()}}, default=str))
        return 0
    print("files read: " + (", ".join(config.sources) or "none (every value is a default)"))
    width = max(map(len, shown))
    for key, value in shown.items():
        print(f"{key:<{width}} = {_show(value)}   # {origin.get(key, 'default')}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        values: dict[str, object] = {"help": True}
        command: list[str] = []
    else:
        values, command = parse_options(argv, EXPLAIN_OPTIONS, EXPLAIN_USAGE)
    if values.get("help"):
        print(command_help("explain"))
        return 0
    if not command:
        raise UsageError("no command given (put it after --)", EXPLAIN_USAGE)
    timeout = positive_number(values, "timeout", float, EXPLAIN_USAGE)
    check_host_flags(values, EXPLAIN_USAGE)
    report = explain(values, command, timeout)
    if values.get("json"):
        import json

        print(json.dumps(report, default=str))
    else:
        print(render(report))
    return 0


def explain(values: dict[str, object], command: list[str], timeout: float | None
            ) -> dict[str, object]:
    """The pipeline's decisions for `command` up to its profile, as a JSON-able dict."""
    sandbox, ws, mode = open_session(values, prefix="explain", probe=False)
    try:
        return _decisions(sandbox, ws, mode, values, command, timeout)
    finally:
        sandbox.close_session(ws.session_id)
        sandbox.close()


def _decisions(sandbox: SyncWorkspaceSandbox, ws: SessionWorkspace, mode: str,
               values: dict[str, object], command: list[str], timeout: float | None
               ) -> dict[str, object]:
    """The pipeline's steps before the driver, in its order, so that a refusal here is
    the one the run would meet first."""
    from . import approval as ap
    from .capabilities import READ_ONLY
    from .command import SandboxCommand as Command
    from .drivers import should_sandbox

    config = sandbox.config
    caps_asked = requested_capabilities(values, sandbox, ws, mode, EXPLAIN_USAGE)
    cmd = Command(command[0], command[1:], session_id=ws.session_id,
                  capabilities=caps_asked, timeout=timeout,
                  cwd=str(values["cwd"]) if values.get("cwd") else None)
    cwd = sandbox.resolve_cwd(ws, cmd.cwd)
    mode = sandbox.mode_for(ws)
    baseline = sandbox.baseline(ws, mode)
    caps = caps_asked if caps_asked is not None else baseline
    origin = setting_sources(config, values)
    out: dict[str, object] = {
        "argv": cmd.argv, "mode": mode, "mode_from": origin["mode"],
        "workspace": ws.cwd, "cwd": cwd,
    }
    if not caps.is_within(baseline):
        out["needs_approval"] = ap.exceeds(caps, baseline) or "a boundary change"
    if mode == READ_ONLY and caps.fs_write:
        out["refused"] = "fs_write needs workspace-write or full-access mode"
    policy = _policy_verdict(config, cmd)
    if policy:
        out["command_policy"] = policy
    sandboxed = should_sandbox(mode, cmd.preference)
    ceiling = config.max_memory_mb
    if sandboxed and ceiling and (caps.max_memory_mb is None
                                  or caps.max_memory_mb > ceiling):
        caps = caps.replace(max_memory_mb=ceiling)
    out["timeout_seconds"] = (cmd.timeout or caps.timeout_secs
                              or float(config.default_timeout_seconds))
    out["timeout_from"] = ("--timeout" if timeout else origin["default_timeout_seconds"])
    out["output"] = {
        "streamed_bytes": config.stream_output_bytes,
        "streamed_from": origin["stream_output_bytes"],
        "captured_bytes": config.max_output_bytes,
        "captured_from": origin["max_output_bytes"],
    }
    if sandboxed and mode != READ_ONLY and declared(config.backend).confines:
        from .core import refuse_home_workspace

        try:
            refuse_home_workspace(ws.cwd, sandbox.env, config.allow_home_workspace)
        except Exception as exc:
            out["refused"] = str(exc)
    out.update(_boundary(sandbox, ws, cmd, mode, caps, cwd, sandboxed, origin, values))
    return out


def _boundary(sandbox: SyncWorkspaceSandbox, ws: SessionWorkspace, cmd: SandboxCommand,
              mode: str, caps: SandboxCapabilities, cwd: str, sandboxed: bool,
              origin: dict[str, str], values: dict[str, object]) -> dict[str, object]:
    """The driver's part: which backend, and the profile it would be given, built
    without starting anything (an unavailable backend is reported, not raised)."""
    from .capabilities import FULL_ACCESS

    config = sandbox.config
    out: dict[str, object] = {}
    try:
        driver = sandbox.driver_for(ws, sandboxed)
        driver.available()
    except Exception as exc:
        out["backend"] = config.backend
        out["backend_from"] = origin["backend"]
        out["unavailable"] = " ".join(str(exc).split())
        return out
    out["backend"] = driver.name
    out["backend_from"] = origin["backend"]
    if not sandboxed or mode == FULL_ACCESS:
        out["layers"] = ["none: full-access runs the command as it is"]
        out["network"] = "all"
        return out
    profile = sandbox.profile_for(cmd, ws, mode, caps, cwd, driver)
    out.update(_profile_facts(profile, config, origin))
    flags = [f"--{k.replace('_', '-')}" for k in ("network", "allow_host")
             if values.get(k)]
    if flags:
        out["network_from"] = " and ".join(flags)
    if out["backend_from"] == "default" or config.backend == "auto":
        out["backend_from"] = f"backend = {config.backend!r}, {out['backend_from']}"
    out["layers"] = layers(driver.name, profile, config)
    return out


def _policy_verdict(config: SandboxConfig, cmd: SandboxCommand) -> str | None:
    """What the command policy would say, without the hook's audit of a match."""
    from .command_policy import policy_hook_from_config
    from .command_policy.normalize import scan_target

    hook = policy_hook_from_config(config.command_policy)
    if hook is None:
        return "off ([sandbox.command_policy] enabled = false)"
    policy = hook.policy
    if not policy.enabled:
        return None
    raw, truncated = scan_target(cmd.program, cmd.args, cmd.stdin)
    verdict = policy.check_text(raw, truncated=truncated)
    if verdict.blocked:
        return "blocked: " + "; ".join(f"{m.name} ({m.description})" for m in verdict.blocks)
    if verdict.matches:
        return "warns: " + "; ".join(f"{m.name} ({m.description})" for m in verdict.warnings)
    return None


def _profile_facts(profile: Profile, config: SandboxConfig, origin: dict[str, str]
                   ) -> dict[str, object]:
    network = profile.network
    net: object = network.kind
    if network.hosts:
        net = {"kind": network.kind, "hosts": list(network.hosts),
               "denied": list(config.deny_hosts)}
    return {
        "read_scope": profile.read_scope,
        "read": list(profile.read_roots) + list(profile.read_extra),
        "workspace_writable": profile.workspace_writable,
        "writable": ([profile.workspace] if profile.workspace_writable else [])
        + list(profile.write_roots),
        "writable_from": origin["writable"],
        "hidden": [path for path, _kind in profile.hidden],
        "hidden_from": origin["unreadable"],
        "shown_back": [path for path, _kind in profile.shown],
        "protected": [p.path for p in profile.protected],
        "network": net,
        "network_from": origin["allow_hosts"] if network.hosts else "the mode",
        "memory_default_mb": config.memory_default_mb(),
        "limits": {
            "max_memory_mb": profile.max_memory_mb,
            "max_pids": config.max_pids,
            "cpu_quota_percent": config.cpu_quota_percent,
            "tmp_size_mb": profile.tmp_size_mb,
            "max_file_size_mb": profile.max_file_size_mb,
        },
        "limits_from": {key: origin[key] for key in (
            "max_memory_mb", "max_pids", "cpu_quota_percent", "tmp_size_mb",
            "max_file_size_mb")},
        "spawn_subprocess": profile.spawn_subprocess,
        "environment_dropped": sorted(set(os.environ) - set(profile.env)),
    }


def layers(backend: str, profile: Profile, config: SandboxConfig) -> list[str]:
    """The kernel layers the backend would put around this profile, here."""
    from .capabilities import NetworkPolicy

    out: list[str] = []
    abi = 0
    traits = declared(backend)
    if sys.platform.startswith("linux"):
        from .drivers.linux.host.limits import mechanism
        from .drivers.linux.init.landlock import landlock_abi

        abi = landlock_abi()
        kind, _bases, _why = mechanism()
    else:
        kind = "none"
    if traits.namespaces:
        spaces = "user, mount, PID, IPC, UTS, cgroup"
        if profile.network.kind != NetworkPolicy.ALL:
            spaces += ", network"
        workspace = "writable" if profile.workspace_writable else "read-only"
        out.append(f"{backend}: namespaces ({spaces}); the host read-only, the workspace "
                   f"{workspace}")
    if traits.linux_layers:
        out.append(f"Landlock ABI {abi}" if abi else
                   "Landlock: not on this kernel (bubblewrap's mounts alone)")
        out.append("seccomp: the base filter"
                   + ("" if profile.spawn_subprocess else ", and no new processes"))
        if kind.startswith("cgroup") or kind == "systemd":
            out.append(f"{kind}: pids.max {config.max_pids}"
                       + (f", memory.max {profile.max_memory_mb} MiB"
                          if profile.max_memory_mb else "")
                       + (f", cpu.max {config.cpu_quota_percent}%"
                          if config.cpu_quota_percent else ""))
        else:
            out.append(f"rlimits ({kind}): RLIMIT_NPROC, RLIMIT_AS")
        if profile.max_file_size_mb:
            out.append(f"RLIMIT_FSIZE {profile.max_file_size_mb} MiB")
    if profile.network.hosts:
        out.append("stockade's proxy: only the allowed hosts")
    if not out:
        out.append(backend)
    return out


def render(report: dict[str, object]) -> str:
    """The explanation as lines a person reads."""
    lines = [f"command:   {' '.join(map(str, report['argv']))}"]  # type: ignore[call-overload]

    def row(label: str, value: object, origin: object = None) -> None:
        text = value if isinstance(value, str) else _show(value)
        lines.append(f"{label + ':':<11}{text}" + (f"   (from {origin})" if origin else ""))

    row("mode", report["mode"], report.get("mode_from"))
    row("backend", report.get("backend"), report.get("backend_from"))
    row("workspace", report["workspace"])
    if report.get("cwd") != report["workspace"]:
        row("cwd", report["cwd"])
    for key, label in (("unavailable", "cannot run"), ("refused", "refused"),
                       ("needs_approval", "approval"), ("command_policy", "policy")):
        if key in report:
            row(label, report[key])
    if "read_scope" in report:
        row("reads", f"{report['read_scope']} scope: "
            + ", ".join(report["read"]))  # type: ignore[arg-type]
        row("writes", ", ".join(report["writable"]) or "nothing but a private /tmp",  # type: ignore[arg-type]
            report.get("writable_from"))
        hidden = report["hidden"]
        row("hidden", f"{len(hidden)} paths, e.g. {', '.join(hidden[:6])}"  # type: ignore[arg-type,index]
            if hidden else "nothing", report.get("hidden_from"))
        if report.get("protected"):
            row("protected", ", ".join(report["protected"][:8])  # type: ignore[index]
                + (" ..." if len(report["protected"]) > 8 else ""))  # type: ignore[arg-type]
    row("network", report.get("network"), report.get("network_from"))
    row("timeout", f"{report['timeout_seconds']:g} s", report.get("timeout_from"))
    output = report["output"]
    row("output", f"{output['streamed_bytes']} bytes streamed, "  # type: ignore[index]
        f"{output['captured_bytes']} captured")  # type: ignore[index]
    if "limits" in report:
        limits = report["limits"]
        origins = report["limits_from"]
        for key, value in limits.items():  # type: ignore[attr-defined]
            if key == "max_memory_mb" and value is None and report.get("memory_default_mb"):
                value = f"{report['memory_default_mb']} (this machine's default)"
            text = value if isinstance(value, str) else _show(value)
            row("limit", f"{key} = {text}", origins[key])  # type: ignore[index]
    for layer in report.get("layers") or ():  # type: ignore[attr-defined]
        row("layer", layer)
    return "\n".join(lines)
