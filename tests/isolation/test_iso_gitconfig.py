"""git's config, written inside: the keys that run nothing reach the host, no other does.

`git remote add`, `git config user.name`, `git submodule add`, `git push -u`
and `git branch --set-upstream-to` write `.git/config`. Under bubblewrap the
command writes a private copy, merged back when it ends; under the Landlock
backend its writes land and the guard keeps only what is inert
(drivers/linux/host/gitconfig.py, guard.py). Each check reads the host's config
with the host's git, as the person's next command would.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from .conftest import RUN_TIMEOUT, Box, text
from .test_iso_git import GIT_ENV, git, repo

pytestmark = pytest.mark.isolation

__all__ = ["repo"]

WORKFLOWS = r"""
set -e
git config user.name "Agent Smith"
git init -q --bare remote.git
git remote add origin ./remote.git
git push -q -u origin main
git checkout -q -b feature
git branch -q --set-upstream-to=origin/main
git init -q -b main lib && git -C lib commit -q --allow-empty -m lib
git -c protocol.file.allow=always submodule -q add "$PWD/lib" vendor/lib
echo done
"""


def config(box: Box, key: str) -> str:
    return git(box, "config", "--get-all", key).stdout.decode().strip()


def test_everyday_config_writers_work_and_reach_the_host(repo: Box) -> None:
    box = repo
    res = box.sh(WORKFLOWS, mode="workspace-write", env=box.env(**GIT_ENV))
    assert res.returncode == 0 and b"done" in res.stdout, text(res)
    assert "could not write" not in text(res) and "neutralised" not in text(res), text(res)
    assert config(box, "user.name") == "Agent Smith"
    assert config(box, "remote.origin.url") == "./remote.git"
    assert config(box, "branch.main.merge") == "refs/heads/main"
    assert config(box, "branch.feature.remote") == "origin"
    assert config(box, "submodule.vendor/lib.url") == str(box.ws / "lib")
    assert config(box, "submodule.vendor/lib.active") == "true"
    upstream = git(box, "rev-parse", "--abbrev-ref", "@{upstream}")
    assert upstream.stdout.decode().strip() == "origin/main", text(upstream)
    status = git(box, "submodule", "status")
    assert status.returncode == 0 and "vendor/lib" in status.stdout.decode(), text(status)


# Each payload touches a file in the workspace by its full name, and its `#` drops
# the arguments git adds (an fsmonitor hook's version and token): git runs them
# from the top of the work tree, which `core.worktree /` makes `/`.
ATTACKS = r"""
printf '[core]\n\tfsmonitor = touch %s/pwned-include "#"\n' "$PWD" > evil.cfg
git config core.fsmonitor "touch $PWD/pwned-fsmonitor #"
git config core.hooksPath evil-hooks
git config include.path ../evil.cfg
git config 'includeIf.gitdir:/.path' ../evil.cfg
git config alias.st "!touch $PWD/pwned-alias"
git config core.pager "touch $PWD/pwned-pager"
git config core.worktree /
git config extensions.worktreeConfig true
git config --worktree core.fsmonitor "touch $PWD/pwned-worktree #"
printf '[core]\n\tsshCommand = touch %s/pwned-ssh\n' "$PWD" >> .git/config
git config user.email ok@example.invalid
git config --get core.fsmonitor >/dev/null && echo inside-it-held
"""
RUNNERS = ("core.fsmonitor", "core.hookspath", "include.path", "includeif.", "alias.",
           "core.pager", "core.worktree=", "core.sshcommand")


def _host_git_runs_something(box: Box) -> list[str]:
    """The host's git as the person runs it next; the files its config made it touch."""
    for argv in (["status"], ["-p", "log", "-1"], ["st"], ["fetch", "--dry-run"]):
        git(box, *argv)
    return sorted(p.name for p in box.ws.glob("pwned-*"))


def test_keys_git_acts_on_never_reach_the_host(repo: Box) -> None:
    res = keys_never_reach_the_host(repo)
    assert b"inside-it-held" in res.stdout, text(res)  # a private copy: its own writes stay


