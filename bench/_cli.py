"""What the bench scripts share of their command lines (importable without
TVM: ``opencl_run.py --replay`` runs where TVM is not installed)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

#: The zoo networks the build benches take by default.
ZOO = ("resnet", "mobilenet_v2", "unet", "inception", "chain64")


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


def zoo_networks(doc: str, default: tuple[str, ...]) -> list[str]:
    """The zoo networks named on the command line (``default`` if none)."""
    from texscope.models import zoo  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("networks", nargs="*", metavar="network",
                        help=f"zoo networks (default: {' '.join(default)})")
    networks = parser.parse_args().networks
    refuse_unknown(parser, networks, zoo.NETWORKS, "network")
    return networks or list(default)


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
