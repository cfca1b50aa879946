"""A session's own namespaces: its /tmp as one bounded tmpfs, and one loopback.

A session's /tmp must outlive its commands and be bounded as a whole (a
directory on the host bound into each sandbox bounded each file alone, and
a command could fill the filesystem holding the user's home); a server one
command starts (`npm run dev` in the background) must be reachable from the
session's next command, which a network namespace per command forbids.

So the session gets namespaces of its own: a mount namespace, a copy of the
host's with a tmpfs over the session's /tmp directory, and a network
namespace with only `lo`. Every bwrap of the session starts inside the
mount namespace (`enter`), where binding that directory at /tmp binds the
tmpfs; a command with network none under bubblewrap also joins the network
namespace instead of making one. The namespaces are kept by descriptors
stockade holds, not by a process: the helper that made them has exited
before the first command runs, and when stockade exits or is killed the
kernel closes them and frees the tmpfs with the last command. Nothing is
left on the host: the host's directory stays empty, and no mount, process
or interface outlives stockade.

An unprivileged user needs a user namespace to own them, mapping the user
to itself, as bwrap does for a command; root makes them alone, since a user
namespace mapping only uid 0 would show every other user's files as
nobody's, and root inside it could no longer write them.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ....profile import Profile
    from ...session import Session

#: util-linux, as setpriv: joins namespaces, then execs.
NSENTER = "/usr/bin/nsenter"

#: Inodes per MiB of the tmpfs. Its size bounds the pages, not the inodes: a
#: million empty directories in a 16 MiB session /tmp used no page and kept
#: 1.5 GB of kernel memory until the session closed. One per 4 KiB page.
INODES_PER_MB = 256

#: The helper, run once per session with the init's interpreter (`-I -S`):
#: unshare, map the user to itself (unprivileged), bring up `lo`, follow the
#: host's mounts where they propagate, mount the tmpfs (unless its options
#: are empty: /tmp unbounded by config), say its pid and whether it made a
#: user namespace, wait for its stdin to close. Not bwrap's `--size --tmpfs`:
#: bwrap before 0.10 has no size, and none has an inode count. Root without
#: CAP_SYS_ADMIN (a container's) cannot make the namespaces alone and makes
#: them in a user namespace mapping root to itself, as bwrap does there.
HELPER = r"""
import ctypes, fcntl, os, socket, struct, sys
path, options, own_user = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
libc = ctypes.CDLL(None, use_errno=True)
def check(result, what):
    if result != 0:
        sys.stderr.write(f"stockade-session: {what}: {os.strerror(ctypes.get_errno())}\n")
        sys.exit(1)
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER, EPERM = 0x20000, 0x40000000, 0x10000000, 1
MS_NOSUID, MS_NODEV, MS_REC, MS_SLAVE = 2, 4, 0x4000, 0x80000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
uid, gid = os.getuid(), os.getgid()
if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if own_user else 0)) != 0:
    if own_user or ctypes.get_errno() != EPERM:
        check(-1, "unshare")
    own_user = True
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUSER), "unshare")
if own_user:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifreq = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
    flags = struct.unpack_from("16sH", ifreq)[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
except OSError as exc:
    sys.stderr.write(f"stockade-session: bring up lo: {exc.strerror}\n")
    sys.exit(1)
check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "make / a slave")
if options:
    check(libc.mount(b"stockade-tmp", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV,
                     options.encode()), "mount the tmpfs")
