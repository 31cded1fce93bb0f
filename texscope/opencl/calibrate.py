"""``texscope calibrate``: measure a cost profile on an OpenCL device.

Microbenchmarks through pyopencl, no TVM (``python -m texscope.opencl.calibrate``
runs where TVM is not installed):

* copies between a buffer and an image, both ways, over sizes from one texel
  to 16 MiB: the time per launch (the one-texel copies) and per byte (the
  slope of the larger ones once the launch is taken off);
* per kernel class of the registry (``calibrate_kernels.cl``: packed conv,
  depthwise conv, element-wise, pool, layer norm, layout transform), the same
  kernel over a few shapes with its packed input in a buffer and in an image,
  with its output in a buffer and in an image, and (the convs) with its
  weights in a buffer and in an image.

With ``--kernels DIR`` the kernel classes are priced from texscope's own
built kernels instead (:mod:`texscope.opencl.kernel_set`; ``texscope calibrate
--export-kernels DIR`` builds the set where TVM is): what the planner's plans
run, where a microbenchmark may mislead.

A class's read gain is what reading its input from an image saves, in bytes
a copy moves in the same time, per byte read:
``(t_buffer - t_image_in) / (bytes read * copy seconds per byte)``, the median
over shapes; its write gain likewise for the output, and a conv class's
weight read gain for its weights.  Negative: images cost.
Each time is the least of ``repeats`` runs after a warm-up (other processes
only ever add time), from OpenCL profiling events.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import attrs
import numpy as np

from ..knowledge import profile as cost_profile
from ..errors import TexscopeError, exit_status
from . import kernel_set as built_kernels
from . import source

KERNEL_SOURCE = Path(__file__).with_name("calibrate_kernels.cl")
# (channels, height = width) of the packed tensors each kernel class is timed on.
DEFAULT_SHAPES = ((16, 56), (32, 28), (64, 14))
# Texels per copy: one (the launch price), then 16 KiB to 16 MiB.
COPY_TEXELS = (1, 1024, 16384, 262144, 1048576)
DEFAULT_REPEATS = 3
TEXEL_BYTES = 16  # RGBA float32
VARIANTS = {"buffer": [], "image_in": ["-DIN_IMAGE"], "image_out": ["-DOUT_IMAGE"],
            "weight_image": ["-DWEIGHT_IMAGE"]}


@attrs.frozen
class Microbenchmark:
    """How to time one kernel class.

    ``read_kernel`` is timed with its packed input in a buffer and in an image;
    ``write_kernel`` (None where the class writes only buffers) with its packed
    output in either.
    """

    cost_class: str
    read_kernel: str
    write_kernel: str | None


BENCHMARKS = (
    Microbenchmark("packed_conv", "packed_conv", "packed_conv"),
    Microbenchmark("depthwise_conv", "depthwise_conv", "depthwise_conv"),
    Microbenchmark("elementwise", "elementwise", "elementwise"),
    Microbenchmark("pool", "pool", "pool"),
    Microbenchmark("layer_norm", "layer_norm", None),
    Microbenchmark("layout_transform", "unpack", "pack"),
)


@attrs.frozen
class KernelShape:
    """A kernel's operands, for a packed tensor of ``channels`` x ``size`` x ``size``.

    ``packed_inputs`` are read through IN_T; ``plain_input`` is an NCHW float
    buffer; ``weights`` counts float4s per (input, output) channel block pair
    or per channel block; ``output`` is ``"packed"`` (OUT_T), ``"float4"`` or
    ``"plain"`` (buffers); ``ints`` names the int arguments.
    """

    packed_inputs: int = 1
    plain_input: bool = False
    weights: str | None = None
    output: str = "packed"
    stride: int = 1
    ints: tuple[str, ...] = ("C4", "H", "W", "OH", "OW")
    layers: bool = True  # the global size's third axis runs over channel blocks


OPERANDS = {
    "packed_conv": KernelShape(weights="dense"),
    "depthwise_conv": KernelShape(weights="depthwise"),
    "elementwise": KernelShape(packed_inputs=2),
    "pool": KernelShape(stride=2),
    "layer_norm": KernelShape(output="float4", ints=("C4", "H", "W"), layers=False),
    "unpack": KernelShape(output="plain", ints=("C4", "H", "W")),
    "pack": KernelShape(packed_inputs=0, plain_input=True, ints=("C4", "OH", "OW")),
}


def pick_device(index: int):
    """Device ``index`` (``source.devices`` order), which must have images."""
    device = source.pick_device(index)
    if not device.image_support:
        raise TexscopeError(f"{device.name.strip()} has no image support: nothing to calibrate")
    return device


def describe_device(device, index: int) -> dict:
    """What the profile records of the device (from clGetDeviceInfo)."""
    return {
        "name": device.name.strip(),
        "platform": device.platform.name.strip(),
        "vendor": device.vendor.strip(),
        "driver_version": device.driver_version.strip(),
        "opencl_version": device.version.strip(),
        "compute_units": device.max_compute_units,
        "image2d_max_width": device.image2d_max_width,
        "image2d_max_height": device.image2d_max_height,
        "image_max_array_size": device.image_max_array_size,
        "index": index,
        "source": "clGetDeviceInfo through pyopencl",
    }


class Progress:
    """A plain-text progress bar on stderr (one line per step when stderr is
    not a terminal)."""

    WIDTH = 30

    def __init__(self, total: int, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        filled = self.WIDTH * self.done // self.total
        line = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} {label}"
        if self.live:
            self.stream.write("\r" + line[:100].ljust(100))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class _Bench:
    """The OpenCL objects of one calibration."""

    def __init__(self, cl, device, repeats: int):
        self.cl = cl
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.repeats = repeats
        self.format = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        self.rng = np.random.default_rng(0)
        source = KERNEL_SOURCE.read_text()
        self.programs, self.kernels = {}, {}
        for variant, options in VARIANTS.items():
            try:
                self.programs[variant] = cl.Program(self.context, source).build(options=options)
            except cl.RuntimeError as err:
                raise TexscopeError(f"{device.name.strip()} rejects the calibration kernels "
                                    f"({variant}): {err}") from None

    def kernel(self, variant: str, name: str):
        if (variant, name) not in self.kernels:
            self.kernels[(variant, name)] = self.cl.Kernel(self.programs[variant], name)
        return self.kernels[(variant, name)]

    def seconds(self, enqueue) -> float:
        """The least time of ``repeats`` runs of ``enqueue()`` after a warm-up."""
        enqueue().wait()
        times = []
        for _ in range(self.repeats):
            event = enqueue()
            event.wait()
            times.append((event.profile.end - event.profile.start) * 1e-9)
        return min(times)

    def buffer(self, nfloats: int):
        host = self.rng.standard_normal(max(nfloats, 1)).astype(np.float32)
        mf = self.cl.mem_flags
        return self.cl.Buffer(self.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)

    def image(self, width: int, height: int, layers: int, fill: bool = True):
        image = self.cl.create_image(self.context, self.cl.mem_flags.READ_WRITE, self.format,
                                     shape=(width, height, layers), is_array=True)
        if fill:
            host = self.rng.standard_normal((layers, height, width, 4)).astype(np.float32)
            self.cl.enqueue_copy(self.queue, image, host, origin=(0, 0, 0),
                                 region=(width, height, layers))
        return image


def _copy_shape(texels: int) -> tuple[int, int, int]:
    width = min(texels, 1024)
    return width, math.ceil(texels / width), 1


def measure_copies(bench: _Bench, sizes, progress: Progress) -> dict:
    """Buffer->image and image->buffer copies: the launch and per-byte prices."""
    cl = bench.cl
    samples = []
    for texels in sizes:
        width, height, layers = _copy_shape(texels)
        nbytes = width * height * layers * TEXEL_BYTES
        image = bench.image(width, height, layers)
        buffer = bench.buffer(nbytes // 4)
        region = dict(origin=(0, 0, 0), region=(width, height, layers))
        for direction, enqueue in (
            ("buffer->image", lambda: cl.enqueue_copy(bench.queue, image, buffer, offset=0, **region)),
            ("image->buffer", lambda: cl.enqueue_copy(bench.queue, buffer, image, offset=0, **region)),
        ):
            samples.append({"direction": direction, "bytes": nbytes, "seconds": bench.seconds(enqueue)})
            progress.step(f"copy {direction} {nbytes} bytes")
    smallest = min(s["bytes"] for s in samples)
    launch = statistics.mean(s["seconds"] for s in samples if s["bytes"] == smallest)
    large = [s for s in samples if s["bytes"] > smallest]
    if not large:
        raise TexscopeError("calibration needs copies of at least two sizes")
    # Least squares through the launch price: t = launch + per_byte * bytes.
    per_byte = (sum(s["bytes"] * (s["seconds"] - launch) for s in large)
                / sum(s["bytes"] ** 2 for s in large))
    if per_byte <= 0:
        raise TexscopeError("larger copies measured no slower than a one-texel copy: the "
                            "timer is too coarse for these sizes")
    sizes_text = ", ".join(str(s) for s in sorted({s['bytes'] for s in large}))
    return {
        "seconds_per_byte": {
            "value": per_byte,
            "source": f"measured by texscope calibrate: least-squares slope of buffer<->image "
                      f"copies of {sizes_text} bytes, both ways, the launch price taken off",
        },
        "seconds_per_launch": {
            "value": launch,
            "source": f"measured by texscope calibrate: one-texel ({smallest}-byte) copies, "
                      "mean of the two directions",
        },
        "samples": samples,
    }


def _time_kernel(bench: _Bench, name: str, variant: str, channels: int, size: int) -> float:
    """The time of kernel ``name`` on a [1, channels/4, size, size, 4] input,
    compiled as ``variant`` (which of its packed operands are images)."""
    shape = OPERANDS[name]
    c4 = max(channels // 4, 1)
    height = width = size
    out_h = out_w = math.ceil(size / shape.stride)
    dims = {"C4": c4, "H": height, "W": width, "OH": out_h, "OW": out_w}
    args = []
    for _ in range(shape.packed_inputs):
        args.append(bench.image(width, height, c4) if variant == "image_in"
                    else bench.buffer(c4 * height * width * 4))
    if shape.plain_input:
        args.append(bench.buffer(c4 * 4 * height * width))
    if shape.weights is not None:
        row = weight_row(shape, c4)
        args.append(bench.image(row, c4, 1) if variant == "weight_image"
                    else bench.buffer(c4 * row * 4))
    if shape.output == "packed" and variant == "image_out":
        args.append(bench.image(out_w, out_h, c4, fill=False))
    else:
        args.append(bench.buffer(c4 * 4 * out_h * out_w))
    args += [np.int32(dims[i]) for i in shape.ints]
    kernel = bench.kernel(variant, name)
    kernel.set_args(*args)
    global_size = (out_w, out_h, c4) if shape.layers else (out_w, out_h, 1)
    return bench.seconds(
        lambda: bench.cl.enqueue_nd_range_kernel(bench.queue, kernel, global_size, None))


def _gain(buffer_s: float, image_s: float, nbytes: int, per_byte: float) -> float:
    return (buffer_s - image_s) / (nbytes * per_byte)


def measure_kernels(bench: _Bench, shapes, per_byte: float, progress: Progress,
                    benchmarks=BENCHMARKS) -> dict:
    """Per kernel class: read and write gains, with the times behind them."""
    kernels = {}
    for mb in benchmarks:
        samples, read_gains, write_gains, weight_gains = [], [], [], []
        for channels, size in shapes:
            c4 = max(channels // 4, 1)
            label = f"{mb.cost_class} {c4 * 4}x{size}x{size}"
            read = OPERANDS[mb.read_kernel]
            bytes_in = read.packed_inputs * c4 * size * size * TEXEL_BYTES
            sample = {"channels": c4 * 4, "height": size, "width": size, "bytes_read": bytes_in}
            sample["read_kernel"] = mb.read_kernel
            sample["buffer_s"] = _time_kernel(bench, mb.read_kernel, "buffer", channels, size)
            progress.step(label + " buffers")
            sample["image_in_s"] = _time_kernel(bench, mb.read_kernel, "image_in", channels, size)
            progress.step(label + " image input")
            read_gains.append(_gain(sample["buffer_s"], sample["image_in_s"], bytes_in, per_byte))
            if read.weights is not None:
                sample["bytes_weights"] = weight_bytes(read, c4)
                sample["weight_image_s"] = _time_kernel(bench, mb.read_kernel, "weight_image",
                                                        channels, size)
                progress.step(label + " weights in an image")
                weight_gains.append(_gain(sample["buffer_s"], sample["weight_image_s"],
                                          sample["bytes_weights"], per_byte))
            if mb.write_kernel is not None:
                write = OPERANDS[mb.write_kernel]
                out = math.ceil(size / write.stride)
                sample["bytes_written"] = c4 * out * out * TEXEL_BYTES
                sample["write_kernel"] = mb.write_kernel
                if mb.write_kernel == mb.read_kernel:
                    sample["write_buffer_s"] = sample["buffer_s"]
                else:
                    sample["write_buffer_s"] = _time_kernel(bench, mb.write_kernel, "buffer",
                                                            channels, size)
                    progress.step(label + " buffers (write kernel)")
                sample["image_out_s"] = _time_kernel(bench, mb.write_kernel, "image_out",
                                                     channels, size)
                progress.step(label + " image output")
                write_gains.append(_gain(sample["write_buffer_s"], sample["image_out_s"],
                                         sample["bytes_written"], per_byte))
            samples.append(sample)
        shapes_text = ", ".join(f"{s['channels']}x{s['height']}x{s['width']}" for s in samples)
        how = (f"measured by texscope calibrate: median over packed tensors of {shapes_text} "
               f"of (buffer time - image time) / (bytes accessed x copy seconds per byte)")
        kernels[mb.cost_class] = {
            "read_gain": {"value": statistics.median(read_gains),
                          "source": f"{how}; kernel {mb.read_kernel}, its input in an image"},
            "write_gain": (
                {"value": statistics.median(write_gains),
                 "source": f"{how}; kernel {mb.write_kernel}, its output in an image"}
                if write_gains else
                {"value": 0.0, "source": "not measured: the registry's kernels of this class "
                                         "write only buffers"}),
            "samples": samples,
        }
        if weight_gains:
            kernels[mb.cost_class]["weight_read_gain"] = {
                "value": statistics.median(weight_gains),
                "source": f"{how}; kernel {mb.read_kernel}, its weights in an image"}
    return kernels


def weight_row(shape: KernelShape, c4: int) -> int:
    """Texels of a kernel's weights per output channel block, for ``c4``
    channel blocks: a row of their image (calibrate_kernels.cl)."""
    return c4 * 36 if shape.weights == "dense" else 9


def weight_bytes(shape: KernelShape, c4: int) -> int:
    """The bytes of a kernel's weights for ``c4`` channel blocks."""
    return c4 * weight_row(shape, c4) * TEXEL_BYTES


