import pytest

from stockade.capabilities import (
    NetworkPolicy,
    SandboxCapabilities,
    canonical_path,
    capabilities_for_mode,
    is_under,
    parse_mode,
)
from stockade.errors import InvalidCommand


def test_prefix_is_a_path_component_not_a_string_prefix():
    assert is_under("/a/b/c", "/a/b")
    assert is_under("/a/b", "/a/b")
    assert not is_under("/a/bc", "/a/b")
    assert is_under("/anything", "/")


def test_paths_are_canonicalised_before_comparison(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    caps = SandboxCapabilities(fs_write=[str(link)])
    assert caps.fs_write == (str(real),)
    assert SandboxCapabilities(fs_write=[str(tmp_path / "real" / ".." / "real")]).is_within(caps)


@pytest.mark.parametrize("bad", ["relative/path", "/a/\x00b"])
def test_bad_paths_are_refused(bad):
    with pytest.raises(InvalidCommand):
        SandboxCapabilities(fs_read=[bad])


def test_four_monotonic_checks():
    base = SandboxCapabilities(fs_read=["/usr"], fs_write=["/w"], network=NetworkPolicy.none(),
                               spawn_subprocess=False)
    assert SandboxCapabilities(fs_read=["/usr/lib"]).is_within(base)
    assert SandboxCapabilities(fs_read=["/w/x"]).is_within(base)  # write implies read
    assert not SandboxCapabilities(fs_read=["/etc"]).is_within(base)
    assert not SandboxCapabilities(fs_write=["/usr"]).is_within(base)
    assert not SandboxCapabilities(network=NetworkPolicy.allow_hosts(["a.com"])).is_within(base)
    assert not SandboxCapabilities(spawn_subprocess=True).is_within(base)
    assert SandboxCapabilities.strict().is_within(base)


def test_network_order_none_hosts_all():
    none, hosts, all_ = (NetworkPolicy.none(), NetworkPolicy.allow_hosts(["a.com", "b.com"]),
                         NetworkPolicy.allow_all())
    assert none.is_within(hosts) and hosts.is_within(all_) and none.is_within(all_)
    assert not all_.is_within(hosts) and not hosts.is_within(none)
    assert NetworkPolicy.allow_hosts(["a.com"]).is_within(hosts)
    assert not NetworkPolicy.allow_hosts(["c.com"]).is_within(hosts)
    wild = NetworkPolicy.allow_hosts(["*.example.com"])
    assert NetworkPolicy.allow_hosts(["api.example.com"]).is_within(wild)
    assert not NetworkPolicy.allow_hosts(["example.com"]).is_within(wild)
    assert not NetworkPolicy.allow_hosts(["badexample.com"]).is_within(wild)
    assert NetworkPolicy.allow_hosts(["A.Com."]) == NetworkPolicy.allow_hosts(["a.com"])


def test_modes_map_to_capabilities(tmp_path):
    ws = canonical_path(str(tmp_path))
    ro = capabilities_for_mode("read-only", ws)
    ww = capabilities_for_mode("workspace-write", ws)
    fa = capabilities_for_mode("full-access", ws)
    assert ro.fs_write == () and ww.fs_write == (ws,)
    assert ro.is_within(ww) and ww.is_within(fa) and not ww.is_within(ro)
    assert fa.network.kind == "all"
    with pytest.raises(InvalidCommand, match="unknown mode"):
        parse_mode("yolo")


def test_capabilities_are_hashable_values():
    a = SandboxCapabilities(fs_read=["/b", "/a"])
    b = SandboxCapabilities(fs_read=["/a", "/b"])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.replace(spawn_subprocess=True) != a


def test_limits_are_validated():
    with pytest.raises(InvalidCommand):
        SandboxCapabilities(max_memory_mb=0)
    with pytest.raises(InvalidCommand):
        SandboxCapabilities(timeout_secs=-1)
