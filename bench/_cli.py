"""What the bench scripts share of their command lines (importable without
TVM: ``opencl_run.py --replay`` runs where TVM is not installed)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path


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
