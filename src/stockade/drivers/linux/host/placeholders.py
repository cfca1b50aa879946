"""Git metadata a command could create is created empty first, then held read-only.

A name that does not exist cannot be bound read-only, so in a repository
without `.git/hooks` a command that wrote `hooks/pre-commit` had it live on
the host for the rest of its run: a `git commit` typed meanwhile ran it. An
empty `hooks/` is what `git init` makes anyway, runs nothing, and is not
seen by `git status`; an empty `config` is a repository's defaults. So
these are made once, through the workspace's root handle, and never removed
(removing placeholders is what raced with overlapping commands before), and
the mounts then treat them as the existing names they now are.

`config.worktree` is made only where `extensions.worktreeConfig` is on: with
it off git never reads the file, and the extension lives in the read-only
`config`.
"""

from __future__ import annotations

import os

from .... import gitpolicy
from ....fsroot import Roots
from ....profile import DIR, FILE, PIN, WATCH, Protected

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ....profile import Profile


def hold_git_names(profile: Profile) -> Profile:
    """`profile` with the missing hooks and configs of its existing repositories made."""
    pinned = {p.path for p in profile.protected if p.kind == PIN}
    wanted = [p for p in profile.protected if p.kind == WATCH
              and os.path.dirname(p.path) in pinned
              and os.path.basename(p.path) in ("hooks", *gitpolicy.CONFIG_NAMES)]
    if not wanted:
        return profile
    made: dict[str, str] = {}
    roots = Roots([profile.workspace, *profile.write_roots])
    try:
        for item in wanted:
            name = os.path.basename(item.path)
            if name == "config.worktree" and not _worktree_config_on(roots, item.path):
                continue
            where = roots.locate(item.path)
            if where is None or not where[1]:
                continue
            root, rel = where
            try:
                if name == "hooks":
                    fd, leaf = root.parent(rel)
                    try:
                        os.mkdir(leaf, 0o755, dir_fd=fd)
                    finally:
                        os.close(fd)
                else:
                    root.create(rel, b"", 0o644)
            except FileExistsError:
                pass  # another command made it, or the command itself: the guard decides
            except OSError:
                continue  # not reachable as a real directory: left to the guard's sweep
            kind = root.kind(rel)
            if kind in ("dir", "file") and (kind == "dir") == (name == "hooks"):
                made[item.path] = DIR if kind == "dir" else FILE
    finally:
        roots.close()
    if not made:
        return profile
    return profile.replace(protected=tuple(
        Protected(p.path, made[p.path]) if p.kind == WATCH and p.path in made else p
        for p in profile.protected))


def _worktree_config_on(roots: Roots, path: str) -> bool:
    from .... import gitmeta

    where = roots.locate(os.path.join(os.path.dirname(path), "config"))
    entries = gitmeta.read_config(*where) if where is not None else None
    return any(e.key == "extensions.worktreeconfig"
               and e.value.lower() in ("true", "yes", "on", "1") for e in entries or ())
