"""Run a texscope build on an OpenCL device: make its plan, then replay it.

The plan (``plan.py``) is read off the build: the call sequence from the
Relax ``main`` (``program.py``) and each call's kernel launches from the TIR
that TVM compiled (``launches.py``).  Running it is ``replay.py``'s job, the
same code that runs a plan ``texscope build`` wrote to disk, without TVM.
The planner is not consulted: scopes come from the built module's types.
"""

from __future__ import annotations

from ..errors import TexscopeError
from .launches import Launch, ParamArg, kernel_launches
from .plan import CopyStep, KernelStep, Plan, TensorArg
from .program import Copy, KernelCall, Program, read_program
from .replay import KernelTime, RunResult, replay

__all__ = ["KernelTime", "RunResult", "plan_of", "run"]


def _kernel_steps(call: KernelCall, launches: tuple[Launch, ...]) -> list[KernelStep]:
    def bound(arg):
        if isinstance(arg, ParamArg):
            return TensorArg(call.tensors[arg.index].name, arg.scope)
        return arg

    return [KernelStep(call.binding, call.function, launch.kernel,
                       tuple(bound(arg) for arg in launch.args),
                       launch.global_size, launch.local_size)
            for launch in launches]


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

    Raises
    ------
    TexscopeError
        The build has no OpenCL kernels, or a call was not lowered to kernels.
    """
    if result.kernels is None or not result.opencl_source:
        raise TexscopeError("this build has no OpenCL kernels to run (was it built for OpenCL?)")
    program = read_program(result.module)
    launches = kernel_launches(result.kernels)
    steps = []
    for step in program.steps:
        if isinstance(step, Copy):
            steps.append(CopyStep(step.binding, step.source.name, step.target.name))
        elif step.function in launches:
            steps += _kernel_steps(step, launches[step.function])
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
    )


def run(result, inputs, device=None) -> RunResult:
    """Execute a :func:`texscope.build` result on an OpenCL device.

    Parameters
    ----------
    result : BuildResult
        An OpenCL build (``result.kernels`` and ``result.opencl_source`` set).
    inputs : sequence of numpy arrays
        One per parameter of ``main``.
    device : pyopencl.Device, optional
        The first device found by default.

    Returns
    -------
    RunResult
    """
    return replay(plan_of(result), inputs, device)
