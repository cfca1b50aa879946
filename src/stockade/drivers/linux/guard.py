"""The metadata guard: what a command leaves for the host to run is neutralised after it.

Protected names that exist are read-only during the run under bubblewrap
(mounts) and restored afterwards under Landlock, which cannot make part of
a writable tree read-only. A name that does not exist yet cannot be kept
uncreatable without a placeholder on the host -- and placeholders were the
bug: the person's `git add -A` failed on them, a second command starting
meanwhile took them for real files, and removing them detached that
command's mounts, after which it wrote `.git/hooks/pre-commit` for good.
So missing names are watched instead: once the command and everything it
started are dead, whatever appeared there is neutralised and reported.

Neutralising never deletes work. A created agent or editor config is moved
to the quarantine in stockade's state directory; a git repository the
command created (`git init`, `git submodule add`, a nested `sub/.git` behind
a gitlink, a new linked worktree) stays, with its config reduced to inert
keys (`gitmeta.INERT_KEYS`) and every real hook moved to the quarantine.

The baseline -- which protected paths existed before -- is shared by every
command on the workspace, across processes: a command starting while
another has already created `.vscode` must not take it for the person's.
It is taken when no other guard is alive, and each guard holds an flock on
a file of its own while its command runs. A baseline whose guards all died
(stockade killed) is swept by the next guard before it takes a new one, so
nothing a killed run left stays live.
"""

from __future__ import annotations

import os
import time

