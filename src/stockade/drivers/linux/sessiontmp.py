"""A session's /tmp as one tmpfs of `tmp_size_mb`, shared by all its commands.

A session's /tmp used to be a directory on the host, bound into each
command's sandbox: each file was bounded by `max_file_size_mb`, their sum by
nothing, and a command filled the filesystem holding the user's home 16 MiB
at a time. A fresh tmpfs per command is bounded, but a session's /tmp must
outlive its commands.

So the session gets a mount namespace of its own, a copy of the host's with
a size-capped tmpfs over the session's /tmp directory, and every bwrap of
the session starts inside it (`wrap`), where binding that directory at
/tmp binds the tmpfs. The namespace is kept by two descriptors stockade
holds, not by a process: the bwrap that made it has exited before the first
command runs, and when stockade exits or is killed the kernel closes them
and frees the tmpfs with the last command. Nothing is left on the host: the
host's directory stays empty, and no mount or process outlives stockade.

An unprivileged user needs a user namespace to own the mount namespace
(which bwrap makes, mapping the user to itself, exactly as for a command);
root makes the mount namespace alone, since a user namespace mapping only
uid 0 would show every other user's files as nobody's, and root inside it
could no longer write them.
"""

from __future__ import annotations

import os

#: util-linux, as setpriv and unshare: joins namespaces, then execs.
NSENTER = "/usr/bin/nsenter"


class SessionTmp:
    """The namespace holding one session's bounded /tmp."""

    def __init__(self, bwrap: str, path: str, size_mb: int) -> None:
        from ...errors import SandboxUnavailable
        from ...process import Process

        self.path = path
        self.size_mb = size_mb
        self._own_user = os.geteuid() != 0
        argv = [bwrap, *(["--unshare-user"] if self._own_user else []), "--die-with-parent",
                "--dev-bind", "/", "/", "--size", str(size_mb << 20), "--perms", "0700",
                "--tmpfs", path, "--", "/bin/sh", "-c", 'echo "$$" && read -r _']
        proc = Process(argv, {"PATH": "/usr/bin:/bin"})
        self._fds: list[int] = []
        try:
            line = _read_line(proc.stdout_r)
            if not line.isdigit():
                proc.kill()
                proc.wait()
                err = os.read(proc.stderr_r, 4096).decode("utf-8", "replace").strip()
                raise SandboxUnavailable(f"cannot make the session's /tmp: {err or 'bwrap failed'}")
            # The shell waits on its stdin, so its pid is its own until we close it.
            kinds = ("user", "mnt") if self._own_user else ("mnt",)
            for kind in kinds:
                self._fds.append(os.open(f"/proc/{line}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC))
        except BaseException:
            self.close()
            raise
        finally:
            proc.close()  # EOF on its stdin: the shell, then bwrap, exit
            proc.wait()

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started inside the session's namespace.

        nsenter opens the namespaces through this process's own descriptor
        table, so they are never inherited: a descriptor of the namespace
        reaching the command is a way out of its own.
        """
        me = os.getpid()
        joins = [f"--user=/proc/{me}/fd/{self._fds[0]}", f"--mount=/proc/{me}/fd/{self._fds[1]}",
                 "--preserve-credentials"] if self._own_user else [
                 f"--mount=/proc/{me}/fd/{self._fds[0]}"]
        return [NSENTER, *joins, "--", *argv]

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def usable(bwrap_has_size: bool) -> str | None:
    """Why a session's /tmp cannot be one bounded tmpfs here, or None if it can."""
    if not bwrap_has_size:
        return "this bwrap has no --size (0.10 or newer has)"
    if not os.access(NSENTER, os.X_OK):
        return f"{NSENTER} (util-linux) is missing"
    return None
