"""Every hint names the real path and the real rule (issue 25).

The hint is built from the profile the command ran with (its hidden paths,
whether it may start processes, its network), not guessed from stderr: each
case here runs through the real CLI, as root and as an unprivileged user,
under bubblewrap and the Landlock backend, and reads the `--json` result.
"""

from __future__ import annotations

import json
import shutil
import socket
from typing import Any

import pytest

from .conftest import Box

pytestmark = pytest.mark.isolation

BACKENDS = ("bubblewrap", "landlock")


def result(box: Box, cmd: list[str], backend: str, *options: str) -> dict[str, Any]:
    res = box.run(cmd, options=["--json", "--backend", backend, *options])
    assert res.stdout, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cmd", [["head", "-c", "50", "/etc/shadow"], ["cat", "/etc/shadow"]])
def test_a_read_of_etc_shadow_is_named_as_a_read_outside_the_workspace(
        box: Box, backend: str, cmd: list[str]) -> None:
    """`head` once had its path misparsed ("'/etc/shadow' for reading"), placed in the
    workspace and sent to workspace-write; `cat` was called a write."""
    out = result(box, cmd, backend)
    assert out["exit_code"] != 0 and out["stdout"] == "", out
    hint = out["denial_hint"] or ""
    assert "for reading" not in hint and "workspace-write" not in hint, hint
    assert " in the workspace" not in hint, hint
    assert "nothing outside the workspace is writable in read-only mode" not in hint, hint
    if box.runner.uid == 0:
        # Root reads it on the host: the sandbox hides it, and the hint says so.
        assert out["likely_sandbox_denied"] is True, out
        assert hint.startswith("blocked by the sandbox: /etc/shadow is hidden from commands"), hint
        assert "--allow-read /etc/shadow" in hint, hint
    elif hint:
        # Another user: the file's own mode refuses, and the hint says a read is allowed.
        assert "/etc/shadow" in hint and "reading it is allowed" in hint, hint


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_that_is_not_executable_is_not_called_a_denial(box: Box, backend: str) -> None:
    box.write(box.ws / "a.txt", "just text\n", 0o644)
    for mode in ("read-only", "workspace-write"):
        out = result(box, ["./a.txt"], backend, "--mode", mode)
        assert out["exit_code"] == 126 and "Permission denied" in out["stderr"], out
        assert out["likely_sandbox_denied"] is False and out["denial_hint"] is None, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fork_under_no_subprocess_names_the_setting(box: Box, backend: str) -> None:
    out = result(box, ["/bin/sh", "-c", "ls | cat"], backend, "--no-subprocess")
    assert out["exit_code"] != 0 and out["likely_sandbox_denied"] is True, out
    assert "--no-subprocess" in out["denial_hint"], out
    # Control: the same command without the flag runs.
    assert result(box, ["/bin/sh", "-c", "ls | cat"], backend)["exit_code"] == 0


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
@pytest.mark.parametrize("backend", BACKENDS)
def test_curl_to_the_hosts_loopback_with_network_none_is_named(box: Box, backend: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        out = result(box, ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{port}/"],
                     backend)
    assert out["exit_code"] != 0, out
    assert out["likely_sandbox_denied"] is True, out
    hint = out["denial_hint"]
    assert "network none" in hint and "127.0.0.1" in hint and "--allow-host" in hint, hint


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rel", [".aws/credentials", ".config/gcloud/credentials.db"])
def test_a_hidden_credential_says_it_is_hidden(box: Box, backend: str, rel: str) -> None:
    """It reads as "No such file or directory" (bubblewrap's empty mount) or
    "Permission denied" (Landlock): the hint is what tells the model it exists
    and was hidden, and how to ask for it."""
    path = str(box.home / rel)
    out = result(box, ["cat", path], backend)
    assert out["exit_code"] != 0 and box.markers[rel] not in out["stdout"], out
    assert out["likely_sandbox_denied"] is True, out
    hint = out["denial_hint"]
    assert hint.startswith(f"blocked by the sandbox: {path} "), hint
    assert "hidden from commands" in hint and f"--allow-read {path}" in hint, hint
    # Control: a file that is really missing stays the command's own error.
    out = result(box, ["cat", str(box.ws / "missing.txt")], backend)
    assert out["likely_sandbox_denied"] is False and out["denial_hint"] is None, out
