"""A built model as a portable program: what to allocate, launch and copy.

``texscope build`` writes it next to ``kernels.cl``, and
``python -m texscope.opencl.replay`` runs it with numpy and pyopencl alone, so
this module imports no TVM.  ``texscope.opencl.run`` makes the same plan from
a build in memory and replays it: the two paths cannot drift.

Files (``PLAN_FILE``, ``WEIGHTS_FILE``, next to the OpenCL source):

``plan.json``
    ``format``/``version``; ``target`` (the build's target, for the reader);
    ``kernels``: the OpenCL source file; ``weights``: the ``.npz`` of
    constants (absent without constants);
    ``sizes``: the names of the size variables of a model built for any
    input size (``R.Tensor((1, 3, "h", "w"))``; absent when every shape is
    static); wherever a number depends on them (a tensor's extent, a kernel's
    scalar, a workspace's bytes, a work size) the plan writes it as an
    expression of them (``"(h - 1) // 2 + 1"``, see ``sizes.py``), and the
    replay binds them from the input arrays' shapes;
    ``tensors``: ``[{name, shape, dtype, scope}]``, every tensor the program
    holds, ``scope`` ``global`` (a buffer) or a texture flavour (an
    ``image2d_array_t``, folded as ``texscope.knowledge.scopes.FLAVOUR_AXES`` says);
    ``inputs``: tensor names in the order of ``main``'s parameters;
    ``constants``: tensor names whose values are in the weights file;
    ``steps``, in order, each
    ``{"kind": "kernel", binding, function, kernel, args, global_size, local_size}``
    (``args`` one per kernel parameter: ``{"tensor", "scope"}`` with the scope
    the kernel declares, ``{"workspace", "nbytes"}`` for scratch memory private
    to the step, or ``{"scalar", "dtype"}``, a number or a size expression;
    sizes are OpenCL's global and local work sizes) or
    ``{"kind": "copy", binding, source, target}`` (the same values moved into
    another storage);
    ``outputs``: tensor names ``main`` returns, flattened.
``weights.npz``
    One array per constant, keyed by its tensor name.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np

from ..errors import TexscopeError
from ..knowledge.scopes import is_texture_scope
from . import sizes as size_exprs

FORMAT = "texscope-opencl-plan"
# Version 2 added symbolic sizes; a version-1 plan is a version-2 plan without them.
VERSION = 2
READABLE_VERSIONS = (1, 2)
PLAN_FILE = "plan.json"
WEIGHTS_FILE = "weights.npz"
KERNELS_FILE = "kernels.cl"


def _sizes(values) -> tuple:
    return tuple(size_exprs.validate(v) for v in values)


@attrs.frozen
class TensorSpec:
    """One tensor of the program: its name, shape, element type and storage.

    Each extent is an int, or a size expression (text) for a model built for
    any input size."""

    name: str
    shape: tuple[int | str, ...] = attrs.field(converter=_sizes)
    dtype: str
    scope: str

    @property
    def is_texture(self) -> bool:
        return is_texture_scope(self.scope)


@attrs.frozen
class TensorArg:
    """A kernel parameter bound to tensor ``tensor``, declared by the kernel
    in ``scope``."""

    tensor: str
    scope: str


@attrs.frozen
class WorkspaceArg:
    """Scratch memory a host function allocates for its kernels (a padded
    input, say): ``nbytes`` of buffer (an int or a size expression), private
    to one step."""

    name: str
    nbytes: int | str = attrs.field(converter=size_exprs.validate)


@attrs.frozen
class ScalarArg:
    """A kernel argument that is not memory: a number, or for a model built
    for any input size a size expression (a shape value TVM's kernels take
    as a scalar, such as ``"h * w"``)."""

    value: int | float | str = attrs.field(
        converter=lambda v: size_exprs.validate(v) if isinstance(v, str) else v)
    dtype: str


@attrs.frozen
class KernelStep:
    """One kernel launch of the host function ``function`` called at ``binding``."""

    binding: str
    function: str
    kernel: str
    args: tuple[TensorArg | WorkspaceArg | ScalarArg, ...] = attrs.field(converter=tuple)
    global_size: tuple[int | str, int | str, int | str] = attrs.field(converter=_sizes)
    local_size: tuple[int | str, int | str, int | str] = attrs.field(converter=_sizes)


@attrs.frozen
class CopyStep:
    """``to_vdevice``: tensor ``source`` copied into tensor ``target``."""

    binding: str
    source: str
    target: str


@attrs.frozen
class Plan:
    """Everything a run needs, nothing from TVM."""

    source: str = attrs.field(repr=False)
    tensors: dict[str, TensorSpec] = attrs.field(repr=False)
    inputs: tuple[str, ...]
    constants: dict[str, np.ndarray] = attrs.field(eq=False, repr=False)
    steps: tuple[KernelStep | CopyStep, ...]
    outputs: tuple[str, ...]
    target: str = ""
    sizes: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def spec(self, name: str) -> TensorSpec:
        return self.tensors[name]

    @property
    def is_symbolic(self) -> bool:
        """Whether some number of the plan depends on the input's size."""
        return bool(self.sizes)

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "target": self.target,
            **({"sizes": list(self.sizes)} if self.sizes else {}),
            "kernels": KERNELS_FILE,
            **({"weights": WEIGHTS_FILE} if self.constants else {}),
            "tensors": [_tensor_json(t) for t in self.tensors.values()],
            "inputs": list(self.inputs),
            "constants": list(self.constants),
            "steps": [_step_json(s) for s in self.steps],
            "outputs": list(self.outputs),
        }

    def write(self, directory) -> list[Path]:
        """Write ``plan.json``, ``kernels.cl`` and (with constants)
        ``weights.npz`` into ``directory``; returns the paths written."""
        out = Path(directory)
        written = [out / PLAN_FILE, out / KERNELS_FILE]
        written[0].write_text(json.dumps(self.to_json(), indent=1) + "\n")
        written[1].write_text(self.source)
        if self.constants:
            written.append(out / WEIGHTS_FILE)
            np.savez(written[-1], **self.constants)
        return written


