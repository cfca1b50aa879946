"""Seeding a node's workspace from the caller's bytes, and reading it back.

The workspace is written by the adversary: a command may leave a symlink
where the caller expects a file, and a read that followed it would hand the
caller any file the node's user can read. So every path is walked one
component at a time with O_NOFOLLOW beneath the workspace, and tarballs go
through tarfile's `data` filter (no absolute names, no links out, no devices).
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import TYPE_CHECKING

from ..errors import InvalidCommand

if TYPE_CHECKING:
    from collections.abc import Mapping

#: What one read-back may return: the caller's memory, not the node's disk, is the limit.
MAX_READ_BYTES = 64 << 20


def _parts(rel: str) -> list[str]:
    if "\x00" in rel or rel.startswith("/"):
        raise InvalidCommand(f"workspace path {rel!r} must be relative, without NUL")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise InvalidCommand(f"workspace path {rel!r} must name a file inside the workspace")
    return parts


def _open_dir_beneath(root: str, parts: list[str], create: bool) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise InvalidCommand(f"{'/'.join(parts)}: not a directory inside the workspace "
                             f"({exc.strerror})") from exc
    return fd


def write_files(root: str, files: Mapping[str, bytes]) -> None:
    for rel, data in files.items():
        parts = _parts(rel)
        dfd = _open_dir_beneath(root, parts[:-1], create=True)
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o644, dir_fd=dfd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(bytes(data))
        finally:
            os.close(dfd)


def read_files(root: str, paths: list[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    for rel in paths:
        parts = _parts(rel)
        dfd = _open_dir_beneath(root, parts[:-1], create=False)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as exc:
            raise InvalidCommand(f"{rel}: cannot read it in the workspace ({exc.strerror}; "
                                 "a symlink is never followed)") from exc
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as fh:
            import stat

            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InvalidCommand(f"{rel}: not a regular file")
            data = fh.read(MAX_READ_BYTES - total + 1)
        total += len(data)
        if total > MAX_READ_BYTES:
            raise InvalidCommand(f"read-back over {MAX_READ_BYTES} bytes: ask for fewer files, "
                                 "or use export()")
        out[rel] = data
    return out


def extract_tarball(root: str, data: bytes) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        try:
            tar.extractall(root, filter="data")
        except tarfile.FilterError as exc:
            raise InvalidCommand(f"tarball refused: {exc}") from exc


def make_tarball(root: str) -> bytes:
    """The workspace as a gzip tarball; symlinks stored as links, never followed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", dereference=False) as tar:
        for name in sorted(os.listdir(root)):
            tar.add(os.path.join(root, name), arcname=name, recursive=True)
    return buf.getvalue()
