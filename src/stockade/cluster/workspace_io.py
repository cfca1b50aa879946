"""Seeding a node's workspace from the caller's bytes, and reading it back.

The workspace is written by the adversary: a session reopened under its id
finds whatever its commands left, and a background command may still be
changing it while it is read back. So every operation goes through a
`fsroot.Root` of the workspace: names are checked with `check_name`, no
symlink is followed on the way or at the end, a read never waits on a FIFO
and stops at a cap, and a write replaces the entry at its name instead of
opening it. Tarballs are unpacked member by member the same way, not by
`tarfile`'s extraction, which opens what is already at a member's name.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from typing import TYPE_CHECKING

from .. import fsroot
from ..capabilities import within
from ..errors import InvalidCommand

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: What one read-back may return: the caller's memory, not the node's disk, is the limit.
MAX_READ_BYTES = 64 << 20
#: What one export may hold before compression, a tar header per entry included.
MAX_EXPORT_BYTES = 256 << 20
#: How deep an export goes: each level holds one directory open.
MAX_EXPORT_DEPTH = 256
_HEADER = 512


def _checked(rel: str) -> str:
    try:
        return fsroot.check_name(rel)
    except fsroot.UnsafeName as exc:
        raise InvalidCommand(f"workspace path {rel!r} must name a file inside the workspace "
                             f"({exc})") from exc


def _member_name(name: str) -> str:
    """A tar member's name as a workspace path ("" for the root itself), or refused.

    `./` and a directory's trailing `/` are how tar spells names, so they are
    taken off; what is left must stay beneath the workspace.
    """
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if name in ("", "."):
        return ""
    try:
        return fsroot.check_name(name)
    except fsroot.UnsafeName as exc:
        raise InvalidCommand(f"tarball refused: {exc}") from exc


def write_files(root: str, files: Mapping[str, bytes]) -> None:
    with fsroot.Root(root) as ws:
        for rel, data in files.items():
            _checked(rel)
            head = rel.rpartition("/")[0]
            try:
                if head:
                    ws.makedirs(head, 0o755)
                ws.replace(rel, bytes(data))
            except OSError as exc:
                raise InvalidCommand(f"{rel}: cannot write it inside the workspace "
                                     f"({exc.strerror}; a symlink is never followed)") from exc


def read_files(root: str, paths: list[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    with fsroot.Root(root) as ws:
        for rel in paths:
            _checked(rel)
            try:
                data = ws.read(rel, MAX_READ_BYTES - total)
            except OSError as exc:
                if exc.errno == errno.EFBIG:
                    raise InvalidCommand(f"read-back over {MAX_READ_BYTES} bytes: ask for fewer "
                                         "files, or use export()") from exc
                if exc.errno == errno.EINVAL:
                    raise InvalidCommand(f"{rel}: not a regular file") from exc
                raise InvalidCommand(f"{rel}: cannot read it in the workspace ({exc.strerror}; "
                                     "a symlink is never followed)") from exc
            total += len(data)
            out[rel] = data
    return out


def extract_tarball(root: str, data: bytes) -> None:
    """Unpack the caller's tarball into the workspace: directories, regular files, and
    links that stay inside it; anything else is refused."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar, fsroot.Root(root) as ws:
            for member in tar:
                _extract(tar, ws, member)
    except tarfile.TarError as exc:
        raise InvalidCommand(f"tarball refused: {exc}") from exc
    except OSError as exc:
        raise InvalidCommand(f"tarball refused: {exc.strerror or exc} (a symlink already in "
                             "the workspace is never followed)") from exc


