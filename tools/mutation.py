"""A small mutation tester, outside CI: does the suite notice a wrong line?

For each target file it makes mutants by rewriting one AST node (a comparison
flipped, ``and``/``or`` swapped, a ``not`` dropped, ``+``/``-`` swapped, an
integer constant changed, ``is``/``is not`` swapped, a boolean constant
negated), spread evenly over the file, then runs the file's targeted tests
against each in a copy of the working tree.  A mutant is killed when the
tests fail (or time out).  Prints one line per mutant and the kill rate.

    nice -n 10 python tools/mutation.py --per-file 6 --budget 1800 > mutation.log
    nice -n 10 python tools/mutation.py --root /work/main ...   # another checkout

The mutants of a file are spread evenly over it, so the same ``--per-file``
on the same source makes the same mutants.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# File -> the tests that cover it (what a developer would run after editing it).
TARGETS = {
    "texscope/planner/mincut.py": ["tests/test_mincut.py"],
    "texscope/planner/cost.py": ["tests/test_planner.py"],
    "texscope/collect_consumer.py": ["tests/test_stages.py", "tests/test_planner.py"],
    "texscope/collect_producer.py": ["tests/test_stages.py", "tests/test_planner.py"],
    "texscope/define_vdevice.py": ["tests/test_stages.py", "tests/test_pipeline.py"],
    "texscope/cleanup.py": ["tests/test_stages.py", "tests/test_pipeline.py"],
    "texscope/convert_layout.py": ["tests/test_stages.py", "tests/test_registry.py"],
    "texscope/knowledge/registry.py": ["tests/test_registry.py", "tests/test_stages.py",
                                       "tests/test_coverage.py"],
}

_COMPARE_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                 ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
                 ast.In: ast.NotIn, ast.NotIn: ast.In}


def _mutations(node):
    """(description, function mutating a deep copy of ``node``) pairs."""
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_SWAP:
        new = _COMPARE_SWAP[type(node.ops[0])]
        yield f"{type(node.ops[0]).__name__} -> {new.__name__}", \
            lambda n: n.ops.__setitem__(0, new())
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{type(node.op).__name__} -> {other.__name__}", \
            lambda n: setattr(n, "op", other())
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        other = ast.Sub if isinstance(node.op, ast.Add) else ast.Add
        yield f"{type(node.op).__name__} -> {other.__name__}", \
            lambda n: setattr(n, "op", other())
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield f"{node.value} -> {not node.value}", lambda n: setattr(n, "value", not n.value)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield f"{node.value} -> {node.value + 1}", lambda n: setattr(n, "value", n.value + 1)


class _Replace(ast.NodeTransformer):
    def __init__(self, index, mutate):
        self.index, self.mutate, self.seen = index, mutate, -1

    def generic_visit(self, node):
        self.seen += 1
        if self.seen == self.index:
            self.mutate(node)
        return super().generic_visit(node)


def _not_dropped(tree):
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield index, node


def mutants(source: str):
    """(line, description, mutated source) for every mutation of ``source``."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                  and n.body and isinstance(n.body[0], ast.Expr)}
    nodes = []

    def number(node):  # the order _Replace visits in
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            number(child)

    number(tree)
    for index, node in enumerate(nodes):
        if id(node) in docstrings or isinstance(node, ast.Constant) and \
                isinstance(getattr(node, "value", None), str):
            continue
        for description, mutate in _mutations(node):
            mutated = copy.deepcopy(tree)
            _Replace(index, mutate).visit(mutated)
            yield node.lineno, description, ast.unparse(mutated)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            mutated = copy.deepcopy(tree)

            class Drop(ast.NodeTransformer):
                seen = -1

                def generic_visit(self, n, target=index):
                    Drop.seen += 1
                    here = Drop.seen
                    n = super().generic_visit(n)
                    return n.operand if here == target else n

            yield node.lineno, "not dropped", ast.unparse(Drop().visit(mutated))


def spread(items: list, count: int) -> list:
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-file", type=int, default=10)
    parser.add_argument("--budget", type=float, default=3600, help="seconds in all")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout to mutate and test (this one by default)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the mutants whose 'file:line description' contains "
                        "this (repeatable; e.g. to check that new tests kill survivors)")
    parser.add_argument("files", nargs="*", default=list(TARGETS))
    args = parser.parse_args()
    root = args.root.resolve()
    work = Path(tempfile.mkdtemp(prefix="texscope-mutants-"))
    for part in ("texscope", "tests", "pyproject.toml"):
        src = root / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / part)
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
    start, killed, total = time.time(), 0, 0
    for name in args.files:
        original = (root / name).read_text()
        for line, description, source in spread(list(mutants(original)), args.per_file):
            if args.only and not any(o in f"{name}:{line} {description}" for o in args.only):
                continue
            if time.time() - start > args.budget:
                print("budget spent; stopping", flush=True)
                break
            (work / name).write_text(source)
            began = time.time()
            try:
                run = subprocess.run(
                    [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                     *TARGETS[name]], cwd=work, env=env, capture_output=True, text=True,
                    timeout=args.timeout)
                outcome = "killed" if run.returncode != 0 else "SURVIVED"
            except subprocess.TimeoutExpired:
                outcome = "killed (timeout)"
            total += 1
            killed += outcome != "SURVIVED"
            print(f"{outcome:16} {name}:{line} {description}  ({time.time() - began:.0f} s)",
                  flush=True)
        (work / name).write_text(original)
    print(f"kill rate: {killed}/{total}" + (f" = {killed / total:.0%}" if total else ""),
          flush=True)
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
