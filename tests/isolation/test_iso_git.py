"""git in workspace-write: it works, and it cannot be turned into code the host runs.

The host side of every check runs git as the same user, outside any sandbox,
the way the person who owns the workspace would next type `git commit`.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import SH_TRY, Box, attempts, snapshot, text

pytestmark = pytest.mark.isolation

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Isolation Test", "GIT_AUTHOR_EMAIL": "iso@example.invalid",
    "GIT_COMMITTER_NAME": "Isolation Test", "GIT_COMMITTER_EMAIL": "iso@example.invalid",
    # The machine's /etc/gitconfig is not part of the experiment.
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(box: Box, *args: str) -> subprocess.CompletedProcess[bytes]:
    """git on the host, as the runner, in the workspace."""
    res = box.host(["git", *args], env=box.env(**GIT_ENV))
    return res


@pytest.fixture
def repo(box: Box) -> Box:
    box.write(box.ws / "README", "hello\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "README"],
                 ["commit", "-q", "-m", "host: initial"]):
        res = git(box, *argv)
        assert res.returncode == 0, text(res)
    return box


def guarded(box: Box) -> tuple[object, bytes]:
    return snapshot(box.ws / ".git" / "hooks"), (box.ws / ".git" / "config").read_bytes()


def test_git_status_add_commit_work_inside(repo: Box) -> None:
    box = repo
    before = guarded(box)
    subject = f"inside: change {secrets.token_hex(4)}"
    script = 'git status --porcelain && echo change >> README && echo new > added.txt && ' \
             'git add README added.txt && git commit -q -m "$1" && git log -1 --format=%s'
    res = box.sh(script, subject, mode="workspace-write", env=box.env(**GIT_ENV))
    assert res.returncode == 0, text(res)
    log = git(box, "log", "--format=%s")
    assert log.stdout.decode().splitlines() == [subject, "host: initial"], text(log)
    assert git(box, "status", "--porcelain").stdout == b""
    assert git(box, "fsck", "--no-progress").returncode == 0
    assert guarded(box) == before


GIT_META_ATTACKS = SH_TRY + r"""
try hook-write      sh -c 'printf "#!/bin/sh\ntouch pwned\n" > .git/hooks/pre-commit'
try hook-chmod      chmod +x .git/hooks/pre-commit.sample
try hook-rename     mv .git/hooks/pre-commit.sample .git/hooks/pre-commit
try hook-delete     rm .git/hooks/pre-push.sample
try hooks-replace   sh -c 'rm -rf .git/hooks && mkdir .git/hooks'
try hooks-move      mv .git/hooks .git/hooks-old
try config-append   sh -c 'printf "[core]\n\tfsmonitor = touch pwned\n" >> .git/config'
try config-git      git config core.hooksPath /tmp
try config-replace  sh -c 'cp .git/config c && echo "[alias] x = !id" >> c && mv c .git/config'
try config-delete   rm .git/config
try info-attrs      sh -c 'echo "* filter=evil" > .git/info/attributes'
"""
GIT_META_NAMES = ("hook-write", "hook-chmod", "hook-rename", "hook-delete", "hooks-replace",
                  "hooks-move", "config-append", "config-git", "config-replace", "config-delete",
                  "info-attrs")


#: Writes to .git/config that land in the command's private copy of it
#: (drivers/linux/host/gitconfig.py): they work inside, and none of it reaches the host.
GIT_CONFIG_PRIVATE = ("config-append", "config-git", "config-replace")


def test_git_hooks_and_config_cannot_be_changed(repo: Box) -> None:
    box = repo
    before = guarded(box)
    info0 = snapshot(box.ws / ".git" / "info")
    res = box.sh(GIT_META_ATTACKS, mode="workspace-write", env=box.env(**GIT_ENV))
    tried = attempts(res)
    refused = [n for n in GIT_META_NAMES if n not in GIT_CONFIG_PRIVATE]
    assert {n for n in refused if tried.get(n) is not False} == set(), text(res)
    assert all(tried.get(n) for n in GIT_CONFIG_PRIVATE), text(res)
    assert "core.fsmonitor" in text(res) and "core.hookspath" in text(res), text(res)
    assert guarded(box) == before
    assert snapshot(box.ws / ".git" / "info") == info0
    assert not (box.ws / "pwned").exists()


def _host_commit_runs_planted_hook(box: Box) -> bool:
    """Commit on the host as its owner would; True when attacker code ran."""
    flag = box.ws / "pwned-by-hook"
    git(box, "commit", "-q", "--allow-empty", "-m", "host: later")
    return flag.exists()


HOOK = "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/pwned-by-hook\"\n"


def test_replacing_dot_git_cannot_plant_a_hook(repo: Box) -> None:
    """Renaming .git aside and recreating it would give a .git with writable hooks."""
    box = repo
    script = 'mv .git .git-old && mkdir .git && cp -a .git-old/. .git/ && ' \
             'printf "%s" "$1" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
    box.sh(script, HOOK, mode="workspace-write", env=box.env(**GIT_ENV))
    hook = box.ws / ".git" / "hooks" / "pre-commit"
    planted = hook.exists() and bool(hook.stat().st_mode & stat.S_IXUSR)
    ran = _host_commit_runs_planted_hook(box)
    assert not planted and not ran, f"hook planted: {planted}, executed by host git: {ran}"


def test_commondir_cannot_redirect_host_git(repo: Box) -> None:
    """A new .git/commondir points host git at a config and hooks the sandbox wrote."""
    box = repo
    script = 'cp -a .git/. .evil/ && printf "%s" "$1" > .evil/hooks/pre-commit && ' \
             'chmod +x .evil/hooks/pre-commit && echo ../.evil > .git/commondir'
    box.sh(script, HOOK, mode="workspace-write", env=box.env(**GIT_ENV))
    redirected = (box.ws / ".git" / "commondir").exists()
    ran = _host_commit_runs_planted_hook(box)
    assert not redirected and not ran, f"commondir planted: {redirected}, hook ran: {ran}"


def test_control_host_commit_would_run_a_planted_hook(repo: Box) -> None:
    """The check used above does detect a hook: plant one on the host, commit, see it run."""
    box = repo
    box.write(box.ws / ".git" / "hooks" / "pre-commit", HOOK, 0o755)
    assert _host_commit_runs_planted_hook(box)


def test_git_metadata_untouched_by_read_only_commit_attempt(repo: Box) -> None:
    box = repo
    before = snapshot(Path(box.ws))
    res = box.sh('echo x >> README; git add README; git commit -q -m nope; true',
                 env=box.env(**GIT_ENV))
    assert res.returncode == 0, text(res)
    assert snapshot(Path(box.ws)) == before


def test_planted_gitdir_pointer_cannot_steer_stockade_outside_workspace(repo: Box) -> None:
    """A `.git` file `gitdir: <dir>` must not make stockade (on the host) write into <dir>."""
    box = repo
    box.sh('mv .git .git-old && printf "gitdir: %s\\n" "$1" > .git', str(box.sibling),
           mode="workspace-write")
    before = sorted(p.name for p in box.sibling.iterdir())
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--mode", "workspace-write", "--", "sleep", "2"]),
        cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= {p.name for p in box.sibling.iterdir()} - set(before)
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait(timeout=5)
    assert seen == set(), f"stockade created {sorted(seen)} in {box.sibling} during the run"


#: The longest a planted name may stay live while the command runs, with the machine
#: loaded (measured: a few milliseconds, see README "Protected metadata").
WINDOW_MS = 1000


def plant_and_time(plant: str, planted: str) -> str:
    """A script that runs `plant` (which creates `planted`, HOOK is $1), then reports in ms
    how long `planted` stayed, touches `ready` and keeps running."""
    return (f'{plant}; t0=$(date +%s%N); i=0; while [ -e {planted} ] && [ $i -lt 1000 ]; '
            'do i=$((i+1)); sleep 0.005; done; t1=$(date +%s%N); '
            'echo "window $(( (t1 - t0) / 1000000 ))"; touch ready; sleep 3')


def commit_during(box: Box, script: str, options: tuple[str, ...] = ()) -> tuple[bool, int, str]:
    """Run `script` (from `plant_and_time`); once it says `ready`, commit on the host as
    the person would, while it still runs. (attacker code ran, the window in ms, output)."""
    proc = box.runner.popen(
        box.runner.cli_argv(["run", *options, "--mode", "workspace-write", "--timeout", "30",
                             "--", "/bin/sh", "-c", script, "sh", HOOK]),
        cwd=str(box.ws), env=box.env(**GIT_ENV), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not (box.ws / "ready").exists() and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        running = proc.poll() is None
        ran = _host_commit_runs_planted_hook(box)
    finally:
        stdout, stderr = (b.decode(errors="replace") for b in proc.communicate(timeout=40))
    out = stdout + stderr  # apart, so that a complaint never splits the marker line
    assert running, f"the command ended before the host's commit: {out}"
    words = [line.split()[1] for line in stdout.splitlines() if line.startswith("window ")]
    return ran, int(words[0]) if words else -1, out


def test_commondir_planted_during_a_run_is_never_live(repo: Box) -> None:
    """A `.git/commondir` a running command plants (leading git to a copy whose hooks are
    the command's) is moved away within milliseconds, and the host's `git commit` meanwhile
    runs nothing."""
    box = repo
    plant = ('cp -a .git/. .evil/ && printf "%s" "$1" > .evil/hooks/pre-commit && '
             'chmod +x .evil/hooks/pre-commit && echo ../.evil > .git/commondir')
    ran, window, out = commit_during(box, plant_and_time(plant, ".git/commondir"))
    assert not ran, "host git ran a hook the sandbox planted while the command was running"
    assert 0 <= window < WINDOW_MS, out


# -- what stockade does on the host with an index the command wrote --------------------

def crafted_index(gitlinks: list[str], shared: str = "", files: int = 0) -> bytes:
    """A version 2 git index whose entries are `gitlinks` (mode 160000), named as given,
    then `files` regular files; with `shared`, a `link` extension naming
    `sharedindex.<shared>` (a split index)."""
    import hashlib
    import struct

    entries = [(name, 0o160000) for name in gitlinks]
    entries += [(f"f/{i:07d}", 0o100644) for i in range(files)]
    parts = []
    for name, mode in entries:
        raw = name.encode()
        entry = (struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0) + bytes(20)
                 + struct.pack(">H", min(len(raw), 0xFFF)) + raw)
        parts.append(entry + b"\0" * (8 - len(entry) % 8))
    body = b"".join(parts)
    ext = b""
    if shared:
        empty_ewah = struct.pack(">III", 0, 0, 0)
        data = bytes.fromhex(shared) + empty_ewah * 2
        ext = b"link" + struct.pack(">I", len(data)) + data
    content = b"DIRC" + struct.pack(">II", 2, len(entries)) + body + ext
    return content + hashlib.sha1(content).digest()


def _host_repo(box: Box, path: Path) -> None:
    """A repository of the person's, with a hook and credentials config in it."""
    path.mkdir(parents=True)
    box.runner.own(path)
    res = box.host(["git", "init", "-q", str(path)], env=box.env(**GIT_ENV))
    assert res.returncode == 0, text(res)
    box.write(path / ".git" / "hooks" / "pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    with (path / ".git" / "config").open("a") as fh:
        fh.write("[core]\n\tsshCommand = ssh -i ~/.ssh/work\n[credential]\n\thelper = store\n")


def test_crafted_gitlinks_cannot_steer_the_sweep_out_of_the_workspace(repo: Box) -> None:
    """Gitlinks named `../<another repo>`, by absolute path, `.` or `x/..`, in the index
    and in the shared index it links, must leave every repository but the command's own
    as it was: the sweep once moved another repository's hooks, rewrote its config and
    (past its depth limit) moved its whole .git away."""
    box = repo
    other = box.sibling / "other"
    _host_repo(box, other)
    box.write(box.ws / ".git" / "hooks" / "pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    with (box.ws / ".git" / "config").open("a") as fh:
        fh.write("[credential]\n\thelper = store\n")
    before_other, before_own = snapshot(other), guarded(box)
    up = os.path.relpath(other, box.ws)
    names = [up, str(other), ".", f"x/../{up}", "x/.", f".git/../{up}"]
    sha = "ab" * 20
    box.write(box.ws / "p-index", crafted_index(names[:3], shared=sha))
    box.write(box.ws / "p-shared", crafted_index(names))
    box.write(box.ws / "p-self", crafted_index(["."]))
    res = box.sh(f"cp p-shared .git/sharedindex.{sha} && cp p-shared .git/sharedindex.{'cd' * 20}"
                 " && cp p-index .git/index && git init -q nested && cp p-self nested/.git/index"
                 f" && mkdir -p nested/x && cp p-shared nested/.git/sharedindex.{sha}"
                 " && cp p-index nested/.git/index2 && echo planted",
                 mode="workspace-write", env=box.env(**GIT_ENV))
    assert b"planted" in res.stdout, text(res)
    assert snapshot(other) == before_other, text(res)
    assert guarded(box) == before_own, text(res)
    # The control: the crafted index is what the workspace now holds.
    assert (box.ws / ".git" / "index").read_bytes() == (box.ws / "p-index").read_bytes()
    outside = [p for p in box.state.rglob("quarantine/*/*/origin")
               if not p.read_text().startswith(str(box.ws) + "/")]
    assert outside == [], text(res)
    # Still a workspace stockade runs in.
    assert box.run(["true"], mode="workspace-write").returncode == 0


def test_a_fifo_where_stockade_reads_cannot_hang_the_workspace(repo: Box) -> None:
    """A FIFO at the index, at the shared index it links, at a stray shared index and at
    a created repository's config: stockade reads none of them blocking. One such open
    held the workspace's guard lock, and every later command there hung for good."""
    box = repo
    sha = "00" * 20
    box.write(box.ws / "p-index", crafted_index([], shared=sha))
    script = (f"mkfifo .git/sharedindex.{sha} .git/sharedindex.{'11' * 20} && cp p-index .git/index"
              " && git init -q made && rm -f made/.git/config made/.git/index"
              " && mkfifo made/.git/config made/.git/index made/.git/HEAD2 && echo planted")
    start = time.monotonic()
    res = box.sh(script, mode="workspace-write", env=box.env(**GIT_ENV), timeout=60)
    first = time.monotonic() - start
    assert b"planted" in res.stdout, text(res)
    assert stat.S_ISFIFO((box.ws / ".git" / f"sharedindex.{sha}").lstat().st_mode)  # landed
    start = time.monotonic()
    nxt = box.run(["true"], mode="workspace-write", timeout=60)
    assert nxt.returncode == 0, text(nxt)
    assert first < 20 and time.monotonic() - start < 20, (first, text(res))


def _commit_while_running(box: Box, script: str, planted: Path) -> tuple[bool, bytes]:
    """Run `script` (given HOOK as $1); once `planted` appears, or the command ends, commit
    on the host as the person would. (whether attacker code ran, what the command said)."""
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--mode", "workspace-write", "--timeout", "20", "--",
                             "/bin/sh", "-c", script, "sh", HOOK]),
        cwd=str(box.ws), env=box.env(**GIT_ENV), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 3
        while not planted.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the chmod
        ran = _host_commit_runs_planted_hook(box)
    finally:
        out, _ = proc.communicate(timeout=30)
    return ran, out


def test_a_repository_without_hooks_gets_none_during_a_run(repo: Box) -> None:
    """In a repository without `.git/hooks`, a hook the command creates must not be live
    while it runs: the person's `git commit` meanwhile once ran it."""
    box = repo
    import shutil

    shutil.rmtree(box.ws / ".git" / "hooks")
    script = ('mkdir -p .git/hooks; printf "%s" "$1" > .git/hooks/pre-commit && '
              'chmod +x .git/hooks/pre-commit; echo "hook: $?"; sleep 3')
    ran, out = _commit_while_running(box, script, box.ws / ".git" / "hooks" / "pre-commit")
    assert not ran, out
    assert b"hook: 0" not in out, out  # the command learnt its write did not stand
    assert not (box.ws / ".git" / "hooks" / "pre-commit").exists()
    # What is left is git's own empty form, which the person's git accepts.
    assert sorted(p.name for p in (box.ws / ".git" / "hooks").iterdir()) == []
    assert git(box, "status", "--porcelain").stdout == b""


def test_control_a_hook_written_on_the_host_runs_at_commit(repo: Box) -> None:
    """The control: the same hook, written unconfined, runs at the host's `git commit`."""
    box = repo
    box.write(box.ws / ".git" / "hooks" / "pre-commit", HOOK, 0o755)
    assert _host_commit_runs_planted_hook(box)


def test_a_gitlink_through_a_symlink_binds_nothing_outside(repo: Box) -> None:
    """A gitlink `sub` with `sub -> ../victim` made the next profile bind the other
    repository's .git (writable: a PIN) where the link led; only Landlock inside
    stopped the write."""
    box = repo
    victim = box.sibling / "victim"
    _host_repo(box, victim)
    before = snapshot(victim)
    res = box.sh('ln -s ../sibling/victim sub && git update-index --add --cacheinfo '
                 '160000,"$(git rev-parse HEAD)",sub && echo linked', mode="workspace-write",
                 env=box.env(**GIT_ENV))
    assert b"linked" in res.stdout, text(res)
    res = box.sh("grep -c victim /proc/self/mountinfo; echo x > sub/.git/description; "
                 "echo end", mode="workspace-write", env=box.env(**GIT_ENV))
    out = text(res)
    assert "end" in out and out.splitlines()[0] == "0", out
    assert snapshot(victim) == before, out


def test_a_large_index_cannot_hold_back_the_watch(repo: Box) -> None:
    """A command that kept renaming a huge crafted index into place made the watch parse
    it on every event, and a `.git/commondir` planted meanwhile stayed live for seconds."""
    box = repo
    box.write(box.ws / "p-big", crafted_index(["d/x"], files=300_000))
    # Each big index renamed into place once made the watch parse it; the person's
    # index is back before the commondir, so the host's commit is an ordinary one.
    plant = ('cp .git/index .git/index.orig; for i in 1 2 3 4; do cp p-big .git/i.tmp && '
             'mv .git/i.tmp .git/index; done; mv .git/index.orig .git/index; '
             'cp -a .git/. .evil/ && printf "%s" "$1" > .evil/hooks/pre-commit && '
             'chmod +x .evil/hooks/pre-commit && echo ../.evil > .git/commondir')
    ran, window, out = commit_during(box, plant_and_time(plant, ".git/commondir"))
    assert not ran, out
    assert 0 <= window < WINDOW_MS, out
