"""Property-based attack on the code stockade runs on the host over what a command wrote.

The metadata guard (drivers/linux/host/guard.py, acting through fsroot.py and
gitmeta.py) reads, rewrites and moves workspace content on the host, as
the person, after every command: it must be as contained as the kernel
layers. Hypothesis generates the leftovers of a hostile command -- between
the guard's baseline and its `release()` sweep -- and guard_attack.py
judges the result from outside. The command:

- plants symlinks at every level (`.git`, `.git/hooks`, `.git/config`, a
  directory on the way) to a victim tree outside the workspace (a
  repository of the person's with a hook, a credentials config, a
  submodule and a worktree);
- writes `..`, absolute, `.`, empty, NUL-bearing and over-long names into
  git data: gitlinks in `.git/index` and in the `sharedindex.<hash>` its
  `link` extension names, `gitdir:` files, `commondir`, worktree `gitdir`
  files, `core.worktree`, `core.hooksPath`, `include.path`;
- puts FIFOs, sockets, (as root) driverless device nodes, hard links to
  victim files and sparse files over every read cap stockade has (up to
  10 GiB) at the names stockade reads;
- nests directories and repositories past the guard's depth limits, and
  makes repositories whose pointers lead to themselves or to each other;
- swaps one directory with a symlink to the victim, over and over, on a
  thread, while `release()` runs.

Each case runs twice: one command (guard, mutate, release), and two
overlapping commands on one workspace (guard A, guard B, mutate, release
A, release B); then a later command's profile and guard are built and
released on the same workspace. Checked from outside: the victim tree and
everything beside the workspace are unchanged, no step of stockade's takes
more than 10 s, the process reads no more than 64 MiB, every quarantine
entry's origin is beneath the workspace, and the later command starts.

A few cases also run in a subprocess as the unprivileged user the
isolation suite uses (`stockade-test`, Debian's /usr/bin/python3 and a
world-readable copy of stockade under /var/tmp), and the same mutations
are thrown at the OpenAI Agents SDK client's `delete()` of a workspace it
made (skipped when the `agents` package is missing).

CI runs a fixed, derandomized set (40 examples). For a longer hunt with
fresh randomness:

    STOCKADE_PROPERTY_EXAMPLES=2000 .venv/bin/python -m pytest tests/property

Hypothesis prints a failing case as JSON-like data; guard_attack.py runs
such a case alone (see its docstring).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import guard_attack
import pytest
from guard_attack import SHARED, VICTIM_FILES, run_case
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from isolation.users import ensure_user

SRC = Path(__file__).resolve().parents[2] / "src"
SYSTEM_PYTHON = "/usr/bin/python3"
SHM = "/dev/shm"

_LONG = os.environ.get("STOCKADE_PROPERTY_EXAMPLES", "")
EXAMPLES = int(_LONG) if _LONG else 40
# No explain phase: it re-runs a failure many times over only to annotate the report,
# and a failure here can cost the watchdog's 10 s per run.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
if _LONG:
    PROFILE = settings(max_examples=EXAMPLES, deadline=None, phases=_PHASES,
                       suppress_health_check=list(HealthCheck))
else:
    # CI: the same examples every run, nothing remembered between runs.
    PROFILE = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                       phases=_PHASES, suppress_health_check=list(HealthCheck))
# The whole hunt is one test; pytest's per-test timeout would cut a long one short.
HUNT_TIMEOUT = max(600, EXAMPLES * 20)


def _sizes() -> list[int]:
    """Sparse sizes over every cap stockade reads with (so no read of one is legitimate):
    just over the largest, and 10 GiB."""
    caps = [1 << 20, 64 << 20, 256 << 20]
    try:
        from stockade import gitmeta
        from stockade.drivers.linux.host import fstree

        caps = [gitmeta.MAX_CONFIG_BYTES, fstree.GUARD_MAX_BYTES, gitmeta.MAX_INDEX_BYTES]
    except (ImportError, AttributeError):
        pass
    return [max(caps) + 1, 10 << 30]


# -- what the command writes -------------------------------------------------------------

#: Names stockade opens and reads: where FIFOs, sockets, devices, sparse files and
#: hard links go. Simpler first: hypothesis shrinks towards the start of each list.
READS = [
    ".git/index", ".git/config", ".git/hooks/pre-commit", f".git/sharedindex.{SHARED}",
    ".git/commondir", ".git/HEAD", ".git/config.worktree", "sub/.git", "sub/.git/index",
    "sub/.git/config", f"sub/.git/sharedindex.{SHARED}", "sub/.git/hooks/pre-commit",
    "m/.git", "wt/.git", "n1/.git", ".git/modules/m/config", ".git/modules/m/index",
    ".git/modules/m/commondir", ".git/worktrees/w/gitdir", ".git/worktrees/w/commondir",
    ".git/worktrees/w/config.worktree", ".git/worktrees/w/index",
    ".git/rebase-merge/git-rebase-todo", ".git/sequencer/todo", ".git/hooks/pre-commit.sample",
    "index", "config", "HEAD", f"sharedindex.{SHARED}", "stockade.toml", ".vscode/tasks.json",
]
#: ... and the directories around them, for links, renames and removals.
PATHS = [
    *READS, ".git/hooks", ".git", ".git/info", ".git/info/attributes", ".git/modules",
    ".git/modules/m", ".git/modules/m/hooks", ".git/worktrees", ".git/worktrees/w",
    ".git/rebase-merge", ".git/sequencer", "sub", "sub/.git/hooks", "m", "wt", "n1", "link",
    ".vscode", ".envrc", ".mcp.json", ".devcontainer", "objects", "refs",
]
#: Symlink targets: the victim at every level, by absolute and relative names,
#: the workspace itself, a dangling name and the link's own name.
TARGETS = [
    "@V/repo/.git", "@V/repo/.git/hooks", "@V/repo/.git/config", "@V/repo", "@V",
    "@V/secret.txt", "@V/repo/.git/modules/m", "@V/repo/.git/index", "@V/wt/.git",
    "@U/victim/repo/.git", "../victim/repo/.git", "../../victim/repo/.git",
    "@T/nowhere", "@W", "@W/.git", ".", "..", "@SELF",
]
#: What a pointer (`gitdir:`, commondir, a worktree's gitdir, core.worktree,
#: include.path, hooksPath) may say.
POINTERS = [
    "@V/repo/.git", "@V/repo", "@V/repo/.git/modules/m", "@V/repo/.git/worktrees/w",
    "@V/config", "@V/repo/.git/hooks", "@U/victim/repo/.git",
    "../victim/repo/.git", "../../victim/repo/.git", "../../../victim/repo/.git",
    "../../../../victim/repo/.git", "../../../../../victim/repo",
    ".", "..", ".git", "./.git", "../.git", "../../.git", "../..", "@W/.git", "@W",
    "@W/n1/.git", "@W/n2/.git", "../n1/.git", "../n2/.git", "../sub/.git", "link/.git",
    "modules/m", "worktrees/w", "missing/.git", "", "a\0b", "x" * 5000,
]
#: Gitlink names, as an index records them.
GITLINKS = [
    "sub", "n1", "n2", "m", "r", "link", ".", "..", "x/..", "../victim/repo",
    "../../victim/repo", "../../../victim/repo", "@V/repo", "@V/repo/m", "sub/", ".git",
    ".GIT/x", "a//b", "", "link/x", "d" * 5000, "a\0../victim/repo", "deep/d/d/d",
]
FLIPS = [".git", ".git/hooks", "sub", "sub/.git", ".git/modules/m", ".git/modules/m/hooks",
         "n1", ".vscode", "m", ".git/worktrees/w"]
REPO_AT = ["sub", "", "n1", "n2", "link", "deep/d/d/d"]

path = st.sampled_from(PATHS)
read = st.sampled_from(READS)
pointer = st.sampled_from(POINTERS)
maybe_pointer = st.none() | pointer
gitlinks = st.lists(st.sampled_from(GITLINKS), max_size=4)


def L(*parts: object) -> st.SearchStrategy[list[object]]:
    """A list strategy from strategies and constants, so cases stay plain JSON."""
    return st.tuples(*(p if isinstance(p, st.SearchStrategy) else st.just(p)
                       for p in parts)).map(list)


contents = st.one_of(
    L("hook"), L("plan"), L("junk"), L("empty"),
    L("config", maybe_pointer, maybe_pointer, maybe_pointer),
    L("gitdir", pointer), L("line", pointer), L("index", gitlinks, st.booleans()),
)
specials = st.one_of(
    L("fifo", read),
    L("hard", read, st.sampled_from(VICTIM_FILES)),
    L("sparse", read, st.sampled_from(_sizes())),
    L("sock", read),
    L("dev", read),
)
operations = st.one_of(
    L("file", path, contents),
    L("link", path, st.sampled_from(TARGETS)),
    # Twice the weight: a special file at a name stockade opens is what hangs or
    # floods a reader, and it must land on one of a few names to matter.
    specials,
    specials,
    L("dir", path),
    L("rm", path),
    L("move", path, path),
    L("repo", st.sampled_from(REPO_AT), gitlinks, st.none() | gitlinks),
    L("worktree", st.sampled_from(["w", "w2"]), pointer, pointer),
    L("module", st.sampled_from(["m", "q"]), pointer),
    L("nest", st.sampled_from(["deep", ".git/modules", "sub"]), st.integers(1, 80)),
    L("chain", st.sampled_from(["", "sub", "n1"]), st.integers(1, 40)),
    L("bare"),
    L("cycle"),
)
cases = st.fixed_dictionaries({
    "base": st.fixed_dictionaries({"repo": st.booleans(), "submodule": st.booleans(),
                                   "worktree": st.booleans(), "extras": st.booleans()}),
    "ops": st.lists(operations, min_size=1, max_size=10),
    "flip": st.none() | st.sampled_from(FLIPS),
    "content": st.booleans(),
    "watch": st.booleans(),
    "state": st.sampled_from(["same", "tmpfs"]),
})


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[str, str]]:
    """Where every case's directories go: /var/tmp, and /dev/shm for a state dir on
    another filesystem."""
    top = tempfile.mkdtemp(prefix="stockade-prop-", dir="/var/tmp")
    shm = tempfile.mkdtemp(prefix="stockade-prop-", dir=SHM) if os.path.isdir(SHM) else ""
    try:
        yield top, shm
    finally:
        shutil.rmtree(top, ignore_errors=True)
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


def _judge(case: dict[str, object], top: str, shm: str) -> None:
    for overlap in (False, True):
        bad = run_case(case, top, shm, overlap=overlap)
        # One failing shape is enough, and a hang costs LIMIT seconds per shrink step.
        shape = "two overlapping guards" if overlap else "one guard"
        assert not bad, f"{shape}:\n" + json.dumps(bad, indent=1)


@pytest.mark.timeout(HUNT_TIMEOUT)
def test_the_sweep_stays_inside_the_workspace(base: tuple[str, str]) -> None:
    @PROFILE
    @given(case=cases)
    def hunt(case: dict[str, object]) -> None:
        _judge(case, *base)

    hunt()


# -- as an unprivileged user ---------------------------------------------------------------

#: One case per family, for the run as the unprivileged user.
FIXED = [
    {"base": {"repo": True, "submodule": True, "worktree": True, "extras": True},
     "ops": [["link", ".git/hooks", "@V/repo/.git/hooks"],
             ["hard", ".git/config", "repo/.git/config"],
             ["link", ".git/modules/m/config", "@V/repo/.git/config"],
             ["hard", "stockade.toml", "secret.txt"]],
     "flip": None, "content": True, "watch": False, "state": "same"},
    {"base": {"repo": True, "submodule": False, "worktree": False, "extras": False},
     "ops": [["file", ".git/index", ["index", ["../victim/repo", "@V/repo", "sub"], True]],
             ["file", f".git/sharedindex.{SHARED}", ["index", ["../victim/repo", "."], False]],
             ["repo", "sub", ["../../victim/repo", ".", "x/.."], ["@V/repo"]],
             ["file", "sub/.git/config", ["config", "@V/repo", "@V/config", "@V/repo/.git"]],
             ["file", "n1/.git", ["gitdir", "@V/repo/.git"]]],
     "flip": None, "content": False, "watch": False, "state": "same"},
    {"base": {"repo": True, "submodule": True, "worktree": False, "extras": False},
     "ops": [["fifo", ".git/index"], ["repo", "sub", ["r"], ["r"]],
             ["fifo", f"sub/.git/sharedindex.{SHARED}"], ["fifo", "sub/.git/config"],
             ["sock", ".git/commondir"], ["fifo", "n1/.git"], ["fifo", ".git/HEAD"],
             ["fifo", ".git/hooks/pre-commit"], ["sparse", ".git/modules/m/config", 10 << 30],
             ["sparse", ".git/modules/m/index", 10 << 30]],
     "flip": None, "content": True, "watch": True, "state": "tmpfs"},
    {"base": {"repo": False, "submodule": False, "worktree": False, "extras": False},
     "ops": [["chain", "", 40], ["cycle"], ["nest", "deep", 80], ["bare"],
             ["worktree", "w2", "@V/wt/.git", "@V/repo/.git"], ["module", "q", "@V/repo"]],
     "flip": None, "content": True, "watch": False, "state": "same"},
    {"base": {"repo": True, "submodule": False, "worktree": True, "extras": True},
     "ops": [["file", ".git/hooks/pre-commit", ["hook"]], ["dir", ".vscode"]],
     "flip": ".git/hooks", "content": True, "watch": False, "state": "same"},
    {"base": {"repo": True, "submodule": True, "worktree": False, "extras": False},
     "ops": [["repo", "sub", ["."], None]],
     "flip": ".git", "content": False, "watch": True, "state": "tmpfs"},
]


def _generated(n: int) -> list[dict[str, object]]:
    """The first `n` cases the derandomized strategy draws."""
    drawn: list[dict[str, object]] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def collect(case: dict[str, object]) -> None:
        drawn.append(case)

    collect()
    return drawn[:n]


@pytest.mark.timeout(600)
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the unprivileged user needs root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason=f"the unprivileged run uses {SYSTEM_PYTHON}")
def test_the_sweep_stays_inside_the_workspace_as_an_unprivileged_user() -> None:
    """Root is mode 700 here, so the user gets a world-readable copy of stockade and
    of the case runner, and works in directories it owns; all removed afterwards."""
    user = ensure_user()
    chosen = FIXED + _generated(6)
    top = Path(tempfile.mkdtemp(prefix="stockade-prop-unpriv-", dir="/var/tmp"))
    shm = tempfile.mkdtemp(prefix="stockade-prop-unpriv-", dir=SHM) if os.path.isdir(SHM) else ""
    try:
        shutil.copytree(SRC / "stockade", top / "site" / "stockade",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(guard_attack.__file__, top / "guard_attack.py")
        (top / "cases.json").write_text(json.dumps(chosen))
        for dirpath, _dirs, files in os.walk(top):
            os.chmod(dirpath, 0o755)
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o644)
        (top / "work").mkdir()
        os.chown(top / "work", user.pw_uid, user.pw_gid)
        if shm:
            os.chmod(shm, 0o700)
            os.chown(shm, user.pw_uid, user.pw_gid)
        res = subprocess.run(
            [SYSTEM_PYTHON, "-I", str(top / "guard_attack.py"), "--site", str(top / "site"),
             str(top / "cases.json"), str(top / "work"), shm],
            cwd=top, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
            user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True,
            timeout=480, check=False)
        out = res.stdout.decode(errors="replace")
        assert res.returncode == 0, out + res.stderr.decode(errors="replace")
        runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(runs) == 2 * len(chosen), out + res.stderr.decode(errors="replace")
        failed = [dict(run, case=chosen[run["case"]]) for run in runs if run["violations"]]
        assert not failed, json.dumps(failed, indent=1)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


# -- the OpenAI Agents SDK client's delete() -------------------------------------------------


@pytest.mark.timeout(300)
def test_deleting_a_sandbox_workspace_stays_inside_it(base: tuple[str, str]) -> None:
    """The client removes a workspace it made, on the host: whatever the model's
    commands left in it (links to the victim, hard links, FIFOs, a directory
    flipping to a link, the root itself swapped for a link) nothing outside goes."""
    pytest.importorskip("agents.sandbox", reason="the OpenAI Agents SDK (openai-agents) "
                        "is not installed: pip install 'stockade[openai-agents]'")
    from agents.sandbox import Manifest

    from stockade.adapters.openai_sandbox import StockadeSandboxClient
    from stockade.config import SandboxConfig

    @settings(PROFILE, max_examples=min(EXAMPLES, 15) if not _LONG else EXAMPLES)
    @given(ops=st.lists(operations, min_size=1, max_size=8),
           flip=st.none() | st.sampled_from(FLIPS),
           swap=st.sampled_from([None, "@V", "@V/repo", "other"]))
    def hunt(ops: list[list[object]], flip: str | None, swap: str | None) -> None:
        world = guard_attack.World(base[0], "", False)
        try:
            guard_attack.build_victim(world.victim)
            workspaces = os.path.join(world.top, "workspaces")
            client = StockadeSandboxClient(config=SandboxConfig(workspace_root=workspaces))
            session = asyncio.run(client.create(manifest=Manifest()))
            root = str(session.state.manifest.root)
            world.ws = root
            before = world.outside()
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for op in ops:
                    guard_attack.apply_op(fd, op, world)
                flipper = None
                if flip:
                    flipper = guard_attack.Flipper(fd, flip, world.resolve("@V/repo"))
            finally:
                os.close(fd)
            if swap:
                # The workspace's own name, now another directory or a link out.
                os.rename(root, root + ".aside")
                if swap == "other":
                    os.mkdir(root)
                else:
                    os.symlink(world.resolve(swap), root)
            try:
                guard_attack.bounded(lambda: asyncio.run(client.delete(session)),
                                     "the client's delete()", world)
            finally:
                if flipper is not None:
                    flipper.stop(as_directory=True)
            after = world.outside()
            assert after["victim"] == before["victim"], "delete() changed the victim tree"
            assert after["top"] == before["top"], (before["top"], after["top"])
            left = sorted(os.listdir(workspaces))
            if swap:
                assert os.path.lexists(root), "delete() removed what was put at the root's name"
            elif flipper is None:
                # (With a flipper still swapping names in it, removal may race it.)
                assert left == [], f"delete() left the workspace it made: {left}"
        finally:
            world.unjam()
            world.remove()

    hunt()
