"""Landlock: the pure plan for every ABI, the exact system calls, then the real kernel.

Real tests restrict a child process, never the test runner: Landlock
cannot be undone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.drivers.linux.init import landlock
from stockade.drivers.linux.init.landlock import (
    FS_ALL,
    FS_FILE,
    FS_IOCTL_DEV,
    FS_READ,
    FS_REFER,
    FS_TRUNCATE,
    LandlockReport,
    LandlockRules,
    apply_landlock,
    fs_handled,
)

ALL_WANTED = ("fs.refer", "fs.truncate", "net.bind_tcp", "net.connect_tcp", "fs.ioctl_dev",
              "scope.abstract_unix_socket", "scope.signal")


# -- the plan (pure) -------------------------------------------------------------

def test_handled_filesystem_rights_grow_with_the_abi() -> None:
    assert fs_handled(0) == 0
    assert fs_handled(1) == (1 << 13) - 1
    assert fs_handled(2) == fs_handled(1) | FS_REFER
    assert fs_handled(3) == fs_handled(4) == fs_handled(2) | FS_TRUNCATE
    assert fs_handled(5) == fs_handled(7) == fs_handled(3) | FS_IOCTL_DEV == FS_ALL


@pytest.mark.parametrize("abi,dropped", [
    (1, ALL_WANTED),
    (2, ALL_WANTED[1:]),
    (3, ALL_WANTED[2:]),
    (4, ALL_WANTED[4:]),
    (5, ALL_WANTED[5:]),
    (6, ()),
    (7, ()),
])
def test_plan_names_every_right_the_kernel_lacks(abi: int, dropped: tuple[str, ...]) -> None:
    report = LandlockRules(["/usr"], ["/tmp"]).plan(abi)
    assert (report.abi, report.kernel_abi, report.enforced) == (abi, abi, True)
    assert report.dropped == dropped


def test_a_newer_kernel_is_used_at_the_newest_abi_stockade_knows() -> None:
    report = LandlockRules().plan(9)
    assert (report.abi, report.kernel_abi, report.dropped) == (landlock.ABI_KNOWN, 9, ())


def test_no_landlock_is_reported_not_raised() -> None:
    report = LandlockRules().plan(0, "no Landlock here")
    assert not report.enforced
    assert report.reason == "no Landlock here"
    assert report.to_json()["dropped"] == ["landlock"]


def test_unrequested_rights_are_not_reported_missing() -> None:
    rules = LandlockRules(restrict_tcp=False, scopes=())
    assert rules.plan(1).dropped == ("fs.refer", "fs.truncate", "fs.ioctl_dev")


def test_rules_round_trip_through_json() -> None:
    rules = LandlockRules(["/usr", "/etc"], ["/tmp"], tcp_connect=[3128, 3128], tcp_bind=[8000],
                          scopes=["signal"])
    again = LandlockRules.from_json(json.loads(json.dumps(rules.to_json())))
    assert again.to_json() == rules.to_json()
    assert again.tcp_connect == (3128,)
    assert again.scopes == ("signal",)


def test_a_path_in_both_lists_gets_the_union() -> None:
    rules = LandlockRules(["/a", "/b", "/a"], ["/b"])
    assert rules.path_rules() == [("/a", FS_READ), ("/b", FS_ALL)]


@pytest.mark.parametrize("kwargs,message", [
    ({"scopes": ["pid"]}, "unknown Landlock scope 'pid'"),
    ({"tcp_connect": [70000]}, "TCP port 70000"),
])
def test_invalid_rules_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LandlockRules(**kwargs)


@pytest.mark.parametrize("data,message", [
    ({"read": "/usr"}, "landlock.read must be a list of strings"),
    ({"tcp_connect": ["80"]}, "landlock.tcp_connect must be a list of port numbers"),
    ({"restrict_tcp": "yes"}, "restrict_tcp must be true or false"),
])
def test_malformed_json_rules_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LandlockRules.from_json(data)


# -- the system calls, against a recording kernel --------------------------------

class FakeKernel:
    """Answers Landlock's three syscalls like a kernel of `abi`, and records them."""

    def __init__(self, abi: int, fail_rule: bool = False) -> None:
        self.abi = abi
        self.fail_rule = fail_rule
        self.ruleset_attr = b""
        self.ruleset_fd = -1
        self.path_rules: list[tuple[int, int]] = []  # (allowed, fd's st_mode)
        self.net_rules: list[tuple[int, int]] = []
        self.restricted = False

    def __call__(self, nr: int, *args: object) -> int:
        if nr == landlock.SYS_CREATE_RULESET and args[2] == landlock.CREATE_RULESET_VERSION:
            if not self.abi:
                raise OSError(38, "Function not implemented")
            return self.abi
        if nr == landlock.SYS_CREATE_RULESET:
            assert isinstance(args[0], bytes) and args[1] == len(args[0])
            self.ruleset_attr = args[0]
            self.ruleset_fd = os.open("/dev/null", os.O_RDONLY)
            return self.ruleset_fd
        if nr == landlock.SYS_ADD_RULE:
            assert args[0] == self.ruleset_fd
            attr = args[2]
            assert isinstance(attr, bytes)
            if self.fail_rule:
                raise OSError(22, "Invalid argument")
            if args[1] == landlock.RULE_PATH_BENEATH:
                assert len(attr) == 12
                fd = int.from_bytes(attr[8:], "little", signed=True)
                self.path_rules.append((int.from_bytes(attr[:8], "little"), os.fstat(fd).st_mode))
            else:
                assert len(attr) == 16
                self.net_rules.append((int.from_bytes(attr[:8], "little"),
                                       int.from_bytes(attr[8:], "little")))
            return 0
        if nr == landlock.SYS_RESTRICT_SELF:
            self.restricted = True
            return 0
        raise AssertionError(f"unexpected syscall {nr}")

    def fields(self) -> list[int]:
        a = self.ruleset_attr
        return [int.from_bytes(a[i:i + 8], "little") for i in range(0, len(a), 8)]


