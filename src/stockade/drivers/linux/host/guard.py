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

Everything the guard does in a writable root goes through `fsroot.Roots`:
names are resolved beneath the root by the kernel, no link is followed, and
a name read from the workspace (a gitlink, a `gitdir:` pointer) is checked
before it is joined. It acts only on what it can reach that way; a path that
leads elsewhere is reported, never followed.

Neutralising never deletes work. A created agent or editor config is moved
to the quarantine in stockade's state directory; a git repository the
command created (`git init`, `git submodule add`, a nested `sub/.git` behind
a gitlink, a new linked worktree) stays, with its config reduced to inert
keys (`gitpolicy.INERT_KEYS`) and every real hook moved to the quarantine.

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

from .... import gitmeta, gitpolicy
from ....command import Neutralised
from ....fsroot import Root, Roots
from ....profile import HOLD, KEEP_LINK, PIN
from .fstree import (
    GUARD_MAX_BYTES,
    GUARD_MAX_DEPTH,
    GUARD_MAX_ENTRIES,
    TooLarge,
    exchange,
    read_tree,
    remove_entry,
    remove_tree,
    write_tree,
)
from .watch import Watch

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from ....profile import Profile
    from .gitconfig import PrivateConfigs
    from .treewatch import TreeWatch

#: The baseline's names for the paths seen: the same few dozen paths are looked up
#: several times per command, every command.
_KEYS: dict[str, str] = {}
#: A protected path's mark in the baseline when it did not exist (`_Marks`).
MISSING = "missing"
#: The config a repository gets when the one the command wrote cannot be parsed.
MINIMAL_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
#: A created repository nested deeper than this is not followed but moved to
#: the quarantine whole: git itself recurses into every level.
MAX_DEPTH = 32
#: More than this in a rebase plan, `info/` or a hook (samples included) of a
#: repository the command made is not git's own: moved, so that the Landlock
#: baseline's copy of it stays small.
KEPT_MAX_BYTES = 1 << 20
SAMPLE_MAX_BYTES = 64 << 10


