"""texscope's modules import in layers: no module reaches, even from inside a
function, a module that imports it back."""

import ast
from pathlib import Path

import texscope

PACKAGE = Path(texscope.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """texscope modules ``path`` imports anywhere in it (a package's
    ``from . import x`` counts as importing ``x``)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = ".".join(base[:len(base) - node.level + 1])
            target = f"{base}.{node.module}" if node.module else base
            found.add(target)
            if node.module is None:
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("texscope"))
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {name for name in found if name in known and name != here}


def test_no_module_imports_in_a_circle():
    graph = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}
    # The package's __init__ files re-export what is below them; a module
    # importing its own package (for a sibling) is not a layer violation.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".") and m != "texscope"}
    cycles = []

    def visit(node, path, done):
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, path + [node], done)
        done.add(node)

    done = set()
    for start in sorted(graph):
        visit(start, [], done)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


# Jobs from the bottom up: a module imports only from its own job or below.
# The five stages share one rank (each reads the analyses before it).
RANKS = {
    "errors": 0,
    "knowledge": 1,
    "models": 1,
    "ir": 2,
    "tvm_workarounds": 2,
    "rewrites": 3,
    "planner": 3,
    "convert_layout": 4, "collect_consumer": 4, "collect_producer": 4,
    "define_vdevice": 4, "cleanup": 4,
    "diagnostics": 5,
    "pipeline": 6,
    "frontend": 7,
    "opencl": 8,
    "backend": 9,
    "cli": 10,
    "__main__": 11,
}


def job_of(module: str) -> str:
    return module.split(".")[1] if "." in module else "texscope"


def test_the_top_holds_only_the_stages_pipeline_errors_and_cli():
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert top | packages == set(RANKS)
    assert packages == set(texscope.PACKAGES)


def test_every_job_imports_only_its_own_or_lower_jobs():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        here = module_name(path)
        if here == "texscope":
            continue
        for target in imports_of(path):
            if target == "texscope":
                continue
            if RANKS[job_of(target)] > RANKS[job_of(here)]:
                upward.append(f"{here} -> {target}")
    assert upward == [], "\n".join(sorted(upward))
