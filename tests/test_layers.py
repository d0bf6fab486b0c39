"""The package's floors, checked by walking its imports (``ast``; nothing is imported).

Each floor may import only the floors below it (module-level and function-level imports
alike); no two modules import each other, directly or through others; no step module (one that
defines a ``BlockedStep``) nor any other module of ``step_methods`` imports a step module or
builds a step of another module.
``KNOWN`` lists the breaches the restructuring has not removed yet: it must match what is found
exactly, so that a new breach fails and a removed one must be struck off the list.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "pymc_ibp"

#: the floors, bottom first: the first part of a module's path below ``pymc_ibp``
FLOORS = [
    {"exceptions", "_numba_utils", "_pytensor_utils", "_stat_names", "likelihoods", "thinning"},
    {"datasets", "distributions"},
    {"kernels"},
    {"matching"},
    {"inference"},
    {"init"},
    {"step_methods"},
    {"distributed"},
    {"diagnostics"},
]

#: breaches still to be removed by a restructuring in progress (none now)
KNOWN = set()


def _modules():
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text(), str(path)))
    return out


def _imports(name, tree, modules):
    """The package modules ``name`` imports anywhere in its body (``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                       else node.module for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _floor(name):
    parts = name.split(".")
    if len(parts) == 1:
        return len(FLOORS)  # pymc_ibp/__init__.py: the top
    for i, floor in enumerate(FLOORS):
        if parts[1] in floor:
            return i
    raise AssertionError(f"{name} is on no floor: add its package to FLOORS")


def _step_classes(modules):
    """``{class name: module}`` of every class that derives from ``BlockedStep`` (directly or
    through another such class of the package)."""
    bases = {}
    for name, (_, tree) in modules.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases[node.name] = (name, [ast.unparse(b).split(".")[-1] for b in node.bases])
    steps, grew = {"BlockedStep": None}, True
    while grew:
        grew = False
        for cls, (mod, bs) in bases.items():
            if cls not in steps and any(b in steps for b in bs):
                steps[cls], grew = mod, True
    del steps["BlockedStep"]
    return steps


def _breaches():
    modules = _modules()
    graph = {n: _imports(n, t, modules) for n, (_, t) in modules.items()}
    steps = _step_classes(modules)
    step_modules = set(steps.values())
    out = set()
    for name, deps in graph.items():
        for dep in deps:
            if _floor(dep) > _floor(name):
                out.add(("up a floor", name, dep))
            if name.startswith("pymc_ibp.step_methods.") and dep in step_modules:
                out.add(("step imports step", name, dep))
    for name, (_, tree) in modules.items():
        if not name.startswith("pymc_ibp.step_methods.") or name.endswith("step_methods"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                cls = node.func.id
                if cls in steps and steps[cls] != name:
                    out.add(("step builds step", name, cls))
    # cycles: every pair of modules on a common cycle, reported once as (a, b) with a < b
    for a in graph:
        for b in graph[a]:
            if a in _reach(graph, b) and a < b and not _is_package_init(a, b):
                out.add(("cycle", a, b))
    return out


def _is_package_init(a, b):
    """A package's ``__init__`` re-exporting its own submodules is not a cycle."""
    return b.startswith(a + ".") or a.startswith(b + ".")


def _reach(graph, start):
    seen, stack = set(), [start]
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        stack.extend(graph[m])
    return seen


def test_floors_cycles_and_steps():
    found = _breaches()
    new = sorted(found - KNOWN)
    gone = sorted(KNOWN - found)
    assert not new, "new breaches of the package's floors:\n" + "\n".join(map(str, new))
    assert not gone, "breaches removed: strike them off KNOWN:\n" + "\n".join(map(str, gone))


def test_no_module_above_800_lines():
    long = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if len(p.read_text().splitlines()) > 800}
    assert not long, f"modules above 800 lines: {sorted(long)}"


def test_no_class_above_600_lines():
    long = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 600:
                long.add(node.name)
    assert not long, f"classes above 600 lines: {sorted(long)}"