def steps(shapes, copy_sizes, benchmarks=BENCHMARKS) -> int:
    per_shape = sum(2 + (OPERANDS[mb.read_kernel].weights is not None)
                    + (0 if mb.write_kernel is None else 1 + (mb.write_kernel != mb.read_kernel))
                    for mb in benchmarks)
    return 2 * len(copy_sizes) + per_shape * len(shapes)


def calibrate(device_index: int = 0, shapes=DEFAULT_SHAPES, repeats: int = DEFAULT_REPEATS,
              copy_sizes=COPY_TEXELS, progress_stream=None, kernels_dir=None) -> dict:
    """Measure a cost profile on OpenCL device ``device_index``; returns the
    profile document (validated; :func:`texscope.knowledge.profile.from_document` reads it).

    With ``kernels_dir`` (what ``texscope calibrate --export-kernels`` wrote),
    the classes it holds are priced from texscope's own built kernels
    (:mod:`texscope.opencl.kernel_set`); the microbenchmarks price the rest.
    """
    if repeats < 1:
        raise TexscopeError(f"repeats must be at least 1, not {repeats}")
    cl = source.pyopencl()
    device = pick_device(device_index)
    built_classes = set()
    if kernels_dir is not None:
        built_classes = {c["cost_class"] for c in built_kernels.read_manifest(kernels_dir)["cases"]}
    benchmarks = tuple(mb for mb in BENCHMARKS if mb.cost_class not in built_classes)
    total = steps(shapes, copy_sizes, benchmarks)
    if kernels_dir is not None:
        total += built_kernels.steps(kernels_dir)
    progress = Progress(total, progress_stream)
    bench = _Bench(cl, device, repeats)
    copy = measure_copies(bench, copy_sizes, progress)
    per_byte = copy["seconds_per_byte"]["value"]
    kernels = measure_kernels(bench, shapes, per_byte, progress, benchmarks)
    if kernels_dir is not None:
        kernels.update(built_kernels.measure(kernels_dir, device, repeats, per_byte, progress))
    document = {
        "format": cost_profile.FORMAT,
        "version": cost_profile.VERSION,
        "device": describe_device(device, device_index),
        "created_by": (f"texscope calibrate: repeats={repeats}, shapes (channels, size)="
                       f"{[list(s) for s in shapes]}, copy texels={list(copy_sizes)}"
                       + (f", built kernels from {kernels_dir}" if kernels_dir else "")),
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "copy": copy,
        "kernels": kernels,
    }
    cost_profile.from_document(document, "the measured profile")  # every number checked
    return document


