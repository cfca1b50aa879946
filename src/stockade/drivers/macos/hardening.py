"""Hardening for stockade's own processes on macOS, after Codex's process-hardening.

Two different things live here. `scrub_env` is applied by the driver to every
command's environment. `harden_process` is for a stockade helper that runs
unconfined next to sandboxed commands (the managed proxy, a long-lived
harness process): it stops same-user debuggers attaching and core dumps
spilling its memory, which holds what the sandbox keeps from the command.
It is opt-in and never called on import: a library that silently made its
caller undebuggable would be a surprise nobody asked for.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

#: ptrace request that makes the calling process refuse debuggers (<sys/ptrace.h>).
PT_DENY_ATTACH = 31

# DYLD_* loads code into whatever starts next, and sandbox-exec itself runs
# unconfined until it applies the profile. Malloc* makes libmalloc write
# logs and stack records to a path of the variable's choosing
# (MallocLogFile, MallocStackLogging) -- again before confinement starts.
_SCRUBBED_PREFIXES = ("DYLD_", "Malloc")


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without DYLD_* and Malloc* variables, whoever set them."""
    return {k: v for k, v in env.items() if not k.startswith(_SCRUBBED_PREFIXES)}


def deny_debugger_attach() -> bool:
    """PT_DENY_ATTACH on this process; True when macOS accepted it.

    Only on macOS: the request number means something else on other systems.
    """
    if sys.platform != "darwin":
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ptrace = libc.ptrace
    ptrace.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    ptrace.restype = ctypes.c_int
    return int(ptrace(PT_DENY_ATTACH, 0, None, 0)) == 0


def disable_core_dumps() -> bool:
    """RLIMIT_CORE = 0, so a crash does not write this process's memory to disk."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        return False
    return True


def harden_process(environ: MutableMapping[str, str] | None = None) -> tuple[str, ...]:
    """Harden the calling helper process; returns the steps that took effect.

    `environ` (default: os.environ) loses DYLD_* and Malloc* so nothing this
    helper starts inherits them.
    """
    import os

    target = os.environ if environ is None else environ
    done: list[str] = []
    for name in [k for k in target if k.startswith(_SCRUBBED_PREFIXES)]:
        del target[name]
    done.append("env-scrubbed")
    if disable_core_dumps():
        done.append("no-core-dumps")
    if deny_debugger_attach():
        done.append("pt-deny-attach")
    return tuple(done)