class MetadataGuard:
    """Baseline of the protected paths before a command; neutralise and restore after it.

    `restore_content`: keep a copy of every existing protected path and put
    it back when it changed (the Landlock backend, where they are writable
    during the run). Without it (bubblewrap, where mounts hold them) only
    which paths existed is recorded. `watch`: settle names as they appear
    while the command runs (watch.py), not only after it.
    """

    def __init__(self, profile: Profile, state_dir: str, *, restore_content: bool,
                 watch: bool = True, tree: TreeWatch | None = None) -> None:
        self.roots = ([profile.workspace] if profile.workspace_writable else []) + list(
            profile.write_roots)
        self.content = restore_content
        self.links = {p.path for p in profile.protected if p.kind == KEEP_LINK}
        self.paths = sorted({p.path for p in profile.protected if p.kind not in (PIN, HOLD)})
        self.gitdirs = sorted({p.path for p in profile.protected if p.kind == PIN})
        self.alive_fd = -1
        self.stale: list[Neutralised] = []
        #: The owner bits of the directories holding protected paths, as the
        #: command found them: what the guard gives back if they go (`_regain`).
        self._modes = _owner_modes(self.paths) if os.geteuid() != 0 else {}
        self.fs = Roots([])
        self._seen: set[str] = set()
        self._marks = _Marks()
        self._final = True
        self.watch: Watch | None = None
        self.tree = tree
        self.private: PrivateConfigs | None = None
        #: The configs the command was given, kept past the merge for the sweep:
        #: a config the person replaced during the run is judged against them.
        self._given: dict[str, bytes | None] = {}
        #: When the command began (its config locks are younger).
        self.started_ns = time.time_ns()
        from ....paths import sha256_hex

        key = sha256_hex(os.fsencode(profile.workspace))[:32]
        base = os.path.join(state_dir, "guard")
        self.dir = os.path.join(base, key)
        if not self.paths and not os.path.isdir(self.dir):
            return  # nothing to guard, nothing a killed run left: one stat
        import fcntl

        os.makedirs(base, mode=0o700, exist_ok=True)
        self.quarantine = os.path.join(state_dir, "quarantine", key)
        self._quarantined: dict[str, int] = {}
        self._snap_lock = os.path.join(base, key + ".lock")
        self._alive = os.path.join(base, f"{key}.alive.{os.getpid()}.{os.urandom(6).hex()}")
        with _FileLock(self._snap_lock):
            self.alive_fd = os.open(self._alive, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.alive_fd, fcntl.LOCK_EX)
            try:
                if not self._others_alive():
                    if tree is not None:
                        tree.settle_configs()
                    if os.path.isdir(self.dir):
                        # Every guard of this baseline died with its command
                        # (stockade was killed): what they would have
                        # neutralised is still live on the host. Swept by
                        # the next run whatever its mode: when only writable
                        # runs swept, a hook stayed live through any number
                        # of read-only ones, and the next `git commit` ran it.
                        # The killed runs' writable roots, not only this run's:
                        # a read-only run has none, and a `--allow-write`
                        # directory of theirs held names they left live.
                        roots, self.roots = self.roots, sorted(
                            {*self.roots, *self._recorded_roots()} or {profile.workspace})
                        made = self._made_while_killed()
                        self.stale = self._sweep(self._recorded(), created=made)
                        _remember_made(base, self.dir, made)
                        self.roots = roots
                        if tree is not None:
                            tree.adopt(made)
                    remove_tree(self.dir)
                if not self.paths:
                    self._leave()
                    return
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                self._record()
            except BaseException:
                self._leave()
                raise
        if watch:
            self._watch()

    def _watch(self) -> None:
        """Settle each protected name as it appears (and, when copies are kept, each
        protected directory as it changes) for as long as this guard is alive."""
        import stat
        import threading

        from .watch import Watch

        names: dict[str, set[str]] = {}
        trees: set[str] = set()
        # Each protected file also by its inode: a hard link the command made to
        # it (under Landlock, or once the person's rename detached a mount)
        # writes it where no directory watch sees. One a mount holds cannot be
        # linked (EXDEV) until its name is replaced, and the watch arms it at
        # that event, before settling it: no add_watch per file per command.
        files: dict[str, str] = {}
        armed: set[str] = set()
        for path in self.paths:
            names.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):
                files[path] = path
                if self.content:
                    armed.add(path)
            elif self.content and stat.S_ISDIR(mode):
                trees.add(path)
                try:
                    with os.scandir(path) as entries:
                        inside = [e.path for e in entries if e.is_file(follow_symlinks=False)]
                    files.update((f, path) for f in inside)
                    armed.update(inside)
                except OSError:
                    pass  # the tree's own watch and the sweep still cover it
        for gitdir in self.gitdirs:
            # New worktrees and modules appear there. Not the index: its gitlinks
            # wait for the sweep after the run (see `_gitlinks`).
            names.setdefault(gitdir, set()).update(("worktrees", "modules"))
        self._lock = threading.Lock()
        # What any guard of this baseline settled while this one's command ran
        # is reported by this one too: the name may be its command's, whichever
        # watch came first.
        self._during = os.path.join(self.dir, "during")
        try:
            self._during_from = os.stat(self._during).st_size
        except OSError:
            self._during_from = 0
        self.watch = Watch(names, trees, self._settle_now, files, armed)

    @property
    def unwatched(self) -> str:
        """What the watches could not follow ("" when they follow everything): names
        then wait for the sweep, repositories for a walk of the tree."""
        why = [self.watch.failed if self.watch is not None else "",
               f"tree: {self.tree.incomplete}, walked after the run"
               if self.tree is not None and self.tree.incomplete else ""]
        return "; ".join(w for w in why if w)

    def _settle_now(self, path: str) -> None:
        """One watched path, settled as the sweep after the run would settle it."""
        with self._lock, _FileLock(self._snap_lock):
            if self.alive_fd < 0:
                return
            if self.watch is not None and path in self.watch.replaced:
                # For every guard of the baseline, for the rest of its life.
                key = self._key(path)
                if key in _Marks.read(self.dir).present:
                    _touch(None, os.path.join(self.dir, key + ".replaced"))
            gitdirs = self._recorded()[1]
            parent = os.path.dirname(path)
            if parent in gitdirs and os.path.basename(path) in ("worktrees", "modules"):
                done = self._sweep(([], [parent]), seen=gitdirs, final=False)
            else:
                done = self._sweep(([path], []), seen=gitdirs, final=False)
            self._share(done)

    def _share(self, done: list[Neutralised]) -> None:
        """Tell every guard of this baseline what this one settled: the name may be its
        command's (`_settled_during`)."""
        if done:
            with open(self._during, "ab") as fh:
                fh.write("".join(f"{n.path}\0{n.what}\0{n.moved_to}\0" for n in done)
                         .encode("utf-8", "surrogateescape"))

    def _settled_during(self) -> list[Neutralised]:
        """What the watches of this baseline settled since this guard's start."""
        try:
            with open(self._during, "rb") as fh:
                fh.seek(self._during_from)
                fields = fh.read().decode("utf-8", "surrogateescape").split("\0")
        except OSError:
            return []
        return [Neutralised(*fields[i:i + 3]) for i in range(0, len(fields) - 2, 3)]

    def adopt(self, private: PrivateConfigs) -> None:
        """Fill `private` from the host's configs now, and merge it back in `release`."""
        if self.private is not None and self.private is not private:
            self.private.close()  # a parked sandbox's, which could not serve after all
        private.owner = self
        self.private = private
        self.started_ns = time.time_ns()
        fs = Roots(self.roots)
        try:
            if self.alive_fd < 0:
                private.refresh(fs)
            else:
                with _FileLock(self._snap_lock):  # not halfway through another's merge
                    private.refresh(fs)
        finally:
            fs.close()

    def _merge_private(self, fs: Roots) -> list[Neutralised]:
        """The private configs' inert changes into the host's, under the baseline's lock."""
        private, self.private = self.private, None
        if private is None:
            return []
        self._given = dict(private.base)
        done: list[Neutralised] = []
        try:
            for merged in private.merge(fs):
                if merged.error:
                    done.append(Neutralised(merged.path, "the command's changes to this git "
                                            f"config were not merged: {merged.error}"))
                elif merged.dropped:
                    done.append(Neutralised.dropped(merged.path, merged.dropped))
        finally:
            private.close()
        return done

    def _left_locks(self, fs: Roots) -> list[Neutralised]:
        """Each `config.lock` of a guarded repository the command's git left behind."""
        from .gitconfig import LOCK_WAIT_SECONDS, clear_left_lock, is_config_of

        done: list[Neutralised] = []
        # One wait for all of them: a command touching many locks once held the
        # next command's start for a second each.
        until = time.time_ns() + int(LOCK_WAIT_SECONDS * 1e9)
        for path in self.paths:
            if not is_config_of(path, self.gitdirs):
                continue
            try:
                try:
                    what = clear_left_lock(fs, path, self.started_ns, until)
                except PermissionError:
                    where = self._open_parent(path)  # its directory's owner bits back
                    if where is not None:
                        os.close(where[0])
                    what = clear_left_lock(fs, path, self.started_ns, until)
            except OSError as exc:
                what = (f"COULD NOT BE CHECKED ({exc.strerror or exc}): a git config write "
                        "may fail until it is removed")
            if what:
                done.append(Neutralised(path + ".lock", what))
        return done

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
        key = _KEYS.get(path)
        if key is None:
            from ....paths import sha256_hex

            if len(_KEYS) > 4096:
                _KEYS.clear()  # a long-lived server over many workspaces
            key = _KEYS[path] = sha256_hex(os.fsencode(path))[:24]
        return key

    def _recorded(self) -> tuple[list[str], list[str]]:
        """(paths, git directories) the baseline on disk knows, from its manifest."""
        paths: list[str] = []
        gitdirs: list[str] = []
        for line in self._manifest():
            kind, _, path = line.partition(" ")
            if path and kind in ("p", "g"):
                (gitdirs if kind == "g" else paths).append(path)
        return sorted(set(paths)), sorted(set(gitdirs))

    def _recorded_roots(self) -> list[str]:
        """The writable roots of every run that recorded into this baseline."""
        return sorted({line[2:] for line in self._manifest() if line.startswith("r ")})

    def _made_while_killed(self) -> list[str]:
        """The repositories in the workspace that its killed runs' trees did not have.

        The next process's watch, walking the tree afresh, would take a
        repository a killed command made deep in it for the person's.
        """
        had = {line[2:] for line in self._manifest() if line.startswith("e ")}
        from .treewatch import repositories

        return sorted({p for top in self._recorded_trees() for p in repositories(top)} - had)

    def _recorded_trees(self) -> list[str]:
        """The workspaces whose repositories the baseline's manifest lists."""
        return sorted({line[2:] for line in self._manifest() if line.startswith("T ")})

    def _manifest(self) -> list[str]:
        """The manifest's lines: `p`ath, `g`it directory, `r`oot, `T`ree, `e`xisting."""
        try:
            with open(os.path.join(self.dir, "manifest"), "rb") as fh:
                return fh.read().decode("utf-8", "surrogateescape").split("\0")
        except OSError:
            return []

    def _record(self) -> None:
        """Add to the baseline every path it does not know yet, as it is now.

        A path beneath one the baseline records as missing is recorded as
        missing too: it was created while a command ran (the `.git/hooks`
        of a repository another command just made), so it is not the
        person's, whatever it holds by now.
        """
        self.fs = Roots(self.roots)
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        manifest: list[str] = []
        marks = _Marks.read(self.dir)
        new: list[str] = []

        def mark(key: str, state: str) -> None:
            marks.add(key, state)
            new.append(f"{key} {state}\n")

        try:
            budget = [GUARD_MAX_BYTES, GUARD_MAX_ENTRIES]
            for path in self.paths:
                key = self._key(path)
                tree_kept = os.path.lexists(os.path.join(self.dir, key))
                known = tree_kept or key in marks.present or key in marks.missing
                if known and (tree_kept or not self.content or key in marks.missing):
                    continue
                if not known:
                    manifest.append(f"p {path}")
                if self._under_missing(path, marks):
                    mark(key, MISSING)
                    continue
                where = self._open_parent(path)
                if where is None:
                    mark(key, MISSING)
                    continue
                fd, name = where
                try:
                    if not (self.content or path in self.links):
                        mark(key, _identity(fd, name) or MISSING)
                        continue
                    held = marks.present.get(key)
                    if held is not None and self._not_held(key, _identity(fd, name), held):
                        # Held by a mount, but no longer the file the mount holds
                        # (a directory above renamed aside and rebuilt): not the
                        # original, so no copy of it; its identity decides.
                        continue
                    tree = read_tree(fd, name, budget)
                except TooLarge:
                    from ....errors import SandboxUnavailable

                    raise SandboxUnavailable(
                        f"{path} is too large for the landlock backend to keep a copy of "
                        f"(over {GUARD_MAX_BYTES >> 20} MiB, {GUARD_MAX_ENTRIES} entries "
                        f"or {GUARD_MAX_DEPTH} levels); without one it could not undo "
                        "changes to it. Use read-only mode or backend = \"bubblewrap\""
                    ) from None
                finally:
                    os.close(fd)
                if tree is None:
                    if not known:
                        mark(key, MISSING)
                else:
                    # A guard that keeps copies, joining a baseline a bubblewrap
                    # run recorded without them: the same file, held read-only
                    # until now, so as it is now it is the original.
                    write_tree(dir_fd, key, tree)
            for gitdir in self.gitdirs:
                key = self._key(gitdir) + ".git"
                if os.path.lexists(os.path.join(self.dir, key)):
                    continue
                manifest.append(f"g {gitdir}")
                _write(dir_fd, key, "\0".join(self._git_state(gitdir)))
        finally:
            os.close(dir_fd)
            self.fs.close()
            if new:  # before the manifest, which is what a later sweep goes by
                _Marks.append(self.dir, "".join(new))
        known_roots = set(self._recorded_roots())
        manifest += [f"r {root}" for root in self.roots if root not in known_roots]
        if self.tree is not None and self.tree.root not in self._recorded_trees():
            # What the tree had, for the next process should this one be killed.
            manifest.append(f"T {self.tree.root}")
            manifest += [f"e {repo}" for repo in sorted(self.tree.existing)]
        if manifest:
            with open(os.path.join(self.dir, "manifest"), "ab") as fh:
                fh.write(("\0".join(manifest) + "\0").encode("utf-8", "surrogateescape"))

    def _not_held(self, key: str, now: str, held: str) -> bool:
        """Whether what a held path's name shows now (`_identity`) is no longer the file
        its mount held: another file, or its name replaced, whatever inode number
        it got (a freed one is soon handed out again)."""
        return now != held or os.path.lexists(os.path.join(self.dir, key + ".replaced"))

    def _under_missing(self, path: str, marks: _Marks) -> bool:
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if self._key(parent) in marks.missing:
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
            if self.private is not None:
                self.private.close()
                self.private = None
            return done
        if self.watch is not None:
            self.watch.close()
        try:
            with _FileLock(self._snap_lock):
                # Also the roots `_open_parent` regains a closed directory through:
                # the last sweep's were closed, and a `.git` the command made mode
                # 000 kept its lock (and failed the merge after it).
                fs = self.fs = Roots(self.roots)
                try:
                    for step in (self._left_locks, self._merge_private):
                        try:
                            done += step(fs)
                        except Exception as exc:
                            # Never in the way of the sweep below: it is what
                            # takes out what the command left to run.
                            why = getattr(exc, "strerror", None) or type(exc).__name__
                            done.append(Neutralised(
                                self.roots[0] if self.roots else self.dir,
                                f"COULD NOT BE MERGED ({why}): check the git configs here"))
                finally:
                    fs.close()
                if self.watch is not None:
                    done += self._settled_during()
                created, configs = self.tree.drain() if self.tree is not None else ([], [])
                swept = self._sweep(self._recorded(), created=created, configs=configs)
                if self.watch is not None:
                    # A sweep covers every name of the baseline: what another
                    # guard's command made and its own watch had not settled
                    # yet was taken out here, and reported to that guard too.
                    self._share(swept)
                done += swept
                _remember_made(os.path.dirname(self.dir), self.dir, created)
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

    def _sweep(self, recorded: tuple[list[str], list[str]], seen: list[str] | None = None,
               created: list[str] | None = None, final: bool = True,
               configs: list[str] | None = None) -> list[Neutralised]:
        """Every path of the baseline back to what it was, every new repository made inert,
        every agent or editor config made below the top (`configs`) moved away.

        Covers every path the baseline knows, not only this command's: the
        command that created `.vscode` may be one still running, and the
        name must not be live longer than the first run that ends.
        """
        paths, gitdirs = recorded
        done: list[Neutralised] = []
        self.fs = Roots(self.roots)
        self._marks = _Marks.read(self.dir)
        # Repositories the person had are swept by their own entry below; one
        # the command made that leads to one of them must not "neutralise" it.
        self._seen = {os.path.normpath(g) for g in (gitdirs if seen is None else seen)}
        # While the command runs no index is read (`_gitlinks`): only the sweep
        # after it judges gitlinks, and an unreadable index.
        self._final = final
        try:
            for path in paths:
                self._attempt(self._settle, path, done)
            for gitdir in gitdirs:
                self._attempt(self._new_in_gitdir, gitdir, done)
            for dot_git in created or ():
                # Anywhere in the tree, found by the tree's watch (treewatch.py).
                self._attempt(self._created_repository, dot_git, done)
            for config in configs or ():
                self._attempt(self._created_config, config, done)
            for root in self.fs.paths:
                self._attempt(self._bare_shaped, root, done)
        finally:
            self.fs.close()
            self._final = True
        return done

    # -- reaching the workspace ----------------------------------------------------------

    def _open_parent(self, path: str) -> tuple[int, str] | None:
        """(fd of `path`'s directory, its name), reached beneath the writable root
        holding it with no link followed; None when no root holds it or the chain
        to it is broken."""
        where = self.fs.locate(path)
        if where is None or not where[1]:
            return None
        root, rel = where
        try:
            try:
                fd, name = root.parent(rel)
            except PermissionError:
                _regain(root.fd, root.path, rel.split("/")[:-1], self._modes)
                fd, name = root.parent(rel)
        except OSError:
            return None
        _regain(fd, os.path.dirname(path), [], self._modes)
        return fd, name

    def _kind(self, path: str) -> str:
        """`Root.kind` of `path` through the root holding it; "" when none holds it."""
        where = self.fs.locate(path)
        return where[0].kind(where[1]) if where is not None else ""

    def _listdir(self, path: str) -> list[str]:
        where = self.fs.locate(path)
        return where[0].listdir(where[1]) if where is not None else []

    def _head(self, path: str, size: int = 1 << 16) -> bytes:
        where = self.fs.locate(path)
        return where[0].head(where[1], size) if where is not None else b""

    def _config(self, path: str) -> list[gitmeta.Entry] | None:
        where = self.fs.locate(path)
        return gitmeta.read_config(*where) if where is not None else None

    def _gitlinks(self, index: str) -> list[str] | None:
        """An index's gitlinks; none while the command runs: an index is as large as
        the command makes it, and parsing one on the watch's thread held back the
        names behind it for seconds. The sweep after the run reads them all."""
        if not self._final:
            return []
        where = self.fs.locate(index)
        return gitmeta.index_gitlinks(*where) if where is not None else []

    def _pointer(self, path: str, base: str) -> str:
        """The path a pointer file (`gitdir: X`, `commondir`, a worktree's `gitdir`)
        names, resolved against `base` as git would follow it; "" when there is none.

        As git reads it: everything after the prefix, only the line ending
        dropped (a name with a trailing space is another name). Resolving
        links here only decides where git would go; acting there still goes
        through the roots, which follow none.
        """
        data = self._head(path)
        if path.endswith("/.git"):
            if not data.startswith(b"gitdir: "):
                return ""
            data = data[len(b"gitdir: "):]
        line = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "surrogateescape")
        if not line or "\x00" in line:
            return ""
        return os.path.realpath(os.path.join(base, line))

    # -- the sweep -------------------------------------------------------------------------

    def _bare_shaped(self, root: str, done: list[Neutralised]) -> None:
        """A writable root laid out as a bare repository is one to git.

        git asks whether the directory itself is a git directory (HEAD,
        objects, refs) before it looks for `.git`, so `HEAD`, `objects/`,
        `refs/` and a `config` written at the top of the workspace make the
        person's next `git status` there obey that config.
        """
        j = os.path.join
        if (self._kind(j(root, "HEAD")) == "file" and self._kind(j(root, "objects")) == "dir"
                and self._kind(j(root, "refs")) == "dir"
                and self._kind(j(root, "config")) == "file"):
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
        if not self.fs.holds(path):
            return  # outside every writable root: the command could not change it
        key = self._key(path)
        held = self._marks.present.get(key, "")
        missing = key in self._marks.missing
        kept = os.path.lexists(os.path.join(self.dir, key))
        where = self._open_parent(path)
        if not kept and held:
            # Held read-only by a mount: unchanged, unless it is no longer the
            # same file. Then the mount is gone and the command can write what
            # is there now: a directory above was renamed aside and rebuilt, or
            # a file took the name (the person's `git config` renames one in),
            # whatever inode number it got -- a freed one is soon handed out
            # again, and the command can make files until it gets it.
            if where is None:
                self._break_chain(path, done)
                return
            fd, name = where
            try:
                now = _identity(fd, name)
                if now and self._not_held(key, now, held):
                    self._neutralise(fd, name, path, done)
            finally:
                os.close(fd)
            return
        if where is None:
            self._break_chain(path, done)
            return
        fd, name = where
        try:
            exists = bool(_identity(fd, name))
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
            if self._merged_config(fd, name, path, want, have, done):
                return
            moved = self._quarantine(path) if have is not None else ""
            write_tree(fd, name, want)
            done.append(Neutralised(path, "restored: the command changed protected metadata",
                                    moved))
        finally:
            os.close(fd)

    def _merged_config(self, fd: int, name: str, path: str, want: object, have: object,
                       done: list[Neutralised]) -> bool:
        """A held repository's config the command changed (the Landlock backend): its
        inert changes kept, the rest dropped, as bubblewrap's private copy is merged
        (gitconfig.py). False when it is not such a config, or not one git reads."""
        from .gitconfig import is_config_of

        if not (isinstance(want, tuple) and isinstance(have, tuple) and want[0] == "f"
                and have[0] == "f" and is_config_of(path, self._seen)):
            return False
        base, ours = want[5], have[5]
        theirs = gitmeta.parse_config_bytes(ours)
        result = (gitpolicy.merge_config(gitmeta.parse_config_bytes(base) or [], theirs,
                                       gitmeta.config_text(base))
                  if theirs is not None else None)
        if result is None:
            return False
        text, _kept, dropped = result
        body = text.encode("utf-8", "surrogateescape")
        present = {entry.key for entry in theirs or ()}
        if body == ours or (not self._final and not present.intersection(dropped)):
            # While the command runs, only a key git would act on that is there
            # is worth racing its own next write for: ours could land over that
            # one. Not a key gone: a file read while it was being rewritten
            # (truncated, not yet written) lacks every key, and merging that
            # took the person's own keys away.
            return True
        # Replaced in one step, the command's version copied aside, never moved:
        # its git, reading the file between a removal and a rewrite, took it for
        # empty and wrote back a config without the person's keys.
        temp = f".stockade-new-{os.urandom(6).hex()}"
        write_tree(fd, temp, (*want[:5], body))
        try:
            # False when written again since it was read: that write's own event
            # settles it. What was dropped is still reported: the command's git
            # can have read the merge in the moment it stood, and written on it.
            _swap_in(fd, temp, name, ours)
        finally:
            remove_entry(fd, temp)
        moved = self._quarantine_copy(path, have) if dropped else ""
        if dropped:
            done.append(Neutralised.dropped(path, dropped, moved))
        return True

    def _neutralise(self, fd: int, name: str, path: str, done: list[Neutralised]) -> None:
        """A protected name that appeared during the run: make it inert, keep the work."""
        parent = os.path.dirname(path)
        if name == ".git":
            self._inert_repository(path, parent, done, 0)
        elif parent in self.gitdirs or os.path.basename(parent) == ".git":
            self._inert_git_entry(path, done)
        else:
            moved = self._quarantine(path)
            done.append(Neutralised(path, "created by the command: the person's tools would "
                                    "read or run it", moved))

    def _created_config(self, path: str, done: list[Neutralised]) -> None:
        """An agent or editor config made below the top (treewatch.py)."""
        self._move(path, done, "created by the command: the person's tools would read or "
                               "run it in that directory")

    def _created_repository(self, path: str, done: list[Neutralised]) -> None:
        """A `.git`, or a directory git takes for a git directory (treewatch.py)."""
        if os.path.basename(path) == ".git":
            self._inert_repository(path, os.path.dirname(path), done, 0)
        elif self._kind(path) == "dir":
            self._inert_gitdir(path, path, done, 0)

    def _inert_git_entry(self, path: str, done: list[Neutralised]) -> None:
        name = os.path.basename(path)
        if name in ("rebase-merge", "sequencer", "info"):
            self._kept_git_dir(path, done)
        elif name == "hooks":
            self._inert_hooks(path, done)
        elif name in gitpolicy.CONFIG_NAMES:
            self._inert_config(path, done)
        else:
            self._move(path, done, "git would follow it to another repository's config"
                       if name == "commondir" else "created by the command")

    def _kept_git_dir(self, path: str, done: list[Neutralised]) -> None:
        """A rebase left half done, or `info/`, in a repository the command touched:
        kept unless it runs something or would stop later commands.

        A plan with `exec` lines runs at the person's `git rebase --continue`. A
        link here, or more than `KEPT_MAX_BYTES`, made every later profile (a
        link cannot be held read-only) or Landlock baseline (too large to copy)
        refuse: one sparse file locked the person out of the workspace.
        """
        kind = self._kind(path)
        if not kind:
            return
        if kind != "dir":
            self._move(path, done, "not a directory git keeps there")
        elif os.path.basename(path) != "info" and self._plans_exec(path):
            self._move(path, done, "a rebase plan with exec lines")
        elif self._size(path) > KEPT_MAX_BYTES:
            self._move(path, done, f"more than {KEPT_MAX_BYTES >> 20} MiB of git metadata")

    def _size(self, path: str) -> int:
        """Bytes of `path`, or beneath it (by st_size, not read), counted until past
        KEPT_MAX_BYTES."""
        where = self.fs.locate(path)
        st = where[0].lstat(where[1]) if where is not None else None
        if where is None or st is None:
            return 0
        if st.st_mode & 0o170000 != 0o040000:
            return st.st_size
        root, rel = where
        total, stack, seen = 0, [rel], 0
        while stack and total <= KEPT_MAX_BYTES and seen < GUARD_MAX_ENTRIES:
            current = stack.pop()
            for name in root.listdir(current):
                seen += 1
                st = root.lstat(f"{current}/{name}")
                if st is None:
                    continue
                if st.st_mode & 0o170000 == 0o040000:
                    stack.append(f"{current}/{name}")
                total += st.st_size
        return total if seen < GUARD_MAX_ENTRIES else KEPT_MAX_BYTES + 1

    def _inert_repository(self, dot_git: str, worktree: str, done: list[Neutralised],
                          depth: int) -> None:
        """A `.git` the command made (dir or `gitdir:` file) keeps working, inert."""
        if depth > MAX_DEPTH:
            self._move(dot_git, done, f"a repository nested more than {MAX_DEPTH} deep")
            return
        kind = self._kind(dot_git)
        if kind == "link":
            self._move(dot_git, done, "a .git symlink the command created")
        elif kind == "file":
            target = self._pointer(dot_git, os.path.dirname(dot_git))
            if not target or self._kind(target) != "dir":
                # Pointing out of the workspace (into the command's own /tmp, or
                # at a repository of the person's whose config and hooks would
                # then run on this directory's content), or through a link.
                self._move(dot_git, done, "a .git pointer the command created to a git "
                           "directory outside the workspace")
                return
            self._inert_gitdir(target, worktree, done, depth)
        elif kind == "dir":
            self._inert_gitdir(dot_git, worktree, done, depth)

    def _inert_gitdir(self, gitdir: str, worktree: str, done: list[Neutralised],
                      depth: int) -> None:
        gitdir = os.path.normpath(gitdir)
        if gitdir in self._seen:
            return  # the person's (swept as such), or reached twice by a cycle of links
        self._seen.add(gitdir)
        for name in ("config", "config.worktree", "hooks", "commondir", "gitdir", "info",
                     "rebase-merge", "sequencer"):
            # A link where git reads its metadata: a later run that holds this
            # repository cannot mount it read-only, and refused to start.
            if self._kind(os.path.join(gitdir, name)) == "link":
                self._move(os.path.join(gitdir, name), done,
                           "a link where git reads its metadata")
        for name in gitpolicy.CONFIG_NAMES:
            if self._kind(os.path.join(gitdir, name)):
                self._attempt(self._inert_config, os.path.join(gitdir, name), done)
        self._attempt(self._inert_hooks, os.path.join(gitdir, "hooks"), done)
        common = os.path.join(gitdir, "commondir")
        if self._kind(common) and not self._commondir_is_main(gitdir):
            self._move(common, done, "git would follow it to another repository's config")
        for name in ("rebase-merge", "sequencer", "info"):
            self._attempt(self._kept_git_dir, os.path.join(gitdir, name), done)
        # Gitlinks are checked out where git puts this repository's worktree:
        # a (kept) core.worktree, a linked worktree's `gitdir` file, or beside it.
        worktree = self._worktree_of(gitdir) or worktree

        def nested(path: str, into: list[Neutralised]) -> None:
            self._inert_gitdir(path, worktree, into, depth + 1)

        def linked(dot_git: str, into: list[Neutralised]) -> None:
            self._inert_repository(dot_git, os.path.dirname(dot_git), into, depth + 1)

        for sub in ("worktrees", "modules"):
            for entry in self._listdir(os.path.join(gitdir, sub)):
                self._attempt(nested, os.path.join(gitdir, sub, entry), done)
        for link in self._gitlinks(os.path.join(gitdir, "index")) or ():
            self._attempt(linked, os.path.join(worktree, link, ".git"), done)

    def _new_in_gitdir(self, gitdir: str, done: list[Neutralised]) -> None:
        """In a repository that existed: the worktrees, modules and gitlinks that did not."""
        recorded = os.path.join(self.dir, self._key(gitdir) + ".git")
        if not os.path.lexists(recorded) or self._kind(gitdir) != "dir":
            return
        before = set(_read(recorded).split("\0"))
        now = self._git_state(gitdir)
        worktree = self._worktree_of(gitdir) or (
            os.path.dirname(gitdir) if os.path.basename(gitdir) == ".git" else "")
        for item in now:
            if item in before:
                continue
            kind, _, rest = item.partition(" ")
            name = rest.rpartition(" ")[0] if kind in ("wt", "mod") else rest
            if kind in ("wt", "mod"):
                sub = os.path.join(gitdir, "worktrees" if kind == "wt" else "modules", name)
                self._inert_gitdir(sub, worktree, done, 1)
            elif kind == "index" and self._gitlinks(os.path.join(gitdir, "index")) is None:
                # Changed, and git can read it but stockade cannot: the
                # gitlinks it holds are unknown, so it must not stay.
                self._move(os.path.join(gitdir, "index"), done,
                           "an index the command changed that stockade cannot read")
            elif kind == "link" and worktree:
                checkout = os.path.join(worktree, name)
                self._inert_repository(os.path.join(checkout, ".git"), checkout, done, 1)

    # -- the neutralisers --------------------------------------------------------------

    def _inert_config(self, path: str, done: list[Neutralised]) -> None:
        where = self._open_parent(path)
        if where is None:
            return
        fd, name = where
        try:
            kind = _kind_at(fd, name)
            if kind not in ("file", ""):
                moved = self._quarantine(path)
                done.append(Neutralised(path, "not a regular git config file", moved))
                return
            entries = self._config(path)
            given = (self.private.base if self.private is not None else self._given).get(path)
            merged = (gitpolicy.merge_config(gitmeta.parse_config_bytes(given) or [], entries,
                                           gitmeta.config_text(given))
                      if given is not None and entries is not None else None)
            if merged is not None:
                # The config the command was given is known (its private copy's):
                # what it changed since is merged as the copy would be, so a
                # remote the person had keeps its URL after their own write
                # detached the copy and the command wrote the file itself.
                text, _kept, removed = merged
            elif entries is None:
                text, removed = MINIMAL_CONFIG.decode(), ["everything (not parseable)"]
            else:
                gitdir = os.path.dirname(path)

                def inside(value: str) -> bool:
                    # Where git will go (links resolved), and beneath a root as named.
                    joined = os.path.join(gitdir, value)
                    return self.fs.holds(os.path.realpath(joined)) and self.fs.holds(joined)

                text, removed = gitpolicy.filter_config(entries, worktree_ok=inside)
            if not removed:
                return
            moved = self._quarantine(path)
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o644, dir_fd=fd)
            with open(out, "wb") as fh:
                fh.write(text.encode("utf-8", "surrogateescape"))
            done.append(Neutralised(path, "removed from a git config the command wrote: "
                                    + ", ".join(removed), moved))
        finally:
            os.close(fd)

    def _inert_hooks(self, hooks: str, done: list[Neutralised]) -> None:
        kind = self._kind(hooks)
        if not kind:
            return
        if kind != "dir":
            self._move(hooks, done, "not a hooks directory")
            return
        for entry in self._listdir(hooks):
            # Each on its own: one the command made impossible to move (an
            # unreadable directory sorted first) left every hook after it live.
            self._attempt(self._inert_hook, os.path.join(hooks, entry), done)

    def _inert_hook(self, path: str, done: list[Neutralised]) -> None:
        if path.endswith(gitpolicy.SAMPLE_SUFFIX):
            # git never runs a sample; one that is not a small file is not
            # git's, and only weighs on the Landlock baseline's copy.
            if self._kind(path) == "file" and self._size(path) <= SAMPLE_MAX_BYTES:
                return
            self._move(path, done, "not a sample git ships")
            return
        done.append(Neutralised(path, "a git hook the command created", self._quarantine(path)))

    def _move(self, path: str, done: list[Neutralised], what: str) -> None:
        if self._kind(path):
            done.append(Neutralised(path, what, self._quarantine(path)))

    def _quarantine(self, path: str) -> str:
        """Move `path` out of the workspace into the quarantine; where it went ("" if lost)."""
        where = self.fs.locate(path)
        if where is None or not where[1]:
            return ""
        root, rel = where
        return self._into_quarantine(path, lambda q, item: root.move_to(rel, q, item),
                                     lambda: root.remove(rel))

    def _quarantine_copy(self, path: str, tree: tuple[object, ...]) -> str:
        """A copy of `tree`, what `path` holds, in the quarantine; where it went."""

        def put(quarantine: Root, item: str) -> bool:
            fd, name = quarantine.parent(item)
            try:
                write_tree(fd, name, tree)
            finally:
                os.close(fd)
            return True

        return self._into_quarantine(path, put)

    def _into_quarantine(self, path: str, put: Callable[[Root, str], bool],
                         remove: Callable[[], None] | None = None) -> str:
        """A fresh quarantine entry for `path`, filled by `put(quarantine, item)`.

        The destination is stockade's own name (a fresh directory, `item`
        inside it, the original path beside it in `origin`), never one made of
        the command's names: a relative path built from them once led out of
        the quarantine. Past `QUARANTINE_PER_PATH` entries for one path in one
        run, what would be kept is not (`remove` frees the name instead): a
        command rewriting a config in a loop filled the state directory with
        thousands of copies a second.
        """
        kept = self._quarantined.get(path, 0)
        if kept >= QUARANTINE_PER_PATH:
            if remove is not None:
                remove()
            return ""
        self._quarantined[path] = kept + 1
        os.makedirs(self.quarantine, mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        entry = f"{stamp}-{os.urandom(4).hex()}"
        with Root(self.quarantine) as quarantine:
            os.mkdir(entry, 0o700, dir_fd=quarantine.fd)
            quarantine.create(f"{entry}/origin", path.encode("utf-8", "surrogateescape") + b"\n",
                              0o600)
            kept = False
            try:
                kept = put(quarantine, f"{entry}/item")
            finally:
                if not kept:
                    # An entry without its item (the path gone first, to a
                    # concurrent sweep) would name a file the quarantine lacks.
                    quarantine.remove(entry)
        return os.path.join(self.quarantine, entry, "item") if kept else ""

    def _break_chain(self, path: str, done: list[Neutralised]) -> None:
        """A directory above `path` is no longer a real directory: move the impostor."""
        where = self.fs.locate(path)
        if where is None:
            return
        root, rel = where
        current = ""
        for part in rel.split("/")[:-1]:
            current = f"{current}/{part}" if current else part
            kind = root.kind(current)
            if kind not in ("dir", ""):
                self._move(root.join(current), done,
                           "replaced a directory holding protected metadata")
                return
            if not kind:
                return  # gone: nothing under it can run

    # -- reading a repository ----------------------------------------------------------

    def _git_state(self, gitdir: str) -> list[str]:
        """What a repository holds that leads git elsewhere: worktrees, modules, gitlinks.

        Worktrees and modules by name and identity: one renamed aside and rebuilt
        under the same name is a new one. Gitlinks read afresh from the index and
        the shared index it names, never from a cache a command could satisfy
        with `touch -d`.
        """
        state: list[str] = []
        where = self.fs.locate(gitdir)
        if where is None:
            return state
        root, rel = where

        def j(*names: str) -> str:
            return "/".join(x for x in (rel, *names) if x)

        for kind, sub in (("wt", "worktrees"), ("mod", "modules")):
            for entry in root.listdir(j(sub)):
                st = root.lstat(j(sub, entry))
                if st is not None:
                    state.append(f"{kind} {entry} {st.st_dev}:{st.st_ino}")
        if self._final:
            state += [f"link {p}" for p in gitmeta.index_gitlinks(root, j("index")) or ()]
        st = root.lstat(j("index"))
        if st is not None:
            state.append(f"index {st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_size}")
        return state

    def _worktree_of(self, gitdir: str) -> str:
        """Where git checks this repository out, when it says so itself.

        As git decides it: a `gitdir` file only in a linked worktree's directory
        (`worktrees/<id>`; anywhere else git ignores it, and so must this, or a
        planted one sends the check to a decoy); then `core.worktree`, from
        `config.worktree` over `config` when extensions.worktreeConfig is on.
        A worktree outside the writable roots is one the guard does not act in.
        """
        if os.path.basename(os.path.dirname(gitdir)) == "worktrees":
            target = self._pointer(os.path.join(gitdir, "gitdir"), gitdir)
            if target:
                return os.path.dirname(target)
        entries = self._config(os.path.join(gitdir, "config")) or []
        worktree = ""
        per_worktree = False
        for entry in entries:
            if entry.key == "core.worktree":
                worktree = entry.value
            elif entry.key == "extensions.worktreeconfig":
                per_worktree = entry.value.lower() in ("true", "yes", "on", "1")
        if per_worktree:
            for entry in self._config(os.path.join(gitdir, "config.worktree")) or ():
                if entry.key == "core.worktree":
                    worktree = entry.value
        return os.path.realpath(os.path.join(gitdir, worktree)) if worktree else ""

    def _plans_exec(self, path: str) -> bool:
        for todo in ("git-rebase-todo", "todo", "done"):
            for line in self._head(os.path.join(path, todo), 1 << 20).splitlines():
                word = line.strip().split(b" ", 1)[0]
                if word in (b"x", b"exec"):
                    return True
        return False

    def _commondir_is_main(self, gitdir: str) -> bool:
        """A linked worktree's commondir must lead back to the repository that holds it."""
        parent = os.path.dirname(gitdir)
        if os.path.basename(parent) != "worktrees":
            return False
        target = self._pointer(os.path.join(gitdir, "commondir"), gitdir)
        return bool(target) and target == os.path.realpath(os.path.dirname(parent))


def _made_file(base: str, key_dir: str) -> str:
    return os.path.join(base, os.path.basename(key_dir) + ".made")


def _remember_made(base: str, key_dir: str, made: list[str]) -> None:
    """Keep, past the baseline, which repositories commands made (held by the
    baseline's lock): a later process's walk must not take them for the person's."""
    path = _made_file(base, key_dir)
    known = set(_read(path).split("\0")) - {""} if os.path.exists(path) else set()
    keep = sorted(p for p in known | set(made) if os.path.lexists(p))
    if keep or known:
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write("\0".join(keep).encode("utf-8", "surrogateescape"))
        os.replace(tmp, path)


def made_by_commands(state_dir: str, workspace: str, found: set[str]) -> set[str]:
    """Of the repositories `found` beneath `workspace` by a fresh walk, those commands
    made: remembered as made, or missing from what a live or killed run's
    baseline recorded as existing.

    A second process's walk, while the first one's command ran, found the
    repository that command had just made and held it as the person's: the
    first one's sweep then skipped it, and its fsmonitor stayed armed.
    """
    from ....paths import sha256_hex

    base = os.path.join(state_dir, "guard")
    key_dir = os.path.join(base, sha256_hex(os.fsencode(workspace))[:32])
    made = found & set(_read(_made_file(base, key_dir)).split("\0")) \
        if os.path.exists(_made_file(base, key_dir)) else set()
    try:
        with open(os.path.join(key_dir, "manifest"), "rb") as fh:
            lines = fh.read().decode("utf-8", "surrogateescape").split("\0")
    except OSError:
        return made
    if f"T {workspace}" in lines:
        made |= found - {line[2:] for line in lines if line.startswith("e ")}
    return made


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


def _kind_at(dir_fd: int, name: str) -> str:
    import stat

    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return ""
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "other"


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


#: Quarantine entries one path gets in one run; the first ones hold the person's
#: version and the command's first, the rest are the same loop again.
QUARANTINE_PER_PATH = 50

#: Milliseconds a merge waits for the command's git to finish writing the file.
LOCK_WAITS = 50


def _swap_in(fd: int, temp: str, name: str, ours: bytes) -> bool:
    """Put `temp` at `name` if `name` still holds `ours`; True if it did.

    A write the command lands after `ours` was read is never undone: what a
    swap displaced that is newer goes back, as does anything that landed on
    the name meanwhile (the command's next `git config` would otherwise
    silently lose its keys). A git mid-write (holding `config.lock`) is waited
    for, briefly: its write would land between the look and the swap, and
    the next git, reading before the swap-back, would build on `temp`. Never
    under git's lock: a `git config` of the command's that met it failed.
    """
    for _ in range(LOCK_WAITS):
        if _inode(fd, name + ".lock") is None:
            break
        time.sleep(0.001)  # a lock the command keeps only delays the swap
    if _read_at(fd, name) != ours:
        return False  # the usual case of a newer write, seen before anything is moved
    placed = _inode(fd, temp)
    try:
        exchange(fd, temp, name)
    except OSError:
        # No exchange on this file system: the check just before narrows the race.
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return True
    if _read_at(fd, temp) == ours:
        return True
    for _ in range(8):
        newest = _inode(fd, temp)
        exchange(fd, temp, name)
        if _inode(fd, temp) == placed:
            break  # nothing landed meanwhile: the newest is back at its name
        placed = newest
    return False


def _owner_modes(paths: list[str]) -> dict[str, int]:
    """The owner bits of each existing directory that holds one of `paths`."""
    out: dict[str, int] = {}
    for parent in {os.path.dirname(p) for p in paths}:
        try:
            out[parent] = os.lstat(parent).st_mode & 0o700
        except OSError:
            pass
    return out


def _regain(fd: int, path: str, parts: list[str], modes: dict[str, int]) -> None:
    """Give the directories `parts` lead to beneath `fd` (at `path`; `fd` itself when
    there are none) back the owner bits they had when the command started (all of
    them for one it made), where this user owns them and is not root.

    Landlock does not mediate chmod: a command that took the write bit off
    `.git` left the guard unable to put anything back or take anything away
    there, and its fsmonitor stayed for the person's next `git status`. A
    mode the person chose (`chmod 555 .git`) is theirs, and stays.
    """
    import stat

    if os.geteuid() == 0:
        return  # nothing a mode bit can refuse
    here = fd
    try:
        for part in [*parts, ""]:
            st = os.fstat(here)
            want = modes.get(path, 0o700)
            if st.st_uid == os.geteuid() and want & ~st.st_mode:
                os.chmod(f"/proc/self/fd/{here}", stat.S_IMODE(st.st_mode) | want)
            if not part:
                break
            path = os.path.join(path, part)
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=here)
            if here != fd:
                os.close(here)
            here = nxt
    except OSError:
        pass  # the settle that follows fails, and says so
    finally:
        if here != fd:
            os.close(here)