def keys_never_reach_the_host(box: Box) -> subprocess.CompletedProcess[bytes]:
    res = box.sh(ATTACKS, mode="workspace-write", env=box.env(**GIT_ENV))
    listing = git(box, "config", "--list", "--show-origin").stdout.decode().lower()
    assert [k for k in RUNNERS if k in listing] == [], listing
    assert config(box, "user.email") == "ok@example.invalid"
    assert _host_git_runs_something(box) == []
    assert "core.fsmonitor" in text(res) and "include" in text(res), text(res)
    return res


def test_control_the_same_writes_unconfined_run_on_the_host(repo: Box) -> None:
    """The attacks above work: written without stockade, the host's git runs them."""
    box = repo
    box.host(["/bin/sh", "-c", ATTACKS], env=box.env(**GIT_ENV))
    assert "pwned-fsmonitor" in _host_git_runs_something(box) or \
        "pwned-worktree" in _host_git_runs_something(box)


def test_the_host_config_never_holds_them_during_the_run(repo: Box) -> None:
    """A private copy: the person's prompt running `git status` mid-run reads their own."""
    box = repo
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append((box.ws / ".git" / "config").read_text())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        res = box.sh('git config core.fsmonitor "touch $PWD/pwned" && sleep 2 && '
                     'git config --get core.fsmonitor', mode="workspace-write",
                     env=box.env(**GIT_ENV))
    finally:
        done.set()
        watcher.join()
    assert res.returncode == 0 and b"pwned" in res.stdout, text(res)
    assert len(seen) > 20 and not [s for s in seen if "fsmonitor" in s.lower()]


def test_overlapping_commands_and_the_person_all_keep_their_keys(repo: Box) -> None:
    """Two commands at once and the person's own `git config` meanwhile: each key
    lands once both commands end, none overwrites another's."""
    box = repo
    results: dict[str, object] = {}

    def run(name: str, script: str) -> None:
        results[name] = box.sh(script, mode="workspace-write", env=box.env(**GIT_ENV))

    first = threading.Thread(target=run, args=("a", "git config user.name A && sleep 2"))
    second = threading.Thread(target=run, args=("b", "sleep 0.5 && git config "
                                                     "remote.up.url /srv/up.git && sleep 1"))
    first.start()
    second.start()
    time.sleep(1)
    assert git(box, "config", "color.ui", "auto").returncode == 0
    first.join()
    second.join()
    assert config(box, "user.name") == "A", results
    assert config(box, "remote.up.url") == "/srv/up.git"
    assert config(box, "color.ui") == "auto"


def person_sets_during_a_run(box: Box, key: str, value: str) -> None:
    """The person's own `git config KEY VALUE` on the host, a second into a command's run."""
    running = threading.Thread(target=box.sh, args=("sleep 2",),
                               kwargs={"mode": "workspace-write", "env": box.env(**GIT_ENV)})
    running.start()
    time.sleep(1)
    assert git(box, "config", key, value).returncode == 0
    running.join()


def test_the_persons_own_keys_stay_when_they_write_during_a_run(repo: Box) -> None:
    """Their `git config user.name` mid-run replaced the file the command's copy was
    bound over; the sweep then kept only inert keys of theirs, and their editor, alias
    and credential helper were gone (judged against nothing instead of against the
    config the command was given)."""
    box = repo
    for key, value in (("core.editor", "vim"), ("alias.co", "checkout"),
                       ("credential.helper", "cache")):
        assert git(box, "config", key, value).returncode == 0
    person_sets_during_a_run(box, "user.name", "Me Myself")
    assert (config(box, "core.editor"), config(box, "alias.co"),
            config(box, "credential.helper"), config(box, "user.name")) == (
        "vim", "checkout", "cache", "Me Myself")


#: A repository made with a key git runs, then `.git` made unreachable as the last act:
#: the release's first step (the left-lock check) once failed on it, and the sweep that
#: makes the new repository inert never ran.
UNREACHABLE_GIT = (
    'git init -q sub && git -C sub config core.fsmonitor "touch $PWD/pwned-sub; false" && '
    "chmod 000 .git")


