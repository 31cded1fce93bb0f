"""The OpenCL fuzzer's random modules, built here and replayed on another
OpenCL implementation: a second compiler and runtime checking every kernel.

``tests/test_fuzz.py`` builds random Relax modules (``tests/fuzz_models.py``)
and runs them on PoCL.  ``--export`` draws ``--count`` distinct recipes of
the same strategy (hypothesis, derandomized: the same recipes every time),
half of them for the tiny texture target of the test, builds each with
texscope and writes ``DIR/<index>/`` (the build, ``inputs.npz``, the CPU's
``expected.npz``) and ``DIR/recipes.json``.  ``--replay`` runs each build
with numpy and pyopencl only and compares with the CPU as
``numpy.allclose`` does (rtol = atol = 1e-3, atol absolute, as every
replay recorded in docs/benchmarks.md compared); it prints the
mismatches and failures with their recipes and exits 1 if there is any.

    python bench/fuzz_replay.py --export DIR [--count 300]   # here, with TVM
    python bench/fuzz_replay.py --replay DIR [--device N] [--markdown]   # there: NVIDIA's OpenCL
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from texscope.errors import TexscopeError
from texscope.diagnostics.numerics import compare
from texscope.opencl import replay as rp
from texscope.opencl.plan import read_plan
from texscope.opencl.source import pick_device
from _cli import (Recorded, built_at, device_line, export_meta, read_case, refuse_unknown,
                  replay_parser, write_case)

RECIPES = "recipes.json"
# The fuzzer's strategy and builder live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
TOLERANCE = 1e-3


def draw_recipes(count: int) -> list:
    """``count`` distinct (recipe, tiny) pairs the OpenCL fuzz test's strategy
    draws, in a fixed order."""
    # pylint: disable=import-outside-toplevel
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from fuzz_models import recipes

    found: dict = {}

    @settings(max_examples=count * 4, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(recipe=recipes(max_steps=5), tiny=st.booleans())
    def collect(recipe, tiny):
        if len(found) < count:
            found.setdefault(repr((recipe, tiny)), (recipe, tiny))

    collect()
    return list(found.values())


def export(directory: Path, count: int, target: str) -> None:
    # pylint: disable=import-outside-toplevel
    import texscope
    from texscope.diagnostics import verify
    from texscope.knowledge.targets import texture_target
    from fuzz_models import build

    drawn = draw_recipes(count)
    base = json.loads(str(texture_target(target).target))
    tiny = dict(base, texture_spatial_limit=64, texture_depth_limit=16)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index, (recipe, small) in enumerate(drawn):
        root = directory / f"{index:04d}"
        mod = build(recipe)
        inputs = verify.random_inputs(mod)
        entry = {"index": root.name, "recipe": repr(recipe), "tiny": small}
        try:
            root.mkdir(exist_ok=True)
            texscope.build(mod, tiny if small else base).export(root)
            write_case(root, mod, inputs)
        except Exception as err:  # pylint: disable=broad-except  # a build failure is a finding
            entry["build_failed"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        written.append(entry)
        if index % 25 == 24:
            print(f"exported {index + 1} of {len(drawn)}", flush=True)
    (directory / RECIPES).write_text(json.dumps(written, indent=1) + "\n")
    export_meta(directory, target)
    failed = sum("build_failed" in entry for entry in written)
    print(f"exported {len(written) - failed} modules to {directory}; {failed} failed to build")


def _check(directory: Path, entry: dict, device) -> str | None:
    """None where module ``entry`` matches the CPU, else what went wrong."""
    if "build_failed" in entry:
        return f"{entry['index']} build failed ({entry['build_failed']}): {entry['recipe']}"
    root = directory / entry["index"]
    try:
        plan = read_plan(root)
        inputs, expected = read_case(root, plan)
        check = compare(rp.replay(plan, inputs, device).outputs, expected, TOLERANCE, TOLERANCE)
    except TexscopeError as err:
        return f"{entry['index']} failed ({err}): {entry['recipe']}"
    if check.ok:
        return None
    return (f"{entry['index']} MISMATCH (abs {check.max_abs_error:.2g}, rel "
            f"{check.max_rel_error:.2g}, tiny {entry['tiny']}): {entry['recipe']}")


def replay_all(directory: Path, device, only=(), markdown: bool = False) -> int:
    entries = [e for e in json.loads((directory / RECIPES).read_text())
               if not only or e["index"] in only]
    done, bad = 0, []
    try:
        for entry in entries:
            if (problem := _check(directory, entry, device)) is not None:
                bad.append(problem)
            done += 1
    except KeyboardInterrupt:  # SIGINT (``timeout -s INT``): what was replayed so far
        print(f"interrupted after {done} of {len(entries)} modules")
    built = built_at(directory)
    with Recorded(markdown, "fuzz_replay.py", device_line(device), built=built):
        print(device_line(device) + (f"; {built}" if built else ""))
        print(f"{done - len(bad)} of {len(entries)} random modules match the CPU")
        for line in bad:
            print("  " + line)
    return 1 if bad or done < len(entries) else 0


def main(argv=None) -> int:
    p = replay_parser(__doc__, "modules", "indices to replay (0007 ...; default: all)",
                      "draw and build, for a replay elsewhere")
    p.add_argument("--count", type=int, default=300)
    args = p.parse_args(argv)
    refuse_unknown(p, [m for m in args.modules if not m.isdigit()], (), "module index")
    if not (args.export or args.replay):
        p.error("give --export DIR (where TVM is) or --replay DIR")
    try:
        if args.export:
            if Path(args.export, RECIPES).exists():
                p.error(f"{args.export} already holds an export; give a new folder")
            export(Path(args.export), args.count, args.target)
            return 0
        if not (Path(args.replay) / RECIPES).is_file():
            p.error(f"--replay {args.replay}: no {RECIPES} (fuzz_replay.py --export writes it)")
        return replay_all(Path(args.replay), pick_device(args.device),
                          {m.zfill(4) for m in args.modules}, args.markdown)
    except TexscopeError as err:
        p.error(str(err))


if __name__ == "__main__":
    sys.exit(main())
