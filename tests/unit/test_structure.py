"""Rules about the shape of the tree that no behavioural test would notice."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _top_level_names_from_tests() -> dict[str, str]:
    """Every name the test layout makes importable at top level, with its path.

    tests/ is on sys.path (its conftest.py), so each directory and module in
    it is a top-level name. pytest also puts each test directory without an
    `__init__.py` on sys.path, so what that directory holds is top-level too.
    """
    names: dict[str, str] = {}

    def add(directory: str) -> None:
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if entry.startswith((".", "_")):
                continue
            if os.path.isdir(path):
                names.setdefault(entry, path)
            elif entry.endswith(".py"):
                names.setdefault(entry[:-3], path)

    add(TESTS)
    for root, dirs, _files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        if root != TESTS and not os.path.exists(os.path.join(root, "__init__.py")):
            add(root)
    return names


def test_no_test_directory_or_module_shadows_an_importable_package() -> None:
    """A test directory named like a package hides it, or joins it.

    tests/agents (no `__init__.py`) was a namespace portion of the optional
    `agents` package (the OpenAI Agents SDK): which one `import agents`
    found depended on the order of sys.path, and the adapter's tests failed
    in a full run that passed alone. So no name the layout puts at top level
    may also be the standard library's or found on sys.path outside tests/.
    """
    outside = [p for p in sys.path
               if not os.path.abspath(p or os.curdir).startswith(TESTS)]
    clashes = []
    for name, path in _top_level_names_from_tests().items():
        if name in sys.stdlib_module_names or name in sys.builtin_module_names:
            clashes.append(f"{os.path.relpath(path, TESTS)} shadows the standard library's {name}")
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, outside)
        if spec is not None:
            where = spec.origin or list(spec.submodule_search_locations or [])
            clashes.append(f"{os.path.relpath(path, TESTS)} shadows {name} ({where})")
    assert not clashes, "rename these under tests/:\n" + "\n".join(clashes)


# -- the modules of src/stockade ----------------------------------------------------------

SRC = os.path.join(os.path.dirname(TESTS), "src")


def _modules() -> dict[str, tuple[str, ast.Module]]:
    """Every module of the package by dotted name, with its path and syntax tree."""
    out: dict[str, tuple[str, ast.Module]] = {}
    for root, dirs, files in os.walk(os.path.join(SRC, "stockade")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                dotted = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                dotted = dotted.removesuffix(".__init__")
                with open(path, encoding="utf-8") as fh:
                    out[dotted] = (path, ast.parse(fh.read(), path))
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package(module: str, modules: dict[str, tuple[str, ast.Module]]) -> str:
    return module if modules[module][0].endswith("__init__.py") else module.rpartition(".")[0]


def _target(module: str, node: ast.ImportFrom, modules: dict[str, tuple[str, ast.Module]]) -> str:
    """The absolute name a `from ... import` reads from."""
    if node.level == 0:
        return node.module or ""
    parts = _package(module, modules).split(".")
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _may_import(importer: str, dotted: str) -> bool:
    """A private module (`cluster._local`) is its package's own: only modules inside
    that package may import it."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        owner = ".".join(parts[:i])
        if _is_private(part) and not (importer == owner or importer.startswith(owner + ".")):
            return False
    return True


def _private_names_defined(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, variables, attributes it sets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if _is_private(name)}


#: A third-party object's private attribute that shares its name with one of
#: stockade's. The OpenAI Agents SDK's `SandboxSession` has no public name for
#: the session it wraps; its own clients read `_inner`.
THIRD_PARTY = {"src/stockade/adapters/openai_sandbox.py": {"session._inner"}}


def cross_module_private_uses() -> list[str]:
    """Where a module of stockade uses a private name of another of its modules.

    Three shapes: `from .x import _name` (or a private module from outside
    its package); `module._name`; and `obj._name` where `_name` is defined
    only in other modules of stockade (the module cannot own it, so it
    reaches into another's object, as `self._ledger._connect()` did). A
    private name the module defines itself is its own, whatever object
    carries it; the private names of third-party and standard modules
    (`argparse._SubParsersAction`, `posix._exit`) are not stockade's and
    are not checked here.
    """
    modules = _modules()
    defined = {name: _private_names_defined(tree) for name, (_path, tree) in modules.items()}
    found = []
    for module, (path, tree) in modules.items():
        own = defined[module]
        others = set().union(*(names for name, names in defined.items() if name != module))
        where = os.path.relpath(path, os.path.dirname(SRC))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _target(module, node, modules)
                if target != "stockade" and not target.startswith("stockade."):
                    continue
                if not _may_import(module, target):
                    found.append(f"{where}:{node.lineno}: imports from {target}")
                for alias in node.names:
                    dotted = f"{target}.{alias.name}"
                    if dotted in modules:
                        if not _may_import(module, dotted):
                            found.append(f"{where}:{node.lineno}: imports {dotted}")
                    elif _is_private(alias.name) and target != module:
                        found.append(f"{where}:{node.lineno}: imports {alias.name} from {target}")
            elif isinstance(node, ast.Import):
                found.extend(f"{where}:{node.lineno}: imports {alias.name}" for alias in node.names
                             if alias.name.startswith("stockade.")
                             and not _may_import(module, alias.name))
            elif isinstance(node, ast.Attribute) and _is_private(node.attr):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name)
                        and owner.func.id == "super"):
                    continue
                if (node.attr not in own and node.attr in others
                        and ast.unparse(node) not in THIRD_PARTY.get(where, set())):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_no_module_uses_another_modules_private_names() -> None:
    """A leading underscore says "only this module relies on it": a module that
    needs another's name gets a public one, so the owner knows who depends on it."""
    found = cross_module_private_uses()
    assert not found, "give these a public name:\n" + "\n".join(found)