def _tensor_json(spec: TensorSpec) -> dict:
    return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype, "scope": spec.scope}


def _arg_json(arg) -> dict:
    if isinstance(arg, TensorArg):
        return {"tensor": arg.tensor, "scope": arg.scope}
    if isinstance(arg, WorkspaceArg):
        return {"workspace": arg.name, "nbytes": arg.nbytes}
    return {"scalar": arg.value, "dtype": arg.dtype}


def _step_json(step) -> dict:
    if isinstance(step, KernelStep):
        return {"kind": "kernel", "binding": step.binding, "function": step.function,
                "kernel": step.kernel, "args": [_arg_json(a) for a in step.args],
                "global_size": list(step.global_size), "local_size": list(step.local_size)}
    return {"kind": "copy", "binding": step.binding, "source": step.source, "target": step.target}


def _arg(item: dict):
    if "tensor" in item:
        return TensorArg(item["tensor"], item["scope"])
    if "workspace" in item:
        return WorkspaceArg(item["workspace"], item["nbytes"])
    return ScalarArg(item["scalar"], item["dtype"])


def _step(item: dict):
    if item["kind"] == "kernel":
        return KernelStep(item["binding"], item["function"], item["kernel"],
                          tuple(_arg(a) for a in item["args"]),
                          item["global_size"], item["local_size"])
    if item["kind"] == "copy":
        return CopyStep(item["binding"], item["source"], item["target"])
    raise KeyError(f"step kind {item['kind']!r}")


def read_plan(directory) -> Plan:
    """The plan ``texscope build`` wrote into ``directory``.

    Raises
    ------
    TexscopeError
        The directory holds no plan, or a plan this version cannot read.
    """
    root = Path(directory)
    path = root / PLAN_FILE
    if not path.is_file():
        raise TexscopeError(f"{root}: no {PLAN_FILE}; write one with `texscope build MODEL "
                            f"--target adreno-opencl -o {root}` (OpenCL targets only)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise TexscopeError(f"{path}:{err.lineno}: not JSON ({err.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TexscopeError(f"{path}: not a texscope OpenCL plan (format {FORMAT!r} expected)")
    if data.get("version") not in READABLE_VERSIONS:
        raise TexscopeError(f"{path}: plan version {data.get('version')!r}; this texscope "
                            f"reads versions {READABLE_VERSIONS[0]} to {VERSION}: rebuild the model")
    try:
        tensors = {t["name"]: TensorSpec(t["name"], t["shape"], t["dtype"], t["scope"])
                   for t in data["tensors"]}
        steps = tuple(_step(s) for s in data["steps"])
        source = (root / data["kernels"]).read_text()
        constants = {}
        if data["constants"]:
            with np.load(root / data["weights"]) as weights:
                constants = {name: weights[name] for name in data["constants"]}
        plan = Plan(source, tensors, tuple(data["inputs"]), constants, steps,
                    tuple(data["outputs"]), data.get("target", ""), data.get("sizes", ()))
    except (KeyError, TypeError, ValueError, OSError) as err:
        raise TexscopeError(f"{path}: incomplete plan ({type(err).__name__}: {err})") from None
    except TexscopeError as err:
        raise TexscopeError(f"{path}: {err}") from None
    _check_names(plan, path)
    _check_sizes(plan, path)
    return plan


def _check_names(plan: Plan, path: Path) -> None:
    named = [*plan.inputs, *plan.constants, *plan.outputs]
    for step in plan.steps:
        if isinstance(step, CopyStep):
            named += [step.source, step.target]
        else:
            named += [a.tensor for a in step.args if isinstance(a, TensorArg)]
    unknown = sorted(set(named) - set(plan.tensors))
    if unknown:
        raise TexscopeError(f"{path}: steps name tensors the plan does not declare: "
                            f"{', '.join(unknown[:5])}")


def size_values(plan: Plan):
    """Every number of the plan that may be a size expression, with what it sizes."""
    for spec in plan.tensors.values():
        for extent in spec.shape:
            yield f"the shape of {spec.name}", extent
    for step in plan.steps:
        if isinstance(step, KernelStep):
            where = f"the launch of {step.kernel} at {step.binding}"
            for arg in step.args:
                if isinstance(arg, ScalarArg):
                    yield where, arg.value
                elif isinstance(arg, WorkspaceArg):
                    yield where, arg.nbytes
            for size in (*step.global_size, *step.local_size):
                yield where, size


def _check_sizes(plan: Plan, path: Path) -> None:
    """Every expression uses declared size variables only (and parses)."""
    declared = set(plan.sizes)
    for what, size in size_values(plan):
        try:
            unknown = size_exprs.names(size) - declared
        except TexscopeError as err:
            raise TexscopeError(f"{path}: {what}: {err}") from None
        if unknown:
            raise TexscopeError(f"{path}: {what} uses {', '.join(sorted(unknown))}, not among "
                                f"the plan's sizes ({', '.join(plan.sizes) or 'none'})")
