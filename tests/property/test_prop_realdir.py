"""The masks' directory resolver against `os.path.realpath`, on trees of links.

Every hidden store and every path shown back is placed where it really is
through `masking.real_dir`, which resolves each directory once and shares
the results between paths: a path it got wrong would be masked (or shown
back) at a name the command does not reach it by. Hypothesis builds trees
of directories and links (relative, absolute, dangling, to `..`, in loops)
and asks for paths through them, in any order, from one shared cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.masking import Resolved, real_dir

NAMES = ("a", "b", "c", ".git", "x y")
TARGETS = ("a", "b/c", "..", "../..", "/", ".", "a/..", "missing", "b/../a", "self")

node = st.tuples(st.sampled_from(["dir", "link", "file"]), st.sampled_from(NAMES),
                 st.integers(0, 5), st.sampled_from(TARGETS), st.booleans())
step = st.sampled_from([*NAMES, ".", "..", "", "missing"])


def _build(root: Path, nodes: list[tuple[str, str, int, str, bool]]) -> list[Path]:
    """The tree, made only in real directories beneath `root` (a link to `/` must not
    become a way to write there); returns where paths may start: those and the links."""
    dirs, starts = [root], [root]
    for kind, name, parent, target, absolute in nodes:
        where = dirs[parent % len(dirs)] / name
        goal = where.name if target == "self" else target
        if absolute and not goal.startswith("/"):
            goal = str(root / goal)
        if os.path.lexists(where):
            continue
        if kind == "dir":
            where.mkdir()
            dirs.append(where)
        elif kind == "file":
            where.write_text("x")
        else:
            where.symlink_to(goal)
        if kind != "file":
            starts.append(where)
    return starts


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(nodes=st.lists(node, max_size=14),
       paths=st.lists(st.tuples(st.integers(0, 20), st.lists(step, max_size=4)),
                      min_size=1, max_size=12))
def test_each_directory_resolves_as_realpath_does(tmp_path_factory, nodes, paths) -> None:
    root = Path(os.path.realpath(tmp_path_factory.mktemp("tree")))
    starts = _build(root, nodes)
    resolved: Resolved = {}
    for start, rest in paths:
        path = os.path.join(str(starts[start % len(starts)]), *rest)
        path = path.replace("/x y/", "//", 1) if start % 7 == 3 else path
        assert real_dir(path, resolved) == os.path.realpath(path), (path, resolved)