def write_profile(document: dict, path, force: bool = False) -> Path:
    """Write a profile document; refuses to replace a file that is not one
    unless ``force``."""
    path = Path(path)
    if path.exists() and not force and not cost_profile.is_profile_file(path):
        raise TexscopeError(f"{path} exists and is not a texscope cost profile; "
                            "not overwriting it")
    if path.parent and not path.parent.is_dir():
        raise TexscopeError(f"no such directory: {path.parent}")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        out.write(json.dumps(document, indent=2) + "\n")
    os.replace(temporary, path)
    return path


def _shapes(text: str):
    try:
        pairs = [item.split("x") for item in text.split(",")]
        shapes = tuple((int(c), int(s)) for c, s in pairs)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected CHANNELSxSIZE[,CHANNELSxSIZE...], e.g. 16x56,32x28") from None
    if any(c < 4 or c % 4 or s < 1 for c, s in shapes):
        raise argparse.ArgumentTypeError(f"{text!r}: channels a positive multiple of 4, size >= 1")
    return shapes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (shared by ``texscope calibrate`` and
    ``python -m texscope.opencl.calibrate``)."""
    parser.add_argument("--device", type=int, default=0,
                        help="OpenCL device index, counting the devices of every platform in "
                             "order (--list-devices shows them; default 0)")
    parser.add_argument("-o", "--output", help="the profile file to write (JSON, "
                                               "docs/costs.md)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite -o even where it is not a cost profile texscope wrote")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help=f"timed runs per measurement, the least kept (default "
                             f"{DEFAULT_REPEATS}; more for a steadier profile)")
    parser.add_argument("--shapes", type=_shapes,
                        help="packed tensors the kernels are timed on, CHANNELSxSIZE,... "
                             "(default " + ",".join(f"{c}x{s}" for c, s in DEFAULT_SHAPES) + ")")
    parser.add_argument("--kernels", metavar="DIR",
                        help="price the kernel classes from texscope's own built kernels: "
                             "the set `texscope calibrate --export-kernels DIR` wrote (the "
                             "microbenchmarks price the classes it lacks)")
    parser.add_argument("--list-devices", action="store_true", help="list the devices and stop")


def run_command(args) -> int:
    if args.list_devices:
        for index, device in enumerate(source.devices()):
            print(f"{index}: {device.name.strip()} ({device.platform.name.strip()}, "
                  f"driver {device.driver_version.strip()}, images "
                  f"{'yes' if device.image_support else 'no'})")
        return 0
    if not args.output:
        raise TexscopeError("say where to write the profile: -o profile.json")
    if (Path(args.output).exists() and not args.force
            and not cost_profile.is_profile_file(args.output)):
        raise TexscopeError(f"{args.output} exists and is not a texscope cost profile; "
                            "not overwriting it (--force overwrites it)")
    document = calibrate(args.device, args.shapes or DEFAULT_SHAPES, args.repeats,
                         kernels_dir=args.kernels)
    path = write_profile(document, args.output, force=args.force)
    print(cost_profile.from_document(document, str(path)).describe())
    print(f"written to {path}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m texscope.opencl.calibrate",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return exit_status(lambda: run_command(args), "texscope")


if __name__ == "__main__":
    sys.exit(main())
