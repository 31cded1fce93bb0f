"""texscope's OpenCL: checks on the emitted source, and an executor that runs
a build on a real OpenCL implementation (PoCL in CI, any GPU where there is one).

pyopencl and an OpenCL driver with image support are needed only here.
"""

from .executor import KernelTime, RunResult, run
from .source import compile_source, default_device, device_target, image_misuse

__all__ = ["KernelTime", "RunResult", "compile_source", "default_device", "device_target", "image_misuse", "run"]