#: The modules that own `SandboxCore`: the core itself and the two shells around it.
CORE_OWNERS = {"stockade.core", "stockade.workspace", "stockade.sync"}


def reaches_into_core(tree: ast.AST, module_names: set[str] | dict[str, object]
                      ) -> list[ast.Attribute]:
    """Every `x.core` in `tree` but a module of that name (`stockade.core`)."""
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "core"
            and ast.unparse(node) not in module_names]


def test_no_front_end_reaches_into_the_sandbox_core() -> None:
    """Front ends use the shells' public methods, never their `core`: through it they
    depended on every name of the pipeline's state, and a change there broke them all."""
    modules = _modules()
    found = [f"{os.path.relpath(path, os.path.dirname(SRC))}:{node.lineno}: {ast.unparse(node)}"
             for module, (path, tree) in sorted(modules.items()) if module not in CORE_OWNERS
             for node in reaches_into_core(tree, modules)]
    assert not found, "use a public method of the sandbox instead:\n" + "\n".join(found)


def test_the_core_reach_finder_finds_a_reach() -> None:
    tree = ast.parse("def f(sandbox):\n    return sandbox.core.sessions\n"
                     "import stockade.core\nx = stockade.core.output\n")
    found = [ast.unparse(n) for n in reaches_into_core(tree, {"stockade.core"})]
    assert found == ["sandbox.core"]


# -- the import graph ---------------------------------------------------------------------

def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports_that_run(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module but those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            for child in node.orelse if _under_type_checking(node) else [node]:
                if child is node:
                    self.generic_visit(node)
                else:
                    self.visit(child)

        def visit_Import(self, node: ast.Import) -> None:
            found.append(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            found.append(node)

    Visitor().visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of stockade it imports (see `test_no_import_cycles`)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, (_path, tree) in modules.items():
        for node in _imports_that_run(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    while name and name not in modules:
                        name = name.rpartition(".")[0]
                    if name:
                        graph[module].add(name)
                continue
            target = _target(module, node, modules)
            if target not in modules:
                continue
            for alias in node.names:
                dotted = f"{target}.{alias.name}"
                graph[module].add(dotted if dotted in modules else target)
        graph[module].discard(module)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No two modules of stockade import each other, directly or through others.

    The rule: an import counts wherever it runs, at module level or inside a
    function. A function-level import only defers the dependency to the
    first call; both modules still need each other, and neither can be
    understood or tested without the other. An import under
    `if TYPE_CHECKING:` does not count: it never runs, and annotations name
    types without making a module depend on another's behaviour.
    `from package import name` counts as an import of the submodule when
    `name` is one, else of the package.
    """
    graph = import_graph()
    cycles = import_cycles(graph)
    shown = ["  " + " -> ".join(f"{m} ({', '.join(sorted(graph[m] & set(c)))})" for m in c)
             for c in cycles]
    assert not cycles, "these modules import each other:\n" + "\n".join(shown)


# -- names compared as strings ------------------------------------------------------------

def _string_constants(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [v for element in node.elts for v in _string_constants(element)]
    return []


def test_network_kinds_are_compared_through_network_policy() -> None:
    """`profile.network.kind == "hosts"` beside `NetworkPolicy.HOSTS`: a renamed kind
    would leave the literal comparing false, silently. capabilities.py defines them."""
    found = []
    for _module, (path, tree) in _modules().items():
        if path.endswith(os.path.join("stockade", "capabilities.py")):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if (any(ast.unparse(o).endswith("network.kind") for o in operands)
                    and any(_string_constants(o) for o in operands)):
                found.append(f"{os.path.relpath(path, os.path.dirname(SRC))}:{node.lineno}: "
                             f"{ast.unparse(node)}")
    assert not found, "compare with NetworkPolicy.NONE / HOSTS / ALL:\n" + "\n".join(found)


def test_only_the_registry_compares_backend_names() -> None:
    """What a backend can do is declared in drivers/registry.py; a comparison with its
    name elsewhere is a decision the next backend would silently fall outside of."""
    from stockade.drivers.registry import REGISTRY

    src = os.path.join(os.path.dirname(TESTS), "src", "stockade")
    found = []
    for root, _dirs, files in os.walk(src):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or path.endswith(os.path.join("drivers", "registry.py")):
                continue
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                named = [s for s in sides if isinstance(s, (ast.Name, ast.Attribute))
                         and ("backend" in ast.unparse(s) or ast.unparse(s) == "name")]
                consts = [c.value for s in sides for c in ast.walk(s)
                          if isinstance(c, ast.Constant) and c.value in REGISTRY]
                if named and consts:
                    found.append(f"{os.path.relpath(path, src)}:{node.lineno}")
    assert found == []
