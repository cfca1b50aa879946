"""An argv as Windows wants it: one command line, one environment block.

Windows passes a process a single string, and each program splits it
itself; nearly all do it as the Microsoft C runtime does
(`CommandLineToArgvW`). `command_line` quotes for that parser and
`split_command_line` is that parser, so the tests check round trips rather
than trusting either. cmd.exe is the exception and is handled by name.
"""

from __future__ import annotations

import ntpath

from ...envscrub import INJECTION_NAMES, INJECTION_PREFIXES, PYTHON_HARMLESS
from ...errors import InvalidCommand, SandboxUnavailable

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_SPACE = " \t"
_NEEDS_QUOTES = " \t\n\v\""


def quote_arg(arg: str) -> str:
    """One argument quoted so `CommandLineToArgvW` gives it back unchanged.

    Backslashes are literal except before a quote, where 2n+1 of them mean
    n backslashes and a literal quote; so a run of backslashes before a quote
    (or before the closing quote) is doubled.
    """
    if arg and not any(c in _NEEDS_QUOTES for c in arg):
        return arg
    out = ['"']
    slashes = 0
    for c in arg:
        if c == "\\":
            slashes += 1
            continue
        if c == '"':
            out.append("\\" * (2 * slashes + 1) + '"')
        else:
            out.append("\\" * slashes + c)
        slashes = 0
    out.append("\\" * (2 * slashes) + '"')
    return "".join(out)


def _is_cmd(program: str) -> bool:
    return ntpath.basename(program).lower() in ("cmd", "cmd.exe")


def command_line(argv: list[str]) -> str:
    """The command line for `argv` (pure).

    The program name is parsed by other rules (no backslash escapes, a quote
    only toggles), so it cannot hold a quote at all. cmd.exe does not use
    the C runtime's parser: after `/c` the rest of the line is a command for
    it to read, so `cmd /d /s /c TEXT` passes TEXT verbatim inside the one
    pair of quotes that `/s` strips, and cmd sees exactly TEXT.
    """
    if not argv:
        raise InvalidCommand("empty argv")
    for arg in argv:
        if "\x00" in arg:
            raise InvalidCommand(f"argument contains a NUL byte: {arg!r}")
    program = argv[0]
    if '"' in program or not program:
        raise InvalidCommand(f"a Windows program name cannot contain a quote: {program!r}")
    head = f'"{program}"' if any(c in _SPACE for c in program) else program
    rest = argv[1:]
    if _is_cmd(program):
        flags: list[str] = []
        while rest and rest[0].lower() in ("/d", "/s", "/q", "/e:off", "/v:off"):
            flags.append(rest.pop(0))
        if rest and rest[0].lower() in ("/c", "/k"):
            switch = rest.pop(0)
            options = [f for f in dict.fromkeys(["/d", "/s", *flags]) if f]
            return " ".join([head, *options, switch, '"' + " ".join(rest) + '"'])
    return " ".join([head, *(quote_arg(a) for a in rest)])