def _inode(fd: int, name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _read_at(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return None
    with open(fd, "rb") as fh:
        return fh.read(gitmeta.MAX_CONFIG_BYTES + 1)


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "surrogateescape")
    except OSError:
        return ""


def _touch(dir_fd: int | None, name: str) -> None:
    os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd))


class _Marks:
    """What a baseline knows of each protected path it keeps no copy of, by key: the
    identity (`_identity`) of a file a mount holds, and whether it was missing.

    One file of `KEY STATE` lines for every path rather than a file per path:
    the baseline is taken afresh before most commands, and a file per name
    was most of its cost. A key may carry both (a guard keeping copies found
    a held path's directory gone); the identity then decides, as it did.
    """

    NAME = "marks"

    def __init__(self) -> None:
        self.present: dict[str, str] = {}
        self.missing: set[str] = set()

    def add(self, key: str, state: str) -> None:
        if state == MISSING:
            self.missing.add(key)
        else:
            self.present.setdefault(key, state)

    @classmethod
    def read(cls, base: str) -> _Marks:
        """The marks of the baseline in `base`: its file, and the files of one an
        earlier stockade took (`KEY.missing`, `KEY.present`), which a run killed
        before an upgrade leaves for the next one to sweep."""
        marks = cls()
        try:
            with open(os.path.join(base, cls.NAME), "rb") as fh:
                # Whole lines only: what follows the last newline was cut.
                lines = fh.read().decode("ascii", "replace").split("\n")[:-1]
        except OSError:
            lines = []
        for line in lines:
            key, _, state = line.partition(" ")
            if _is_key(key) and (state == MISSING or _is_identity(state)):
                marks.add(key, state)
        try:
            names = os.listdir(base)
        except OSError:
            names = []
        for name in names:
            key, _, suffix = name.partition(".")
            if suffix == "missing" and _is_key(key):
                marks.add(key, MISSING)
            elif suffix == "present" and _is_key(key):
                ident = _read(os.path.join(base, name))
                if _is_identity(ident):
                    marks.add(key, ident)
        return marks

    @classmethod
    def append(cls, base: str, lines: str) -> None:
        """Add `lines` in one write, or nothing: a record cut short (a full disk) is
        taken back, and one a crash cut is ended first, so that no record after
        it is read as part of it."""
        fd = os.open(os.path.join(base, cls.NAME),
                     os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            end = os.fstat(fd).st_size
            data = lines.encode("ascii")
            if end and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            try:
                if os.write(fd, data) != len(data):
                    import errno

                    raise OSError(errno.ENOSPC, "the baseline's marks were cut short")
            except OSError:
                os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)


def _is_key(text: str) -> bool:
    return len(text) == 24 and all(c in "0123456789abcdef" for c in text)


def _is_identity(text: str) -> bool:
    parts = text.split(":")
    return len(parts) == 3 and all(p.isdigit() for p in parts)


class _FileLock:
    """An exclusive flock held for a `with` block."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> _FileLock:
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(self.fd)
            # Without it two commands on one workspace would settle each
            # other's baselines: refused rather than run unguarded.
            from ....errors import SandboxUnavailable

            raise SandboxUnavailable(
                f"cannot lock {self.path}: {exc.strerror}; stockade's state directory must "
                "be on a filesystem with locks (set XDG_STATE_HOME to a local directory)"
            ) from exc
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