def apply_fake(rules: LandlockRules, kernel: FakeKernel) -> LandlockReport:
    return apply_landlock(rules, kernel)  # type: ignore[arg-type]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    return tmp_path


@pytest.mark.parametrize("abi,size", [(1, 8), (3, 8), (4, 16), (5, 16), (6, 24), (7, 24), (8, 24)])
def test_ruleset_attr_has_exactly_the_fields_the_kernel_knows(abi: int, size: int,
                                                              tree: Path) -> None:
    """An older kernel rejects a longer struct with E2BIG unless its tail is zero."""
    kernel = FakeKernel(abi)
    apply_fake(LandlockRules([str(tree / "dir")], tcp_connect=[3128]), kernel)
    assert len(kernel.ruleset_attr) == size
    fields = kernel.fields()
    assert fields[0] == fs_handled(min(abi, landlock.ABI_KNOWN))
    if abi >= 4:
        assert fields[1] == landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP
        assert kernel.net_rules == [(landlock.NET_CONNECT_TCP, 3128)]
    else:
        assert kernel.net_rules == []
    if abi >= 6:
        assert fields[2] == landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL


def test_rules_are_masked_to_the_abi_and_to_files(tree: Path) -> None:
    kernel = FakeKernel(2)
    report = apply_fake(LandlockRules([str(tree / "dir")], [str(tree / "file")]), kernel)
    (dir_rights, _), (file_rights, _) = kernel.path_rules
    assert dir_rights == FS_READ
    # A file may only carry file rights, and ABI 2 has no TRUNCATE to give.
    assert file_rights == FS_FILE & fs_handled(2) & ~FS_TRUNCATE
    assert kernel.restricted
    assert report.dropped == ALL_WANTED[1:]


def test_missing_paths_are_skipped_and_reported(tree: Path) -> None:
    kernel = FakeKernel(7)
    report = apply_fake(LandlockRules([str(tree / "dir"), str(tree / "nope")],
                                          [str(tree / "file" / "below")]), kernel)
    assert len(kernel.path_rules) == 1
    assert report.skipped == (str(tree / "nope"), str(tree / "file" / "below"))


def test_a_kernel_without_landlock_changes_nothing() -> None:
    kernel = FakeKernel(0)
    report = apply_fake(LandlockRules(["/usr"]), kernel)
    assert not report.enforced and "5.13" in report.reason
    assert kernel.ruleset_attr == b"" and not kernel.restricted


def test_a_failed_rule_raises_and_never_restricts(tree: Path) -> None:
    kernel = FakeKernel(7, fail_rule=True)
    with pytest.raises(OSError, match=f"Landlock rule for {tree / 'dir'} failed"):
        apply_fake(LandlockRules([str(tree / "dir")]), kernel)
    assert not kernel.restricted
    with pytest.raises(OSError):
        os.fstat(kernel.ruleset_fd)  # closed on the way out


