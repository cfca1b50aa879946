"""What a review of the hidden set by class found, each beside its unconfined control:
areas under a writable root, stores linked in from elsewhere, a `.env` linked out of
the workspace, a virtualenv named `.env`, a project file dropping the person's patterns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Box, text
from .test_iso_hidden_classes import _own_tree, _plant_canaries

pytestmark = pytest.mark.isolation

CAT = 'for f in "$@"; do cat "$f" 2>/dev/null; done; echo DONE'


def _leaked(out: str, canaries: dict[str, str]) -> list[str]:
    assert "DONE" in out, out
    return [rel for rel, canary in canaries.items() if canary in out]


IN_AREAS = (".ssh/deploy_key", ".config/gh/hosts.yml", ".local/share/keyrings/login.keyring",
            ".cache/huggingface/token")


def test_areas_under_a_writable_root_stay_hidden(box: Box) -> None:
    """Landlock's write rule on a root reads everything beneath it: an area there
    needs bubblewrap's mask, not the rules alone."""
    canaries = _plant_canaries(box, IN_AREAS)
    _shown_inside(box)
    (box.home / ".local").chmod(0o755)
    box.user_config('writable = ["~/.local", "~/.cache"]')
    res = box.sh(CAT, *(str(box.home / r) for r in IN_AREAS), mode="workspace-write")
    assert _leaked(text(res), canaries) == [], text(res)
    box.user_config('allow_home_workspace = true')
    res = box.run(["/bin/sh", "-c", CAT, "sh", *(str(box.home / r) for r in IN_AREAS)],
                  mode="workspace-write", options=["--workspace", str(box.home)],
                  cwd=box.home)
    assert _leaked(text(res), canaries) == [], text(res)


def _shown_inside(box: Box) -> None:
    """Something shown back in each area, as a developer's home has: such an area is
    the Landlock layer's to hide, not bubblewrap's empty mount."""
    for rel in (".config/git/config", ".ssh/known_hosts", ".local/share/uv/python",
                ".cache/pip/http"):
        box.write(box.home / rel, "shown\n")
    _own_tree(box, box.home)


def _linked_stores(box: Box) -> dict[str, str]:
    """A dotfiles layout: stores kept elsewhere in the home and linked into place."""
    canaries = {"gh": "CANARY-linked-gh", "key": "CANARY-linked-key"}
    box.write(box.home / "dotfiles" / "mycli" / "token.yml", canaries["gh"] + "\n", 0o600)
    box.write(box.home / "keys" / "id_work", canaries["key"] + "\n", 0o600)
    (box.home / ".config").mkdir(exist_ok=True)
    (box.home / ".ssh").mkdir(exist_ok=True)
    os.symlink(box.home / "dotfiles" / "mycli", box.home / ".config" / "mycli")
    os.symlink(box.home / "keys" / "id_work", box.home / ".ssh" / "id_work")
    _shown_inside(box)
    for link in (box.home / ".config" / "mycli", box.home / ".ssh" / "id_work"):
        os.lchown(link, box.runner.uid, box.runner.gid)
    return canaries


LINKED = [".config/mycli/token.yml", ".ssh/id_work"]


def test_a_store_linked_into_an_area_stays_hidden(box: Box) -> None:
    canaries = _linked_stores(box)
    res = box.sh(CAT, *(str(box.home / r) for r in LINKED), mode="read-only")
    assert _leaked(text(res), canaries) == [], text(res)


def test_control_a_linked_store_reads_unconfined(box: Box) -> None:
    canaries = _linked_stores(box)
    res = box.host(["/bin/sh", "-c", CAT, "sh", *(str(box.home / r) for r in LINKED)],
                   capture_output=True)
    assert sorted(_leaked(text(res), canaries)) == ["gh", "key"]


def _dotenv_linked_out(box: Box) -> str:
    box.write(box.home / "secrets" / "app.env", "CANARY-env-linked-out\n", 0o600)
    box.mkdir("ws/svc")
    os.symlink(box.home / "secrets" / "app.env", box.ws / "svc" / ".env")
    os.lchown(box.ws / "svc" / ".env", box.runner.uid, box.runner.gid)
    _own_tree(box, box.home / "secrets")
    return "CANARY-env-linked-out"


def test_a_dotenv_linked_out_of_the_workspace_stays_hidden(box: Box) -> None:
    canary = _dotenv_linked_out(box)
    box.user_config('unreadable = ["default", "dotenv"]')
    res = box.sh("cat svc/.env; echo DONE", mode="read-only")
    assert "DONE" in text(res) and canary not in text(res), text(res)
    assert canary in text(box.host(["cat", "svc/.env"], capture_output=True))  # control


def test_a_virtualenv_named_dotenv_keeps_working(box: Box) -> None:
    """The preset names files: `python -m venv .env` is a directory, and hiding it
    broke every command that ran its python."""
    box.write(box.ws / ".env" / "bin" / "tool", "#!/bin/sh\necho tool-ran\n", 0o755)
    box.user_config('unreadable = ["default", "dotenv"]')
    res = box.sh(".env/bin/tool", mode="read-only")
    assert "tool-ran" in text(res), text(res)


@pytest.mark.parametrize("project", ['["default"]', '["default", "dotenv", "!.env"]',
                                     '["default", "!**/.env"]'])
def test_a_project_file_cannot_drop_the_persons_patterns(box: Box, project: str) -> None:
    box.write(box.ws / ".env", "CANARY-project-dropped\n")
    box.user_config('unreadable = ["default", "dotenv"]')
    box.write(box.ws / "stockade.toml", f"[sandbox]\nunreadable = {project}\n")
    res = box.sh("cat .env; echo DONE", mode="read-only")
    assert res.returncode == 78, text(res)
    assert "CANARY-project-dropped" not in text(res)


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_an_interpreter_in_the_home_does_not_show_the_home(box: Box, backend: str) -> None:
    """stockade run by a Python whose prefix is the home (a copy in ~/bin, a
    `--prefix=$HOME` build): the prefix was bound and granted whole, after the masks."""
    from .conftest import SYSTEM_PYTHON

    canaries = _plant_canaries(box, (".ssh/deploy_key", ".git-credentials"))
    python = box.home / "bin" / "python3"
    box.write(python, Path(SYSTEM_PYTHON).resolve().read_bytes(), 0o755)
    import sysconfig

    deps = sysconfig.get_paths()["purelib"]  # stockade's dependencies, for the root runner
    res = box.host([str(python), "-I", "-c",
                    f"import sys; sys.path[:0] = [{box.runner.site!r}, {deps!r}]; "
                    "from stockade.cli import main; sys.exit(main(sys.argv[1:]))",
                    "run", "--backend", backend, "--mode", "read-only", "--",
                    "/bin/sh", "-c", CAT, "sh",
                    *(str(box.home / r) for r in (".ssh/deploy_key", ".git-credentials"))],
                   capture_output=True)
    assert _leaked(text(res), canaries) == [], text(res)
