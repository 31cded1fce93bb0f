"""What the bench scripts share (importable without TVM: the ``--replay``
steps run where TVM is not installed): their command lines, the case an
``--export`` writes for a replay elsewhere (``inputs.npz``, ``expected.npz``
and the commit and target it was built at), the device line, and
``--markdown``, which writes a script's table as its section of
docs/benchmarks.md headed with the date, device, driver and commit."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

#: The zoo networks the build benches take by default.
ZOO = ("resnet", "mobilenet_v2", "unet", "inception", "chain64")

#: Target attributes of the all-buffer builds: no image fits (limits of 1
#: still fit a one-texel tensor, a pool's [1, 1, 1, 1, 4], as an image).
NO_TEXTURES = {"texture_spatial_limit": 0, "texture_depth_limit": 0}


def refuse_unknown(parser: argparse.ArgumentParser, names: Iterable[str],
                   known: Iterable[str], what: str = "model") -> None:
    """A usage error (exit status 2) naming the first of ``names`` not among
    ``known``, and what is."""
    known = list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown {what} {unknown[0]!r}; choose from {', '.join(known)}")


def model_files(names: Iterable[str]) -> dict[str, str]:
    """The names that are paths of ``.tflite`` files (a model of one's own),
    by their file's stem."""
    return {Path(name).stem: name for name in names
            if name.endswith(".tflite") and Path(name).is_file()}


def zoo_networks(doc: str, default: tuple[str, ...]) -> argparse.Namespace:
    """The command line of a bench over zoo networks: ``networks`` (those
    named, ``default`` if none) and ``markdown`` (:func:`add_markdown_option`)."""
    from texscope.models import zoo  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("networks", nargs="*", metavar="network",
                        help=f"zoo networks (default: {' '.join(default)})")
    add_markdown_option(parser)
    args = parser.parse_args()
    refuse_unknown(parser, args.networks, zoo.NETWORKS, "network")
    args.networks = args.networks or list(default)
    return args


def chosen_models(parser: argparse.ArgumentParser, names: list[str],
                  zoo_loaders: dict[str, Callable[[], object]],
                  corpus_too: bool = True) -> dict[str, Callable[[], object]]:
    """name -> a loader of each model ``names`` names (all where none):
    ``zoo_loaders`` as ``zoo/<network>`` (or by the network's own name), the
    MediaPipe models of texscope's corpus unless not ``corpus_too``, and
    ``.tflite`` files by path; a usage error for any other name."""
    # pylint: disable=import-outside-toplevel
    from texscope.frontend.tflite_model import load_tflite
    from texscope.models import corpus

    corpus_models = {name: functools.partial(load_tflite, path)
                     for name, path in sorted(corpus.mediapipe_models().items())}
    files = model_files(names)
    refuse_unknown(parser, names, [*(f"zoo/{name}" for name in zoo_loaders), *zoo_loaders,
                                   *corpus_models, *files.values()])
    found = {f"zoo/{name}": load for name, load in zoo_loaders.items()}
    if corpus_too:
        found.update(corpus_models)
    if names:
        found = {key: load for key, load in found.items()
                 if key in names or key.removeprefix("zoo/") in names}
    found.update({name: functools.partial(load_tflite, path) for name, path in files.items()})
    return found


def loaded(found: dict[str, Callable[[], object]], width: int) -> Iterator[tuple[str, object]]:
    """Each model of ``found`` loaded, by name; one the importer refuses is
    printed as skipped, with its reason, and left out."""
    from texscope.frontend.tflite_model import failure_reason  # pylint: disable=import-outside-toplevel

    for name, load in found.items():
        try:
            mod = load()
        except Exception as err:  # pylint: disable=broad-except  # the importer's own errors: report, go on
            print(f"{name:<{width}} skipped: {type(err).__name__}: {failure_reason(err)[:110]}")
            continue
        yield name, mod


# -- the tables and the exported cases the OpenCL benches share -------------

def add_export_options(parser: argparse.ArgumentParser,
                       export_help: str = "build only, for a replay elsewhere",
                       replay_help: str = "run what --export wrote (no TVM)") -> None:
    """``--export DIR`` (build only, where TVM is) and ``--replay DIR`` (run
    what it wrote, without TVM), one or the other."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--export", metavar="DIR", help=export_help)
    mode.add_argument("--replay", metavar="DIR", help=replay_help)


def add_device_options(parser: argparse.ArgumentParser, target: bool = True) -> None:
    """``--device N`` (the OpenCL device a replay runs on) and, where
    ``target``, ``--target`` (the preset an export builds for)."""
    parser.add_argument("--device", type=int,
                        help="OpenCL device index (python -m texscope.opencl.replay "
                             "--list-devices)")
    if target:
        parser.add_argument("--target", default="adreno-opencl",
                            help="the target preset the builds are for")


def add_preset_options(parser: argparse.ArgumentParser) -> None:
    """``--preset-option NAME=VALUE`` (repeatable): a field of the target's
    :class:`~texscope.knowledge.targets.TexturePreset` set for this export
    (:func:`apply_preset_options`), to measure a schedule choice."""
    parser.add_argument("--preset-option", action="append", default=[], metavar="NAME=VALUE",
                        help="set a field of the target preset for the builds "
                             "(conv_texels_ahead=4, conv_exact_texels=false, ...)")


def apply_preset_options(target: str, options: list[str]) -> None:
    """Set ``options`` (``NAME=VALUE``: an int or true/false) on the preset
    ``target`` names, for every build of this process.

    Raises
    ------
    TexscopeError
        An unknown field, or a value of the wrong type."""
    import attrs  # pylint: disable=import-outside-toplevel

    from texscope.errors import TexscopeError  # pylint: disable=import-outside-toplevel
    from texscope.knowledge import targets  # pylint: disable=import-outside-toplevel

    if not options:
        return
    preset = targets.preset_of(targets.texture_target(target).target)
    fields = {field.name: field for field in attrs.fields(type(preset))}
    changes = {}
    for option in options:
        name, _, text = option.partition("=")
        current = getattr(preset, name, None)
        if name not in fields or not isinstance(current, (bool, int)):
            raise TexscopeError(f"--preset-option {option}: {preset.name} has no integer or "
                             f"boolean field {name!r}")
        if isinstance(current, bool):
            if text.lower() not in ("true", "false"):
                raise TexscopeError(f"--preset-option {option}: {name} is true or false")
            changes[name] = text.lower() == "true"
        else:
            try:
                changes[name] = int(text)
            except ValueError:
                raise TexscopeError(f"--preset-option {option}: {name} is an integer") from None
    targets.PRESETS[preset.name] = attrs.evolve(preset, **changes)


def replay_parser(doc: str, positional: str, help_text: str, export_help: str | None = None,
                  replay_help: str | None = None, target: bool = True,
                  ) -> argparse.ArgumentParser:
    """The command line an export/replay bench starts from: ``positional``
    names (``nargs="*"``), ``--export``/``--replay``
    (:func:`add_export_options`), ``--device`` and ``--target``
    (:func:`add_device_options`) and ``--markdown``
    (:func:`add_markdown_option`)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument(positional, nargs="*", help=help_text)
    add_export_options(parser, *(text for text in (export_help, replay_help) if text))
    add_device_options(parser, target)
    add_markdown_option(parser)
    return parser


def replay_folder(parser: argparse.ArgumentParser, folder: str) -> Path:
    """``--replay``'s folder; a usage error where there is none."""
    path = Path(folder)
    if not path.is_dir():
        parser.error(f"--replay {folder}: no such folder ({parser.prog} --export writes one)")
    return path


class Columns:
    """A table printed a row at a time, as each row is measured.

    Parameters
    ----------
    *columns
        Each column's title and width, right-aligned; a negative width
        left-aligns it; ``None`` widens the gap between two groups of columns.
    """

    def __init__(self, *columns: tuple[str, int] | None):
        self.columns = columns

    def line(self, *cells: object) -> str:
        """The row of ``cells`` (one a column, the gaps left out)."""
        cells = iter(cells)
        parts = ["" if column is None else
                 f"{next(cells)!s:{'<' if column[1] < 0 else '>'}{abs(column[1])}}"
                 for column in self.columns]
        return " ".join(parts)

    def header(self) -> str:
        """The row of titles."""
        return self.line(*(column[0] for column in self.columns if column is not None))


def print_columns(header: tuple, rows: list[tuple]) -> None:
    """Print ``header`` and ``rows`` as right-aligned columns."""
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)))