print(os.getpid(), "user" if own_user else "mount", flush=True)
sys.stdin.buffer.read()
"""


class SessionNamespace:
    """The namespaces of one session: its /tmp (bounded when `size_mb`) and its loopback."""

    def __init__(self, python: str, path: str, size_mb: int | None) -> None:
        from ....errors import SandboxUnavailable
        from ....process import Process

        self.path = path
        self.size_mb = size_mb
        options = (f"size={size_mb << 20},nr_inodes={size_mb * INODES_PER_MB},mode=0700"
                   if size_mb else "")
        proc = Process([python, "-I", "-S", "-c", HELPER, path, options,
                        "1" if os.geteuid() != 0 else "0"], {"PATH": "/usr/bin:/bin"})
        self._fds: dict[str, int] = {}
        try:
            pid, _, made = _read_line(proc.stdout_r).partition(" ")
            if not pid.isdigit() or made not in ("user", "mount"):
                proc.kill()  # its stderr ends with it
                err = os.read(proc.stderr_r, 4096).decode("utf-8", "replace").strip()
                raise SandboxUnavailable(f"cannot make the session's namespaces: "
                                         f"{err or 'no answer'}")
            # The helper waits on its stdin, so its pid is its own until we close it.
            kinds = ("user", "mnt", "net") if made == "user" else ("mnt", "net")
            for kind in kinds:
                self._fds[kind] = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            #: The inode of the user namespace its commands join, 0 for none.
            self.user_namespace = os.fstat(self._fds["user"]).st_ino if "user" in self._fds else 0
        except BaseException:
            self.close()
            raise
        finally:
            proc.close()  # end-of-file on its stdin: the helper exits
            proc.wait()

    def enter(self, argv: list[str], *, net: bool = False) -> tuple[list[str], list[int]]:
        """`argv` started inside the session's namespaces (its network namespace too
        when `net`), and descriptors the launch must close once it has started.

        nsenter opens the namespaces through this process's descriptor table,
        so they are never inherited: a descriptor of the namespace reaching the
        command is a door out of its own. The launch's own duplicates: a
        session closed meanwhile cannot close them, nor a new one reuse their
        numbers for its namespace.
        """
        kinds = [kind for kind in ("user", "mnt", "net")
                 if kind in self._fds and (kind != "net" or net)]
        fds = [os.dup(self._fds[kind]) for kind in kinds]
        me = os.getpid()
        option = {"user": "--user", "mnt": "--mount", "net": "--net"}
        joins = [f"{option[kind]}=/proc/{me}/fd/{fd}" for kind, fd in zip(kinds, fds, strict=True)]
        if "user" in self._fds:
            joins.append("--preserve-credentials")
        return [NSENTER, *joins, "--", *argv], fds

    def close(self) -> None:
        fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)


class SessionNamespaces:
    """How one driver makes a session's namespaces: at its first command, kept by
    the session (`Session.namespaces`), closed with the session."""

    def __init__(self) -> None:
        import _thread

        #: Why no session can have namespaces here, once the helper failed.
        self._unusable = ""
        self._lock = _thread.allocate_lock()

    def close_session(self, session: Session) -> None:
        with self._lock:
            held, session.namespaces = session.namespaces, None
        if held is not None:
            held.close()

    def of(self, profile: Profile) -> tuple[SessionNamespace | None, str]:
        """The namespaces of `profile`'s session (made at its first command), or None
        where it has none, and what the audit record says of its /tmp."""
        from ....errors import SandboxUnavailable

        path = profile.session_tmp
        if not path:
            return None, ""
        session = profile.session
        with self._lock:
            if session is None or session.closed or session.tmp != path:
                # Closed (a sandbox parked late for it): making it again would
                # put a directory back on the host after the session removed it.
                raise SandboxUnavailable("the session's /tmp is gone: the session was closed")
            held = session.namespaces
            if held is None:
                held, why = self._make(path, profile.tmp_size_mb)
                if held is None:
                    return None, (f"a host directory, each file bounded alone: {why}"
                                  if profile.tmp_size_mb else "")
                session.namespaces = held
        assert isinstance(held, SessionNamespace)
        return held, f"one tmpfs of {held.size_mb} MiB for the session" if held.size_mb else ""

    def _make(self, path: str, size_mb: int | None) -> tuple[SessionNamespace | None, str]:
        """A session's namespaces over `path`, or None and why (`_lock` held)."""
        from ....errors import SandboxUnavailable

        if not os.path.isdir(path) or os.path.islink(path):
            # Mounting over something else, or making it, is never wanted.
            raise SandboxUnavailable(f"the session's /tmp {path} is not a directory")
        why = self._unusable or usable()
        if why:
            return None, why
        from ..layers import init_python

        # Sized once, at the session's first command: a later size would be a
        # second /tmp, the first one's files gone from view and still held by
        # whatever runs in it.
        try:
            return SessionNamespace(init_python(), path, size_mb), ""
        except SandboxUnavailable as exc:
            # As a cgroup missing leaves rlimits: the limit weakens, the
            # boundary does not (each command makes its own loopback), and the
            # record says so. Asked once: the helper costs an interpreter start.
            self._unusable = str(exc)
            return None, self._unusable


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def usable() -> str | None:
    """Why a session cannot have namespaces of its own here, or None if it can."""
    if not os.access(NSENTER, os.X_OK):
        return f"{NSENTER} (util-linux) is missing"
    return None


def probe(python: str, state_dir: str) -> str | None:
    """`usable`, and the helper run once on a scratch directory: where Python may not
    make a namespace (a profile that grants user namespaces to bwrap alone) only
    trying says so."""
    from ....errors import SandboxUnavailable
    from ...owned import owned_dir, remove_owned

    why = usable()
    if why is not None:
        return why
    scratch = owned_dir(os.path.join(state_dir, "tmp"), "probe-")
    try:
        SessionNamespace(python, scratch, 1).close()
    except SandboxUnavailable as exc:
        return str(exc)
    finally:
        remove_owned(scratch)
    return None


def explain(returncode: int, stderr: bytes) -> str | None:
    """nsenter's own failure to enter the namespace, which is not the command's exit 1.

    Seen where stockade runs non-dumpable (privileges dropped with setuid):
    nsenter may not open another process's descriptors through /proc.
    """
    if returncode == 1 and stderr.startswith(b"nsenter: "):
        line = stderr.decode("utf-8", "replace").splitlines()[0]
        return (f"stockade could not enter the session's namespaces: {line} (a process "
                "that changed its user is not dumpable: run stockade as that user from the "
                "start)")
    return None