def test_a_git_directory_made_unreachable_does_not_stop_the_sweep(repo: Box) -> None:
    box = repo
    res = box.sh(UNREACHABLE_GIT, mode="workspace-write", env=box.env(**GIT_ENV))
    try:
        assert "Traceback" not in text(res), text(res)
        assert "fsmonitor" not in git(box, "-C", "sub", "config", "--list").stdout.decode()
        box.host(["git", "-C", "sub", "status"], env=box.env(**GIT_ENV))
        assert not (box.ws / "pwned-sub").exists(), text(res)
    finally:
        (box.ws / ".git").chmod(0o755)


def test_a_mode_the_person_gave_their_git_directory_stays(repo: Box) -> None:
    """The guard gives back owner bits a command took away, never ones the person had
    not: a `chmod 555 .git` of theirs came back as 755 after every run."""
    box = repo
    (box.ws / ".git").chmod(0o555)
    try:
        res = box.sh("true", mode="workspace-write", env=box.env(**GIT_ENV))
        assert res.returncode == 0, text(res)
        assert (box.ws / ".git").stat().st_mode & 0o777 == 0o555
    finally:
        (box.ws / ".git").chmod(0o755)


@pytest.mark.xfail(strict=True, reason="Known limits: a protected file the person replaces "
                   "while a command runs is a new file to it, no longer held, so a key that "
                   "runs something set meanwhile is dropped, the person's too (their version "
                   "is in the quarantine)")
def test_the_persons_own_config_write_during_a_run_is_kept(repo: Box) -> None:
    box = repo
    person_sets_during_a_run(box, "core.sshCommand", "ssh -i ~/.ssh/work")
    assert config(box, "core.sshCommand") == "ssh -i ~/.ssh/work"


#: Writes a key git runs into the host's config through a hard link in a directory
#: no watch looks at, then waits (bounded) for it to be taken out while it runs.
LINKED_WRITE = r"""
ln .git/config .git/objects/cfg-link || exit 3
printf '[core]\n\tfsmonitor = touch %s/pwned-link\n' "$PWD" >> .git/objects/cfg-link
for i in $(seq 100); do
  grep -qi fsmonitor .git/config || { echo cut; exit 0; }
  sleep 0.05
done
echo still-live
"""
#: The same, once the person's own `git config` has replaced the file the command's
#: private copy was bound over (which detaches that mount inside).
AFTER_PERSONS_WRITE = r"""
first=$(stat -c %i .git/config)
touch ready
for i in $(seq 500); do
  [ "$(stat -c %i .git/config)" != "$first" ] && break
  sleep 0.02
done
[ "$(stat -c %i .git/config)" = "$first" ] && { echo held; exit 0; }
""" + LINKED_WRITE


#: Seconds a key written through a link may stay in the person's config: the
#: watch's reaction, with room for a loaded machine (it stayed the whole run once).
LIVE_AT_MOST = 0.5


