"""The service's request, its key and the client's choice, without a service
(tests/isolation/test_iso_service.py runs the real one)."""

from __future__ import annotations

import os

import pytest

from stockade import serviceclient
from stockade.config import load_config
from stockade.errors import ConfigError
from stockade.service import code_fingerprint


def test_a_request_travels_whole() -> None:
    data = serviceclient.request(["--json", "--", "printf", "a\nb", "\udcff"])
    argv, env, umask, ignored, limits = serviceclient.parse_request(data)
    assert argv == ["--json", "--", "printf", "a\nb", "\udcff"]
    assert env == dict(os.environb)
    assert umask == (lambda u: (os.umask(u), u)[1])(os.umask(0o022))
    assert all(len(t) == 3 for t in limits) and isinstance(ignored, list)


@pytest.mark.parametrize("data", [
    b"", b"\0\0\0\x05abc", b"\0\0\0\x03abc", b"\0\0\0\x12stockade-service-3",
    serviceclient.request(["x"])[:-3],
    serviceclient.request(["x"]) + b"\0\0\0\x01z",
    serviceclient.request(["x"]).replace(b"stockade-service-3", b"stockade-service-9"),
])
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        serviceclient.parse_request(data)


def test_the_choice_flag_then_environment_then_the_users_config(tmp_path) -> None:
    conf = tmp_path / "stockade" / "config.toml"
    conf.parent.mkdir()
    env = {"XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path)}
    assert not serviceclient.wanted(["--", "x"], env)
    conf.write_text("[sandbox]\nservice = true\n")
    assert serviceclient.wanted(["--", "x"], env)
    assert not serviceclient.wanted(["--no-service", "--", "x"], env)
    assert not serviceclient.wanted(["--service", "--no-service", "--", "x"], env)
    assert not serviceclient.wanted(["--", "x"], {**env, "STOCKADE_SERVICE": "0"})
    assert serviceclient.wanted(["--", "--no-service"], env)  # the command's own argument
    assert not serviceclient.wanted(["--help"], env)
    other = tmp_path / "other.toml"
    other.write_text("[sandbox]\nservice = false\n")
    assert not serviceclient.wanted(["--config", str(other), "--", "x"], env)
    conf.write_text("[sandbox]\nservice = \n")  # broken: the in-process run says why
    assert not serviceclient.wanted(["--", "x"], env)


def test_the_key_changes_with_the_environment_but_not_the_directory() -> None:
    base = dict(os.environb)
    key = serviceclient.service_key(base)
    assert serviceclient.service_key({**base, b"PWD": b"/elsewhere", b"SHLVL": b"9"}) == key
    assert serviceclient.service_key({**base, b"PYTHONPATH": b"/x"}) != key
    assert serviceclient.service_key({k: v for k, v in base.items() if k != b"PATH"}) != key


def test_a_project_file_may_not_set_it(tmp_path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text("[sandbox]\nservice = false\n")
    with pytest.raises(ConfigError, match="service"):
        load_config({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}, str(ws))


def test_the_fingerprint_sees_an_edit(tmp_path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    before = code_fingerprint(str(tmp_path))
    st = (tmp_path / "a.py").stat()
    os.utime(tmp_path / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    edited = code_fingerprint(str(tmp_path))
    assert edited != before
    # Bytecode is written as commands import: it is not a change of the code.
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    assert code_fingerprint(str(tmp_path)) == edited


def test_the_key_changes_with_what_a_command_inherits_from_its_process() -> None:
    key = serviceclient.service_key()
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {min(cpus)})
        try:
            assert serviceclient.service_key() != key
        finally:
            os.sched_setaffinity(0, cpus)
    assert serviceclient.service_key() == key
