"""Checks on the OpenCL source texscope emits.

pyopencl and an OpenCL driver with image support (PoCL in CI, any GPU where
there is one) are needed only here.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import re
import subprocess
import sys

from ..errors import TexscopeError

PARALLEL_FROM = 64  # kernels in a source: fewer compile as one program

IMAGE_PARAM = re.compile(r"(?:__read_only|__write_only|__read_write)?\s*image2d(?:_array)?_t\s+(\w+)")
KERNEL = re.compile(r"__kernel void (\w+)\(([^)]*)\)\s*\{")
# TVM wraps reads in READ_IMAGEF / READ_IMAGEH macros that expand to read_image*.
IMAGE_ACCESS = re.compile(
    r"\b(read_image[fhi]|write_image[fhi]|get_image_\w+|READ_IMAGE[FH])\s*\(\s*$"
)


def pyopencl():
    """The pyopencl module, or a TexscopeError saying how to install it."""
    try:
        import pyopencl as cl  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise TexscopeError("pyopencl is not installed: pip install pyopencl") from err
    return cl


def kernel_signatures(source: str) -> dict[str, str]:
    """Kernel name to parameter list, for the kernels defined in ``source``."""
    return {m.group(1): m.group(2) for m in KERNEL.finditer(source)}


def kernel_bodies(source: str) -> dict[str, str]:
    """Kernel name to its body (braces included), for the kernels defined in ``source``."""
    return {m.group(1): _body(source, m.end() - 1) for m in KERNEL.finditer(source)}


def devices() -> list:
    """Every OpenCL device, platform by platform: what ``--device N`` indexes."""
    cl = pyopencl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:  # no ICD installed at all
        raise TexscopeError(f"no OpenCL platform found ({err}); apt-get install "
                            "pocl-opencl-icd for a CPU one") from None
    return [device for platform in platforms for device in platform.get_devices()]


def pick_device(index: int | None = None):
    """OpenCL device ``index`` of :func:`devices`, the first by default."""
    found = devices()
    if not found:
        raise TexscopeError("no OpenCL device found (apt-get install pocl-opencl-icd for a CPU one)")
    index = index or 0
    if not 0 <= index < len(found):
        listed = "; ".join(f"{i}: {d.name.strip()}" for i, d in enumerate(found))
        raise TexscopeError(f"no OpenCL device {index}; there are {listed}")
    return found[index]


def default_device():
    """The first OpenCL device found."""
    return pick_device(0)


def device_target(device=None, base="qcom/adreno-opencl-texture") -> dict:
    """``base`` (a target, tag, preset name or JSON) as target JSON whose texture
    limits are no larger than an OpenCL device's, so that every texture the plan
    makes can be created there (PoCL's images stop at 8192 texels a side where
    Adreno's reach 16384)."""
    from ..knowledge.targets import texture_target  # pylint: disable=import-outside-toplevel

    device = device or default_device()
    texture = texture_target(base)
    spec = json.loads(str(texture.target))
    spec["texture_spatial_limit"] = min(texture.spatial_limit, device.image2d_max_width,
                                        device.image2d_max_height)
    spec["texture_depth_limit"] = min(texture.depth_limit, device.image_max_array_size)
    return spec


# TVM's OpenCL codegen enables this extension whenever a kernel uses half.
HALF_PRAGMA = re.compile(r"#pragma\s+OPENCL\s+EXTENSION\s+cl_khr_fp16\s*:\s*enable")


def missing_extensions(source: str, device) -> list[str]:
    """OpenCL extensions ``source`` needs that ``device`` lacks."""
    needs = ["cl_khr_fp16"] if HALF_PRAGMA.search(source) else []
    return [ext for ext in needs if ext not in device.extensions.split()]


@functools.lru_cache(maxsize=32)
def compiled(source: str, device):
    """(context, program): ``source`` built by ``device``'s OpenCL compiler,
    once per source and device; a compiler error, or an extension the kernels
    need and the device lacks, is a TexscopeError."""
    context = _context(source, device)
    return context, _build(context, source, device)


def _context(source: str, device):
    """A context on ``device``, after checking it has the extensions
    ``source`` needs."""
    _check_extensions(source, device)
    return pyopencl().Context([device])


def _check_extensions(source: str, device) -> None:
    if missing := missing_extensions(source, device):
        raise TexscopeError(
            f"{device.name.strip()} lacks {', '.join(missing)}, which these kernels need "
            "(float16 tensors are computed in half precision): run them on a device that "
            "has it (Adreno and Mali GPUs do) or build the model in float32")


def _build(context, source: str, device):
    cl = pyopencl()
    try:
        return cl.Program(context, source).build()
    except cl.RuntimeError as err:
        raise _rejected(device, err) from None


def _rejected(device, message) -> TexscopeError:
    return TexscopeError(f"{device.name.strip()} rejects the kernels: {message}")


def source_parts(source: str, parts: int) -> list[str]:
    """``source`` cut into at most ``parts`` sources of whole kernels, each
    compiling alone: the text before the first kernel (pragmas) heads every
    part, kernel prototypes are dropped (no kernel calls another), and the
    ``// Function:`` sections (a kernel with the macros before it) are dealt
    out in order, about as many bytes to each part."""
    marker = "// Function: "
    first = source.find(marker)
    if parts <= 1 or first < 0:
        return [source]
    head = source[:first]
    sections = [marker + text for text in source[first:].split(marker)[1:]]
    sections = ["\n".join(line for line in text.splitlines()
                          if not (line.startswith("__kernel ") and line.endswith(");")))
                for text in sections]
    share = sum(map(len, sections)) / parts
    grouped, size = [[]], 0.0
    for text in sections:
        if size >= share and len(grouped) < parts:
            grouped.append([])
            size = 0.0
        grouped[-1].append(text)
        size += len(text)
    return [head + "\n".join(group) + "\n" for group in grouped]


def compiled_kernels(source: str, device, jobs: int = 1, context=None):
    """(context, {kernel name: program}): ``source`` built as up to ``jobs``
    programs compiled at once (a tuning set holds hundreds of kernels), in
    ``context`` where given (one on ``device``), else in a new one.  Errors
    as :func:`compiled`.

    The parts compile in worker processes, each in a context of its own, and
    load here from their binaries: NVIDIA's driver compiles one program at a
    time per process (an H200, 970 kernels in 16 parts: 26-43 s in 16
    threads, 9.4 s in 16 processes, the binaries loading in 0.06 s from the
    driver's compute cache).  Where a worker cannot start, dies without a
    word, or its binary does not load, the parts compile in threads."""
    parts = source_parts(source, jobs) if len(KERNEL.findall(source)) >= PARALLEL_FROM else [source]
    if context is None:
        context = _context(source, device)
    else:
        _check_extensions(source, device)
    if len(parts) == 1:
        program = _build(context, source, device)
        return context, {name: program for name in kernel_signatures(source)}
    try:
        programs = _built_in_processes(context, parts, device)
    except OSError:
        with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
            programs = list(pool.map(lambda part: _build(context, part, device), parts))
    return context, {name: program for part, program in zip(parts, programs)
                     for name in kernel_signatures(part)}


# A worker: one part from stdin, its binary to stdout, the compiler's message
# to stderr (exit status 3).  Started as ``python -c``, it imports neither
# texscope nor the caller's ``__main__`` (which multiprocessing's spawn would
# run again), only pyopencl; the devices are listed as :func:`devices` lists them.
_WORKER = """
import sys
import pyopencl as cl
device = [d for p in cl.get_platforms() for d in p.get_devices()][int(sys.argv[1])]
try:
    program = cl.Program(cl.Context([device]), sys.stdin.read()).build()
except cl.RuntimeError as err:
    sys.stderr.write(str(err))
    sys.exit(3)
sys.stdout.buffer.write(program.get_info(cl.program_info.BINARIES)[0])
"""


def _built_in_processes(context, parts: list[str], device) -> list:
    """``parts`` compiled one per worker process, loaded into ``context``;
    OSError where that fails for a reason other than the compiler's."""
    cl = pyopencl()
    index = next((i for i, found in enumerate(devices()) if found == device), None)
    if index is None:  # a sub-device: not one a worker can name
        raise OSError(f"{device.name.strip()} is not among the devices a worker lists")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

    def compile_part(part: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _WORKER, str(index)], input=part.encode(),
                              capture_output=True, env=env, check=False)

    with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
        done = list(pool.map(compile_part, parts))
    programs = []
    for worker in done:
        if worker.returncode == 3:
            raise _rejected(device, worker.stderr.decode(errors="replace"))
        if worker.returncode != 0 or not worker.stdout:
            raise OSError(f"a compiling process ended with status {worker.returncode}")
        try:
            programs.append(cl.Program(context, [device], [worker.stdout]).build())
        except cl.Error as err:  # the source compiled: a binary this driver will not load
            raise OSError(f"a compiled part does not load: {err}") from None
    return programs