# -- the real kernel -------------------------------------------------------------

pytest_real = pytest.mark.isolation
needs_landlock = pytest.mark.skipif(landlock.landlock_abi() < 6,
                                    reason="needs Landlock ABI 6 (Linux 6.12)")

CHILD = r"""
import errno, json, os, socket, sys
from stockade.drivers.linux.init import landlock, seccomp
rules, script = json.loads(sys.argv[1]), sys.argv[2]
seccomp.set_no_new_privs()
report = landlock.apply_landlock(landlock.LandlockRules.from_json(rules))
out = {"report": report.to_json()}
def t(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
exec(script)
print(json.dumps(out))
"""

SYSTEM = ["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", sys.base_prefix, sys.prefix,
          str(Path(landlock.__file__).parents[3])]


def restricted(rules: LandlockRules, script: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(rules.to_json()), script],
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture
def area(tmp_path: Path) -> Path:
    for d in ("w/a", "w/b", "ro", "secret"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "w/a/file").write_text("data")
    (tmp_path / "ro/file").write_text("read only")
    (tmp_path / "secret/key").write_text("hidden")
    return tmp_path


@pytest_real
@needs_landlock
def test_writes_only_under_write_roots(area: Path) -> None:
    rules = LandlockRules([*SYSTEM, str(area / "ro")], [str(area / "w")])
    out = restricted(rules, f"""
t("write_inside", lambda: open({str(area / "w/new")!r}, "w").write("x"))
t("write_readonly", lambda: open({str(area / "ro/new")!r}, "w").write("x"))
t("append_readonly", lambda: open({str(area / "ro/file")!r}, "a").write("x"))
t("mkdir_readonly", lambda: os.mkdir({str(area / "ro/sub")!r}))
t("unlink_readonly", lambda: os.unlink({str(area / "ro/file")!r}))
t("read_readonly", lambda: open({str(area / "ro/file")!r}).read())
t("read_unlisted", lambda: open({str(area / "secret/key")!r}).read())
t("list_unlisted", lambda: os.listdir({str(area / "secret")!r}))
""")
    assert out["report"] == {"abi": min(landlock.landlock_abi(), 7),
                             "kernel_abi": landlock.landlock_abi(), "enforced": True,
                             "dropped": [], "skipped": [], "reason": ""}
    assert {k: v for k, v in out.items() if k != "report"} == {
        "write_inside": "ok", "write_readonly": "EACCES", "append_readonly": "EACCES",
        "mkdir_readonly": "EACCES", "unlink_readonly": "EACCES", "read_readonly": "ok",
        "read_unlisted": "EACCES", "list_unlisted": "EACCES"}
    assert (area / "w/new").read_text() == "x"
    assert not (area / "ro/new").exists()
    assert (area / "ro/file").read_text() == "read only"


@pytest_real
@needs_landlock
def test_refer_lets_files_move_between_write_roots_but_not_out(area: Path) -> None:
    """Without REFER handled and granted, every cross-directory rename is EXDEV."""
    (area / "w2").mkdir()
    rules = LandlockRules([*SYSTEM, str(area / "ro")], [str(area / "w"), str(area / "w2")])
    a, b, ro, w2 = area / "w/a", area / "w/b", area / "ro", area / "w2"
    out = restricted(rules, f"""
t("rename_across_dirs", lambda: os.rename({str(a / "file")!r}, {str(b / "file")!r}))
t("rename_across_roots", lambda: os.rename({str(b / "file")!r}, {str(w2 / "file")!r}))
t("link_across_dirs", lambda: os.link({str(w2 / "file")!r}, {str(a / "hard")!r}))
t("rename_into_readonly", lambda: os.rename({str(a / "hard")!r}, {str(ro / "moved")!r}))
t("rename_out_of_readonly", lambda: os.rename({str(ro / "file")!r}, {str(a / "stolen")!r}))
t("link_into_readonly", lambda: os.link({str(w2 / "file")!r}, {str(ro / "hard")!r}))
""")
    del out["report"]
    assert out == {"rename_across_dirs": "ok", "rename_across_roots": "ok",
                   "link_across_dirs": "ok", "rename_into_readonly": "EACCES",
                   "rename_out_of_readonly": "EACCES", "link_into_readonly": "EACCES"}
    assert (area / "ro/file").exists() and not (area / "ro/moved").exists()