from ... import gitmeta
from ...capabilities import is_under
from ...profile import HOLD, KEEP_LINK, PIN, _read_gitdir_pointer
from .fstree import (
    GUARD_MAX_BYTES,
    GUARD_MAX_DEPTH,
    GUARD_MAX_ENTRIES,
    TooLarge,
    open_parent,
    read_tree,
    remove_entry,
    remove_tree,
    write_tree,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...profile import Profile

#: The config a repository gets when the one the command wrote cannot be parsed.
MINIMAL_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
#: A created repository nested deeper than this is not followed but moved to
#: the quarantine whole: git itself recurses into every level.
MAX_DEPTH = 32


class Neutralised:
    """One thing the guard changed after a run, for the command's output and the audit."""

    __slots__ = ("moved_to", "path", "what")

    def __init__(self, path: str, what: str, moved_to: str = "") -> None:
        self.path = path
        self.what = what
        self.moved_to = moved_to

    def to_json(self) -> dict[str, str]:
        out = {"path": self.path, "what": self.what}
        if self.moved_to:
            out["moved_to"] = self.moved_to
        return out

    def __repr__(self) -> str:
        return f"Neutralised({self.path!r}, {self.what!r})"


class MetadataGuard:
    """Baseline of the protected paths before a command; neutralise and restore after it.

    `restore_content`: keep a copy of every existing protected path and put
    it back when it changed (the Landlock backend, where they are writable
    during the run). Without it (bubblewrap, where mounts hold them) only
    which paths existed is recorded.
    """

    def __init__(self, profile: Profile, state_dir: str, *, restore_content: bool) -> None:
        self.roots = ([profile.workspace] if profile.workspace_writable else []) + list(
            profile.write_roots)
        self.content = restore_content
        self.links = {p.path for p in profile.protected if p.kind == KEEP_LINK}
        self.paths = sorted({p.path for p in profile.protected if p.kind not in (PIN, HOLD)})
        self.gitdirs = sorted({p.path for p in profile.protected if p.kind == PIN})
        self.alive_fd = -1
        self.stale: list[Neutralised] = []
        from ...paths import sha256_hex

        key = sha256_hex(profile.workspace.encode())[:32]
        base = os.path.join(state_dir, "guard")
        self.dir = os.path.join(base, key)
        if not self.paths and not os.path.isdir(self.dir):
            return  # nothing to guard, nothing a killed run left: one stat
        import fcntl

        os.makedirs(base, mode=0o700, exist_ok=True)
        self.quarantine = os.path.join(state_dir, "quarantine", key)
        self._snap_lock = os.path.join(base, key + ".lock")
        self._alive = os.path.join(base, f"{key}.alive.{os.getpid()}.{os.urandom(6).hex()}")
        with _FileLock(self._snap_lock):
            self.alive_fd = os.open(self._alive, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.alive_fd, fcntl.LOCK_EX)
            try:
                if not self._others_alive():
                    if os.path.isdir(self.dir):
                        # Every guard of this baseline died with its command
                        # (stockade was killed): what they would have
                        # neutralised is still live on the host. Swept by
                        # the next run whatever its mode: when only writable
                        # runs swept, a hook stayed live through any number
                        # of read-only ones, and the next `git commit` ran it.
                        # A read-only run has no writable roots of its own;
                        # the baseline's paths are reached from the workspace.
                        roots, self.roots = self.roots, self.roots or [profile.workspace]
                        self.stale = self._sweep(self._recorded())
                        self.roots = roots
                    remove_tree(self.dir)
                if not self.paths:
                    self._leave()
                    return
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                self._record()
            except BaseException:
                self._leave()
                raise

    def _leave(self) -> None:
        """Give up this guard's alive file (it guards nothing, or failed to start)."""
        if self.alive_fd >= 0:
            os.close(self.alive_fd)
            self.alive_fd = -1
            os.unlink(self._alive)

    # -- the baseline ----------------------------------------------------------------

    def _others_alive(self) -> bool:
        """Whether another guard on this workspace is running; removes dead ones' files."""
        import fcntl

        prefix = os.path.basename(self.dir) + ".alive."
        base = os.path.dirname(self.dir)
        alive = False
        for name in os.listdir(base):
            path = os.path.join(base, name)
            if not name.startswith(prefix) or path == self._alive:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                alive = True  # its owner holds it
            else:
                os.unlink(path)  # a guard that died without cleaning up
            finally:
                os.close(fd)
        return alive

    @staticmethod
    def _key(path: str) -> str:
        from ...paths import sha256_hex

        return sha256_hex(path.encode())[:24]

    def _recorded(self) -> tuple[list[str], list[str]]:
        """(paths, git directories) the baseline on disk knows, from its manifest."""
        paths: list[str] = []
        gitdirs: list[str] = []
        try:
            with open(os.path.join(self.dir, "manifest"), "rb") as fh:
                lines = fh.read().decode("utf-8", "surrogateescape").split("\0")
        except OSError:
            return paths, gitdirs
        for line in lines:
            kind, _, path = line.partition(" ")
            if path:
                (gitdirs if kind == "g" else paths).append(path)
        return sorted(set(paths)), sorted(set(gitdirs))

    def _record(self) -> None:
        """Add to the baseline every path it does not know yet, as it is now.

        A path beneath one the baseline records as missing is recorded as
        missing too: it was created while a command ran (the `.git/hooks`
        of a repository another command just made), so it is not the
        person's, whatever it holds by now.
        """
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        manifest: list[str] = []
        try:
            budget = [GUARD_MAX_BYTES, GUARD_MAX_ENTRIES]
            for path in self.paths:
                key = self._key(path)
                tree_kept = os.path.lexists(os.path.join(self.dir, key))
                if self._known(key) and (tree_kept or not self.content or os.path.lexists(
                        os.path.join(self.dir, key + ".missing"))):
                    continue
                if not self._known(key):
                    manifest.append(f"p {path}")
                if self._under_missing(path):
                    _touch(dir_fd, key + ".missing")
                    continue
                where = open_parent(path, self.roots)
                if where is None:
                    _touch(dir_fd, key + ".missing")
                    continue
                fd, name = where
                try:
                    if not (self.content or path in self.links):
                        ident = _identity(fd, name)
                        if ident:
                            _write(dir_fd, key + ".present", ident)
                        else:
                            _touch(dir_fd, key + ".missing")
                        continue
                    tree = read_tree(fd, name, budget)
                except TooLarge:
                    from ...errors import SandboxUnavailable

                    raise SandboxUnavailable(
                        f"{path} is too large for the landlock backend to keep a copy of "
                        f"(over {GUARD_MAX_BYTES >> 20} MiB, {GUARD_MAX_ENTRIES} entries "
                        f"or {GUARD_MAX_DEPTH} levels); without one it could not undo "
                        "changes to it. Use read-only mode or backend = \"bubblewrap\""
                    ) from None
                finally:
                    os.close(fd)
                if tree is None:
                    if not self._known(key):
                        _touch(dir_fd, key + ".missing")
                else:
                    # A guard that keeps copies, joining a baseline a bubblewrap
                    # run recorded without them: held read-only until now, so
                    # the path as it is now is the original.
                    write_tree(dir_fd, key, tree)
            for gitdir in self.gitdirs:
                key = self._key(gitdir) + ".git"
                if os.path.lexists(os.path.join(self.dir, key)):
                    continue
                manifest.append(f"g {gitdir}")
                _write(dir_fd, key, "\0".join(_git_state(gitdir)))
        finally:
            os.close(dir_fd)
        if manifest:
            with open(os.path.join(self.dir, "manifest"), "ab") as fh:
                fh.write(("\0".join(manifest) + "\0").encode("utf-8", "surrogateescape"))

    def _known(self, key: str) -> bool:
        return any(os.path.lexists(os.path.join(self.dir, key + suffix))
                   for suffix in ("", ".missing", ".present"))

    def _under_missing(self, path: str) -> bool:
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if os.path.lexists(os.path.join(self.dir, self._key(parent) + ".missing")):
                return True
            if any(parent == r for r in self.roots):
                return False
            parent = os.path.dirname(parent)
        return False

    # -- after the run ---------------------------------------------------------------

    def release(self) -> list[Neutralised]:
        """Neutralise and restore, once this guard's command is dead; what was done."""
        done = list(self.stale)
        self.stale = []
        if self.alive_fd < 0:
            return done
        try:
            with _FileLock(self._snap_lock):
                done += self._sweep(self._recorded())
                os.close(self.alive_fd)
                self.alive_fd = -1
                os.unlink(self._alive)
                if not self._others_alive():
                    remove_tree(self.dir)
        finally:
            if self.alive_fd >= 0:
                os.close(self.alive_fd)
                self.alive_fd = -1
        return done

    def _sweep(self, recorded: tuple[list[str], list[str]]) -> list[Neutralised]:
        """Every path of the baseline back to what it was, every new repository made inert.

        Covers every path the baseline knows, not only this command's: the
        command that created `.vscode` may be one still running, and the
        name must not be live longer than the first run that ends.
        """
        paths, gitdirs = recorded
        done: list[Neutralised] = []
        for path in paths:
            self._attempt(self._settle, path, done)
        for gitdir in gitdirs:
            self._attempt(self._new_in_gitdir, gitdir, done)
        for root in self.roots:
            self._attempt(self._bare_shaped, root, done)
        return done

    def _bare_shaped(self, root: str, done: list[Neutralised]) -> None:
        """A writable root laid out as a bare repository is one to git.

        git asks whether the directory itself is a git directory (HEAD,
        objects, refs) before it looks for `.git`, so `HEAD`, `objects/`,
        `refs/` and a `config` written at the top of the workspace make the
        person's next `git status` there obey that config.
        """
        if (os.path.isfile(os.path.join(root, "HEAD")) and not os.path.islink(
                os.path.join(root, "HEAD")) and os.path.isdir(os.path.join(root, "objects"))
                and os.path.isdir(os.path.join(root, "refs"))
                and os.path.isfile(os.path.join(root, "config"))):
            self._inert_gitdir(root, root, done, 0)

    @staticmethod
    def _attempt(step: Callable[[str, list[Neutralised]], None], path: str,
                 done: list[Neutralised]) -> None:
        """One step of the sweep; a failure is reported, and the sweep goes on.

        Whatever the command left can make a step fail (bytes that do not
        decode, a directory at a file's name, an entry it made unreadable):
        that must never leave the rest of the workspace unswept, nor pass
        silently.
        """
        try:
            step(path, done)
        except Exception as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            done.append(Neutralised(path, f"COULD NOT BE NEUTRALISED ({why}): check it before "
                                    "running git or an editor here"))

    def _settle(self, path: str, done: list[Neutralised]) -> None:
        key = self._key(path)
        missing = os.path.lexists(os.path.join(self.dir, key + ".missing"))
        present = os.path.join(self.dir, key + ".present")
        kept = os.path.lexists(os.path.join(self.dir, key))
        where = open_parent(path, self.roots)
        if not kept and os.path.lexists(present):
            # Held read-only by a mount: unchanged, unless it is no longer the
            # same file (a directory above it renamed aside and rebuilt).
            if where is None:
                self._break_chain(path, done)
                return
            fd, name = where
            try:
                if _identity(fd, name) not in ("", _read(present)):
                    self._neutralise(fd, name, path, done)
            finally:
                os.close(fd)
            return
        if where is None:
            self._break_chain(path, done)
            return
        fd, name = where
        try:
            exists = os.path.lexists(os.path.join(f"/proc/self/fd/{fd}", name))
            if missing:
                if exists:
                    self._neutralise(fd, name, path, done)
                return
            base_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                want = read_tree(base_fd, key, [1 << 62, 1 << 62])
            finally:
                os.close(base_fd)
            try:
                have = read_tree(fd, name)
            except (TooLarge, OSError):
                # Too large, or an entry made unreadable (chmod 000) so the
                # restore would stop at it: not the baseline, whatever it is.
                have = ("unreadable",)
            if want is None or _same(have, want):
                return
            moved = self._quarantine(fd, name, path) if have is not None else ""
            write_tree(fd, name, want)
            done.append(Neutralised(path, "restored: the command changed protected metadata",
                                    moved))
        finally:
            os.close(fd)

    def _neutralise(self, fd: int, name: str, path: str, done: list[Neutralised]) -> None:
        """A protected name that appeared during the run: make it inert, keep the work."""
        parent = os.path.dirname(path)
        if name == ".git":
            self._inert_repository(path, parent, done, 0)
        elif parent in self.gitdirs or os.path.basename(parent) == ".git":
            self._inert_git_entry(path, done)
        else:
            moved = self._quarantine(fd, name, path)
            done.append(Neutralised(path, "created by the command: the person's tools would "
                                    "read or run it", moved))

    def _inert_git_entry(self, path: str, done: list[Neutralised]) -> None:
        name = os.path.basename(path)
        if name in ("rebase-merge", "sequencer"):
            # A rebase the command left half done is kept, unless its plan runs
            # a program at the person's `git rebase --continue`.
            if _plans_exec(path):
                self._move(path, done, "a rebase plan with exec lines")
        elif name == "hooks":
            self._inert_hooks(path, done)
        elif name in ("config", "config.worktree"):
            self._inert_config(path, done)
        else:
            self._move(path, done, "git would follow it to another repository's config"
                       if name == "commondir" else "created by the command")

    def _inert_repository(self, dot_git: str, worktree: str, done: list[Neutralised],
                          depth: int) -> None:
        """A `.git` the command made (dir or `gitdir:` file) keeps working, inert."""
        if depth > MAX_DEPTH:
            self._move(dot_git, done, f"a repository nested more than {MAX_DEPTH} deep")
            return
        if os.path.islink(dot_git):
            self._move(dot_git, done, "a .git symlink the command created")
            return
        if os.path.isfile(dot_git):
            target = _read_gitdir_pointer(dot_git)
            if not target or not any(is_under(target, r) for r in self.roots):
                # Pointing out of the workspace: into the command's own /tmp,
                # or at a repository of the person's whose config and hooks
                # would then run on this directory's content.
                self._move(dot_git, done, "a .git pointer the command created to a git "
                           "directory outside the workspace")
                return
            self._inert_gitdir(target, worktree, done, depth)
        elif os.path.isdir(dot_git):
            self._inert_gitdir(dot_git, worktree, done, depth)

    def _inert_gitdir(self, gitdir: str, worktree: str, done: list[Neutralised],
                      depth: int) -> None:
        for name in ("config", "config.worktree"):
            if os.path.lexists(os.path.join(gitdir, name)):
                self._attempt(self._inert_config, os.path.join(gitdir, name), done)
        self._attempt(self._inert_hooks, os.path.join(gitdir, "hooks"), done)
        common = os.path.join(gitdir, "commondir")
        if os.path.lexists(common) and not _commondir_is_main(gitdir):
            self._move(common, done, "git would follow it to another repository's config")
        # Gitlinks are checked out where git puts this repository's worktree:
        # a (kept) core.worktree, a linked worktree's `gitdir` file, or beside it.
        worktree = _worktree_of(gitdir) or worktree

        def nested(path: str, into: list[Neutralised]) -> None:
            self._inert_gitdir(path, worktree, into, depth + 1)

        def linked(dot_git: str, into: list[Neutralised]) -> None:
            self._inert_repository(dot_git, os.path.dirname(dot_git), into, depth + 1)

        for sub in ("worktrees", "modules"):
            for entry in _listdir(os.path.join(gitdir, sub)):
                self._attempt(nested, os.path.join(gitdir, sub, entry), done)
        for link in gitmeta.all_gitlinks(os.path.join(gitdir, "index")):
            self._attempt(linked, os.path.join(worktree, link, ".git"), done)

    def _new_in_gitdir(self, gitdir: str, done: list[Neutralised]) -> None:
        """In a repository that existed: the worktrees, modules and gitlinks that did not."""
        recorded = os.path.join(self.dir, self._key(gitdir) + ".git")
        if not os.path.lexists(recorded):
            return
        before = set(_read(recorded).split("\0"))
        if not os.path.isdir(gitdir) or os.path.islink(gitdir):
            return
        now = _git_state(gitdir)
        worktree = _worktree_of(gitdir) or (
            os.path.dirname(gitdir) if os.path.basename(gitdir) == ".git" else "")
        for item in now:
            if item in before:
                continue
            kind, _, rest = item.partition(" ")
            name = rest.rpartition(" ")[0] if kind in ("wt", "mod") else rest
            if kind in ("wt", "mod"):
                sub = os.path.join(gitdir, "worktrees" if kind == "wt" else "modules", name)
                self._inert_gitdir(sub, worktree, done, 1)
            elif kind == "index" and gitmeta.index_gitlinks(
                    os.path.join(gitdir, "index")) is None:
                # Changed, and git can read it but stockade cannot: the
                # gitlinks it holds are unknown, so it must not stay.
                self._move(os.path.join(gitdir, "index"), done,
                           "an index the command changed that stockade cannot read")
            elif kind == "link" and worktree:
                checkout = os.path.join(worktree, name)
                self._inert_repository(os.path.join(checkout, ".git"), checkout, done, 1)

    # -- the neutralisers --------------------------------------------------------------

    def _inert_config(self, path: str, done: list[Neutralised]) -> None:
        where = open_parent(path, self.roots)
        if where is None:
            return
        fd, name = where
        try:
            full = os.path.join(f"/proc/self/fd/{fd}", name)
            if os.path.islink(full) or (os.path.lexists(full) and not os.path.isfile(full)):
                moved = self._quarantine(fd, name, path)
                done.append(Neutralised(path, "not a regular git config file", moved))
                return
            entries = gitmeta.read_config(os.path.join(f"/proc/self/fd/{fd}", name))
            if entries is None:
                text, removed = MINIMAL_CONFIG.decode(), ["everything (not parseable)"]
            else:
                gitdir = os.path.dirname(path)

                def inside(value: str) -> bool:
                    real = os.path.realpath(os.path.join(gitdir, value))
                    return any(is_under(real, r) for r in self.roots)

                text, removed = gitmeta.filter_config(entries, worktree_ok=inside)
            if not removed:
                return
            moved = self._quarantine(fd, name, path)
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o644, dir_fd=fd)
            with open(out, "wb") as fh:
                fh.write(text.encode("utf-8", "surrogateescape"))
            done.append(Neutralised(path, "removed from a git config the command wrote: "
                                    + ", ".join(removed), moved))
        finally:
            os.close(fd)

    def _inert_hooks(self, hooks: str, done: list[Neutralised]) -> None:
        where = open_parent(hooks, self.roots)
        if where is None:
            return
        fd, name = where
        try:
            full = os.path.join(f"/proc/self/fd/{fd}", name)
            if not os.path.lexists(full):
                return
            if os.path.islink(full) or not os.path.isdir(full):
                moved = self._quarantine(fd, name, hooks)
                done.append(Neutralised(hooks, "not a hooks directory", moved))
                return
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
        finally:
            os.close(fd)
        try:
            for entry in sorted(os.listdir(sub)):
                if entry.endswith(gitmeta.SAMPLE_SUFFIX):
                    continue
                path = os.path.join(hooks, entry)
                moved = self._quarantine(sub, entry, path)
                done.append(Neutralised(path, "a git hook the command created", moved))
        finally:
            os.close(sub)

    def _move(self, path: str, done: list[Neutralised], what: str) -> None:
        where = open_parent(path, self.roots)
        if where is None:
            return
        fd, name = where
        try:
            if os.path.lexists(os.path.join(f"/proc/self/fd/{fd}", name)):
                done.append(Neutralised(path, what, self._quarantine(fd, name, path)))
        finally:
            os.close(fd)

    def _quarantine(self, dir_fd: int, name: str, path: str) -> str:
        """Move `name` out of the workspace into the quarantine; where it went ("" if lost).

        A rename when the state directory shares the filesystem; otherwise a
        copy through descriptors, then removal. Only what is too large to
        copy is removed without a copy.
        """
        root = max((r for r in self.roots if is_under(path, r)), key=len, default="/")
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        dest = os.path.join(self.quarantine, f"{stamp}-{os.urandom(3).hex()}",
                            os.path.relpath(path, root))
        os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
        try:
            os.rename(name, dest, src_dir_fd=dir_fd)
            return dest
        except OSError as exc:
            import errno

            if exc.errno != errno.EXDEV:
                raise
        try:
            tree = read_tree(dir_fd, name)
        except TooLarge:
            tree = None
        if tree is not None:
            parent = os.open(os.path.dirname(dest), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                write_tree(parent, os.path.basename(dest), tree)
            finally:
                os.close(parent)
        remove_entry(dir_fd, name)
        return dest if tree is not None else ""

    def _break_chain(self, path: str, done: list[Neutralised]) -> None:
        """A directory above `path` is no longer a real directory: move the impostor."""
        root = max((r for r in self.roots if is_under(path, r)), key=len, default="")
        current = root
        for part in os.path.relpath(path, root).split(os.sep)[:-1]:
            current = os.path.join(current, part)
            if os.path.islink(current) or (os.path.lexists(current)
                                           and not os.path.isdir(current)):
                self._move(current, done, "replaced a directory holding protected metadata")
                return
            if not os.path.lexists(current):
                return  # gone: nothing under it can run


def _same(have: object, want: object) -> bool:
    """Whether a protected tree is as the baseline has it.

    Only root can give the copy its original owner, so for anyone else the
    copy is theirs whoever owned the original: ownership is compared as root
    only, or a group-owned `.git` would be "restored" after every command.
    """
    if have == want or os.geteuid() == 0:
        return have == want
    return _unowned(have) == _unowned(want)


def _unowned(tree: object) -> object:
    if isinstance(tree, tuple) and tree and tree[0] in ("f", "d"):
        body = tree[5]
        if tree[0] == "d":
            body = {k: _unowned(v) for k, v in body.items()}
        return (tree[0], tree[1], tree[4], body)
    return tree


def _git_state(gitdir: str) -> list[str]:
    """What a repository holds that leads git elsewhere: worktrees, modules, gitlinks.

    Worktrees and modules by name and identity: one renamed aside and rebuilt
    under the same name is a new one. Gitlinks read afresh from the index and
    its shared indexes, never from a cache a command could satisfy with
    `touch -d`.
    """
    state: list[str] = []
    for kind, sub in (("wt", "worktrees"), ("mod", "modules")):
        for entry in _listdir(os.path.join(gitdir, sub)):
            try:
                st = os.lstat(os.path.join(gitdir, sub, entry))
            except OSError:
                continue
            state.append(f"{kind} {entry} {st.st_dev}:{st.st_ino}")
    index = os.path.join(gitdir, "index")
    state += [f"link {p}" for p in gitmeta.all_gitlinks(index)]
    try:
        st = os.lstat(index)
        state.append(f"index {st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_size}")
    except OSError:
        pass
    return state


def _worktree_of(gitdir: str) -> str:
    """Where git checks this repository out, when it says so itself.

    As git decides it: a `gitdir` file only in a linked worktree's directory
    (`worktrees/<id>`; anywhere else git ignores it, and so must this, or a
    planted one sends the check to a decoy); then `core.worktree`, from
    `config.worktree` over `config` when extensions.worktreeConfig is on.
    """
    pointer = os.path.join(gitdir, "gitdir")
    if (os.path.basename(os.path.dirname(gitdir)) == "worktrees" and os.path.isfile(pointer)
            and not os.path.islink(pointer)):
        line = gitmeta.read_head(pointer).rstrip(b"\r\n").decode("utf-8", "surrogateescape")
        if line:
            return os.path.dirname(os.path.realpath(os.path.join(gitdir, line)))
    entries = gitmeta.read_config(os.path.join(gitdir, "config")) or []
    worktree = ""
    per_worktree = False
    for entry in entries:
        if entry.key == "core.worktree":
            worktree = entry.value
        elif entry.key == "extensions.worktreeconfig":
            per_worktree = entry.value.lower() in ("true", "yes", "on", "1")
    if per_worktree:
        for entry in gitmeta.read_config(os.path.join(gitdir, "config.worktree")) or ():
            if entry.key == "core.worktree":
                worktree = entry.value
    return os.path.realpath(os.path.join(gitdir, worktree)) if worktree else ""


def _plans_exec(path: str) -> bool:
    for todo in ("git-rebase-todo", "todo", "done"):
        for line in gitmeta.read_head(os.path.join(path, todo), 1 << 20).splitlines():
            word = line.strip().split(b" ", 1)[0]
            if word in (b"x", b"exec"):
                return True
    return False


def _identity(dir_fd: int, name: str) -> str:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}:{st.st_mode & 0o170000}"


def _write(dir_fd: int, name: str, text: str) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    with open(fd, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogateescape"))


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "surrogateescape")
    except OSError:
        return ""


def _commondir_is_main(gitdir: str) -> bool:
    """A linked worktree's commondir must lead back to the repository that holds it."""
    parent = os.path.dirname(gitdir)
    if os.path.basename(parent) != "worktrees":
        return False
    from ...profile import _read_first_line

    target = _read_first_line(os.path.join(gitdir, "commondir"))
    if not target:
        return False
    return os.path.realpath(os.path.join(gitdir, target)) == os.path.realpath(
        os.path.dirname(parent))


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path)) if not os.path.islink(path) else []
    except OSError:
        return []


def _touch(dir_fd: int, name: str) -> None:
    os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd))


class _FileLock:
    """An exclusive flock held for a `with` block."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> _FileLock:
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
