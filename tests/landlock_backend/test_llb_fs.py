"""Filesystem boundary under the Landlock backend: the isolation suite's attacks, re-run.

Where a case holds as it does under bubblewrap, the isolation suite's own
test runs unchanged with a Landlock box. Where Landlock holds a weaker
version of the property (protected names are restored after the run
instead of being read-only during it), the weaker property is tested here
and the original is a strict xfail; where Landlock does not mediate an
operation at all (chmod, utime), the case is a strict xfail. Every xfail
is listed, with its reason, in docs/landlock-backend.md.
"""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest

from isolation import test_iso_fs as iso
from isolation import test_iso_trust as trust
from isolation.conftest import Box, attempts, snapshot, text

pytestmark = pytest.mark.isolation

NO_CHMOD = ("Landlock (ABI 7 and older) has no right for chmod, chown, utime or "
            "extended attributes: a command can change the mode and times of any file its "
            "user owns, outside the workspace too")
DURING_RUN = ("without a mount namespace a protected name in a writable workspace cannot be "
              "read-only: Landlock's rights on the workspace reach everything in it. The "
              "landlock backend restores these names once the command's tree is dead "
              "(tested below); while it runs they are writable")

# The isolation suite's escape script without its chmod line (see NO_CHMOD).
ESCAPE_NO_CHMOD = iso.ESCAPE_SCRIPT.replace(
    "try sibling-chmod    chmod 777 ../sibling/notes.txt\n", "")
BLOCKED_NO_CHMOD = tuple(n for n in iso.BLOCKED if n != "sibling-chmod")


def test_escape_script_has_the_chmod_line_removed() -> None:
    assert ESCAPE_NO_CHMOD != iso.ESCAPE_SCRIPT and "chmod" not in ESCAPE_NO_CHMOD


def test_writes_outside_workspace_leave_host_unchanged(box: Box) -> None:
    """iso.test_writes_outside_workspace_leave_host_unchanged, minus chmod."""
    existing, fresh = iso._host_tmp_targets(box)
    try:
        home0, sib0 = snapshot(box.home), snapshot(box.sibling)
        parent0 = sorted(os.listdir(box.root))
        res = box.sh(ESCAPE_NO_CHMOD, str(existing), str(fresh), mode="workspace-write")
        out = text(res)
        assert res.returncode == 0, out
        assert (box.ws / "ok.txt").read_text() == "in-workspace\n", out
        tried = attempts(res)
        assert {n for n in BLOCKED_NO_CHMOD if tried.get(n) is not False} == set(), out
        assert snapshot(box.home) == home0
        assert snapshot(box.sibling) == sib0
        assert sorted(os.listdir(box.root)) == parent0
        # No private /tmp: the host's is simply out of reach, read and write.
        assert existing.read_text() == "host tmp original\n"
        assert not fresh.exists()
    finally:
        existing.unlink(missing_ok=True)
        fresh.unlink(missing_ok=True)


@pytest.mark.xfail(strict=True, reason=NO_CHMOD)
def test_chmod_outside_workspace_is_blocked(box: Box) -> None:
    before = (box.sibling / "notes.txt").stat().st_mode
    box.sh("chmod 777 ../sibling/notes.txt", mode="workspace-write")
    assert (box.sibling / "notes.txt").stat().st_mode == before


def test_control_same_attacks_succeed_unconfined(box: Box) -> None:
    iso.test_control_same_attacks_succeed_unconfined(box)


def test_symlink_out_of_workspace_does_not_write_through(box: Box) -> None:
    iso.test_symlink_out_of_workspace_does_not_write_through(box)


def test_hardlink_to_outside_file_fails(box: Box) -> None:
    iso.test_hardlink_to_outside_file_fails(box)


# -- protected metadata in workspace-write -----------------------------------------------


def test_protected_names_a_run_creates_are_neutralised(box: Box) -> None:
    iso.test_protected_names_a_run_creates_are_neutralised(box)


@pytest.mark.xfail(strict=True, reason=DURING_RUN)
def test_existing_protected_files_cannot_be_changed_during_the_run(box: Box) -> None:
    iso.test_existing_protected_files_stay_unchanged(box)


PROTECTED = {".stockade", ".envrc", "stockade.toml", ".vscode", ".claude", ".git", ".codex",
             ".agents", ".idea"}


