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