def split_command_line(line: str) -> list[str]:
    """`CommandLineToArgvW`'s reading of `line` (the 2008-and-later rules)."""
    args: list[str] = []
    n = len(line)
    if line.startswith('"'):
        end = line.find('"', 1)
        end = n if end < 0 else end
        args.append(line[1:end])
        i = end + 1
    else:
        i = 0
        while i < n and line[i] not in _SPACE:
            i += 1
        args.append(line[:i])
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        cur: list[str] = []
        quoted = False
        while i < n:
            c = line[i]
            if c == "\\":
                j = i
                while j < n and line[j] == "\\":
                    j += 1
                count = j - i
                if j < n and line[j] == '"':
                    cur.append("\\" * (count // 2))
                    if count % 2:
                        cur.append('"')
                        j += 1
                    i = j
                else:
                    cur.append("\\" * count)
                    i = j
                continue
            if c == '"':
                if quoted and i + 1 < n and line[i + 1] == '"':
                    cur.append('"')
                    i += 2
                    continue
                quoted = not quoted
                i += 1
                continue
            if c in _SPACE and not quoted:
                break
            cur.append(c)
            i += 1
        args.append("".join(cur))


_BATCH = (".bat", ".cmd")


def resolve_program(program: str, env: Mapping[str, str],
                    is_file: Callable[[str], bool]) -> str:
    """The absolute path CreateProcess is given as lpApplicationName (pure but for is_file).

    Searched on PATH with PATHEXT, never in the current directory: the
    workspace is written by the command's author, and a `git.exe` planted
    there must not be what `git` means. A batch file is refused: Windows
    runs it through cmd.exe, which re-reads the arguments by its own rules.
    """
    exts = [e.lower() for e in (_get(env, "PATHEXT") or ".COM;.EXE").split(";") if e]
    if ntpath.isabs(program):
        candidates = [program]
    elif "\\" in program or "/" in program:
        raise InvalidCommand(f"program {program!r} is a relative path: give it absolute")
    else:
        candidates = [ntpath.join(d, program) for d in (_get(env, "PATH") or "").split(";")
                      if d and ntpath.isabs(d)]
    for base in candidates:
        names = [base] if ntpath.splitext(base)[1] else []
        names += [base + e for e in exts]
        for name in names:
            if is_file(name):
                if ntpath.splitext(name)[1].lower() in _BATCH:
                    raise InvalidCommand(
                        f"{name} is a batch file; Windows runs those through cmd.exe, which "
                        "parses the arguments by other rules. Run `cmd.exe /d /s /c` with the "
                        "command instead")
                return name
    raise SandboxUnavailable(f"cannot find {program} on PATH (searched with PATHEXT)")


def _get(env: Mapping[str, str], name: str) -> str:
    for key, value in env.items():
        if key.upper() == name:
            return value
    return ""


# What makes a Windows program load code it was not asked to run. .NET loads
# the profiler DLL these name into every managed process; DOTNET_STARTUP_HOOKS
# runs an assembly before Main; __COMPAT_LAYER applies compatibility shims
# (RunAsInvoker among them) to whatever starts next.
_WINDOWS_INJECTION_PREFIXES = ("COR_", "CORECLR_")
_WINDOWS_INJECTION_NAMES = ("DOTNET_STARTUP_HOOKS", "__COMPAT_LAYER")


def command_env(env: Mapping[str, str], *, temp: str) -> dict[str, str]:
    """The command's environment on Windows, from the profile's scrubbed one (pure).

    Windows reads variable names without regard to case, so the shared
    scrub (which compares exact names) is applied again folded: `PythonStartup`
    is PYTHONSTARTUP to Python on Windows. TEMP and TMP name the run's own
    directory when there is one; TMPDIR=/tmp from the shared scrub means
    nothing here. Applying it twice gives the same result.
    """
    out: dict[str, str] = {}
    seen: set[str] = set()
    harmless = {n.upper() for n in PYTHON_HARMLESS}
    for name, value in env.items():
        upper = name.upper()
        if upper in seen or upper == "TMPDIR" or (temp and upper in ("TEMP", "TMP")):
            continue
        if upper.startswith(tuple(p.upper() for p in INJECTION_PREFIXES)) \
                and upper not in harmless:
            continue
        if upper in {n.upper() for n in INJECTION_NAMES}:
            continue
        if upper.startswith(_WINDOWS_INJECTION_PREFIXES) or upper in _WINDOWS_INJECTION_NAMES:
            continue
        seen.add(upper)
        out[name] = value
    if temp:
        out["TEMP"] = out["TMP"] = temp
    return out


def environment_block(env: Mapping[str, str]) -> str:
    """`NAME=value\\0...\\0\\0`, sorted by upper-cased name as CreateProcess expects."""
    items = []
    for name, value in env.items():
        if not name or "=" in name or "\x00" in name or "\x00" in value:
            raise InvalidCommand(f"environment variable {name!r} cannot be passed on Windows")
        items.append((name.upper(), name, value))
    items.sort()
    return "".join(f"{name}={value}\x00" for _, name, value in items) + "\x00"
