"""Which resource-limit mechanism holds, for each host shape (pure detection)."""

from stockade.drivers.linux.limits import detect, parse_proc_cgroup

HYBRID = "4:memory:/svc/x\n8:pids:/\n1:cpu:/\n0::/\n"
PURE_V2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope\n"


def probes(files, writable=(), exists=()):
    return dict(read=lambda p: files.get(p, ""), writable=lambda p: p in writable,
                exists=lambda p: p in exists or p in files)


def test_parse_proc_cgroup():
    assert parse_proc_cgroup(HYBRID) == {"memory": "/svc/x", "pids": "/", "cpu": "/", "": "/"}


def test_v1_hybrid_with_writable_memory_and_pids():
    files = {"/proc/self/cgroup": HYBRID}
    dirs = ("/sys/fs/cgroup/memory/svc/x", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu")
    kind, bases, _ = detect(**probes(files, writable=dirs, exists=dirs))
    assert kind == "cgroup-v1"
    assert bases["memory"] == "/sys/fs/cgroup/memory/svc/x"
    assert bases["pids"] == "/sys/fs/cgroup/pids"


def test_v1_not_writable_falls_back_to_rlimits_with_a_reason():
    kind, bases, why = detect(**probes({"/proc/self/cgroup": HYBRID}))
    assert kind == "rlimit" and bases == {} and "no writable cgroup" in why


def test_pure_v2_delegated_and_not():
    base = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope"
    files = {"/proc/self/cgroup": PURE_V2, "/sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
             f"{base}/cgroup.controllers": "cpu memory pids"}
    assert detect(**probes(files, writable=(base,)))[0] == "cgroup-v2"
    kind, _, why = detect(**probes(files))
    assert kind == "rlimit" and "not writable" in why and "systemd-run" in why
    files[f"{base}/cgroup.controllers"] = "cpu"
    assert "lacks controllers memory, pids" in detect(**probes(files, writable=(base,)))[2]