def compile_source(source: str, device=None):
    """Build ``source`` with the device's OpenCL compiler; returns the program."""
    return compiled(source, device or default_device())[1]


def _body(source: str, start: int) -> str:
    depth, i = 0, start
    while i < len(source):
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        i += 1
        if depth == 0:
            break
    return source[start:i]


def image_misuse(source: str) -> list[str]:
    """Places where a kernel touches an image argument other than through an
    image read, write or query (e.g. ``vload4`` on it, or pointer arithmetic)."""
    problems = []
    bodies = kernel_bodies(source)
    for name, params in kernel_signatures(source).items():
        body = bodies[name]
        for image in IMAGE_PARAM.findall(params):
            for use in re.finditer(rf"\b{image}\b", body):
                before = body[: use.start()]
                if not IMAGE_ACCESS.search(before):
                    line = body[: use.end()].rsplit("\n", 1)[-1].strip()
                    problems.append(f"{name}: {image} used as `{line}`")
    return problems


_LOOP = re.compile(r"for \(int (\w+) = [^;]*;[^;]*;[^)]*\) \{")


def _arguments(source: str, open_paren: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` is at ``open_paren``."""
    depth, start, args = 0, open_paren + 1, []
    for i in range(open_paren, len(source)):
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        if depth == 1 and source[i] == ",":
            args.append(source[start:i].strip())
            start = i + 1
        if depth == 0:
            args.append(source[start:i].strip())
            return args
    return args


def repeated_texel_stores(source: str) -> list[str]:
    """Image writes inside a loop whose variable their coordinate ignores.

    Each iteration writes the same texel, so only the last one's value stays:
    what a 4-lane texel store scalarized into one store per lane looks like
    (TVM 0.27 without ``RetypeTextureStore``: every lane a broadcast).
    """
    problems = []
    for name, body in kernel_bodies(source).items():
        loops: list[tuple[int, str]] = []  # (brace depth inside the loop, variable)
        depth = 0
        for line in body.splitlines():
            for store in re.finditer(r"\bwrite_image\w*\(", line):
                coordinate = _arguments(line, store.end() - 1)[1]
                ignored = [var for _, var in loops if not re.search(rf"\b{var}\b", coordinate)]
                if ignored:
                    problems.append(f"{name}: `{line.strip()}` repeats over {', '.join(ignored)}")
            loop = _LOOP.search(line)
            depth += line.count("{") - line.count("}")
            if loop:
                loops.append((depth, loop.group(1)))
            while loops and depth < loops[-1][0]:
                loops.pop()
    return problems
