"""The stockade environment of mini-swe-agent, through its own agent loop.

The environment is chosen the way a config file chooses it
(`environment_class: stockade.adapters.mini_swe_agent.StockadeEnvironment`),
and mini-swe-agent's `DefaultAgent`, with its default config's templates,
drives it with its deterministic test model, as root and as an unprivileged user.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from isolation.conftest import Box

pytest.importorskip("minisweagent")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="stockade-mswea-", dir="/var/tmp"))
    for sub in ("ws", "home", "state", "data", "config"):
        (base / sub).mkdir()
    (base / "home/.bashrc").write_text("# mine\n")
    for name, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                      ("XDG_CONFIG_HOME", "config")):
        monkeypatch.setenv(name, str(base / sub))
    yield base / "ws", base / "home"
    shutil.rmtree(base, ignore_errors=True)


# Set by the conftest: the user runner reads the venv's packages from a copy of its own.
RUNS_INSTALLED_PACKAGES = True

# mini-swe-agent's DefaultAgent with its default config's templates, given the config
# block docs/agents.md shows (argv[1]) for the workspace (argv[2]) and the commands of
# its deterministic model (argv[3:]); prints what the agent loop saw, as JSON.
AGENT_LOOP = """
import json
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_path
from minisweagent.environments import get_environment
from minisweagent.models.test_models import DeterministicModel, make_output

block, ws, *commands = sys.argv[1:]
defaults = yaml.safe_load(get_config_path("default").read_text())
config = yaml.safe_load(block.replace("/path/to/project", ws))
env = get_environment(config["environment"], default_type="local")
outputs = [make_output(f"THOUGHT: step {i}\\n\\n```mswea_bash_command\\n{c}\\n```",
                       [{"command": c}]) for i, c in enumerate(commands)]
outputs.append(make_output("done", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
                                     "\\necho all done"}]))
agent = DefaultAgent(DeterministicModel(outputs=outputs), env,
                     **{**defaults["agent"], "step_limit": 20})
try:
    result = agent.run("fix it")
finally:
    env.close()
print(json.dumps({"result": result, "environment": type(env).__module__ + "." + type(env).__name__,
                  "seen": [str(m["content"]) for m in agent.messages if m["role"] == "user"][1:]}))
"""


def test_the_agent_loop_runs_each_action_in_stockade(
        box: Box, host_python: Callable[..., Any], documented: Callable[[str, str], str]) -> None:
    """As root and as an unprivileged user, with the environment the documented config
    selects."""
    block = documented("mini-swe-agent", "yaml")
    bashrc = (box.home / ".bashrc").read_text()
    res = host_python(AGENT_LOOP, block, str(box.ws),
                      "echo fixed > fix.txt && cat fix.txt && echo $STOCKADE_SANDBOX",
                      "echo pwned >> ~/.bashrc",
                      "sleep 30",
                      "rm -rf --no-preserve-root /", timeout=100)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    got = json.loads(res.stdout.decode().splitlines()[-1])
    assert got["environment"] == "stockade.adapters.mini_swe_agent.StockadeEnvironment"
    result, seen = got["result"], got["seen"]
    assert result["exit_status"] == "Submitted" and "all done" in result["submission"]
    assert "<returncode>0</returncode>" in seen[0] and "fixed\nbubblewrap" in seen[0]
    assert "<returncode>1</returncode>" in seen[1] and "Read-only file system" in seen[1]
    assert "stockade: blocked by the sandbox" in seen[1]
    assert "<returncode>-1</returncode>" in seen[2] and "past its 5 s timeout" in seen[2]
    assert "<returncode>77</returncode>" in seen[3] and "command policy blocked" in seen[3]
    assert (box.ws / "fix.txt").read_text() == "fixed\n"
    assert (box.home / ".bashrc").read_text() == bashrc


def test_an_unavailable_sandbox_runs_nothing(dirs: tuple[Path, Path]) -> None:
    from stockade.adapters.mini_swe_agent import StockadeEnvironment

    ws, _ = dirs
    conf = ws.parent / "broken.toml"
    conf.write_text('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    env = StockadeEnvironment(cwd=str(ws), config=str(conf))
    try:
        out = env.execute({"command": "touch ran"})
    finally:
        env.close()
    assert out["returncode"] == 125 and "SandboxUnavailable" in out["output"]
    assert not (ws / "ran").exists()
