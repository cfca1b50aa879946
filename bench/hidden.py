"""Per-command cost of the default hidden set on a developer's home, against another tree.

The hidden set is built for every command: the areas and names are joined
to HOME, each candidate path is looked up, the hidden directories holding
something shown back are listed, and under bubblewrap the Landlock layer's
read roots are split around every hidden path (which lists each directory
on the way). So it is measured on a home as people have one: 500
directories under ~/.config, the usual dotfiles, caches and toolchains, a
~/.ssh with keys, and the workspace a project under the home.

Two figures per tree, medians in milliseconds:

- host side: `build_profile` + `build_bwrap_args` + `layers.init_config`,
  which is what the hiding adds to (no process is started);
- end to end: `SyncWorkspaceSandbox.execute('/bin/true')` under bubblewrap,
  cold (`warm_sandboxes = 0`, what the CLI's `run` does) and warm.

Each tree runs in a child interpreter with its own `src` first on the path,
so two versions of stockade are compared on the same machine, one after the
other. To compare with the commit before the hidden set by class:

    git worktree add --detach /var/tmp/stockade-before 2ee1708^
    .venv/bin/python bench/hidden.py --src src --src /var/tmp/stockade-before/src
    git worktree remove /var/tmp/stockade-before
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

#: What a developer's home holds besides ~/.config's directories: files, and
#: directories (a trailing slash), some hidden, some shown back, some neither.
TYPICAL = (
    ".bashrc", ".profile", ".bash_history", ".gitconfig", ".npmrc", ".pypirc", ".netrc",
    ".git-credentials", ".python_history", ".lesshst", ".viminfo", ".wget-hsts",
    ".ssh/config", ".ssh/known_hosts", ".ssh/id_ed25519", ".ssh/id_ed25519.pub",
    ".ssh/id_rsa", ".ssh/id_rsa.pub", ".ssh/authorized_keys",
    ".aws/credentials", ".aws/config", ".kube/config", ".docker/config.json",
    ".gnupg/pubring.kbx", ".cargo/config.toml", ".cargo/bin/", ".cargo/registry/",
    ".rustup/toolchains/", ".m2/repository/", ".m2/settings.xml", ".gradle/caches/",
    ".gradle/gradle.properties", ".npm/_cacache/", ".nvm/versions/", ".pyenv/versions/",
    ".cache/pip/", ".cache/uv/", ".cache/go-build/", ".cache/huggingface/token",
    ".cache/mozilla/", ".cache/thumbnails/", ".local/share/uv/", ".local/share/nvim/",
    ".local/share/keyrings/login.keyring", ".local/share/Trash/", ".local/state/nvim/",
    ".local/bin/", ".vscode/extensions/", ".mozilla/firefox/", "go/pkg/", "Documents/",
    "Downloads/", "src/other-project/", "snap/firefox/",
)


def make_home(root: str, config_dirs: int) -> tuple[str, str]:
    """(home, workspace): a home with `config_dirs` tools under ~/.config."""
    home = os.path.join(root, "home")
    for i in range(config_dirs):
        d = os.path.join(home, ".config", f"tool{i:03d}")
        os.makedirs(d)
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write("x = 1\n")
    # Some of them the allowlist shows back, as on a real machine.
    for shown in ("git", "pip", "nvim", "gh", "gcloud", "fontconfig", "htop"):
        os.makedirs(os.path.join(home, ".config", shown), exist_ok=True)
    for rel in TYPICAL:
        path = os.path.join(home, rel)
        if rel.endswith("/"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("x\n")
    workspace = os.path.join(home, "src", "project")
    os.makedirs(os.path.join(workspace, "src"))
    with open(os.path.join(workspace, "README"), "w") as f:
        f.write("x\n")
    return home, workspace


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def child(home: str, workspace: str, runs: int, e2e_runs: int) -> dict[str, object]:
    """Run in the child: the figures for the stockade first on sys.path."""
    import stockade
    from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
    from stockade.boundary import build_profile
    from stockade.capabilities import capabilities_for_mode
    from stockade.drivers.linux import layers
    from stockade.drivers.linux.bwrap import build_bwrap_args, locate_bwrap

    env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LANG": "C.UTF-8"}
    bwrap = locate_bwrap(env, workspace)
    caps = capabilities_for_mode("workspace-write", workspace)

    def host_side() -> object:
        profile = build_profile(mode="workspace-write", workspace=workspace, cwd=workspace,
                                capabilities=caps, read_scope="host", host_env=env)
        build_bwrap_args(profile, bwrap, inner=["/bin/true"])
        return layers.init_config(profile)

    host_side()
    host = []
    for _ in range(runs):
        start = time.perf_counter()
        host_side()
        host.append((time.perf_counter() - start) * 1000.0)
    profile = build_profile(mode="workspace-write", workspace=workspace, cwd=workspace,
                            capabilities=caps, read_scope="host", host_env=env)
    config = layers.init_config(profile)
    landlock = config.get("landlock")
    rules = len(landlock.get("read", ())) if isinstance(landlock, dict) else 0

    # The end-to-end runs see the fake home as the person's.
    os.environ.clear()
    os.environ.update(env)
    cmd = SandboxCommand("/bin/true", session_id="bench")
    figures: dict[str, object] = {
        "stockade": os.path.dirname(stockade.__file__),
        "host_side_ms": _median(host), "hidden": len(profile.hidden),
        "shown": len(getattr(profile, "shown", ())), "landlock_read_rules": rules,
    }
    for label, warm in (("cold", 0), ("warm", 1)):
        sb = SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write", ledger=False,
                                                backend="bubblewrap", warm_sandboxes=warm))
        sb.open_session("bench", workspace)
        for _ in range(3):
            res = sb.execute(cmd)
            assert res.exit_code == 0, res
        samples = []
        for _ in range(e2e_runs):
            start = time.perf_counter()
            sb.execute(cmd)
            samples.append((time.perf_counter() - start) * 1000.0)
        sb.close()
        figures[f"execute_{label}_ms"] = _median(samples)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[],
                        help="a tree's src directory to measure (repeatable; default: src)")
    parser.add_argument("--dir", default="/var/tmp",
                        help="where the fake home is made (default /var/tmp; the split lists "
                             "its parent, so a crowded one adds Landlock rules a real /home "
                             "would not)")
    parser.add_argument("--config-dirs", type=int, default=500)
    parser.add_argument("--runs", type=int, default=200, help="host-side runs per tree")
    parser.add_argument("--e2e-runs", type=int, default=200, help="executes per tree and path")
    parser.add_argument("--child", nargs=2, metavar=("HOME", "WORKSPACE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.runs, args.e2e_runs)))
        return
    srcs = args.src or [os.path.join(os.path.dirname(HERE), "src")]
    # Under /var/tmp: the sandbox's /tmp is its own, and the home must be the host's.
    root = tempfile.mkdtemp(prefix="stockade-bench-hidden-", dir=args.dir)
    try:
        home, workspace = make_home(root, args.config_dirs)
        print(f"home with {args.config_dirs} directories under ~/.config; "
              f"{args.runs} host-side runs, {args.e2e_runs} executes per row; medians, ms\n")
        print("| tree | host side | execute, cold | execute, warm | hidden | shown "
              "| Landlock read rules |\n|---|---|---|---|---|---|---|")
        for src in srcs:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
            out = subprocess.run([sys.executable, __file__, "--child", home, workspace,
                                  "--runs", str(args.runs), "--e2e-runs", str(args.e2e_runs)],
                                 env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                sys.exit(f"{src}: {out.stderr.strip()}")
            f = json.loads(out.stdout.splitlines()[-1])
            print(f"| {f['stockade']} | {f['host_side_ms']} | {f['execute_cold_ms']} "
                  f"| {f['execute_warm_ms']} | {f['hidden']} | {f['shown']} "
                  f"| {f['landlock_read_rules']} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