@pytest_real
@needs_landlock
def test_truncate_is_a_write_right(area: Path) -> None:
    """Before ABI 3 truncate(2) was unrestricted: a read-only file could be emptied."""
    rules = LandlockRules([*SYSTEM, str(area / "ro")], [str(area / "w")])
    out = restricted(rules, f"""
t("truncate_readonly", lambda: os.truncate({str(area / "ro/file")!r}, 0))
t("o_trunc_readonly",
  lambda: os.close(os.open({str(area / "ro/file")!r}, os.O_WRONLY | os.O_TRUNC)))
t("truncate_writable", lambda: os.truncate({str(area / "w/a/file")!r}, 1))
""")
    del out["report"]
    assert out == {"truncate_readonly": "EACCES", "o_trunc_readonly": "EACCES",
                   "truncate_writable": "ok"}
    assert (area / "ro/file").read_text() == "read only"
    assert (area / "w/a/file").read_text() == "d"


@pytest_real
@needs_landlock
def test_device_ioctls_need_ioctl_dev() -> None:
    script = """
import fcntl
def tcgets():
    fd = os.open("/dev/null", os.O_RDONLY)
    fcntl.ioctl(fd, 0x5401, bytes(64))
t("tcgets_dev_null", tcgets)
"""
    read_only = restricted(LandlockRules([*SYSTEM, "/dev"]), script)
    writable = restricted(LandlockRules(SYSTEM, ["/dev"]), script)
    assert read_only["tcgets_dev_null"] == "EACCES"  # Landlock said no
    assert writable["tcgets_dev_null"] == "ENOTTY"  # the device said no


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []

    def serve(s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            conn.close()

    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        threading.Thread(target=serve, args=(s,), daemon=True).start()
        made.append(s)
    yield made
    for s in made:
        s.close()


@pytest_real
@needs_landlock
def test_tcp_connect_only_to_listed_ports_and_no_bind(listeners: list[socket.socket]) -> None:
    allowed, other = (s.getsockname()[1] for s in listeners)
    script = f"""
t("connect_allowed", lambda: socket.create_connection(("127.0.0.1", {allowed}), 5).close())
t("connect_other", lambda: socket.create_connection(("127.0.0.1", {other}), 5).close())
t("bind", lambda: socket.socket().bind(("127.0.0.1", 0)))
"""
    gated = restricted(LandlockRules(SYSTEM, tcp_connect=[allowed]), script)
    free = restricted(LandlockRules(SYSTEM, restrict_tcp=False), script)
    del gated["report"], free["report"]
    assert gated == {"connect_allowed": "ok", "connect_other": "EACCES", "bind": "EACCES"}
    assert free == {"connect_allowed": "ok", "connect_other": "ok", "bind": "ok"}


@pytest_real
@needs_landlock
def test_abstract_unix_sockets_and_signals_outside_are_out_of_reach() -> None:
    outside = socket.socket(socket.AF_UNIX)
    name = f"\0stockade-depth-{os.getpid()}"
    outside.bind(name)
    outside.listen(1)
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        script = f"""
def connect_outside():
    s = socket.socket(socket.AF_UNIX)
    s.connect({name!r})
def connect_own():
    own = socket.socket(socket.AF_UNIX)
    own.bind({name + "-own"!r})
    own.listen(1)
    socket.socket(socket.AF_UNIX).connect({name + "-own"!r})
def signal_own_child():
    import subprocess
    p = subprocess.Popen(["sleep", "30"])
    os.kill(p.pid, 15)
    p.wait()
t("connect_outside", connect_outside)
t("connect_own", connect_own)
t("signal_outside", lambda: os.kill({bystander.pid}, 0))
t("signal_own_child", signal_own_child)
"""
        scoped = restricted(LandlockRules(SYSTEM), script)
        unscoped = restricted(LandlockRules(SYSTEM, scopes=()), script)
    finally:
        bystander.kill()
        bystander.wait()
        outside.close()
    del scoped["report"], unscoped["report"]
    assert scoped == {"connect_outside": "EPERM", "connect_own": "ok",
                      "signal_outside": "EPERM", "signal_own_child": "ok"}
    assert unscoped == {"connect_outside": "ok", "connect_own": "ok", "signal_outside": "ok",
                        "signal_own_child": "ok"}
