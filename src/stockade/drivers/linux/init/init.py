"""stockade-init's entry point: `python -I -S init.py CONFIG -- ARGV...` inside bwrap.

Python compiles a script from source on every run -- 4 ms for the whole
init on a small VM -- but loads imported modules from the bytecode cache,
so this file only finds its siblings and the work is in initcore.py.
"""

import sys

TYPE_CHECKING = False  # typing costs the init 3 ms; mypy treats this name as True

if __name__ == "__main__":
    # Appended, not prepended: the standard library must win over whatever
    # another module in this directory is ever named.
    sys.path.append(__file__.rpartition("/")[0] or ".")
    if TYPE_CHECKING:
        from .initcore import main
    else:
        from initcore import main
    sys.exit(main(sys.argv))
