"""Built networks run on the default OpenCL device: images against buffers.

Each network is built twice for an Adreno target with the device's image
limits: once as texscope plans it (textures where they pay), once with no
texture allowed (every tensor a buffer).  Both run on the same inputs; the
table gives the summed kernel and copy time from OpenCL profiling events
(median of 5 runs), how many images and copies the run used, whether the
outputs match the CPU, and the slowest commands of the texture build.

On PoCL (a CPU OpenCL) images are emulated in memory: these times show that
the mechanism works end to end, not how fast a phone's GPU is.

Run: ``python bench/opencl_run.py [network ...]``
"""

from __future__ import annotations

import statistics
import sys

import numpy as np

import texscope
from texscope import opencl, verify, zoo

NETWORKS = {
    "resnet": lambda: zoo.resnet_style(blocks=2),
    "mobilenet_v2": lambda: zoo.mobilenet_v2_style(),
    "unet": lambda: zoo.unet_style(),
    "inception": lambda: zoo.inception_block(),
    "chain64": lambda: zoo.conv_chain(64),
}
RUNS = 5


def scaled_inputs(mod):
    """Random inputs with conv weights scaled by 1/sqrt(fan-in), so that a
    64-conv chain stays finite."""
    arrays = verify.random_inputs(mod)
    return [(a / np.sqrt(np.prod(a.shape[1:]))).astype(a.dtype) if i and a.ndim == 4 else a
            for i, a in enumerate(arrays)]


def timed_runs(result, inputs, device):
    runs = [opencl.run(result, inputs, device) for _ in range(RUNS)]
    total = statistics.median(sum(t.seconds for t in run.times) for run in runs)
    return runs[0], total


def main(names) -> None:
    device = opencl.default_device()
    with_images = opencl.device_target(device)
    buffers_only = dict(with_images, texture_spatial_limit=1, texture_depth_limit=1)
    print(f"device: {device.name.strip()} ({device.platform.name.strip()}), "
          f"image limit {with_images['texture_spatial_limit']} texels")
    if "Portable Computing Language" in device.platform.name:
        print("PoCL runs on the CPU: the times show that image kernels run, not phone speed.")
    header = ("network", "launches", "images", "copies", "images ms", "buffers ms",
              "img/buf", "matches CPU")
    rows, slowest = [], {}
    for name in names:
        mod = NETWORKS[name]()
        inputs = scaled_inputs(mod)
        expected = verify.reference_outputs(mod, inputs)
        textured, t_images = timed_runs(texscope.build(mod, with_images), inputs, device)
        plain, t_buffers = timed_runs(texscope.build(mod, buffers_only), inputs, device)
        ok = all(verify.compare(run.outputs, expected, 1e-3, 1e-3).ok for run in (textured, plain))
        rows.append((name, len(textured.times) - textured.copies, textured.images, textured.copies,
                     f"{t_images * 1e3:.2f}", f"{t_buffers * 1e3:.2f}",
                     f"{t_images / t_buffers:.2f}", "yes" if ok else "NO"))
        slowest[name] = textured.slowest()[:3]
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths)))
    print("\nslowest commands with images:")
    for name, times in slowest.items():
        for t in times:
            print(f"  {name:<13} {t.seconds * 1e3:8.3f} ms  {t.binding:<10} {t.kernel}")


if __name__ == "__main__":
    main(sys.argv[1:] or list(NETWORKS))