def markdown_table(header, rows) -> list[str]:
    """The lines of a Markdown table of ``header`` and ``rows``."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def device_line(device) -> str:
    """An OpenCL device as the tables name it: its name, platform and driver."""
    return (f"{device.name.strip()} ({device.platform.name.strip()}, "
            f"driver {device.driver_version.strip()})")


#: What an export records of where it was built (beside what it wrote).
EXPORT_META = "meta.json"


def export_meta(directory: Path, target) -> None:
    """Record beside an export the commit and target it was built at, so that
    a replay on a copy without ``.git`` still names them."""
    import json  # pylint: disable=import-outside-toplevel

    directory.mkdir(parents=True, exist_ok=True)
    target = target if isinstance(target, str) else target.get("kind", "opencl")
    (directory / EXPORT_META).write_text(json.dumps({"commit": commit(), "target": target})
                                         + "\n")


def built_at(directory: Path) -> str:
    """How :func:`export_meta` described ``directory``'s build (``"built at
    COMMIT for TARGET"``), or "" where it wrote nothing there."""
    import json  # pylint: disable=import-outside-toplevel

    path = directory / EXPORT_META
    if not path.is_file():
        return ""
    meta = json.loads(path.read_text())
    return f"built at {meta.get('commit', 'unknown')} for {meta.get('target', '?')}"


