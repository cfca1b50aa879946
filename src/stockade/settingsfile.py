"""What config.py and trust.py both know of a settings file: how much of one stockade
reads, and what to say when a file cannot be one.
"""

from __future__ import annotations

import os

#: The most stockade reads of a settings file: far past any real one, and a bound on what
#: a planted file (a terabyte of holes costs nothing) can make it hold in memory.
MAX_SETTINGS_BYTES = 1 << 20


def settings_problem(path: str, exc: OSError, *, follow: bool, fix: str = "remove it") -> str:
    """What is wrong with the settings file at `path` that `exc` refused, in a few words;
    `fix` ends the words for a file that is not a regular one."""
    import errno
    import stat

    if exc.errno == errno.EFBIG:
        return (f"larger than {MAX_SETTINGS_BYTES >> 20} MiB, more than any settings file "
                "holds; remove it")
    try:
        mode = os.stat(path, follow_symlinks=follow).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode):
        return ("is a symbolic link, which stockade does not follow for a project's "
                "settings; put the file itself there, or remove it")
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return f"not a regular file ({kind}); {fix}"
    return f"cannot read: {exc.strerror or exc}"
