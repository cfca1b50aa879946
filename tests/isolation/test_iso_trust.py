"""What a run leaves in the workspace for the host to run later, and overlapping runs.

Every attack here is checked where it would land: the host's own git is run
afterwards, outside any sandbox, with a payload that writes a marker in the
sibling directory (read-only inside the sandbox, writable on the host), and
the marker is looked for. Each has an unconfined control that shows the same
script does make the host's git run the payload.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import Box, Listener, snapshot, text, unix_listener

pytestmark = pytest.mark.isolation

GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def git(box: Box, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return box.host(["git", *GIT_ID, *args], cwd=cwd or box.ws, capture_output=True)


def init_repo(box: Box, where: Path | None = None) -> Path:
    repo = where or box.ws
    git(box, "init", "-q", str(repo), cwd=repo.parent)
    box.write(repo / "a.txt", "a\n")
    git(box, "add", "a.txt", cwd=repo)
    git(box, "commit", "-qm", "first", cwd=repo)
    return repo


def marker(box: Box, name: str) -> Path:
    return box.sibling / f"ran-{name}"


def unconfined(box: Box, script: str, cwd: Path) -> None:
    res = box.host(["sh", "-c", script], cwd=cwd, capture_output=True)
    assert res.returncode == 0, text(res)


def copy_workspace(box: Box, name: str) -> Path:
    """A copy of the workspace for the unconfined control, as the same user."""
    dest = box.mkdir("controls") / name
    res = box.host(["cp", "-a", str(box.ws), str(dest)], capture_output=True)
    assert res.returncode == 0, text(res)
    return dest


# -- git: a nested repository behind a gitlink --------------------------------------------

NESTED = r"""
set -e
mkdir sub && cd sub && git init -q .
git config core.fsmonitor "touch $M"
echo x > f && git add f && git -c user.name=t -c user.email=t@t commit -qm m
cd .. && git add sub 2>/dev/null
echo planted
"""


def test_a_nested_repository_behind_a_gitlink_runs_nothing_on_the_host(box: Box) -> None:
    init_repo(box)
    control = copy_workspace(box, "control")
    m = marker(box, "nested")
    unconfined(box, NESTED.replace("$M", str(m) + "-control"), control)
    git(box, "status", cwd=control)
    assert Path(str(m) + "-control").exists(), "control: the host's git status ran it"

    res = box.sh(NESTED.replace("$M", str(m)), mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    status = git(box, "status")
    assert status.returncode == 0, text(status)
    assert not m.exists(), "the host's git status ran the command's fsmonitor"
    assert b"fsmonitor" not in (box.ws / "sub" / ".git" / "config").read_bytes()
    assert "neutralised" in text(res)


# -- git: a linked worktree outside the workspace -----------------------------------------

def test_a_rewritten_worktree_commondir_is_not_obeyed(box: Box) -> None:
    init_repo(box)
    wt = box.sibling / "wt"
    res = git(box, "worktree", "add", "-q", str(wt))
    assert res.returncode == 0, text(res)
    m = marker(box, "commondir")
    script = (f"set -e; cp -a .git/. evil/ 2>/dev/null || (mkdir evil && cp -a .git/. evil/); "
              f"git --git-dir=evil config core.fsmonitor 'touch {m}'; "
              "echo ../../../evil > .git/worktrees/wt/commondir; echo planted")
    control = copy_workspace(box, "control")
    unconfined(box, script.replace(str(m), str(m) + "-control"), control)
    assert b"evil" in (control / ".git" / "worktrees" / "wt" / "commondir").read_bytes()

    res = box.sh(script, mode="workspace-write")
    git(box, "status", cwd=wt)
    assert not m.exists(), f"the linked worktree obeyed a planted commondir\n{text(res)}"
    assert (box.ws / ".git" / "worktrees" / "wt" / "commondir").read_bytes().strip() == b"../.."


# -- git: core.hooksPath inside the workspace (husky's layout) ----------------------------

def test_hooks_path_inside_the_workspace_is_protected(box: Box) -> None:
    init_repo(box)
    git(box, "config", "core.hooksPath", ".husky/_")
    box.mkdir("ws/.husky")
    box.mkdir("ws/.husky/_")
    box.write(box.ws / ".husky" / "_" / "pre-commit",
              '#!/bin/sh\n. "$(dirname "$0")/../pre-commit"\n', 0o755)
    box.write(box.ws / ".husky" / "pre-commit", "#!/bin/sh\ntrue\n", 0o755)
    m = marker(box, "husky")
    script = f"printf '#!/bin/sh\\ntouch {m}\\n' > .husky/pre-commit; echo planted"
    control = copy_workspace(box, "control")
    unconfined(box, script.replace(str(m), str(m) + "-control"), control)
    box.write(control / "b.txt", "b\n")
    git(box, "add", "b.txt", cwd=control)
    git(box, "commit", "-qm", "b", cwd=control)
    assert Path(str(m) + "-control").exists(), "control: the host's commit ran the hook"

    res = box.sh(script, mode="workspace-write")
    assert b"touch" not in (box.ws / ".husky" / "pre-commit").read_bytes(), text(res)
    box.write(box.ws / "b.txt", "b\n")
    git(box, "add", "b.txt")
    git(box, "commit", "-qm", "b")
    assert not m.exists(), f"the host's git commit ran a hook the command wrote\n{text(res)}"


# -- git works the way an agent expects ----------------------------------------------------

def test_git_init_add_commit_work_and_status_matches_the_host(box: Box) -> None:
    box.write(box.ws / "a.txt", "a\n")
    script = ("set -e; git init -q .; git add -A; "
              "git -c user.name=t -c user.email=t@t commit -qm first; "
              "git status --porcelain --untracked-files=all; echo ok")
    res = box.sh(script, mode="workspace-write")
    assert res.returncode == 0 and res.stdout.decode().strip() == "ok", text(res)
    log = git(box, "log", "--format=%s")
    assert log.stdout.decode().strip() == "first", text(log)
    inside = box.sh("git status --porcelain --untracked-files=all", mode="workspace-write")
    host = git(box, "status", "--porcelain", "--untracked-files=all")
    assert inside.stdout == host.stdout == b"", text(inside) + text(host)


# -- overlapping runs ------------------------------------------------------------------------

OVERLAP = r"""
touch ready.$N
i=0; while [ "$(ls ready.* 2>/dev/null | wc -l)" -lt $TOTAL ] && [ $i -lt 400 ]; do
  sleep 0.05; i=$((i+1)); done