def _extract(tar: tarfile.TarFile, ws: fsroot.Root, member: tarfile.TarInfo) -> None:
    rel = _member_name(member.name)
    if not rel:
        return
    head = rel.rpartition("/")[0]
    if member.isdir():
        ws.makedirs(rel, 0o755)
        return
    if head:
        ws.makedirs(head, 0o755)
    if member.isreg():
        src = tar.extractfile(member)
        assert src is not None  # a regular member always has its bytes
        # As tarfile's `data` filter: no set-id bits, nothing writable by others.
        ws.replace(rel, src.read(), (member.mode & 0o755) | 0o600)
        fd, name = ws.parent(rel)
        try:
            os.utime(name, (member.mtime, member.mtime), dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
    elif member.issym():
        target = member.linkname
        # Lexically inside is not inside once links already placed are followed
        # (`d/p -> ..`, then `l -> d/p/..`): a target that climbs is refused.
        if target.startswith("/") or ".." in target.split("/") or within(
                os.path.join(ws.path, head, target), ws.path) is None:
            raise InvalidCommand(f"tarball refused: {member.name} links outside the "
                                 f"workspace, to {target}")
        _place(ws, rel, lambda fd, tmp: os.symlink(target, tmp, dir_fd=fd))
    elif member.islnk():
        source = _member_name(member.linkname)
        if not source or ws.kind(source) != "file":
            raise InvalidCommand(f"tarball refused: {member.name} is a hard link to "
                                 f"{member.linkname}, not to a file unpacked before it")
        sfd, sname = ws.parent(source)
        try:
            _place(ws, rel, lambda fd, tmp: os.link(sname, tmp, src_dir_fd=sfd, dst_dir_fd=fd,
                                                    follow_symlinks=False))
        finally:
            os.close(sfd)
    else:
        raise InvalidCommand(f"tarball refused: {member.name} is not a file, a directory "
                             "or a link")


def _place(ws: fsroot.Root, rel: str, make: Callable[[int, str], None]) -> None:
    """Make an entry under a fresh name beside `rel` with `make(dir_fd, name)`, then
    rename it over whatever is at `rel`, which is never opened."""
    fd, name = ws.parent(rel)
    try:
        tmp = f".stockade-new-{os.urandom(6).hex()}"
        make(fd, tmp)
        try:
            os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def make_tarball(root: str) -> bytes:
    """The workspace as a gzip tarball: links stored as links, FIFOs, sockets and devices
    left out, and no more than MAX_EXPORT_BYTES of it.

    Each entry is read as it is found, through descriptors: one a command
    swapped for a link or a FIFO since it was listed is left out, never
    followed or waited on.
    """
    buf = io.BytesIO()
    budget = [MAX_EXPORT_BYTES]
    with fsroot.Root(root) as ws, tarfile.open(fileobj=buf, mode="w:gz") as tar:
        _add_dir(tar, ws, "", budget, 0)
    return buf.getvalue()


def _over() -> InvalidCommand:
    return InvalidCommand(f"the workspace is over {MAX_EXPORT_BYTES} bytes to export: "
                          "read what is needed with read_files() instead")


def _charge(budget: list[int], size: int) -> None:
    budget[0] -= _HEADER + size
    if budget[0] < 0:
        raise _over()


def _add_dir(tar: tarfile.TarFile, d: fsroot.Root, prefix: str, budget: list[int],
             depth: int) -> None:
    for name in d.listdir():
        arcname = prefix + name
        st = d.lstat(name)
        if st is None:
            continue  # gone since it was listed
        info = tarfile.TarInfo(arcname)
        info.mode = stat.S_IMODE(st.st_mode)
        info.mtime = int(st.st_mtime)
        info.uid, info.gid = st.st_uid, st.st_gid
        if stat.S_ISREG(st.st_mode):
            try:
                data = d.read(name, max(budget[0] - _HEADER, 0))
            except OSError as exc:
                if exc.errno == errno.EFBIG:
                    raise _over() from exc
                if exc.errno in (errno.ENOENT, errno.ELOOP, errno.EXDEV, errno.EINVAL,
                                 errno.ENXIO, errno.ENOTDIR):
                    continue  # no longer a regular file at that name
                raise InvalidCommand(f"{arcname}: cannot read it to export "
                                     f"({exc.strerror})") from exc
            _charge(budget, len(data))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        elif stat.S_ISLNK(st.st_mode):
            try:
                fd, link = d.parent(name)
                try:
                    info.linkname = os.readlink(link, dir_fd=fd)
                finally:
                    os.close(fd)
            except OSError:
                continue
            info.type = tarfile.SYMTYPE
            _charge(budget, len(info.linkname))
            tar.addfile(info)
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_EXPORT_DEPTH:
                raise InvalidCommand(f"{arcname}: the workspace is over {MAX_EXPORT_DEPTH} "
                                     "directories deep to export")
            try:
                sub = d.sub(name)
            except OSError:
                continue  # no longer a directory at that name
            info.type = tarfile.DIRTYPE
            _charge(budget, 0)
            tar.addfile(info)
            with sub:
                _add_dir(tar, sub, arcname + "/", budget, depth + 1)