def linked_write_is_cut_while_it_runs(box: Box, script: str, person: bool) -> bytes:
    """The command's output; asserts, from the host, that the key was in the person's
    config for a moment only (polled every millisecond while the command runs) and
    that the host's git runs nothing after it.

    Not that no git of the person's ran in that moment: without a mount between the
    command and the file (Landlock, or once the person's own rename detached it)
    the key is there until the watch takes it out, milliseconds, and a git started
    then reads it (docs/landlock-backend.md)."""
    results: list[subprocess.CompletedProcess[bytes]] = []
    running = threading.Thread(target=lambda: results.append(box.sh(
        script, mode="workspace-write", env=box.env(**GIT_ENV))))
    running.start()
    if person:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (box.ws / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert git(box, "config", "user.email", "me@example.invalid").returncode == 0
    live: list[float] = []
    while running.is_alive():
        try:
            if b"fsmonitor" in (box.ws / ".git" / "config").read_bytes().lower():
                live.append(time.monotonic())
        except OSError:
            pass  # between a removal and a rename
        time.sleep(0.001)
    running.join()
    res = results[0]
    assert res.returncode == 0, text(res)
    assert not live or live[-1] - live[0] < LIVE_AT_MOST, (live[-1] - live[0], text(res))
    assert "fsmonitor" not in git(box, "config", "--list").stdout.decode().lower()
    assert _host_git_runs_something(box) == []
    return res.stdout


def test_a_key_written_through_a_hard_link_after_the_persons_write_is_cut_at_once(
        repo: Box) -> None:
    out = linked_write_is_cut_while_it_runs(repo, AFTER_PERSONS_WRITE, person=True)
    assert b"cut" in out, out


def test_control_a_key_written_through_a_hard_link_stays_unconfined(repo: Box) -> None:
    box = repo
    res = box.host(["/bin/sh", "-c", LINKED_WRITE], env=box.env(**GIT_ENV))
    assert b"still-live" in res.stdout, text(res)
    assert _host_git_runs_something(box) == ["pwned-link"]


#: Once the person's write detached the private copy, the command writes the
#: host's file itself, pointing the person's `origin` elsewhere.
REPOINT_AFTER_PERSONS_WRITE = AFTER_PERSONS_WRITE.split("ln .git/config")[0] + r"""
git config remote.origin.url /srv/attacker.git && echo repointed
"""


def test_a_remote_the_person_had_keeps_its_url_after_their_write_detached_the_copy(
        repo: Box) -> None:
    """Their next `git push` would go to the command's URL: the cut after the person's
    write kept every inert key as the command wrote it."""
    box = repo
    assert git(box, "remote", "add", "origin", "/srv/real.git").returncode == 0
    out = linked_write_is_cut_while_it_runs(box, REPOINT_AFTER_PERSONS_WRITE, person=True)
    if b"held" in out:
        pytest.skip("the person's write did not detach the copy on this kernel")
    assert b"repointed" in out, out
    assert config(box, "remote.origin.url") == "/srv/real.git"


def test_control_a_remote_repointed_unconfined_stays_repointed(repo: Box) -> None:
    box = repo
    assert git(box, "remote", "add", "origin", "/srv/real.git").returncode == 0
    box.host(["git", "config", "remote.origin.url", "/srv/attacker.git"], env=box.env(**GIT_ENV))
    assert config(box, "remote.origin.url") == "/srv/attacker.git"


#: What a git killed while writing its config leaves: `config.lock`, which makes every
#: later `git config` fail until someone removes it.
LEFT_LOCK = r"""
git config user.name "Agent Smith"
printf '[user]\n\tname = half-written\n' > .git/config.lock
echo done
"""


def test_a_config_lock_the_command_left_is_removed_and_its_keys_merged(repo: Box) -> None:
    box = repo
    person_lock = box.ws / ".git" / "config.lock"
    res = box.sh(LEFT_LOCK + "sleep 1.2", mode="workspace-write", env=box.env(**GIT_ENV))
    assert res.returncode == 0 and b"done" in res.stdout, text(res)
    assert "config.lock" in text(res), text(res)  # said, not silent
    assert not person_lock.exists()
    assert config(box, "user.name") == "Agent Smith"
    assert git(box, "config", "color.ui", "auto").returncode == 0


def test_a_config_lock_behind_a_directory_the_command_closed_is_removed(repo: Box) -> None:
    """The command leaves `config.lock` and takes the owner's bits off `.git`: the guard
    gives them back as the person had them, and the lock goes as before. (Root
    reads through a mode of 000 either way; the unprivileged runner is the case.)"""
    box = repo
    res = box.sh(LEFT_LOCK + "chmod 000 .git; sleep 1.2", mode="workspace-write",
                 env=box.env(**GIT_ENV))
    assert res.returncode == 0 and b"done" in res.stdout, text(res)
    assert "COULD NOT" not in text(res), text(res)
    assert not (box.ws / ".git" / "config.lock").exists()
    assert git(box, "config", "color.ui", "auto").returncode == 0


def test_a_config_lock_from_before_the_command_is_the_persons(repo: Box) -> None:
    box = repo
    person_lock = box.write(box.ws / ".git" / "config.lock", "[user]\n")
    res = box.sh("git config user.name A; true", mode="workspace-write",
                 env=box.env(**GIT_ENV))
    assert res.returncode == 0, text(res)
    assert person_lock.read_text() == "[user]\n"


def test_control_a_left_config_lock_stops_the_persons_git(repo: Box) -> None:
    box = repo
    box.host(["/bin/sh", "-c", LEFT_LOCK], env=box.env(**GIT_ENV))
    res = git(box, "config", "color.ui", "auto")
    assert res.returncode != 0 and b"lock" in res.stderr, text(res)


#: Once the person's rename detached the private copy, a file of the command's with
#: the inode number the held config had (freed by that rename) renamed over it:
#: identical by device and inode to what the baseline recorded.
REUSED_INODE = r"""
import os, sys, time
orig = next(e.inode() for e in os.scandir(".git") if e.name == "config")
person, stop = sys.argv[1].encode(), time.monotonic() + float(sys.argv[2])
open("ready", "w").close()
deadline = time.monotonic() + 20
while person not in open(".git/config", "rb").read():
    if time.monotonic() > deadline:
        sys.exit("never detached")
    time.sleep(0.01)
payload = '[user]\n\tname = person\n[core]\n\tfsmonitor = "touch pwned-reused"\n'
# The number is free once the detached mount has let go of the old file, which
# takes a moment; the guard's own rewrite of the config may get it first.
made, mine = [], None
for i in range(40000):
    if i % 1000 == 0:
        if time.monotonic() > stop:
            break
        if os.stat(".git/config").st_ino == orig:
            mine = ".git/config"
            break
        time.sleep(0.05)
    p = f".git/.t{i}"
    open(p, "w").close()
    if os.stat(p).st_ino == orig:
        mine = p
        break
    made.append(p)
for p in made:
    os.unlink(p)
if mine is None:
    print("not-reused")
    sys.exit(0)
with open(mine, "a") as fh:
    fh.write(payload)
if mine != ".git/config":
    os.rename(mine, ".git/config")
time.sleep(1)
print("reused")
"""


#: How long the attack may try for the number: reuse either comes within seconds or
#: not at all for this filesystem and runner (seen: 1 s, or nothing in 80).
REUSE_BUDGET = 12.0


def test_a_file_that_reuses_the_held_configs_inode_number_is_still_cut(repo: Box) -> None:
    """The attack as a command makes it; when the number is handed out again is up to
    the kernel, so it is tried until it is (tests/unit/test_guard_replaced.py
    plays the same outcome deterministically)."""
    box = repo
    budget = time.monotonic() + REUSE_BUDGET
    attempt = 0
    while (left := budget - time.monotonic()) > 1:
        attempt += 1
        (box.ws / "ready").unlink(missing_ok=True)
        results: list[subprocess.CompletedProcess[bytes]] = []
        running = threading.Thread(target=lambda n=attempt, s=left, out=results: out.append(box.py(
            REUSED_INODE, f"person-{n}", f"{s:.1f}", mode="workspace-write",
            env=box.env(**GIT_ENV))))
        running.start()
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (box.ws / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert git(box, "config", "user.name", f"person-{attempt}").returncode == 0
        running.join()
        res = results[0]
        assert res.returncode == 0, text(res)
        assert "fsmonitor" not in git(box, "config", "--list").stdout.decode().lower()
        assert _host_git_runs_something(box) == []
        if b"not-reused" not in res.stdout:
            assert b"reused" in res.stdout and "core.fsmonitor" in text(res), text(res)
            return
    pytest.skip(f"the kernel never handed the held config's inode number out again in "
                f"{attempt} runs over {REUSE_BUDGET:.0f} s; the guard-level test covers the "
                f"outcome")