def test_protected_names_planted_during_a_run_are_gone_after_it(box: Box) -> None:
    box.write(box.ws / "main.py", "print('hi')\n")
    res = box.sh(iso.PROTECTED_ATTACKS, mode="workspace-write")
    out = text(res)
    tried = attempts(res)
    # The attacks really ran (this backend cannot stop them while it runs) ...
    assert tried.get("envrc") and tried.get("stockade-toml") and tried.get("git-hook"), out
    # ... and nothing they made is left live on the host (a .git they made
    # stays, inert: that is how `git init` works in a run).
    left = (PROTECTED - {".git"}) & set(os.listdir(box.ws))
    assert not left, f"left on the host: {sorted(left)}"
    assert iso._git_would_run(box.ws) == [], out
    assert (box.ws / "main.py").read_text() == "print('hi')\n"


def test_existing_protected_files_are_restored_after_the_run(box: Box) -> None:
    box.write(box.ws / "stockade.toml", '[sandbox]\nmode = "read-only"\n')
    box.write(box.ws / ".envrc", "export SAFE=1\n")
    box.mkdir("ws/.vscode")
    box.write(box.ws / ".vscode" / "settings.json", "{}\n")
    guarded = {p: snapshot(box.ws / p) if (box.ws / p).is_dir() else (box.ws / p).read_bytes()
               for p in ("stockade.toml", ".envrc", ".vscode")}
    res = box.sh(iso.PROTECTED_ATTACKS + 'echo "{\\"x\\": 1}" > .vscode/tasks.json\n',
                 mode="workspace-write")
    assert attempts(res).get("stockade-toml"), text(res)
    for p, was in guarded.items():
        now = snapshot(box.ws / p) if (box.ws / p).is_dir() else (box.ws / p).read_bytes()
        assert now == was, p


def test_planted_stockade_toml_does_not_reach_the_next_command(box: Box) -> None:
    """The escalation the restore exists for: a stockade.toml asking for full-access."""
    box.sh('printf "[sandbox]\\nmode = \\"full-access\\"\\n" > stockade.toml',
           mode="workspace-write")
    assert not (box.ws / "stockade.toml").exists()
    # The next command, with no mode given, is read-only and confined.
    res = box.sh("echo x > after.txt; echo $STOCKADE_SANDBOX")
    assert not (box.ws / "after.txt").exists(), text(res)
    assert res.stdout.decode().strip() == "landlock", text(res)


def test_benign_run_leaves_the_workspace_as_it_was(box: Box) -> None:
    """No placeholders are needed here, so none appear, inside or afterwards."""
    box.write(box.ws / "main.py", "print('hi')\n")
    before = snapshot(box.ws)
    res = box.sh("ls -a", mode="workspace-write")
    assert res.returncode == 0, text(res)
    assert ".envrc" not in res.stdout.decode()
    assert snapshot(box.ws) == before


# -- read-only mode ----------------------------------------------------------------------

RO_WITHOUT_METADATA = tuple(op for op in iso.RO_OPS if op not in ("chmod", "touch"))


def test_read_only_default_blocks_every_write(box: Box) -> None:
    """iso.test_read_only_default_blocks_every_write, minus chmod and touch (see NO_CHMOD)."""
    iso._ro_workspace(box)
    before = snapshot(box.ws)
    script = iso.RO_SCRIPT.replace("try chmod    chmod 777 a.txt\n", "").replace(
        "try touch    touch a.txt\n", "")
    res = box.sh(script)
    tried = attempts(res)
    assert {n for n in RO_WITHOUT_METADATA if tried.get(n) is not False} == set(), text(res)
    assert snapshot(box.ws) == before


@pytest.mark.xfail(strict=True, reason=NO_CHMOD)
def test_read_only_blocks_chmod_and_touch(box: Box) -> None:
    iso._ro_workspace(box)
    before = snapshot(box.ws)
    res = box.sh(iso.SH_TRY + "try chmod chmod 777 a.txt\ntry touch touch -d 2001-01-01 a.txt\n")
    assert attempts(res) == {"chmod": False, "touch": False}, text(res)
    assert snapshot(box.ws) == before


def test_control_workspace_write_does_change_workspace(box: Box) -> None:
    iso.test_control_workspace_write_does_change_workspace(box)


@pytest.mark.parametrize(("rel", "original", "attack"), iso.SCRATCH_CASES)
def test_toolchain_dirs_cannot_plant_code_the_host_runs(box: Box, rel: str,
                                                        original: str | None,
                                                        attack: str) -> None:
    iso.test_toolchain_dirs_cannot_plant_code_the_host_runs(box, rel, original, attack)


