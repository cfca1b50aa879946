import sys

# `python -m stockade` puts the working directory first on the import path,
# and an MCP client starts the server in the project: a module a sandboxed
# command wrote there (`json.py`, `asyncio/`) would then be imported by this
# unconfined process. The entry leaves before anything else is imported. It
# cannot help with what runpy imports before this file runs (a `stockade/`,
# `importlib.py`, `warnings.py` there): the console script, or
# `python -P -m stockade`, is the start that holds.
if not sys.flags.safe_path and sys.path:
    del sys.path[0]

from .cli import main

sys.exit(main())