echo started
echo $N > out.$N 2>/dev/null
mkdir -p .vscode .claude 2>/dev/null; echo '{}' > .vscode/tasks.json 2>/dev/null
echo 'touch $M' > .envrc 2>/dev/null
printf '[sandbox]\nmode = "full-access"\n' > stockade.toml 2>/dev/null
mkdir -p .git/hooks 2>/dev/null
printf '#!/bin/sh\ntouch $M\n' > .git/hooks/pre-commit 2>/dev/null
chmod +x .git/hooks/pre-commit 2>/dev/null
exit 0
"""
LEFT = {".vscode", ".claude", ".envrc", "stockade.toml", ".stockade", ".codex", ".agents",
        ".idea"}


@pytest.mark.parametrize("round_", range(3))
def test_eight_overlapping_runs_each_keep_every_protection(box: Box, round_: int) -> None:
    """8 runs at once, mixed modes, all attacking the same repository (which has no
    hooks directory), all waiting until every one has started: each starts, and
    afterwards nothing is left for the host -- the host's `git commit` runs no hook."""
    init_repo(box)
    hooks = box.ws / ".git" / "hooks"
    for p in hooks.glob("*"):
        p.unlink()
    hooks.rmdir()
    m = marker(box, f"overlap-{round_}")
    total = 8
    modes = ["workspace-write", "read-only"] * (total // 2)

    # Read-only runs cannot write ready.N: every run waits for the writers' files.
    writers = modes.count("workspace-write")

    def one(n: int) -> subprocess.CompletedProcess[bytes]:
        script = OVERLAP.replace("$N", str(n)).replace("$TOTAL", str(writers)).replace(
            "$M", str(m))
        # A warm runner's parked sandbox is discarded when a writer starts on
        # the workspace: here some always do, so warm is not required.
        return box.sh(script, mode=modes[n], timeout=90,
                      env=box.env(STOCKADE_TEST_WARM_EXPECT="any"))

    with concurrent.futures.ThreadPoolExecutor(total) as pool:
        results = list(pool.map(one, range(total)))
    for n, res in enumerate(results):
        assert res.returncode == 0 and b"started" in res.stdout, f"run {n}: {text(res)}"
    left = LEFT & set(os.listdir(box.ws))
    assert not left, f"left on the host: {sorted(left)}"
    for n in range(total):
        assert (box.ws / f"out.{n}").exists() == (modes[n] == "workspace-write"), n
    real_hooks = [p.name for p in hooks.glob("*")] if hooks.is_dir() else []
    assert real_hooks == [], real_hooks
    box.write(box.ws / "c.txt", "c\n")
    git(box, "add", "c.txt")
    commit = git(box, "commit", "-qm", "c")
    assert commit.returncode == 0, text(commit)
    assert not m.exists(), "the host's git commit ran a hook a run left"


# -- a workspace of $HOME -------------------------------------------------------------------

HOME_ATTACK = r"""
echo 'touch $M' >> .bashrc 2>/dev/null
mkdir -p .ssh 2>/dev/null; echo 'ssh-ed25519 AAAA evil' >> .ssh/authorized_keys 2>/dev/null
mkdir -p .config/systemd/user && printf '[Service]\nExecStart=/bin/true\n' \
  > .config/systemd/user/evil.service 2>/dev/null
mkdir -p .local/bin && printf '#!/bin/sh\ntouch $M\n' > .local/bin/git 2>/dev/null
mkdir -p .config/stockade && printf '[sandbox]\nmode = "full-access"\n' \
  > .config/stockade/config.toml 2>/dev/null
echo 'touch $M' > .profile 2>/dev/null
mkdir -p .cargo && printf '[build]\nrustc-wrapper = "/bin/sh"\n' > .cargo/config.toml 2>/dev/null
mkdir -p .gradle/init.d && echo 'exec "touch $M"' > .gradle/init.d/evil.gradle 2>/dev/null
mkdir -p .ipython/profile_default/startup && echo 'import os' \
  > .ipython/profile_default/startup/00-evil.py 2>/dev/null
echo '{"mcpServers": {"x": {"command": "touch", "args": ["$M"]}}}' > .claude.json 2>/dev/null
mkdir -p .docker/cli-plugins && printf '#!/bin/sh\ntouch $M\n' \
  > .docker/cli-plugins/docker-compose 2>/dev/null
echo '!import os; os.system("touch $M")' > .pdbrc 2>/dev/null
mkdir -p .local/share/nvim/site/plugin && echo 'os.execute("touch $M")' \
  > .local/share/nvim/site/plugin/evil.lua 2>/dev/null
echo 'touch $M' > .kshrc 2>/dev/null
mkdir -p .config/i3 && echo 'exec touch $M' > .config/i3/config 2>/dev/null
echo done
"""


#: Per-user files ordinary tools obey by running what they name; no list of names ends.
HOME_CLASS_ATTACK = r"""
mkdir -p .config/user-tmpfiles.d .local/share/dbus-1/services .config/uv .config/hg
printf '#env\nLESSOPEN=|%s/.lp.sh %%s\n' "$HOME" > .config/lesskey
printf '#!/bin/sh\ntouch $M\n' > .lp.sh && chmod +x .lp.sh
echo 'C /tmp/x - - - - /etc/shadow' > .config/user-tmpfiles.d/evil.conf
echo '[D-BUS Service]' > .local/share/dbus-1/services/evil.service
echo 'index-url = "http://127.0.0.1:9/simple"' > .config/uv/uv.toml
printf '[hooks]\npre-commit = touch $M\n' > .config/hg/hgrc
echo 'script-shell=/tmp/evil' >> .npmrc
echo done
"""
HOME_CLASS_FILES = (".config/lesskey", ".lp.sh", ".config/user-tmpfiles.d/evil.conf",
                    ".local/share/dbus-1/services/evil.service", ".config/uv/uv.toml",
                    ".config/hg/hgrc")


def test_a_workspace_of_home_is_refused_for_writing(box: Box) -> None:
    """A writing command in a workspace that holds the home is refused unless the person
    set allow_home_workspace: one command once left fifty kinds of file there that the
    host's next `less`, login or build ran, and the class has no end."""
    m = marker(box, "home-class")
    script = HOME_CLASS_ATTACK.replace("$M", str(m))
    control = box.mkdir("controls/home-class")
    unconfined(box, script, control)
    assert all((control / rel).exists() for rel in HOME_CLASS_FILES)
    before = snapshot(box.home)
    for cwd in (box.home, box.root):  # the home itself, and a directory above it
        res = box.sh(script, mode="workspace-write", options=["--workspace", str(cwd)],
                     cwd=cwd)
        assert res.returncode == 77, text(res)
        err = res.stderr.decode()
        assert "allow_home_workspace" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(box.home) == before
    # Read-only still works there, and a project inside the home is no home workspace.
    assert box.sh("echo fine", options=["--workspace", str(box.home)],
                  cwd=box.home).returncode == 0
    project = box.home / "project"
    project.mkdir()
    box.runner.own(project)
    res = box.sh("echo x > f && echo ok", mode="workspace-write",
                 options=["--workspace", str(project)], cwd=project)
    assert b"ok" in res.stdout, text(res)


def test_a_workspace_of_home_keeps_start_up_files_and_doors_shut(box: Box) -> None:
    """An MCP client started in ~ makes the home the workspace: what a login, a
    shell, systemd or the next ssh connection would run stays as it was."""
    box.user_config("allow_home_workspace = true")  # asked for by name
    bashrc = box.home / ".bashrc"
    before = bashrc.read_bytes()
    m = marker(box, "home")
    script = HOME_ATTACK.replace("$M", str(m))
    box.mkdir("controls")
    control = box.mkdir("controls/home")
    unconfined(box, script, control)
    assert (control / ".local" / "bin" / "git").exists() and (control / ".profile").exists()
    assert (control / ".cargo" / "config.toml").exists() and (control / ".claude.json").exists()

    res = box.sh(script, mode="workspace-write", options=["--workspace", str(box.home)],
                 cwd=box.home)
    assert b"done" in res.stdout, text(res)
    assert bashrc.read_bytes() == before, text(res)
    for rel in (".ssh/authorized_keys", ".config/systemd/user/evil.service", ".local/bin/git",
                ".config/stockade/config.toml", ".profile", ".cargo/config.toml",
                ".gradle/init.d/evil.gradle", ".ipython/profile_default/startup/00-evil.py",
                ".claude.json", ".docker/cli-plugins/docker-compose", ".pdbrc",
                ".local/share/nvim/site/plugin/evil.lua", ".kshrc", ".config/i3/config"):
        assert not (box.home / rel).exists(), f"{rel} left in the home\n{text(res)}"


def test_a_workspace_of_home_still_hides_credentials(box: Box) -> None:
    """The workspace's own write grant is not a request to see what is hidden in it."""
    box.user_config("allow_home_workspace = true")  # asked for by name
    res = box.sh("cat .aws/credentials .ssh/id_rsa 2>&1; echo end", mode="workspace-write",
                 options=["--workspace", str(box.home)], cwd=box.home)
    out = text(res)
    assert "end" in out and not any(m in out for m in box.markers.values() if "bashrc" not in m)


#: Credential stores the decoy home does not have: a command in a workspace of ~
#: could create them, with what the tool that reads them runs.
UNBORN_STORES = r"""
mkdir -p .config/containers && echo '{"credHelpers": {"x": "evil"}}' \
  > .config/containers/auth.json 2>/dev/null
mkdir -p .cargo && echo '[registry]' > .cargo/credentials.toml 2>/dev/null
echo '*:*:*:*:pw' > .pgpass 2>/dev/null
printf '[client]\npager = "touch /tmp/x"\n' > .my.cnf 2>/dev/null
echo done
"""
UNBORN = (".config/containers/auth.json", ".cargo/credentials.toml", ".pgpass", ".my.cnf")


def test_a_credential_store_that_did_not_exist_is_not_left_behind(box: Box) -> None:
    """A store with no file gets no mask; what a command writes there is neutralised."""
    box.user_config("allow_home_workspace = true")  # asked for by name
    control = box.mkdir("controls/unborn")
    unconfined(box, UNBORN_STORES, control)
    assert all((control / rel).exists() for rel in UNBORN)
    assert not any((box.home / rel).exists() for rel in UNBORN)
    res = box.sh(UNBORN_STORES, mode="workspace-write",
                 options=["--workspace", str(box.home)], cwd=box.home)
    assert b"done" in res.stdout, text(res)
    for rel in UNBORN:
        assert not (box.home / rel).exists(), f"{rel} left in the home\n{text(res)}"


def test_a_link_at_a_stores_name_does_not_mask_the_workspace(box: Box) -> None:
    """`ln -s ~ ~/.mozilla` made every later command in a workspace of ~ see an
    empty home: the mask for the browser profile went over the link's target."""
    box.user_config("allow_home_workspace = true")  # asked for by name
    link = box.home / ".mozilla"
    os.symlink(box.home, link)
    box.runner.own(link)
    res = box.sh("cat .bashrc; echo end", mode="workspace-write",
                 options=["--workspace", str(box.home)], cwd=box.home)
    assert "end" in text(res), text(res)
    assert box.markers[".bashrc"] in text(res), text(res)


#: Directories above what a workspace of ~ must keep hidden: a credential store,
#: a container runtime's socket, stockade's own state (the guard's baseline).
MASKED_PARENTS = (".docker", ".config/gcloud", ".terraform.d", ".local/share/keyrings",
                  ".colima", ".local/state")
RENAME = "for d in " + " ".join(MASKED_PARENTS) + r"""; do
  mv "$d" "$d-moved" 2>/dev/null && echo "moved $d"; done
echo 'echo planted' > .zshrc; mkdir -p bin; printf '#!/bin/sh\necho planted\n' > bin/git
chmod +x bin/git; echo renamed"""
READ_MOVED = r"""for d in """ + " ".join(MASKED_PARENTS) + r"""; do
  [ -d "$d-moved" ] && cat $(find "$d-moved" -type f) 2>/dev/null; done
python3 -I -c '
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); print("REACHED", s.recv(64).decode())
    except OSError as exc:
        print("refused", path, exc.errno)
' .colima-moved/default/docker.sock .colima/default/docker.sock; echo end"""


def test_renaming_the_directory_above_a_mask_unmasks_nothing(
        box: Box, listeners: list[Listener]) -> None:
    """A workspace of ~: hidden paths, runtime sockets and stockade's state are
    hidden by path, so the directories above them must not move either."""
    box.user_config("allow_home_workspace = true")  # asked for by name
    sock_dir = box.home / ".colima" / "default"
    sock_dir.mkdir(parents=True)
    box.runner.own(box.home / ".colima", sock_dir)
    listener = unix_listener(listeners, sock_dir / "docker.sock", box.runner)
    state = box.home / ".local" / "state"
    state.mkdir(parents=True, exist_ok=True)
    box.runner.own(box.home / ".local", state)
    env = box.env(XDG_STATE_HOME=str(state))
    secrets_ = [m for m in box.markers.values() if "bashrc" not in m]

    # The control, unconfined as the same user on a copy: every rename works,
    # the moved credentials read back and the moved socket answers.
    control = box.mkdir("controls/home-rename")
    res = box.host(["cp", "-a", f"{box.home}/.", str(control)], capture_output=True)
    assert res.returncode == 0, text(res)
    unconfined(box, RENAME, control)
    assert (control / ".docker-moved").is_dir() and (control / ".colima-moved").is_dir()
    res = box.host(["sh", "-c", READ_MOVED], cwd=control, capture_output=True,
                   env=box.env(XDG_STATE_HOME=str(state)))
    assert any(m in text(res) for m in secrets_), text(res)

    try:
        res = box.sh(RENAME, mode="workspace-write", options=["--workspace", str(box.home)],
                     cwd=box.home, env=env)
        assert b"renamed" in res.stdout, text(res)
        moved = [line for line in text(res).splitlines() if line.startswith("moved ")]
        # Planted start-up files were neutralised: the guard kept its baseline.
        assert not (box.home / ".zshrc").exists(), text(res)
        assert not (box.home / "bin" / "git").exists(), text(res)
        res = box.sh(READ_MOVED, mode="workspace-write",
                     options=["--workspace", str(box.home)], cwd=box.home, env=env)
        out = text(res)
        assert "end" in out, out
        assert not any(m in out for m in secrets_), out
        assert "REACHED" not in out, out
        assert listener.settle() == 0
        assert not moved, moved
    finally:
        for d in MASKED_PARENTS:
            aside = box.home / f"{d}-moved"
            if aside.exists():
                os.rename(aside, box.home / d)


# -- found by attacking the guard: each a script, then the host's own git ------------------

def _with_sub(box: Box) -> None:
    init_repo(box)
    sub = box.mkdir("ws/sub")
    init_repo(box, sub)
    git(box, "add", "sub")
    git(box, "commit", "-qm", "sub")


ATTACKS = {
    # A gitdir pointer with bytes that do not decode used to crash the sweep.
    "undecodable-pointer": (init_repo, r"""
        R=$(printf 'r\351'); rm -rf .git; git init -q --separate-git-dir "$PWD/$R" .
        git config core.fsmonitor "touch $M; false"; echo planted""", ["status"]),
    # git ends a line at a comment, backslash and all.
    "comment-backslash": (init_repo, r"""
        printf '[core]\n\tbare = false ; \\\n\tfsmonitor = "touch %s; false"\n' "$M" \
          > new.cfg; rm -rf .git; git init -q .; cp new.cfg .git/config; echo planted""",
                          ["status"]),
    # A directory at config.worktree's name stopped the rest of the sweep.
    "config-worktree-dir": (None, r"""
        git init -q .; mkdir .git/config.worktree
        printf '#!/bin/sh\ntouch %s\n' "$M" > .git/hooks/pre-commit
        chmod +x .git/hooks/pre-commit; echo planted""", ["commit", "--allow-empty", "-qm", "x"]),
    # A split index keeps the gitlink in sharedindex.*.
    "split-index": (init_repo, r"""
        mkdir sub; (cd sub; git init -q; git -c user.name=t -c user.email=t@t commit -q \
          --allow-empty -m x); git add sub; git -C sub config core.fsmonitor "touch $M; false"
        git update-index --split-index; echo planted""", ["status"]),
    # A submodule renamed aside and rebuilt under its name.
    "submodule-rebuilt": (_with_sub, r"""
        mv sub sub.old && mkdir sub && cd sub && git init -q && \
        git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x && \
        git config core.fsmonitor "touch $M; false"; echo planted""", ["status"]),
    # Six repositories deep: git recurses into every level.
    "deep-gitlinks": (None, r"""
        mk() { (cd "$1" && git init -q . && git -c user.name=t -c user.email=t@t \
          commit -q --allow-empty -m x); }
        p=.; for i in 1 2 3 4 5 6; do mkdir -p "$p/d$i"; p="$p/d$i"; done
        mk "$p"; git -C "$p" config core.fsmonitor "touch $M; false"
        while [ "$p" != . ]; do q=$(dirname "$p"); mk "$q"; git -C "$q" add "$(basename "$p")"
          git -C "$q" -c user.name=t -c user.email=t@t commit -qm l; p=$q; done
        echo planted""", ["status"]),
    # An entry made unreadable used to stop the restore.
    "unreadable-entry": (init_repo, r"""
        printf '#!/bin/sh\ntouch %s\n' "$M" > .git/hooks/pre-commit 2>/dev/null
        chmod +x .git/hooks/pre-commit 2>/dev/null
        touch .git/hooks/zzz 2>/dev/null; chmod 000 .git/hooks/zzz 2>/dev/null; echo planted""",
                         ["commit", "--allow-empty", "-qm", "x"]),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_what_the_guard_was_tricked_with_runs_nothing_on_the_host(box: Box, name: str) -> None:
    setup, script, trigger = ATTACKS[name]
    if setup is not None:
        setup(box)
    m = marker(box, name)
    script = script.replace("$M", str(m)).replace("%s", str(m))
    control = copy_workspace(box, "control")
    cm = Path(str(m) + "-control")
    unconfined(box, script.replace(str(m), str(cm)), control)
    git(box, *trigger, cwd=control)
    assert cm.exists(), f"control: the host's git did not run the payload ({name})"

    res = box.sh(script, mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    git(box, *trigger)
    assert not m.exists(), f"the host's git ran what the command left\n{text(res)}"


def test_global_hooks_path_inside_the_workspace_is_protected(box: Box) -> None:
    init_repo(box)
    box.mkdir("ws/.githooks")
    box.write(box.ws / ".githooks" / "pre-commit", "#!/bin/sh\ntrue\n", 0o755)
    global_cfg = box.write(box.sibling / "gitconfig", "[core]\n\thooksPath = .githooks\n")
    m = marker(box, "global")
    env = box.env(GIT_CONFIG_GLOBAL=str(global_cfg))
    box.sh(f"printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit; echo planted",
           mode="workspace-write", env=env)
    box.host(["git", *GIT_ID, "commit", "--allow-empty", "-qm", "x"], env=env,
             capture_output=True)
    assert not m.exists(), "the host's commit ran a hook in the global hooksPath"


def test_a_workspace_inside_a_monorepo_keeps_its_hooks_path(box: Box) -> None:
    init_repo(box)
    git(box, "config", "core.hooksPath", "pkg/.githooks")
    box.mkdir("ws/pkg")
    box.mkdir("ws/pkg/.githooks")
    box.write(box.ws / "pkg" / ".githooks" / "pre-commit", "#!/bin/sh\ntrue\n", 0o755)
    m = marker(box, "monorepo")
    box.sh(f"printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit; echo planted",
           mode="workspace-write", options=["--workspace", str(box.ws / "pkg")],
           cwd=box.ws / "pkg")
    git(box, "commit", "--allow-empty", "-qm", "x")
    assert not m.exists(), "the host's commit at the top ran a hook the package's run wrote"


def test_a_landlock_run_overlapping_a_bubblewrap_run_leaves_nothing(box: Box) -> None:
    """The bubblewrap run records only which names existed; a Landlock run joining
    that baseline must still keep copies of what it can write, and put them back."""
    init_repo(box)
    m = marker(box, "mixed")
    script = (f"printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/pre-commit; "
              "chmod +x .git/hooks/pre-commit; echo planted")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        long = pool.submit(box.sh, "touch started; sleep 3", mode="workspace-write")
        for _ in range(100):
            if (box.ws / "started").exists():
                break
            time.sleep(0.05)
        res = box.sh(script, mode="workspace-write", options=["--backend", "landlock"])
        assert long.result().returncode == 0
    assert b"planted" in res.stdout, text(res)
    git(box, "commit", "--allow-empty", "-qm", "x")
    assert not m.exists(), f"the host's commit ran the Landlock run's hook\n{text(res)}"


def test_a_git_pointer_into_the_sessions_tmp_is_moved_away(box: Box) -> None:
    m = marker(box, "session-tmp")
    script = ("git init -q --separate-git-dir /tmp/evil.git . && "
              f"git config core.fsmonitor 'touch {m}; false' && "
              "T=$(awk '$5==\"/tmp\"{print $4}' /proc/self/mountinfo | head -n1) && "
              "echo \"gitdir: $T/evil.git\" > .git; echo planted")
    res = box.sh(script, mode="workspace-write", options=["--session", "s1"])
    assert b"planted" in res.stdout, text(res)
    git(box, "status")
    assert not m.exists(), f"the host's git followed a pointer into the session's /tmp\n{text(res)}"
    # Not vacuous: the pointer was there to follow, and the guard is what moved it.
    assert "a .git pointer" in text(res), text(res)


EXITS_EARLY = """
import sys, time
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sb = SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write", ledger=False{backend}))
sb.open_session("s", {ws!r})
sb.start(SandboxCommand("sh", ["-c", "mkdir .vscode; echo x > .vscode/tasks.json; "
                                     "touch written; sleep 30"], session_id="s"))
for _ in range(200):
    if __import__("os").path.exists({ws!r} + "/written"):
        break
    time.sleep(0.05)
"""


def test_a_script_that_exits_without_closing_leaves_nothing(box: Box,
                                                            backend: str = "") -> None:
    """A background process's writes are swept when the interpreter exits, not by
    whatever command happens to run next in the workspace."""
    code = EXITS_EARLY.format(site=box.runner.site, ws=str(box.ws), backend=backend)
    res = box.host([box.runner.python, "-I", "-c", code], capture_output=True, timeout=60)
    assert res.returncode == 0, text(res)
    assert (box.ws / "written").exists(), text(res)
    assert not (box.ws / ".vscode").exists(), "a background process's .vscode was left"


# -- a session's /tmp ----------------------------------------------------------------------

# $TMPDIR: the Landlock backend's /tmp (it has no mount namespace to put one at /tmp).
FILL = ('for i in 1 2 3; do head -c 8000000 /dev/zero > "${TMPDIR:-/tmp}/f$i" || exit 7; done; '
        'echo filled')


def test_a_sessions_tmp_is_bounded_as_a_whole(box: Box) -> None:
    """Three files of 8 MB, each under any per-file bound, overfill a 16 MiB /tmp."""
    box.user_config("tmp_size_mb = 16")
    res = box.sh(FILL, options=["--session", "big"])
    assert res.returncode == 7 and b"No space left on device" in res.stderr, text(res)
    # Control: the same files fit in a host directory, which a session's /tmp was.
    control = box.mkdir("control")
    res = box.host(["/bin/sh", "-c", FILL], env=box.env(TMPDIR=str(control)))
    assert b"filled" in res.stdout, text(res)
    _nothing_left_of_session_tmps(box)


# A session of 16 MiB, and its /tmp seen from outside, through the root of a
# command of the session that runs `sleep 30.TAG`: the regular files there and
# their sizes. $TMPDIR: /tmp under bubblewrap, the session's directory under
# Landlock. (The unprivileged runner's site, under the host's /tmp, adds a
# mount point, a directory.)
SESSION_TMP_WORLD = """
import os, sys, time
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SyncWorkspaceSandbox
from stockade.config import load_config
# The user's config (a forced bwrap), with the session's /tmp at 16 MiB.
sb = SyncWorkspaceSandbox(load_config(cwd={ws!r}, mode="workspace-write", ledger=False,
                                      tmp_size_mb=16))
sb.open_session("s", {ws!r})
def sh(script):
    res = sb.execute(SandboxCommand("/bin/sh", ["-c", script], session_id="s"))
    return res.exit_code
def seen_from_outside(first=""):
    sb.start(SandboxCommand("/bin/sh", ["-c", first + "exec sleep 30.{tag}"], session_id="s"))
    pid = None
    for _ in range(400):
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                if open(f"/proc/{{name}}/cmdline", "rb").read() == b"sleep\\x0030.{tag}\\x00":
                    pid = name
            except OSError:
                pass
        if pid:
            break
        time.sleep(0.05)
    env = open(f"/proc/{{pid}}/environ", "rb").read().split(b"\\0")
    tmpdir = next(v[7:].decode() for v in env if v.startswith(b"TMPDIR="))
    inside = f"/proc/{{pid}}/root{{tmpdir}}"
    names = [n for n in os.listdir(inside) if not os.path.isdir(os.path.join(inside, n))]
    return {{n: os.lstat(os.path.join(inside, n)).st_size for n in names}}
"""

SESSION_TMP = SESSION_TMP_WORLD + """
# Kept across commands (3: it was not), and counted across them (7: full).
first = sh("head -c 10000000 /dev/zero > $TMPDIR/a || exit 7")
second = sh("test -s $TMPDIR/a || exit 3; head -c 10000000 /dev/zero > $TMPDIR/b || exit 7")
sh("rm -f $TMPDIR/a $TMPDIR/b")
# Nor beside a background command of the session holding 10 MB while it runs.
files = seen_from_outside("head -c 10000000 /dev/zero > $TMPDIR/c && ")
beside = sh("head -c 10000000 /dev/zero > $TMPDIR/d || exit 7")
files = seen_from_outside()
tmp = sb.core.sessions["s"].tmp_dir
print(first, second, beside, sum(files.values()) <= 16 << 20, "+".join(sorted(files)),
      sorted(os.listdir(tmp)), flush=True)
sb.close()
print("gone" if not os.path.exists(tmp) else "left", flush=True)
"""

# Eight first commands at once: each once built a driver of its own, and a /tmp.
PARALLEL_FIRST = SESSION_TMP_WORLD + """
import threading
codes = {{}}
def go(i):
    codes[i] = sh(f"head -c 4000000 /dev/zero > $TMPDIR/f{{i}} || exit 7")
threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
files = seen_from_outside()
written = sorted(f"f{{i}}" for i, code in codes.items() if code == 0)
print(len(written) <= 4, sorted(f for f, size in files.items() if size == 4000000) == written,
      sum(files.values()) <= 16 << 20, flush=True)
sb.close()
"""


def test_a_sessions_tmp_bound_spans_its_commands(box: Box) -> None:
    code = SESSION_TMP.format(site=box.runner.site, ws=str(box.ws), tag=os.getpid())
    res = box.host([box.runner.python, "-I", "-c", code], timeout=120)
    # The files live in the session's tmpfs, within its bound, not in the host
    # directory behind it.
    assert text(res).split() == ["0", "7", "7", "True", "c+d", "[]", "gone"], text(res)
    _nothing_left_of_session_tmps(box)


def test_parallel_first_commands_share_one_bounded_tmp(box: Box) -> None:
    code = PARALLEL_FIRST.format(site=box.runner.site, ws=str(box.ws), tag=os.getpid())
    res = box.host([box.runner.python, "-I", "-c", code], timeout=120)
    assert text(res).split() == ["True", "True", "True"], text(res)
    _nothing_left_of_session_tmps(box)


def test_root_without_cap_sys_admin_still_gets_a_bounded_tmp(box: Box) -> None:
    """A container's root: no mount namespace without a user namespace mapping root
    to itself, as bwrap makes there. (The unprivileged user always makes one.)"""
    code = SESSION_TMP.format(site=box.runner.site, ws=str(box.ws), tag=os.getpid())
    argv = [box.runner.python, "-I", "-c", code]
    if not box.runner.switches_user:
        argv = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", *argv]
    res = box.host(argv, timeout=120)
    assert text(res).split() == ["0", "7", "7", "True", "c+d", "[]", "gone"], text(res)


def test_a_sessions_tmp_bounds_its_inodes_too(box: Box) -> None:
    """Empty directories use no page of the tmpfs, only kernel memory: 16 MiB
    allows 4096 inodes, not the default of half the machine's pages."""
    box.user_config("tmp_size_mb = 16")
    # One mkdir for thousands of names: a process per directory took seconds.
    script = 'cd "$TMPDIR" && seq 0 4999 | sed "s/^/d/" | xargs mkdir || exit 7'
    res = box.sh(script, options=["--session", "inodes"])
    assert res.returncode == 7 and b"No space left on device" in res.stderr, text(res)


NOT_DUMPABLE = """
import ctypes, sys
sys.path.insert(0, {site!r})
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as after dropping privileges
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sb = SyncWorkspaceSandbox(SandboxConfig(ledger=False, warm_sandboxes=0{backend}))
sb.open_session("s", {ws!r})
from stockade.errors import SandboxUnavailable
try:
    res = sb.execute(SandboxCommand("/bin/echo", ["ran"], session_id="s"))
    print(res.exit_code, res.stdout, res.stderr)
except SandboxUnavailable as exc:
    print("refused", exc)
"""


def test_a_session_tmp_that_cannot_be_entered_is_the_sandbox_failing(
        box: Box, backend: str = "") -> None:
    """Not the command's exit 1: nsenter may not open a non-dumpable stockade's
    descriptors (root may, so only the unprivileged user sees it fail at all)."""
    code = NOT_DUMPABLE.format(site=box.runner.site, ws=str(box.ws), backend=backend)
    res = box.host([box.runner.python, "-I", "-c", code], timeout=60)
    out = text(res)
    if box.runner.switches_user:
        assert out.startswith("refused ") and "could not enter the session's namespaces" in out, out
    else:
        assert out.startswith("0 b'ran"), out


def test_a_command_that_says_nsenter_failed_is_still_the_commands_exit(box: Box) -> None:
    """What nsenter prints when it cannot enter is also what a command may print."""
    res = box.sh('echo "nsenter: cannot open /proc/1/fd/3: No such file" >&2; exit 1',
                 options=["--session", "says-nsenter"])
    assert res.returncode == 1 and res.stderr.startswith(b"nsenter: cannot open"), text(res)


def _nothing_left_of_session_tmps(box: Box) -> None:
    """No process and no mount that stockade made for a session's /tmp outlives it."""
    base = str(box.state / "state" / "stockade" / "tmp")
    assert not os.path.isdir(base) or os.listdir(base) == [], os.listdir(base)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            mounts = Path(f"/proc/{pid}/mountinfo").read_text()
        except OSError:
            continue
        assert base.encode() not in cmdline, f"process {pid} left: {cmdline!r}"
        assert base not in mounts, f"process {pid} still has a session /tmp mounted"


# -- known limits (README), pinned so they cannot silently change -------------------------

DEEP_REPO = ("mkdir -p a/b && cd a/b && git init -q . && git -c user.name=t -c user.email=t@t "
             "commit -q --allow-empty -m x && git config core.fsmonitor 'touch {m}; false' "
             "&& echo planted")


def test_a_repository_created_deep_in_the_tree_is_made_inert(box: Box) -> None:
    """`git init` in a directory that already existed, never registered as a gitlink:
    the host's `git status` in `a/b` (a prompt on `cd`) and its `git add -A` at the top
    then ran the command's fsmonitor."""
    init_repo(box)
    box.mkdir("ws/a/b")
    m = marker(box, "deep")
    control = copy_workspace(box, "deep")
    unconfined(box, DEEP_REPO.format(m=m), control)
    git(box, "status", cwd=control / "a" / "b")
    assert m.exists()  # unconfined, the host's git runs it
    m.unlink()
    res = box.sh(DEEP_REPO.format(m=m), mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    git(box, "status", cwd=box.ws / "a" / "b")
    git(box, "add", "-A")
    git(box, "status")
    assert not m.exists(), text(res)
    assert (box.ws / "a" / "b" / ".git").is_dir()  # the work stays, inert


# -- found by the second attack on the guard -----------------------------------------------

ATTACKS_2 = {
    # git reads a pointer whole, newline inside and all.
    "pointer-with-newline": (init_repo, r"""
        rm -rf .git; git init -q "g
x" && git -C "g
x" config core.fsmonitor "touch $M; false" && mv "g
x/.git" "g
x/gd" && git --git-dir="g
x/gd" config core.worktree "$PWD" && printf 'gitdir: g\nx/gd\n' > .git; echo planted""",
                             ["status"]),
    # A `gitdir` file in a main git directory is ignored by git: not a decoy here either.
    "decoy-gitdir-file": (init_repo, r"""
        mkdir sub && cd sub && git init -q && git -c user.name=t -c user.email=t@t commit -q \
          --allow-empty -m s && cd .. && git add sub
        git -C sub config core.fsmonitor "touch $M; false"; echo decoy/.git > .git/gitdir
        echo planted""", ["status"]),
    # The workspace itself laid out as a bare repository.
    "bare-shaped-root": (None, r"""
        mkdir -p objects refs && echo "ref: refs/heads/main" > HEAD
        printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n' > config
        printf '\tworktree = .\n' >> config
        printf '\tfsmonitor = "touch %s; false"\n' "$M" >> config
        echo planted""", ["status"]),
}


@pytest.mark.parametrize("name", sorted(ATTACKS_2))
def test_what_the_guard_was_tricked_with_again_runs_nothing(box: Box, name: str) -> None:
    ATTACKS[name] = ATTACKS_2[name]
    try:
        test_what_the_guard_was_tricked_with_runs_nothing_on_the_host(box, name)
    finally:
        del ATTACKS[name]


def test_a_planted_rebase_plan_runs_nothing(box: Box) -> None:
    init_repo(box)
    git(box, "commit", "--allow-empty", "-qm", "b")
    m = marker(box, "rebase")
    script = ("d=.git/rebase-merge; mkdir -p $d; git rev-parse HEAD > $d/orig-head; "
              "git rev-parse HEAD~1 > $d/onto; echo refs/heads/master > $d/head-name; "
              f": > $d/interactive; echo 'exec touch {m}' > $d/git-rebase-todo; "
              "echo 1 > $d/msgnum; echo 2 > $d/end; echo planted")
    res = box.sh(script, mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    assert "a rebase plan with exec lines" in text(res), text(res)
    git(box, "rebase", "--continue")
    assert not m.exists(), f"the host's rebase --continue ran a planted exec\n{text(res)}"


# -- repositories beyond the top: existing deep ones, bare-shaped ones, after a kill -----------

ARM_VENDORED = ("git -C vendor/dep config core.fsmonitor 'touch {m}; false'; "
                "printf '#!/bin/sh\\ntouch {m}\\n' > vendor/dep/.git/hooks/pre-commit; "
                "chmod +x vendor/dep/.git/hooks/pre-commit; echo tried")


def _vendored(box: Box) -> Path:
    init_repo(box)
    dep = box.mkdir("ws/vendor/dep")
    init_repo(box, dep)
    shutil.rmtree(dep / ".git" / "hooks")  # as a clone without samples has it
    return dep


def test_your_repository_under_a_name_that_is_not_utf8_does_not_stop_commands(
        box: Box) -> None:
    """Every writing command failed (UnicodeEncodeError hashing the path) once the
    person had a repository under such a directory."""
    init_repo(box)
    odd = box.mkdir("ws/" + os.fsdecode(b"v\xff"))
    init_repo(box, odd)
    res = box.sh("echo ok > done.txt && echo ran", mode="workspace-write")
    assert b"ran" in res.stdout, text(res)
    assert (box.ws / "done.txt").read_text() == "ok\n"


def test_an_existing_repository_deep_in_the_tree_is_held(box: Box) -> None:
    """A vendored clone's config and hooks were writable and never compared: the host's
    `git status` (a prompt on `cd vendor/dep`) and `git commit` there obeyed them."""
    dep = _vendored(box)
    m = marker(box, "vendored")
    control = copy_workspace(box, "vendored")
    unconfined(box, ARM_VENDORED.format(m=m), control)
    git(box, "status", cwd=control / "vendor" / "dep")
    assert m.exists()  # unconfined, the host's git runs it
    m.unlink()
    res = box.sh(ARM_VENDORED.format(m=m), mode="workspace-write")
    assert b"tried" in res.stdout, text(res)
    git(box, "status", cwd=dep)
    git(box, "commit", "--allow-empty", "-qm", "host", cwd=dep)
    assert not m.exists(), text(res)
    config = (dep / ".git" / "config").read_text()
    assert "fsmonitor" not in config, config
    # What the person works with there still works, inside and out.
    res = box.sh("git -C vendor/dep log --oneline | wc -l && echo x > vendor/dep/b && "
                 "git -C vendor/dep add b && git -C vendor/dep -c user.name=t "
                 "-c user.email=t@t commit -qm inside && echo committed",
                 mode="workspace-write")
    assert b"committed" in res.stdout, text(res)


BARE_SHAPED = ("mkdir -p a && git init -q --bare a/b && git --git-dir=a/b config core.bare false"
               " && git --git-dir=a/b config core.worktree .. && "
               "git --git-dir=a/b config core.fsmonitor 'touch {m}; false' && echo planted")


def test_a_bare_shaped_repository_made_deep_in_the_tree_is_made_inert(box: Box) -> None:
    """No `.git` name anywhere: git takes a directory with HEAD, objects/ and refs/ for a
    git directory, so the host's `git status` inside it obeyed its config."""
    init_repo(box)
    m = marker(box, "bare")
    control = copy_workspace(box, "bare")
    unconfined(box, BARE_SHAPED.format(m=m), control)
    git(box, "status", cwd=control / "a" / "b")
    assert m.exists()
    m.unlink()
    res = box.sh(BARE_SHAPED.format(m=m), mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    git(box, "status", cwd=box.ws / "a" / "b")
    assert not m.exists(), text(res)
    assert (box.ws / "a" / "b" / "HEAD").is_file()  # the work stays, inert


REARM = """
import sys
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sb = SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write", ledger=False{backend}))
sb.open_session("s", {ws!r})
def sh(script):
    r = sb.execute(SandboxCommand("sh", ["-c", script], session_id="s"))
    return r.stdout.decode() + r.stderr.decode()
print(sh("git init -q a/b && echo made"))
print(sh("git -C a/b config core.fsmonitor 'touch {m}; false' && echo armed"))
sb.close()
"""


def test_a_repository_made_inert_cannot_be_rearmed_by_the_next_command(
        box: Box, backend: str = "") -> None:
    """Made by one command, it is not the person's afterwards: in the same process the
    next command's changes to it are undone too; in a new one (the CLI) it is held."""
    init_repo(box)
    box.mkdir("ws/a/b")
    m = marker(box, "rearmed")
    code = REARM.format(site=box.runner.site, ws=str(box.ws), backend=backend, m=m)
    res = box.host([box.runner.python, "-I", "-c", code], capture_output=True, timeout=120)
    assert res.returncode == 0 and "made" in text(res) and "armed" in text(res), text(res)
    git(box, "status", cwd=box.ws / "a" / "b")
    assert not m.exists(), text(res)
    res = box.sh(f"git -C a/b config core.fsmonitor 'touch {m}; false'; echo tried",
                 mode="workspace-write")
    assert b"tried" in res.stdout, text(res)
    git(box, "status", cwd=box.ws / "a" / "b")
    assert not m.exists(), text(res)


def _started(box: Box, script: str) -> subprocess.Popen[bytes]:
    """`stockade run` of `script` in the workspace, running; its stdout a pipe."""
    return box.runner.popen(box.runner.cli_argv(["run", "--mode", "workspace-write", "--",
                                                 "/bin/sh", "-c", script]),
                            cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def test_a_repository_made_by_a_killed_stockade_is_made_inert_by_the_next(box: Box) -> None:
    """The next process walks the tree afresh: without the killed run's record of what
    the tree had, it took the killed command's repository for the person's."""
    init_repo(box)
    box.mkdir("ws/a/b")
    m = marker(box, "killed")
    script = (f"git init -q a/b && git -C a/b config core.fsmonitor 'touch {m}; false' && "
              "echo planted && exec sleep 60")
    proc = _started(box, script)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"planted\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    # Control: as the kill left it, the host's git obeys it.
    control = copy_workspace(box, "killed")
    git(box, "status", cwd=control / "a" / "b")
    assert m.exists()
    m.unlink()
    res = box.run(["/bin/true"], mode="workspace-write")
    assert res.returncode == 0, text(res)
    git(box, "status", cwd=box.ws / "a" / "b")
    assert not m.exists(), text(res)


@pytest.mark.xfail(strict=True, reason="Known limits: a held repository's metadata is a read-only "
                   "mount under bubblewrap, so removing the directory that holds it fails")
def test_a_directory_holding_your_repository_can_be_removed(box: Box) -> None:
    dep = _vendored(box)
    res = box.sh("rm -rf vendor; echo rc=$?", mode="workspace-write")
    assert b"rc=0" in res.stdout, text(res)
    assert not dep.exists(), text(res)


# Shapes git takes for a git directory that a lstat of HEAD, objects/ and refs/
# as a file and two directories missed: objects through a link, HEAD as a link
# into refs/, and a `commondir` whose target holds objects, refs and the config.
ARMED = ("git config -f {where}/config core.repositoryformatversion 0 && "
         "git config -f {where}/config core.bare false && "
         "git config -f {where}/config core.worktree . && "
         "git config -f {where}/config core.fsmonitor 'touch {m}.{n}; false'")
ODD_SHAPES = "\n".join([
    "mkdir -p a/v1/refs/heads a/store && echo 'ref: refs/heads/main' > a/v1/HEAD",
    "ln -s ../store a/v1/objects", ARMED.format(m="{m}", n=1, where="a/v1"),
    "mkdir -p a/v2/refs/heads a/v2/objects && ln -s refs/heads/main a/v2/HEAD",
    ARMED.format(m="{m}", n=2, where="a/v2"),
    "mkdir -p a/v3 a/c3/refs/heads a/c3/objects && echo 'ref: refs/heads/main' > a/v3/HEAD",
    "echo ../c3 > a/v3/commondir",
    "git config -f a/c3/config core.pager 'touch {m}.3; cat'",
    "echo planted"])


def _odd_shapes_ran(box: Box, where: Path, m: Path) -> list[str]:
    for n in ("1", "2"):
        git(box, "status", cwd=where / "a" / f"v{n}")
    # A pager runs only on a terminal: `script` gives git one.
    box.host(["script", "-qc", "git branch", "/dev/null"], cwd=where / "a" / "v3",
             capture_output=True, stdin=subprocess.DEVNULL)
    return sorted(p.name for p in m.parent.glob(m.name + ".*"))


def test_every_shape_git_takes_for_a_repository_is_made_inert(box: Box) -> None:
    init_repo(box)
    m = marker(box, "shape")
    control = copy_workspace(box, "shape")
    unconfined(box, ODD_SHAPES.format(m=m), control)
    assert len(_odd_shapes_ran(box, control, m)) == 3  # unconfined, git obeys all three
    for p in m.parent.glob(m.name + ".*"):
        p.unlink()
    res = box.sh(ODD_SHAPES.format(m=m), mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    assert _odd_shapes_ran(box, box.ws, m) == [], text(res)


HIDDEN_IN_A_GITDIR = ("mkdir -p d/.git/objects d/.git/refs/heads && "
                      "echo 'ref: refs/heads/main' > d/.git/HEAD && git init -q d/.git/sub && "
                      "git -C d/.git/sub config core.fsmonitor 'touch {m}; false' && {last}"
                      "echo planted")


@pytest.mark.parametrize("last", ["mv d/.git d/P && ", ""], ids=["renamed", "left"])
def test_a_repository_built_inside_a_git_directory_is_made_inert(box: Box, last: str) -> None:
    """The watch never looked inside a git directory, and the walk of one moved in
    stopped at it: a repository built there was never found."""
    init_repo(box)
    m = marker(box, "insidegit")
    inner = "d/P/sub" if last else "d/.git/sub"
    control = copy_workspace(box, "insidegit")
    unconfined(box, HIDDEN_IN_A_GITDIR.format(m=m, last=last), control)
    git(box, "status", cwd=control / inner)
    assert m.exists()
    m.unlink()
    res = box.sh(HIDDEN_IN_A_GITDIR.format(m=m, last=last), mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    git(box, "status", cwd=box.ws / inner)
    assert not m.exists(), text(res)


def test_a_repository_made_while_another_process_starts_is_not_taken_for_yours(
        box: Box) -> None:
    """A second stockade process walking the tree while the first's command ran took
    that command's new repository for the person's: held it, recorded it, and
    the first's sweep then skipped it."""
    init_repo(box)
    m = marker(box, "overlap")
    script = (f"git init -q x && git -C x config core.fsmonitor 'touch {m}; false' && "
              f"echo planted && while [ ! -e go ]; do sleep 0.05; done")
    first = _started(box, script)
    try:
        assert first.stdout is not None
        assert first.stdout.readline() == b"planted\n"
        second = _started(box, "echo started; while [ ! -e go2 ]; do sleep 0.05; done")
        try:
            assert second.stdout is not None
            assert second.stdout.readline() == b"started\n"
            box.write(box.ws / "go", "")
            assert first.wait(timeout=60) == 0
        finally:
            box.write(box.ws / "go2", "")
            second.wait(timeout=60)
    finally:
        first.kill()
        first.wait(timeout=10)
    git(box, "status", cwd=box.ws / "x")
    assert not m.exists()
    res = box.run(["/bin/true"], mode="workspace-write")  # and later runs keep it inert
    git(box, "status", cwd=box.ws / "x")
    assert not m.exists(), text(res)


def test_a_link_left_in_a_made_repository_does_not_lock_you_out(box: Box) -> None:
    """A worktree pointer left as a link made every later run refuse to start: a held
    repository's metadata cannot be mounted read-only through a link."""
    init_repo(box)
    res = box.sh("git init -q z && mkdir -p z/.git/worktrees/w && "
                 "ln -s /etc/hostname z/.git/worktrees/w/gitdir", mode="workspace-write")
    assert res.returncode == 0, text(res)
    for _ in range(2):
        res = box.run(["/bin/true"], mode="workspace-write")
        assert res.returncode == 0, text(res)


def test_many_repositories_made_by_a_command_do_not_lock_you_out(box: Box) -> None:
    """Seventy bare-shaped directories, a megabyte of `info/` each, became the person's
    for the next process, whose Landlock copies ran past their budget."""
    init_repo(box)
    res = box.sh("for i in $(seq 70); do mkdir -p r$i/objects r$i/refs r$i/info && "
                 "echo 'ref: refs/heads/main' > r$i/HEAD && "
                 "head -c 1000000 /dev/zero > r$i/info/exclude; done", mode="workspace-write")
    assert res.returncode == 0, text(res)
    res = box.run(["/bin/true"], mode="workspace-write")
    assert res.returncode == 0, text(res)


@pytest.mark.xfail(strict=True, reason="Known limits: a repository a command makes deep in the "
                   "tree is made inert when the command ends, not as it appears")
def test_a_deep_repository_is_inert_while_its_command_still_runs(box: Box) -> None:
    init_repo(box)
    box.mkdir("ws/a/b")
    m = marker(box, "deeplive")
    script = (f"git init -q a/b && git -C a/b config core.fsmonitor 'touch {m}; false' && "
              "echo planted && while [ ! -e go ]; do sleep 0.05; done")
    proc = _started(box, script)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"planted\n"
        git(box, "status", cwd=box.ws / "a" / "b")
        live = m.exists()
    finally:
        box.write(box.ws / "go", "")
        proc.wait(timeout=60)
    assert not live


# -- agent and editor configs below the top ------------------------------------------------

#: Configs a tool loads in the directory it is started in (or an agent reading a
#: file there): a skill whose inline command and hooks Claude Code runs on the
#: host, a project MCP server, editor tasks, a direnv file; made in place, moved
#: in, and deep in a new tree.
NESTED_CONFIGS = r"""
mkdir -p a/b/.claude/skills/x
printf -- '---\nname: x\n---\n!`touch ran`\n' > a/b/.claude/skills/x/SKILL.md
echo '{"mcpServers": {}}' > a/.mcp.json
mkdir -p c/.vscode && echo '{}' > c/.vscode/tasks.json
mkdir -p d && echo 'touch ran' > d/.envrc
mkdir -p t/cur && echo x > t/cur/rules && mv t/cur a/.cursor
mkdir -p x/y/z/.gemini && echo '{}' > x/y/z/.gemini/settings.json
echo work > a/b/work.txt && echo planted
"""
CREATED = ("a/b/.claude", "a/.mcp.json", "c/.vscode", "d/.envrc", "a/.cursor", "x/y/z/.gemini")


def test_an_agent_or_editor_config_made_below_the_top_is_moved_away(box: Box) -> None:
    box.write(box.ws / "keep" / ".vscode" / "settings.json", "{}\n")  # the person's
    res = box.sh(NESTED_CONFIGS, mode="workspace-write")
    assert b"planted" in res.stdout, text(res)
    left = [rel for rel in CREATED if os.path.lexists(box.ws / rel)]
    assert left == [], text(res)
    assert (box.ws / "a" / "b" / "work.txt").read_text() == "work\n"
    assert (box.ws / "keep" / ".vscode" / "settings.json").exists()
    assert b"created by the command" in res.stderr, text(res)


def test_control_without_a_boundary_the_configs_stay(box: Box) -> None:
    res = box.sh(NESTED_CONFIGS, mode="full-access")
    assert b"planted" in res.stdout, text(res)
    assert [rel for rel in CREATED if os.path.lexists(box.ws / rel)] == list(CREATED)


# -- found by the review of the above ------------------------------------------------------

HIDDEN_BEHIND = {
    # A directory the watch cannot read hides what is made in it.
    "unreadable-directory": ["""mkdir -m 0311 d && sleep 0.3 && mkdir -p d/x/.claude/skills/e &&
        echo evil > d/x/.claude/skills/e/SKILL.md && echo '{}' > d/.mcp.json && chmod 755 d &&
        echo planted"""],
    # One the guard cannot reach when the command ends, opened by the next command.
    "closed-until-the-next-run": ["mkdir -p d/x/.claude/skills/e && chmod 600 d && echo planted",
                                  "chmod 755 d && echo planted"],
    # `objects` of a directory merely shaped like a git directory was never walked.
    "inside-objects": ["mkdir -p d/objects d/refs && echo 'ref: refs/heads/main' > d/HEAD && "
                       "echo planted",
                       "mkdir -p d/objects/x/.claude/skills/e && echo '{}' > d/objects/.mcp.json "
                       "&& rm d/HEAD && rmdir d/refs && echo planted"],
}


@pytest.mark.parametrize("name", sorted(HIDDEN_BEHIND))
def test_a_config_made_where_the_watch_cannot_look_is_moved_away(box: Box, name: str) -> None:
    if name == "unreadable-directory" and not box.runner.switches_user:
        pytest.skip("root reads a directory of mode 0311: the watch is not hidden from")
    for script in HIDDEN_BEHIND[name]:
        res = box.sh(script, mode="workspace-write")
        assert b"planted" in res.stdout, text(res)
    box.host(["chmod", "-R", "u+rwx", str(box.ws / "d")], capture_output=True)
    left = sorted(str(p.relative_to(box.ws)) for p in (box.ws / "d").rglob("*")
                  if p.name in (".claude", ".mcp.json"))
    assert left == [], text(res)


def test_a_config_the_person_moves_while_a_command_runs_stays_theirs(box: Box) -> None:
    box.write(box.ws / "app" / ".vscode" / "settings.json", "{}\n")
    proc = box.runner.popen(box.runner.cli_argv(["run", "--mode", "workspace-write", "--",
                                                 "sh", "-c", "sleep 2; echo done"]),
                            cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1)
    box.host(["mv", str(box.ws / "app"), str(box.ws / "app2")], capture_output=True)
    out, err = proc.communicate(timeout=60)
    assert b"done" in out, err
    assert (box.ws / "app2" / ".vscode" / "settings.json").exists(), err


def test_a_stockade_ended_by_sigterm_still_moves_what_its_command_made(box: Box) -> None:
    """Killed by default, it left the command's tree to bwrap and swept nothing: the next
    run then took the config for the person's."""
    proc = box.runner.popen(box.runner.cli_argv(["run", "--mode", "workspace-write", "--",
                                                 "sh", "-c", "mkdir -p t/.claude; sleep 60"]),
                            cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (box.ws / "t" / ".claude").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (box.ws / "t" / ".claude").exists()
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -15, err
    assert not (box.ws / "t" / ".claude").exists(), err