def test_read_only_workspace_survives_namespace_tricks(box: Box) -> None:
    iso.test_read_only_workspace_survives_namespace_tricks(box)


# -- what only this backend has to get right ---------------------------------------------

DEVICE_PROBE = r"""
import os
for path in ("/dev/null", "/dev/urandom", "/dev/zero", "/dev/sda", "/dev/vda", "/dev/mem",
             "/dev/kmsg", "/dev/shm", "/dev/pts", "/dev/ptmx"):
    try:
        fd = os.open(path, os.O_RDONLY)
        os.close(fd)
        print("OPEN", path)
    except OSError as exc:
        print("DENIED" if exc.errno in (1, 13) else "ABSENT", path)
"""


def test_only_the_harmless_devices_open(box: Box) -> None:
    """/dev is the host's here: no disk, no memory, no kernel log, no other terminal."""
    res = box.py(DEVICE_PROBE, mode="workspace-write")
    lines = set(res.stdout.decode().splitlines())
    assert {"OPEN /dev/null", "OPEN /dev/urandom", "OPEN /dev/zero"} <= lines, text(res)
    opened = {line.split()[1] for line in lines if line.startswith("OPEN ")}
    assert opened == {"/dev/null", "/dev/urandom", "/dev/zero"}, text(res)


def test_tmpdir_is_private_writable_and_removed(box: Box) -> None:
    res = box.sh('echo scratch > "$TMPDIR/f" && cat "$TMPDIR/f" && echo "$TMPDIR"')
    out = res.stdout.decode().split()
    assert res.returncode == 0 and out[0] == "scratch", text(res)
    assert not os.path.exists(out[1]), "the command's TMPDIR outlived it"


