"""Every kernel of a model timed from textures and from buffers, side by side.

Each model is built twice for a target preset (``--target``, Adreno's by
default; ``opencl_run.py``'s two builds: every eligible map in a texture,
the weights where the preset's cost profile puts them, and no texture
allowed), and both are replayed on
one device in one process (a profiled session each, warmed up, the median of
``--repeat`` runs per command).  The two builds mostly launch the same
kernels in the same order (only the storages differ; where scopes change
what TVM fuses, some launches are one build's only, counted apart); each
pair is matched by binding and kernel name, and classified by what its call
computes:

- ``1x1 conv``, ``kxk conv``, ``depthwise`` (a conv whose weight has one
  input channel per group), from the conv call's weight constant (a
  padding kernel counts with its conv);
- ``pool``, ``layout`` (layout transforms, pads, resizes, transposes),
  ``reduction`` (means, sums), ``element-wise`` (the rest).

Printed: per model the two builds' whole time (every command) and its
ratio, the launches paired and those of one build only, and the share
of conv time (the buffer build's) spent in kernels no slower from textures;
per kind the same over every model; then the kernels that lose most time
from textures, with the images they read and write (width x height x
layers, ``w`` a weight).  ``--json`` writes every pair and each build's
whole time, launches and agreement with the CPU; ``--markdown`` writes the
tables into docs/benchmarks.md (``$TEXSCOPE_BENCHMARKS_MD`` names another
file), headed with the date, device, driver, and the commit of the replay
and of the export.

Build here, replay where the GPU is (no TVM there):

    python bench/kernel_pairs.py --export DIR [model ...]
    python bench/kernel_pairs.py --replay DIR [--device N] [--repeat R] [--markdown] [model ...]

A GPU's speed drifts over a call (an H200's summed kernel time rose 15% in
four minutes): ``--rounds N`` replays every model's builds N times,
interleaved, the order reversed from model to model, and takes each
command's median over the rounds; ``--against DIR2`` replays a second
export of the same models (an earlier commit, say) in the same rounds and
adds a before-and-after table per model and per kind.

``--preset-option NAME=VALUE`` (repeatable) exports builds with a field
of the target's preset set (``conv_texels_ahead=4``): a schedule choice
measured before a preset makes it its own; the replay's heading names it.

Models: MediaPipe's (texscope's corpus), the zoo's networks as ``zoo/NAME``,
``.tflite`` files by path; all of the corpus and zoo by default.  Without
``--export``/``--replay`` it exports into a temporary folder and replays
that here (on PoCL, a CPU: the mechanism, not a GPU's speed).
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import attrs

from texscope.errors import TexscopeError
from texscope.opencl import replay as rp
from texscope.opencl.memory import image_extent
from texscope.opencl.plan import KernelStep, TensorArg
from texscope.opencl.source import pick_device
import opencl_run
from _cli import (Recorded, add_preset_options, apply_preset_options, built_at, chosen_models,
                  device_line, export_meta, markdown_table, replay_folder, replay_parser)

KINDS = ("1x1 conv", "kxk conv", "depthwise", "pool", "layout", "reduction", "element-wise")
CONV_KINDS = KINDS[:3]


def kind(plan, step: KernelStep) -> str:
    """What ``step``'s call computes, from its function's name and weight."""
    function = step.function
    if "conv2d" in function:
        # Any launch of the call: a padding kernel binds no weight.
        weights = [plan.spec(a.tensor).shape for other in plan.steps
                   if isinstance(other, KernelStep) and other.binding == step.binding
                   for a in other.args
                   if isinstance(a, TensorArg) and a.tensor in plan.constants
                   and len(plan.spec(a.tensor).shape) >= 4]
        if weights:
            out_blocks, in_channels, height, width = weights[0][:4]
            if in_channels == 1 and out_blocks > 1:
                return "depthwise"
            return "1x1 conv" if (height, width) == (1, 1) else "kxk conv"
        return "kxk conv"
    if "pool" in function:
        return "pool"
    if any(word in function for word in ("layout_transform", "pad", "resize", "transpose",
                                         "reshape", "concat", "split", "strided_slice")):
        return "layout"
    if any(word in function for word in ("mean", "sum", "max_", "softmax")):
        return "reduction"
    return "element-wise"


def images(plan, step: KernelStep) -> str:
    """The images ``step`` binds: ``WxHxL`` each, ``w`` where a weight."""
    shown = []
    for arg in step.args:
        if isinstance(arg, TensorArg) and plan.spec(arg.tensor).is_texture:
            width, height, layers = image_extent(plan.spec(arg.tensor))
            shown.append(f"{width}x{height}x{layers}" + ("w" if arg.tensor in plan.constants
                                                         else ""))
    return " ".join(shown) or "-"


def pairs(name: str, textures: dict, buffers: dict) -> list[dict]:
    """One row per kernel launch both builds make, matched in order by
    binding and kernel name."""
    def launches(result):
        return [(step, timed) for step, timed in zip(result["plan"].steps, result["times"])
                if isinstance(step, KernelStep)]

    waiting = defaultdict(list)
    for step, timed in launches(buffers):
        waiting[(step.binding, step.kernel)].append(timed.seconds)
    rows = []
    for step, timed in launches(textures):
        key = (step.binding, step.kernel)
        if not waiting[key]:
            continue
        rows.append({"model": name, "binding": step.binding, "kernel": step.kernel,
                     "kind": kind(textures["plan"], step),
                     "images": images(textures["plan"], step),
                     "textures_s": timed.seconds, "buffers_s": waiting[key].pop(0)})
    return rows


def measure(directories: list[Path], names, device, repeat: int,
            rounds: int = 1) -> list[tuple[list, dict]]:
    """Per export of ``directories``: (every pair, per model the two
    builds' results).  In each of ``rounds`` rounds every model's builds of
    every export are replayed in turn, the order reversed from one model
    (and round) to the next, so that a GPU's drift over the call weighs on
    all of them alike; each command's time is the median over the rounds
    of its median over ``repeat`` runs."""
    runs: dict = {directory: defaultdict(lambda: defaultdict(list)) for directory in directories}
    done = 0
    try:
        for round_ in range(rounds):
            for index, name in enumerate(names):
                inputs, expected = opencl_run.exported_arrays(directories[0] / name)
                order = [(d, b) for d in directories for b in opencl_run.BUILDS]
                for directory, build in order if (round_ + index) % 2 == 0 else order[::-1]:
                    runs[directory][name][build].append(opencl_run.measure_plan(
                        directory / name / build, inputs, expected, device, repeat))
                print(f"measured {name}" + (f" (round {round_ + 1} of {rounds})"
                                            if rounds > 1 else ""), file=sys.stderr, flush=True)
            done += 1
    except KeyboardInterrupt:  # SIGINT (``timeout -s INT``): the tables of what was measured
        print(f"interrupted in round {done + 1} of {rounds}", file=sys.stderr)
    measured = []
    for directory in directories:
        rows, builds = [], {}
        for name in names:
            per_build = runs[directory][name]
            if any(len(per_build[b]) < max(done, 1) for b in opencl_run.BUILDS):
                continue  # not measured in every round
            results = {b: _over_rounds(per_build[b]) for b in opencl_run.BUILDS}
            builds[name] = results
            rows += pairs(name, results["textures"], results["buffers"])
        measured.append((rows, builds))
    return measured


def _over_rounds(results: list[dict]) -> dict:
    """One build's measure_plan results of several rounds as one: each
    command's median time, the total's median, agreement in every round."""
    first = results[0]
    times = rp.median_times([attrs.evolve(r["run"], times=r["times"]) for r in results])
    return dict(first, times=times, total=statistics.median(r["total"] for r in results),
                ok=all(r["ok"] for r in results),
                abs_err=max(r["abs_err"] for r in results))


def _no_slower_share(rows) -> float:
    """Of the rows' buffer time, the share in kernels no slower from textures."""
    total = sum(r["buffers_s"] for r in rows)
    kept = sum(r["buffers_s"] for r in rows if r["textures_s"] <= r["buffers_s"])
    return kept / total if total else float("nan")


def tables(rows, builds, top: int) -> list[str]:
    lines = ["Per model (every command's time, ms; paired: launches both builds make, then "
             "those of the texture and of the buffer build only; conv no slower: share of "
             "paired conv time in kernels no slower from textures):", ""]
    model_rows = []
    for name, results in builds.items():
        mine = [r for r in rows if r["model"] == name]
        tex, buf = (results[b]["total"] for b in opencl_run.BUILDS)
        only = [results[b]["run"].launches - len(mine) for b in opencl_run.BUILDS]
        convs = [r for r in mine if r["kind"] in CONV_KINDS]
        ok = ", ".join("yes" if results[b]["ok"] else f"NO ({results[b]['abs_err']:.2g})"
                       for b in opencl_run.BUILDS)
        model_rows.append((name, f"{len(mine)} +{only[0]}/+{only[1]}", f"{tex * 1e3:.3f}",
                           f"{buf * 1e3:.3f}",
                           f"{tex / buf:.2f}" if buf else "-",
                           f"{_no_slower_share(convs):.0%}", ok))
    lines += markdown_table(("model", "paired", "textures", "buffers", "tex/buf",
                             "conv no slower", "matches CPU (tex, buf)"), model_rows)
    lines += ["", "Per kind, every model:", ""]
    kind_rows = []
    for k in KINDS:
        mine = [r for r in rows if r["kind"] == k]
        if not mine:
            continue
        tex, buf = (sum(r[f"{b}_s"] for r in mine) for b in opencl_run.BUILDS)
        ratios = [r["textures_s"] / r["buffers_s"] for r in mine if r["buffers_s"]]
        kind_rows.append((k, len(mine), f"{tex * 1e3:.3f}", f"{buf * 1e3:.3f}",
                          f"{tex / buf:.2f}" if buf else "-",
                          f"{statistics.median(ratios):.2f}" if ratios else "-",
                          f"{_no_slower_share(mine):.0%}"))
    lines += markdown_table(("kind", "kernels", "textures ms", "buffers ms", "tex/buf",
                             "median ratio", "time no slower"), kind_rows)
    losers = sorted(rows, key=lambda r: r["buffers_s"] - r["textures_s"])[:top]
    lines += ["", f"The {len(losers)} kernels losing most time from textures:", ""]
    lines += markdown_table(
        ("model", "binding", "kind", "textures us", "buffers us", "ratio", "images", "kernel"),
        [(r["model"], r["binding"], r["kind"], f"{r['textures_s'] * 1e6:.1f}",
          f"{r['buffers_s'] * 1e6:.1f}",
          f"{r['textures_s'] / r['buffers_s']:.2f}" if r["buffers_s"] else "-",
          r["images"], r["kernel"][:60]) for r in losers])
    convs = [r for r in rows if r["kind"] in CONV_KINDS]
    ratios = [row[4] for row in model_rows if row[4] != "-"]
    lines += ["", f"Goals: conv time no slower from textures {_no_slower_share(convs):.0%} "
              "(goal >= 80%); models with tex/buf <= 1.10: "
              f"{sum(float(r) <= 1.10 for r in ratios)}/{len(ratios)} (goal: all), < 1.00: "
              f"{sum(float(r) < 1.00 for r in ratios)}/{len(ratios)} (goal: half)"]
    return lines


def main(argv=None) -> int:
    p = replay_parser(__doc__, "models", "default: the corpus and the zoo")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--top", type=int, default=15, help="kernels listed that lose most")
    p.add_argument("--json", metavar="FILE", help="write every pair here")
    p.add_argument("--rounds", type=int, default=1,
                   help="replay every model's builds this many times, interleaved; medians")
    p.add_argument("--against", metavar="DIR",
                   help="another export of the same models (an earlier commit, another preset "
                        "option), replayed in the same rounds: before and after, side by side")
    add_preset_options(p)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: at least 1")
    if args.against and not args.replay:
        p.error("--against compares with a --replay")
    try:
        if args.replay:
            root = replay_folder(p, args.replay)
            return _replay(root, opencl_run.exported_models(
                root, [m.replace("/", "_") for m in args.models]), args)
        loaders = chosen_models(p, args.models, {name: functools.partial(opencl_run.network, name)
                                                 for name in opencl_run.NETWORKS})
        apply_preset_options(args.target, args.preset_option)
        target = " ".join([args.target, *args.preset_option])
        if args.export:
            export(Path(args.export), loaders, target)
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            export(Path(tmp), loaders, target)
            return _replay(Path(tmp), list(loaders), args)
    except TexscopeError as err:
        p.error(str(err))


def export(directory: Path, loaders: dict, target: str) -> None:
    """``opencl_run.export``'s builds, every eligible map of the textures
    build in a texture (:meth:`~texscope.knowledge.profile.CostProfile.with_map_gains`:
    the weights where the preset's profile puts them), whatever the preset's
    profile would plan; ``target``: the preset's name, then any
    ``--preset-option`` set (what the export's meta records)."""
    import texscope  # pylint: disable=import-outside-toplevel
    from texscope.knowledge.profile import EVERYWHERE  # pylint: disable=import-outside-toplevel

    preset = target.split()[0]
    maps = texscope.texture_target(preset).profile.with_map_gains(
        EVERYWHERE, EVERYWHERE, "kernel_pairs.py: every eligible map in a texture")
    opencl_run.export(directory, {name.replace("/", "_"): load
                                  for name, load in loaders.items()}, preset, maps)
    if " " in target:
        export_meta(directory, target)


def before_after(before: tuple[list, dict], after: tuple[list, dict], what: str) -> list[str]:
    """The lines comparing two exports replayed in the same rounds: per
    model and per kind, each build's time before (``what``) and after."""
    (rows_before, builds_before), (rows_after, builds_after) = before, after
    names = [name for name in builds_after if name in builds_before]
    lines = [f"Against the export {what}, replayed in the same rounds (ms; after/before):", ""]
    table, sums = [], defaultdict(float)
    for name in names:
        cells = [name]
        for build in opencl_run.BUILDS:
            old, new = builds_before[name][build]["total"], builds_after[name][build]["total"]
            sums[build, "before"] += old
            sums[build, "after"] += new
            cells += [f"{old * 1e3:.3f}", f"{new * 1e3:.3f}", f"{new / old:.2f}"]
        table.append(cells)
    table.append(["all"] + [cell for build in opencl_run.BUILDS for cell in (
        f"{sums[build, 'before'] * 1e3:.3f}", f"{sums[build, 'after'] * 1e3:.3f}",
        f"{sums[build, 'after'] / sums[build, 'before']:.2f}" if sums[build, "before"] else "-")])
    lines += markdown_table(("model", "textures before", "after", "ratio", "buffers before",
                             "after", "ratio"), table)
    lines += ["", "Per kind (paired kernels), textures and buffers, before -> after:", ""]
    kinds = []
    for k in KINDS:
        old = [r for r in rows_before if r["kind"] == k and r["model"] in names]
        new = [r for r in rows_after if r["kind"] == k and r["model"] in names]
        if not old or not new:
            continue
        cells = [k]
        for build in opencl_run.BUILDS:
            a, b = (sum(r[f"{build}_s"] for r in side) for side in (old, new))
            cells.append(f"{a * 1e3:.3f} -> {b * 1e3:.3f} ({b / a:.2f})" if a else "-")
        kinds.append(cells)
    lines += markdown_table(("kind", "textures", "buffers"), kinds)
    return lines


def _replay(directory: Path, names, args) -> int:
    names = [name.replace("/", "_") for name in names]
    device = pick_device(args.device)
    against = Path(args.against) if args.against else None
    if against is not None:
        missing = [name for name in names if not (against / name / "textures").is_dir()]
        if missing:
            raise TexscopeError(f"--against {against}: no export of {missing[0]} in it")
    measured = measure([directory] + ([against] if against else []), names, device,
                       args.repeat, args.rounds)
    rows, builds = measured[0]
    lines = tables(rows, builds, args.top)
    if against is not None:
        lines += ["", *before_after(measured[1], measured[0], built_at(against) or str(against))]
    built = built_at(directory)
    head = device_line(device) + (f"; {built}" if built else "")
    print(head + "\n")
    with Recorded(args.markdown, "kernel_pairs.py", device_line(device), raw=True, built=built):
        print("\n".join(lines))
    if args.json:
        models = {name: {b: {"total_s": r["total"], "launches": r["run"].launches, "ok": r["ok"],
                             "abs_err": r["abs_err"]} for b, r in results.items()}
                  for name, results in builds.items()}
        Path(args.json).write_text(json.dumps({"device": head, "models": models, "pairs": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
