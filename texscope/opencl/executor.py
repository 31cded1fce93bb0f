"""Run a texscope build on an OpenCL device: make its plan, then replay it.

The plan (``plan.py``) is read off the build: the call sequence from the
Relax ``main`` (``program.py``) and each call's kernel launches from the TIR
that TVM compiled (``launches.py``).  Running it is ``replay.py``'s job, the
same code that runs a plan ``texscope build`` wrote to disk, without TVM.
The planner is not consulted: scopes come from the built module's types.

For a model of symbolic size, each call site binds its host function's size
variables (those of its tensors' shapes, and its scalar parameters) to the
call's shapes, expressions of ``main``'s size variables: the kernels' scalar
arguments, workspaces and work sizes become expressions the replay can
evaluate once it knows the input's size.
"""

from __future__ import annotations

import tvm
from tvm.sym import Analyzer

from ..errors import TexscopeError
from .launches import HostFunction, Launch, ParamArg, SizeArg, Workspace, host_functions
from .plan import CopyStep, KernelStep, Plan, ScalarArg, TensorArg, TensorSpec, WorkspaceArg
from .program import Copy, KernelCall, Program, read_program
from .replay import KernelTime, RunResult, random_inputs, replay
from .resolve import bind_sizes
from .tir_sizes import free_names, size_text, substituted

__all__ = ["KernelTime", "RunResult", "plan_of", "run"]


def _call_values(call: KernelCall, host: HostFunction, program: Program) -> dict:
    """The host function's size variables as expressions of ``main``'s."""
    if len(call.params) != len(host.params):
        raise TexscopeError(f"{call.function} takes {len(host.params)} parameters, the call "
                            f"passes {len(call.params)}", "main", call.binding)
    values = {}
    for param, given in zip(host.params, call.params):
        if not isinstance(given, TensorSpec):
            values[param] = given
            continue
        for dim, extent in zip(param.ty.shape, program.shapes[given.name]):
            # A shape variable takes the call's extent; an expression extent
            # (an output's ``height - 2``) follows from the variables.
            if isinstance(dim, tvm.ir.Var) and dim not in values:
                values[dim] = extent
    return values


class _CallSite:
    """Writes one call's launches in terms of ``main``'s size variables."""

    def __init__(self, call: KernelCall, host: HostFunction, program: Program):
        self.call = call
        self.sizes = set(program.sizes)
        self.values = _call_values(call, host, program) if program.sizes else {}
        self.analyzer = Analyzer()

    def size(self, expr, what: str) -> int | str:
        if isinstance(expr, int):
            return expr
        value = substituted(expr, self.values, self.analyzer)
        unknown = free_names(value) - self.sizes
        if unknown:
            raise TexscopeError(
                f"{what} of {self.call.function} is {expr}, which depends on "
                f"{', '.join(sorted(unknown))}: not given by the call's shapes",
                "main", self.call.binding)
        return size_text(value)

    def arg(self, arg, kernel: str):
        if isinstance(arg, ParamArg):
            return TensorArg(self.call.params[arg.index].name, arg.scope)
        if isinstance(arg, Workspace):
            return WorkspaceArg(arg.name, self.size(arg.nbytes, f"the workspace {arg.name}"))
        if isinstance(arg, SizeArg):
            return ScalarArg(self.size(arg.expr, f"an argument of {kernel}"), arg.dtype)
        return arg

    def step(self, launch: Launch) -> KernelStep:
        what = f"the work size of {launch.kernel}"
        return KernelStep(self.call.binding, self.call.function, launch.kernel,
                          tuple(self.arg(arg, launch.kernel) for arg in launch.args),
                          tuple(self.size(s, what) for s in launch.global_size),
                          tuple(self.size(s, what) for s in launch.local_size))


def _tensors(program: Program) -> dict:
    tensors = {}
    for spec in (*(i.tensor for i in program.inputs), *(c.tensor for c in program.constants),
                 *program.outputs):
        tensors[spec.name] = spec
    for step in program.steps:
        for spec in (step.tensors if isinstance(step, KernelCall) else (step.source, step.target)):
            tensors[spec.name] = spec
    return tensors


def plan_of(result) -> Plan:
    """The portable plan of a :func:`texscope.build` result built for OpenCL.

    A model of symbolic size (``R.Tensor((1, 3, "h", "w"))``) gets a plan
    whose sizes are expressions of its size variables; the replay binds them
    from the inputs.

    Raises
    ------
    TexscopeError
        The build has no OpenCL kernels, a call was not lowered to kernels, or
        a kernel needs a size its call's shapes do not determine.
    """
    if result.kernels is None or not result.opencl_source:
        raise TexscopeError("this build has no OpenCL kernels to run (was it built for OpenCL?)")
    program = read_program(result.module)
    hosts = host_functions(result.kernels)
    steps = []
    for step in program.steps:
        if isinstance(step, Copy):
            steps.append(CopyStep(step.binding, step.source.name, step.target.name))
        elif step.function in hosts:
            site = _CallSite(step, hosts[step.function], program)
            steps += [site.step(launch) for launch in hosts[step.function].launches]
        else:
            raise TexscopeError(f"{step.function} was not lowered to kernels", "main", step.binding)
    return Plan(
        source=result.opencl_source,
        tensors=_tensors(program),
        inputs=tuple(i.tensor.name for i in program.inputs),
        constants={c.tensor.name: c.value for c in program.constants},
        steps=tuple(steps),
        outputs=tuple(spec.name for spec in program.outputs),
        target=result.report.target,
        sizes=program.sizes,
    )


def run(result, inputs=None, device=None, sizes=None) -> RunResult:
    """Execute a :func:`texscope.build` result on an OpenCL device.

    Parameters
    ----------
    result : BuildResult
        An OpenCL build (``result.kernels`` and ``result.opencl_source`` set).
    inputs : sequence of numpy arrays, or dict of them by name
        One per parameter of ``main`` (in order, or by the input names the
        model gave them); for a model of symbolic size, any
        size its shapes allow (one build runs at every size).  Uniform in
        [-1, 1) by default.
    device : pyopencl.Device, optional
        The first device found by default.
    sizes : dict, optional
        The value of each symbolic size (``{"h": 224, "w": 224}``, as
        ``texscope run --size``): the size the random inputs take, or the
        size ``inputs`` must have.

    Returns
    -------
    RunResult
    """
    plan = plan_of(result)
    if inputs is None:
        inputs = random_inputs(plan, sizes=sizes)
    elif sizes:
        bound = bind_sizes(plan, inputs)
        differ = {name: value for name, value in sizes.items() if bound.get(name) != value}
        if differ:
            name = next(iter(differ))
            raise TexscopeError(f"sizes: {name}={differ[name]}, but the inputs give "
                                f"{name}={bound.get(name, '(no such size)')}")
    return replay(plan, inputs, device)