def test_other_sessions_tmpdir_unreadable(box: Box) -> None:
    """Two commands at once: neither can read the other's TMPDIR."""
    marker = f"TMP-{secrets.token_hex(6)}"
    proc = box.runner.popen(
        box.runner.cli_argv(["run", "--backend", "landlock", "--", "/bin/sh", "-c",
                             'echo "$1" > "$TMPDIR/secret"; echo "$TMPDIR"; sleep 5',
                             "sh", marker]),
        cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        tmpdir = proc.stdout.readline().decode().strip()
        res = box.sh(f'cat "{tmpdir}/secret"; ls "{tmpdir}"; true')
        assert marker not in text(res), text(res)
        assert os.path.exists(f"{tmpdir}/secret")
    finally:
        proc.kill()
        proc.wait(timeout=10)


KERNEL_KNOBS = r"""
import os
for path in ("/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
             "/proc/self/oom_score_adj", "/proc/self/attr/current", "/proc/self/mem",
             "/sys/fs/cgroup/pids/cgroup.procs", "/sys/kernel/mm/transparent_hugepage/enabled"):
    try:
        os.close(os.open(path, os.O_WRONLY))  # opened, never written
        print("WRITABLE", path)
    except OSError as exc:
        print("DENIED" if exc.errno in (1, 13) else "ABSENT", path)
"""


def test_kernel_knobs_are_not_writable(box: Box) -> None:
    """/proc and /sys are the host's here, and as root plain file permissions would let
    uid 0 write most of them: only Landlock stands in the way."""
    res = box.py(KERNEL_KNOBS, mode="workspace-write")
    out = text(res)
    assert "WRITABLE" not in out and "DENIED /proc/sys/kernel/hostname" in out, out
    if box.runner.uid == 0:
        # Control: unconfined root could open them (the test could fail).
        assert "WRITABLE /proc/sys/kernel/hostname" in text(
            box.py(KERNEL_KNOBS, mode="full-access"))


SETUID = r"""
cp /bin/true prog && chmod 755 prog && echo EXEC-OK
chmod 4755 prog 2>/dev/null && echo SETUID
chmod u+s prog 2>/dev/null && echo SETUID
chmod 2755 prog 2>/dev/null && echo SETGID
python3 -I -c 'import os; os.chmod("prog", 0o6755)' 2>/dev/null && echo SETUID
true
"""


def test_no_setuid_program_can_be_left_in_the_workspace(box: Box) -> None:
    """Without a user namespace, root's files belong to the real root: a setuid bit here
    would hand every local user a root program."""
    res = box.sh(SETUID, mode="workspace-write")
    out = text(res)
    assert "EXEC-OK" in out and "SETUID" not in out and "SETGID" not in out, out
    assert not (box.ws / "prog").stat().st_mode & 0o6000
    # Control: unconfined, the same chmod does set the bit.
    (box.ws / "prog").unlink()
    assert "SETUID" in text(box.sh(SETUID, mode="full-access"))


# -- what a run leaves for the host, and overlapping runs (tests/isolation/test_iso_trust.py) --

def test_a_sessions_tmp_is_bounded_as_a_whole(box: Box) -> None:
    trust.test_a_sessions_tmp_is_bounded_as_a_whole(box)


def test_a_sessions_tmp_bound_spans_its_commands(box: Box) -> None:
    trust.test_a_sessions_tmp_bound_spans_its_commands(box)


def test_parallel_first_commands_share_one_bounded_tmp(box: Box) -> None:
    trust.test_parallel_first_commands_share_one_bounded_tmp(box)


def test_root_without_cap_sys_admin_still_gets_a_bounded_tmp(box: Box) -> None:
    trust.test_root_without_cap_sys_admin_still_gets_a_bounded_tmp(box)


def test_a_sessions_tmp_bounds_its_inodes_too(box: Box) -> None:
    trust.test_a_sessions_tmp_bounds_its_inodes_too(box)


def test_a_session_tmp_that_cannot_be_entered_is_the_sandbox_failing(box: Box) -> None:
    trust.test_a_session_tmp_that_cannot_be_entered_is_the_sandbox_failing(
        box, ', backend="landlock"')


def test_a_command_that_says_nsenter_failed_is_still_the_commands_exit(box: Box) -> None:
    trust.test_a_command_that_says_nsenter_failed_is_still_the_commands_exit(box)


def test_a_nested_repository_behind_a_gitlink_runs_nothing_on_the_host(box: Box) -> None:
    trust.test_a_nested_repository_behind_a_gitlink_runs_nothing_on_the_host(box)


def test_a_rewritten_worktree_commondir_is_not_obeyed(box: Box) -> None:
    trust.test_a_rewritten_worktree_commondir_is_not_obeyed(box)


def test_hooks_path_inside_the_workspace_is_protected(box: Box) -> None:
    trust.test_hooks_path_inside_the_workspace_is_protected(box)


def test_git_init_add_commit_work_and_status_matches_the_host(box: Box) -> None:
    trust.test_git_init_add_commit_work_and_status_matches_the_host(box)


@pytest.mark.parametrize("round_", range(3))
def test_eight_overlapping_runs_each_keep_every_protection(box: Box, round_: int) -> None:
    trust.test_eight_overlapping_runs_each_keep_every_protection(box, round_)


def test_a_workspace_of_home_is_refused(box: Box) -> None:
    """The home holds hidden credentials, and Landlock cannot hide a path inside a
    writable directory: the run is refused, with the reason, and writes nothing."""
    before = snapshot(box.home)
    res = box.sh(trust.HOME_ATTACK.replace("$M", str(box.sibling / "m")),
                 mode="workspace-write", options=["--workspace", str(box.home)], cwd=box.home)
    assert res.returncode == 77 and b"allow_home_workspace" in res.stderr, text(res)
    # Asked for by name, the backend still refuses what it cannot hide.
    box.user_config("allow_home_workspace = true")
    res = box.sh(trust.HOME_ATTACK.replace("$M", str(box.sibling / "m")),
                 mode="workspace-write", options=["--workspace", str(box.home)], cwd=box.home)
    assert res.returncode == 125 and b"holds a hidden path" in res.stderr, text(res)
    assert snapshot(box.home) == before


@pytest.mark.parametrize("name", sorted(trust.ATTACKS))
def test_what_the_guard_was_tricked_with_runs_nothing_on_the_host(box: Box, name: str) -> None:
    trust.test_what_the_guard_was_tricked_with_runs_nothing_on_the_host(box, name)


def test_global_hooks_path_inside_the_workspace_is_protected(box: Box) -> None:
    trust.test_global_hooks_path_inside_the_workspace_is_protected(box)


def test_a_workspace_inside_a_monorepo_keeps_its_hooks_path(box: Box) -> None:
    trust.test_a_workspace_inside_a_monorepo_keeps_its_hooks_path(box)


def test_a_script_that_exits_without_closing_leaves_nothing(box: Box) -> None:
    trust.test_a_script_that_exits_without_closing_leaves_nothing(box, ', backend="landlock"')


@pytest.mark.parametrize("name", sorted(trust.ATTACKS_2))
def test_what_the_guard_was_tricked_with_again_runs_nothing(box: Box, name: str) -> None:
    trust.test_what_the_guard_was_tricked_with_again_runs_nothing(box, name)


def test_a_planted_rebase_plan_runs_nothing(box: Box) -> None:
    trust.test_a_planted_rebase_plan_runs_nothing(box)


def test_protected_names_are_neutralised_while_the_command_runs(box: Box) -> None:
    iso.test_protected_names_are_neutralised_while_the_command_runs(box)


def test_a_vscode_the_command_made_is_undone_and_the_result_says_so(box: Box) -> None:
    iso.test_a_vscode_the_command_made_is_undone_and_the_result_says_so(box, "landlock")


def test_a_build_cache_is_reused_and_never_written(box: Box) -> None:
    """Without a mount namespace there is no layer to lay over a cache: it stays
    read-only and its variable points the toolchain at the session's private copy,
    which starts empty."""
    iso.test_a_build_cache_is_reused_and_never_written(box, reused=False)


def test_a_file_moves_between_directories_of_the_workspace(box: Box) -> None:
    iso.test_a_file_moves_between_directories_of_the_workspace(box)


@pytest.mark.parametrize("cache", ["existing", "missing"])
def test_pip_wheel_of_a_local_project_builds_and_leaves_pips_cache_alone(box: Box,
                                                                          cache: str) -> None:
    """Also a reparenting rename (setuptools moves the wheel out of its temporary
    directory), which the reaper's signal-only Landlock layer once refused with EXDEV."""
    iso.test_pip_wheel_of_a_local_project_builds_and_leaves_pips_cache_alone(box, cache)


def test_a_repository_created_deep_in_the_tree_is_made_inert(box: Box) -> None:
    trust.test_a_repository_created_deep_in_the_tree_is_made_inert(box)


def test_a_sessions_cache_layer_is_removed_even_when_made_unsearchable(box: Box) -> None:
    iso.test_a_sessions_cache_layer_is_removed_even_when_made_unsearchable(box)


def test_an_existing_repository_deep_in_the_tree_is_held(box: Box) -> None:
    """No mount holds it here: the guard's copies put its config and hooks back."""
    trust.test_an_existing_repository_deep_in_the_tree_is_held(box)


def test_a_bare_shaped_repository_made_deep_in_the_tree_is_made_inert(box: Box) -> None:
    trust.test_a_bare_shaped_repository_made_deep_in_the_tree_is_made_inert(box)


def test_a_repository_made_inert_cannot_be_rearmed_by_the_next_command(box: Box) -> None:
    trust.test_a_repository_made_inert_cannot_be_rearmed_by_the_next_command(
        box, ', backend="landlock"')


def test_a_repository_made_by_a_killed_stockade_is_made_inert_by_the_next(box: Box) -> None:
    trust.test_a_repository_made_by_a_killed_stockade_is_made_inert_by_the_next(box)


# Not strict: `rm -rf` and the guard's restore race, and now and then the
# removal wins (seen once in a full run); the limit is what usually happens.
@pytest.mark.xfail(strict=False, reason="Known limits: the guard puts a held repository's "
                   "metadata back as it is removed, so the directory is usually never empty")
def test_a_directory_holding_your_repository_can_be_removed(box: Box) -> None:
    trust.test_a_directory_holding_your_repository_can_be_removed(box)


def test_every_shape_git_takes_for_a_repository_is_made_inert(box: Box) -> None:
    trust.test_every_shape_git_takes_for_a_repository_is_made_inert(box)


@pytest.mark.parametrize("last", ["mv d/.git d/P && ", ""], ids=["renamed", "left"])
def test_a_repository_built_inside_a_git_directory_is_made_inert(box: Box, last: str) -> None:
    trust.test_a_repository_built_inside_a_git_directory_is_made_inert(box, last)


def test_a_repository_made_while_another_process_starts_is_not_taken_for_yours(
        box: Box) -> None:
    trust.test_a_repository_made_while_another_process_starts_is_not_taken_for_yours(box)


def test_a_link_left_in_a_made_repository_does_not_lock_you_out(box: Box) -> None:
    trust.test_a_link_left_in_a_made_repository_does_not_lock_you_out(box)


def test_many_repositories_made_by_a_command_do_not_lock_you_out(box: Box) -> None:
    trust.test_many_repositories_made_by_a_command_do_not_lock_you_out(box)