def write_case(root: Path, mod, inputs, expected: bool = True) -> None:
    """Write ``inputs`` and (where ``expected``) the CPU's outputs of ``mod``
    on them under ``root`` (``inputs.npz``, ``expected.npz``), for a replay
    without TVM."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / "inputs.npz", *inputs)
    if expected:
        from texscope.diagnostics import verify  # pylint: disable=import-outside-toplevel

        np.savez(root / "expected.npz", *verify.reference_outputs(mod, inputs))


def read_case(root: Path, plan) -> tuple[list, list]:
    """The inputs and CPU outputs :func:`write_case` wrote, in ``plan``'s order."""
    from texscope.opencl import replay  # pylint: disable=import-outside-toplevel

    return (replay.read_arrays(root / "inputs.npz", plan.inputs, "inputs"),
            replay.read_arrays(root / "expected.npz", plan.outputs, "expected outputs"))


def agreement(outputs, expected, tolerance: float = 1e-3):
    """How ``outputs`` compare with the CPU's ``expected``
    (:func:`texscope.diagnostics.numerics.compare`): within ``tolerance``,
    absolutely against the largest expected magnitude, since deep float32
    networks sum in another order on a GPU (an output reaching 1000,
    segmentation logits, differs by ~1e-4 of that)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from texscope.diagnostics.numerics import compare  # pylint: disable=import-outside-toplevel

    scale = max((float(np.abs(e).max(initial=0.0)) for e in expected), default=1.0)
    return compare(outputs, expected, tolerance, tolerance * max(1.0, scale))


def exported(root: Path, names: Iterable[str], marker: str) -> list[str]:
    """``names``, or where none, every folder under ``root`` holding ``marker``
    (what an ``--export`` wrote); a name with no such folder, or a ``root``
    with none at all, is a :class:`TexscopeError`."""
    from texscope.errors import TexscopeError  # pylint: disable=import-outside-toplevel

    found = sorted(path.name for path in root.iterdir() if (path / marker).exists())
    if not found:
        raise TexscopeError(f"{root}: no export in it (no folder holds {marker})")
    missing = [name for name in names if name not in found]
    if missing:
        raise TexscopeError(f"{root}: no export of {missing[0]} (it has {', '.join(found)})")
    return list(names) or found


# -- docs/benchmarks.md ------------------------------------------------------

#: Where ``--markdown`` writes each script's table (``$TEXSCOPE_BENCHMARKS_MD``
#: names another file, as the tests do).
BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def benchmarks_md() -> Path:
    """The file ``--markdown`` writes."""
    import os  # pylint: disable=import-outside-toplevel

    return Path(os.environ.get("TEXSCOPE_BENCHMARKS_MD", BENCHMARKS_MD))


def add_markdown_option(parser: argparse.ArgumentParser) -> None:
    """The ``--markdown`` option every bench script takes."""
    parser.add_argument("--markdown", action="store_true",
                        help="also write this run's table into docs/benchmarks.md, replacing "
                             "this script's previous section")


def commit() -> str:
    """This checkout's commit (``-dirty`` with changes), or "unknown" in a
    copy without ``.git``."""
    import subprocess  # pylint: disable=import-outside-toplevel

    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                              text=True, cwd=BENCHMARKS_MD.parent, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def host_line() -> str:
    """This machine, for benches that run on its CPU: processor and core count."""
    import os  # pylint: disable=import-outside-toplevel
    import platform  # pylint: disable=import-outside-toplevel

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs ({platform.system()} {platform.release()})"


def section(script: str, table: str, device: str, command: str, *, raw: bool = False,
            built: str = "", now=None) -> str:
    """The section of docs/benchmarks.md holding one run of ``script``:
    headed with the date, the device and driver, and the commit it ran on
    (and ``built``, where an export made elsewhere was replayed: see
    :func:`built_at`); the printed ``table`` in a text block, or as it is
    where ``raw`` (a script that prints Markdown)."""
    import datetime  # pylint: disable=import-outside-toplevel

    now = now or datetime.datetime.now(datetime.timezone.utc)
    body = table.strip("\n") if raw else f"```text\n{table.rstrip()}\n```"
    return (f"<!-- bench:{script} -->\n"
            f"## {script}\n\n"
            f"Ran {now:%Y-%m-%d %H:%M} UTC on {device}, commit {commit()}"
            f"{f' (the export {built})' if built else ''}:\n"
            f"`{command}`\n\n"
            f"{body}\n"
            f"<!-- /bench:{script} -->\n")


def replace_section(text: str, script: str, new: str) -> str:
    """``text`` with ``script``'s section replaced by ``new`` (appended where
    there was none)."""
    begin, end = f"<!-- bench:{script} -->", f"<!-- /bench:{script} -->\n"
    start = text.find(begin)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + new
    stop = text.find(end, start)
    stop = len(text) if stop < 0 else stop + len(end)
    return text[:start] + new + text[stop:]


class Recorded:
    """Tees what a bench prints; with ``--markdown``, writes it on exit as the
    script's section of docs/benchmarks.md (see :func:`section`).

    Parameters
    ----------
    enabled
        Whether ``--markdown`` was given; when not, nothing is captured.
    script
        The script's file name, naming its section.
    device
        The device and driver the run measured (:func:`device_line`, or
        :func:`host_line` where the bench runs on the CPU); may be set later
        through the ``device`` attribute, once a device is picked.
    raw
        Whether the script prints Markdown, written as it is.
    built
        Where the replayed export was built (:func:`built_at`), if elsewhere.
    """

    def __init__(self, enabled: bool, script: str, device: str = "", raw: bool = False,
                 built: str = ""):
        self.enabled, self.script, self.device, self.raw = enabled, script, device, raw
        self.built = built
        self._lines: list[str] = []
        self._stdout = None

    def write(self, text: str) -> int:
        self._lines.append(text)
        return self._stdout.write(text)

    def flush(self) -> None:
        self._stdout.flush()

    def __enter__(self) -> "Recorded":
        import sys  # pylint: disable=import-outside-toplevel

        if self.enabled:
            self._stdout, sys.stdout = sys.stdout, self
        return self

    def __exit__(self, kind, *_) -> None:
        import sys  # pylint: disable=import-outside-toplevel

        if not self.enabled:
            return
        sys.stdout = self._stdout
        if kind is None:
            command = " ".join(["python", f"bench/{self.script}", *sys.argv[1:]])
            path = benchmarks_md()
            old = path.read_text() if path.exists() else "# Benchmarks\n"
            new = section(self.script, "".join(self._lines),
                          self.device or host_line(), command, raw=self.raw,
                          built=self.built)
            path.write_text(replace_section(old, self.script, new))
            print(f"wrote {self.script}'s section of {path}")
