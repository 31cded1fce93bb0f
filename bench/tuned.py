"""Plans priced by the device's own measurements (``texscope tune``), run on that device.

Per model, in one process on one OpenCL device, on the same inputs, these
builds run:

* ``tuned``: planned with the tuning file measured on this device
  (``texscope build --tuning``);
* the calibrated profile's (``--profile FILE``, labelled by the file's stem;
  left out without one);
* ``default``: the target preset's built-in profile;
* ``all texture``: every eligible tensor in a texture;
* ``all buffer``: no texture at all (texture limits of 1 texel);
* ``all buffer (again)``: the all-buffer program once more, as a build of
  its own: the difference between the two is the noise band.

The table gives each build's kernel time (summed profiling events, median
of ``--runs`` >= 9, the builds taking turns run by run, each in a session
set up once as a deployed model's is: ``--one-shot`` sets one up for every
run, so its kernels also pay for memory just allocated), launches, images,
copies, whether its outputs match the CPU, its time against the faster of
all-texture and all-buffer, and its predicted time: the tuning file's
measured kernel and copy times summed over what the build runs
(:func:`texscope.collect_producer.measured_seconds`).  Then Pearson's r and
Spearman's rho of predicted against measured time over every build of every
model.

The tuned plan needs the tuning measured on the device the builds run on,
and building needs TVM, which the device lacks; so four steps, two here and
two there:

    python bench/tuned.py --export DIR [--profile cal.json] [model ...]  # here: tuning sets
                                                                          #   and the other builds
    python bench/tuned.py --tune DIR [--device N]          # device: time the tuning sets
                                                            #   (DIR/<model>/tuning.json)
    python bench/tuned.py --export-tuned DIR --tuning-from RESULTS   # here: the tuned builds,
                                                            #   every build's predicted time
    python bench/tuned.py --replay DIR [--device N] [--markdown]   # device: the table

``RESULTS`` is the folder the device's ``DIR`` came back as (its
``<model>/tuning.json``).  ``--export DIR2 --tuning-from RESULTS`` makes a
second round's sets (``texscope tune --tuning``): each model's set also
runs the plan its earlier file chooses whole.  ``--markdown`` writes the table into
docs/benchmarks.md (``$TEXSCOPE_BENCHMARKS_MD`` names another file), headed
with the date, device, driver and the commits of the replay and the export.
On a device without TVM, ``--tune`` and ``--replay`` need only numpy,
pyopencl and this package (its ``texscope/`` folder on ``PYTHONPATH``);
pyopencl's pytools needs ``siphash24``.  Models: the zoo networks
(``zoo/<name>``), the MediaPipe models of texscope's corpus, ``.tflite``
paths; all by default.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _cli import (EXPORT_META, NO_TEXTURES, Recorded, add_device_options,  # noqa: E402
                  add_markdown_option, agreement, built_at, chosen_models, device_line,
                  export_meta, loaded, markdown_table, read_case, write_case)
from calibrated import pearson, spearman  # noqa: E402
from texscope.errors import TexscopeError  # noqa: E402
from opencl_run import NETWORKS, network, scaled_inputs  # noqa: E402

SET, TUNING = "set", "tuning.json"
AGAIN = "all buffer (again)"


def zoo_loaders():
    return {name: (lambda n=name: network(n)) for name in NETWORKS}


def folder(label: str) -> str:
    return label.replace(" ", "-").replace("(", "").replace(")", "")


def program_digest(plan_dir: Path) -> str:
    """What a build runs (its plan and kernels), hashed: two builds of one
    digest are the same program, whatever target they were built for (the
    all-buffer build's says it has no room for images)."""
    plan = json.loads((plan_dir / "plan.json").read_text())
    plan.pop("target", None)
    digest = hashlib.sha256(json.dumps(plan, sort_keys=True).encode())
    digest.update((plan_dir / "kernels.cl").read_bytes())
    return digest.hexdigest()


EXTREMES = ("all buffer", "all texture")


def same_program_as(builds: dict, among: tuple[str, ...] = EXTREMES) -> dict:
    """Per build label but the extremes', the build of ``among`` (by
    default an extreme) that runs the very same program, where one does."""
    among = tuple(label for label in among if label in builds)
    return {label: next((e for e in among if e != label
                         and builds[e]["digest"] == row["digest"]), None)
            for label, row in builds.items() if label not in (*EXTREMES, AGAIN)}


def better_extreme(builds: dict) -> str:
    """The faster of the all-texture and all-buffer builds."""
    return min(("all texture", "all buffer"), key=lambda label: builds[label]["seconds"])


def noise_summary(found: dict) -> tuple[list[str], float]:
    """The same program replayed as two builds, per model: the lines saying
    how far apart, and the largest relative difference."""
    gaps = {name: abs(e["rows"][AGAIN]["seconds"] / e["rows"]["all buffer"]["seconds"] - 1)
            for name, e in found.items()}
    worst = max(gaps, key=gaps.get)
    return ([f"Noise band: `all buffer (again)` against `all buffer`, the same program "
             f"replayed as a build of its own: {statistics.median(gaps.values()) * 100:.1f}% "
             f"apart in the median model, {gaps[worst] * 100:.1f}% at most ({worst})."],
            gaps[worst])


def verdicts(found: dict, band: float) -> list[str]:
    """Per model, how the tuned plan stands against the better extreme."""
    same, within, faster, slower = [], [], [], []
    for name, entry in found.items():
        builds = entry["rows"]
        ratio = builds["tuned"]["seconds"] / builds[better_extreme(builds)]["seconds"]
        if same_program_as(builds).get("tuned"):
            same.append(name)
        elif ratio <= 0.95:
            faster.append(f"{name} {ratio:.3f}")
        elif ratio <= 1.0 + band:
            within.append(f"{name} {ratio:.3f}")
        else:
            slower.append(f"{name} {ratio:.3f}")
    return [f"Tuned plan against the better extreme: the very same program on {len(same)} "
            f"models ({', '.join(same) or 'none'}); at most 0.95x on {len(faster)} "
            f"({', '.join(faster) or 'none'}); otherwise within 1.00x plus the noise band on "
            f"{len(within)} ({', '.join(within) or 'none'}); beyond it on {len(slower)} "
            f"({', '.join(slower) or 'none'})."]


def _safe(name: str) -> str:
    return name.replace("/", "_")


def builds_of(base: dict, profiles: dict) -> list:
    """(label, target, profile) of every build but the tuned one."""
    import texscope  # pylint: disable=import-outside-toplevel
    from texscope.backend.tuning.measured import plan_profiles

    texture = texscope.texture_target(base)
    default = texture.profile
    no_textures = dict(base, **NO_TEXTURES)
    return [*((label, base, p) for label, p in profiles.items()),
            ("default", base, default),
            ("all texture", base, plan_profiles(texture)["all-texture"]),
            ("all buffer", no_textures, default)]


def export(directory: Path, found: dict, base: dict, profiles: dict, preset: str,
           earlier: Path | None = None) -> None:
    """Here (TVM): per model its tuning set, the non-tuned builds, inputs and
    CPU outputs; with ``earlier`` (a folder of ``<model>/tuning.json``), each
    set also runs the plan the model's earlier file chooses (a second round)."""
    import texscope  # pylint: disable=import-outside-toplevel
    from texscope.backend.tuning import tuning_set
    from texscope.opencl import tuning as tuning_file

    previous_of = {}  # every earlier file read and checked before anything is written
    for name in found if earlier is not None else ():
        path = earlier / _safe(name) / TUNING
        previous_of[name] = tuning_file.load(path) | {"origin": str(path)}
    width = max(map(len, found), default=10)
    for name, mod in loaded(found, width):
        root = directory / _safe(name)
        root.mkdir(parents=True)
        start = time.perf_counter()
        tuning_set.export(mod, base, root / SET, name, log=lambda *_: None,
                          previous=previous_of.get(name))
        set_s = time.perf_counter() - start
        for label, target, profile in builds_of(base, profiles):
            plan_dir = root / folder(label)
            plan_dir.mkdir()
            texscope.opencl.plan_of(texscope.build(mod, target, profile=profile)).write(plan_dir)
        write_case(root, mod, scaled_inputs(mod))
        (root / "meta.json").write_text(json.dumps({
            "model": name, "set_build_s": round(set_s, 2),
            "builds": [b[0] for b in builds_of(base, profiles)],
            "profiles": {label: str(p.origin) for label, p in profiles.items()}}, indent=1))
        print(f"  {name}: tuning set built in {set_s:.1f} s, builds written", flush=True)
    export_meta(directory, preset)


def tune(directory: Path, device_index: int | None, repeats: int) -> None:
    """On the device: time every model's tuning set (python -m texscope.opencl.tune)."""
    for root in sorted(p for p in directory.iterdir() if (p / SET).is_dir()):
        start = time.perf_counter()
        command = [sys.executable, "-m", "texscope.opencl.tune", str(root / SET), "-o",
                   str(root / TUNING), "--repeats", str(repeats)]
        if device_index is not None:
            command += ["--device", str(device_index)]
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode:
            print(f"  {root.name}: tune failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        document = json.loads((root / TUNING).read_text())
        document["tune_wall_s"] = round(seconds, 2)
        (root / TUNING).write_text(json.dumps(document, indent=1) + "\n")
        print(f"  {root.name}: timed in {seconds:.1f} s", flush=True)


def _exported_target(parser: argparse.ArgumentParser, directory: Path, given: str) -> str:
    """The preset ``--export`` built ``directory`` for: the tuned builds must
    match the tuning sets.  ``--target`` left at its default takes it; a
    different one is refused."""
    meta = directory / EXPORT_META
    exported = json.loads(meta.read_text()).get("target") if meta.is_file() else None
    if exported is None or given == exported:
        return given
    if given != parser.get_default("target"):
        parser.error(f"--target {given}: {directory} was exported for {exported}")
    return exported


def export_tuned(directory: Path, results: Path, found: dict, base: dict, profiles: dict,
                 preset: str) -> None:
    """Here (TVM): each model's tuned build from the device's tuning file,
    and every build's predicted time by that file."""
    import attrs  # pylint: disable=import-outside-toplevel
    import texscope
    from texscope.backend.tuning.measured import measured_costs, plan_profiles
    from texscope.collect_producer import measured_seconds
    from texscope.frontend.naming import ConvertKeepingNames
    from texscope.knowledge.targets import host_target, texture_target
    from texscope.pipeline import annotate_module
    import tvm

    width = max(map(len, found), default=10)
    for name, mod in loaded(found, width):
        root, measured_root = directory / _safe(name), results / _safe(name)
        tuning_path = measured_root / TUNING
        if not tuning_path.is_file():
            print(f"  {name}: no {tuning_path}; skipped")
            continue
        result = texscope.build(mod, base, tuning=tuning_path)  # refuses a foreign file
        if tuning_path.resolve() != (root / TUNING).resolve():
            shutil.copy(tuning_path, root / TUNING)
        plan_dir = root / "tuned"
        plan_dir.mkdir(exist_ok=True)
        texscope.opencl.plan_of(result).write(plan_dir)
        texture = texture_target(base)
        device = tvm.target.Target(texture.target, host=host_target(None, texture.target))
        measured = measured_costs(mod, device, texture, tuning_path)
        predicted = {}
        labelled = [("tuned", texture.profile),
                    *profiles.items(),
                    ("default", texture.profile),
                    ("all texture", plan_profiles(texture)["all-texture"]),
                    ("all buffer", plan_profiles(texture)["all-buffer"])]
        for label, profile in labelled:
            priced = attrs.evolve(texture_target(device, profile), tuning=measured)
            with device:
                if label == "tuned":
                    _, plans = annotate_module(ConvertKeepingNames(device)(mod), priced)
                else:
                    plain = texture_target(device, profile)
                    _, plans = annotate_module(ConvertKeepingNames(device)(mod), plain)
                    plans = {f: attrs.evolve(p, consumers=attrs.evolve(
                        p.consumers, graph=attrs.evolve(p.consumers.graph, texture=priced)))
                        for f, p in plans.items()}
            seconds = [measured_seconds(p) for p in plans.values()]
            predicted[label] = None if None in seconds else sum(seconds)
        predicted[AGAIN] = predicted["all buffer"]
        meta = json.loads((root / "meta.json").read_text())
        meta["builds"] = ["tuned", *meta["builds"]]
        meta["predicted_s"] = predicted
        meta["untuned_calls"] = len(result.report.untuned)
        (root / "meta.json").write_text(json.dumps(meta, indent=1))
        print(f"  {name}: tuned build written ({len(result.report.kernels)} kernels measured, "
              f"{len(result.report.untuned)} calls by the profile)", flush=True)
    export_meta(directory, preset)


def measure(directory: Path, device, runs: int, one_shot: bool = False,
            contexts: bool = False) -> dict:
    """On the device: every model's builds, taking turns run by run
    (:func:`texscope.opencl.replay.taking_turns`).  Each build runs in one
    session set up once (its memory, weights and arguments), as a deployed
    model runs inference after inference, all of a model's sessions in one
    OpenCL context (``contexts``: a context each, as before 2026-11-29
    09:00); ``one_shot``: a fresh session every run (allocation, weight
    upload and the first writes into new images inside the timed kernels)."""
    found = {}
    try:
        for root in sorted(p for p in directory.iterdir() if (p / "meta.json").is_file()):
            measured = _measure_model(root, device, runs, one_shot, contexts)
            if measured is not None:
                found[measured[0]] = measured[1]
    except KeyboardInterrupt:  # a device call's time limit: the models done still count
        print(f"  interrupted: the table holds the {len(found)} models measured before",
              flush=True)
    return found


def _measure_model(root: Path, device, runs: int, one_shot: bool, contexts: bool):
    """One exported model's builds measured: (model, its rows and figures),
    None where it has no tuned build yet."""
    from texscope.opencl import replay as rp  # pylint: disable=import-outside-toplevel
    from texscope.opencl.plan import read_plan
    from texscope.opencl.session import Session
    from texscope.opencl.source import default_device, pyopencl

    meta = json.loads((root / "meta.json").read_text())
    if "predicted_s" not in meta:
        print(f"  {root.name}: no tuned build (run --export-tuned); skipped")
        return None
    labels = [*meta["builds"], AGAIN]
    plans = {label: read_plan(root / folder("all buffer" if label == AGAIN else label))
             for label in labels}
    inputs, expected = read_case(root, plans["all buffer"])
    if one_shot:
        runners = {label: lambda plan=plan: rp.replay(plan, inputs, device)
                   for label, plan in plans.items()}
    else:
        # One context for the model's sessions (``contexts``: one each).
        shared = None if contexts else pyopencl().Context([device or default_device()])
        # Compiled in worker processes, one per CPU: on one thread each, the
        # adreno preset's builds of 13 models took the whole 7 minutes of a call.
        sessions = {label: Session(plan, rp.in_order(plan.inputs, inputs), device,
                                   profile=True, context=shared,
                                   jobs=os.cpu_count() or 1)
                    for label, plan in plans.items()}
        runners = {label: lambda session=session: session.profiled(
            rp.in_order(session.plan.inputs, inputs)) for label, session in sessions.items()}
    results = {label: [run()] for label, run in runners.items()}
    for turn in rp.taking_turns(list(plans), runs):
        for label in turn:
            results[label].append(runners[label]())
    runners = sessions = None  # each model's device memory goes before the next's
    tuning = json.loads((root / TUNING).read_text())
    rows = {}
    for label, done in results.items():
        timed = done[1:]
        seconds = statistics.median(r.seconds for r in timed)
        ok = agreement(done[0].outputs, expected).ok
        rows[label] = {"run": done[0], "seconds": seconds, "ok": ok,
                       "times": rp.median_times(timed),
                       "predicted": meta["predicted_s"].get(label),
                       "digest": program_digest(root / folder(
                           "all buffer" if label == AGAIN else label))}
    print(f"  {meta['model']}: ran", flush=True)
    return meta["model"], {"rows": rows, "set_build_s": meta["set_build_s"],
                           "tune_s": tuning.get("tune_wall_s"),
                           "untuned": meta.get("untuned_calls", 0)}


def as_json(found: dict) -> dict:
    """What ``--json`` writes: per model and build, the median time, the
    predicted time, whether it matched the CPU, and each command's median
    (binding, kernel, seconds)."""
    return {model: {label: {"seconds": row["seconds"], "predicted_s": row["predicted"],
                            "ok": row["ok"],
                            "commands": [[t.binding, t.kernel, t.seconds] for t in row["times"]]}
                    for label, row in entry["rows"].items()}
            for model, entry in found.items()}


def moved(builds: dict, gains: int = 3, losses: int = 2) -> tuple[str, list]:
    """The better extreme, and the commands of the tuned build whose median
    time moved most against it (matched by binding): the ``gains`` that
    gained most and the ``losses`` that lost most, as (binding, kernel,
    tuned seconds, extreme seconds)."""
    extreme = better_extreme(builds)
    theirs = {}
    for timed in builds[extreme]["times"]:
        theirs.setdefault(timed.binding, timed.seconds)
    pairs = sorted(((t.binding, t.kernel, t.seconds, theirs[t.binding])
                    for t in builds["tuned"]["times"] if t.binding in theirs),
                   key=lambda row: row[2] - row[3])
    gained = [row for row in pairs[:gains] if row[2] < row[3]]
    lost = [row for row in pairs[::-1][:losses] if row[2] > row[3]]
    return extreme, gained + lost


def moved_table(found: dict) -> list[str]:
    """Per model whose tuned program is its own, the kernels that moved most."""
    rows = []
    for name, entry in found.items():
        builds = entry["rows"]
        if "times" not in builds["tuned"] or same_program_as(builds).get("tuned"):
            continue
        extreme, commands = moved(builds)
        rows += [(name, extreme, binding, kernel, f"{mine * 1e6:.1f}", f"{theirs * 1e6:.1f}",
                  f"{(mine - theirs) * 1e6:+.1f}") for binding, kernel, mine, theirs in commands]
    if not rows:
        return []
    return ["Where the tuned program is its own: the commands that gained and lost most "
            "against the better extreme (median per command, us):", "",
            *markdown_table(("model", "extreme", "binding", "kernel", "tuned us", "extreme us",
                             "difference us"), rows), ""]


def table(found: dict) -> list[str]:
    header = ("model", "build", "ms", "vs best extreme", "launches", "images", "copies",
              "predicted ms", "matches CPU")
    rows, pairs = [], []
    for name, entry in found.items():
        builds = entry["rows"]
        floor = builds[better_extreme(builds)]["seconds"]
        same = same_program_as(builds, (*EXTREMES, "default"))
        for label, row in builds.items():
            run = row["run"]
            if row["predicted"] is not None and label != AGAIN:
                pairs.append((row["predicted"], row["seconds"]))
            shown = f"{label} (= {same[label]})" if same.get(label) else label
            rows.append((name, shown, f"{row['seconds'] * 1e3:.3f}",
                         f"{row['seconds'] / floor:.3f}", run.launches, run.images, run.copies,
                         "-" if row["predicted"] is None else f"{row['predicted'] * 1e3:.3f}",
                         "yes" if row["ok"] else "NO"))
    lines = markdown_table(header, rows)
    noise, band = noise_summary(found)
    lines += ["", "`(= all buffer)`: the build runs the very same program (plan and "
              "kernels) as that build.", "", *noise, "", *verdicts(found, band), "",
              *moved_table(found)]
    lines += [f"Predicted (tuning file's kernel and copy times) against measured, over "
              f"{len(pairs)} builds: Pearson r = {pearson(pairs):+.3f}, Spearman rho = "
              f"{spearman(pairs):+.3f}.", ""]
    lines += ["| model | tuning set built here (s) | timed on the device (s) | "
              "calls priced by the profile |", "|---|---|---|---|"]
    lines += [f"| {name} | {e['set_build_s']} | {e['tune_s']} | {e['untuned']} |"
              for name, e in found.items()]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="zoo/<network>, MediaPipe names, .tflite "
                                                  "paths (default: all)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--export", metavar="DIR", help="here: tuning sets and the other builds")
    mode.add_argument("--tune", metavar="DIR", help="device: time the tuning sets")
    mode.add_argument("--export-tuned", metavar="DIR", help="here: the tuned builds "
                                                            "(with --tuning-from)")
    mode.add_argument("--replay", metavar="DIR", help="device: run every build, the table")
    parser.add_argument("--tuning-from", metavar="RESULTS",
                        help="the folder --tune wrote, back from the device")
    parser.add_argument("--profile", action="append", default=[],
                        help="a cost profile calibrated on the device (repeatable)")
    add_device_options(parser)
    parser.add_argument("--runs", type=int, default=9, help="timed runs per build (median)")
    parser.add_argument("--one-shot", action="store_true",
                        help="--replay: every run in a fresh session (memory allocated, "
                             "weights uploaded), as tables before 2026-11-29 06:00 were")
    parser.add_argument("--context-per-build", action="store_true",
                        help="--replay: each build's session in an OpenCL context of its own "
                             "(as tables before 2026-11-29 09:00 were), not one per model")
    parser.add_argument("--json", metavar="FILE",
                        help="--replay: write every build's time, predicted time and "
                             "per-command medians here")
    parser.add_argument("--repeats", type=int, default=9, help="--tune: runs per median")
    add_markdown_option(parser)
    args = parser.parse_args(argv)
    building = not (args.tune or args.replay)
    found = chosen_models(parser, args.models, zoo_loaders()) if building else {}
    if not any((args.export, args.tune, args.export_tuned, args.replay)):
        parser.error("choose a step: --export, --tune, --export-tuned or --replay")
    if args.export_tuned and not args.tuning_from:
        parser.error("--export-tuned needs --tuning-from (the folder --tune wrote)")
    if args.runs < 9:
        parser.error("--runs: at least 9")
    for given in (args.tune, args.replay, args.export_tuned):
        if given and not Path(given).is_dir():
            parser.error(f"{given}: no such folder (tuned.py --export writes one)")
    if building:
        import texscope  # pylint: disable=import-outside-toplevel
        from texscope.knowledge import profile as cost_profile

        if args.export_tuned:
            args.target = _exported_target(parser, Path(args.export_tuned), args.target)
        base = json.loads(str(texscope.texture_target(args.target).target))
        profiles = {Path(p).stem: cost_profile.load(p) for p in args.profile}
        if args.export:
            if Path(args.export).exists() and any(Path(args.export).iterdir()):
                parser.error(f"{args.export} exists and is not empty")
            try:
                export(Path(args.export), found, base, profiles, args.target,
                       Path(args.tuning_from) if args.tuning_from else None)
            except TexscopeError as err:  # an earlier tuning file that is not this model's
                parser.error(str(err))
            return 0
        try:
            export_tuned(Path(args.export_tuned), Path(args.tuning_from), found, base, profiles,
                         args.target)
        except TexscopeError as err:  # a tuning file that is not one, or not this model's
            parser.error(str(err))
        return 0
    from texscope.opencl.source import pick_device  # pylint: disable=import-outside-toplevel

    if args.tune:
        tune(Path(args.tune), args.device, args.repeats)
        return 0
    device = pick_device(args.device)
    built = built_at(Path(args.replay))
    print(f"device: {device_line(device)}" + (f"; {built}" if built else ""))
    found = measure(Path(args.replay), device, args.runs, args.one_shot, args.context_per_build)
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(found), indent=1) + "\n")
    lines = table(found)
    how = ("each run a fresh session (memory allocated, weights uploaded)" if args.one_shot
           else "each build's session set up once, then inference after inference, "
           + ("each session in an OpenCL context of its own" if args.context_per_build
              else "a model's sessions in one OpenCL context"))
    with Recorded(args.markdown, "tuned.py", device_line(device), raw=True, built=built):
        print(f"Median of {args.runs} runs per build, {how}.\n\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
