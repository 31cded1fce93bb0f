"""What the bench scripts share of their command lines."""

from __future__ import annotations

import argparse

from texscope.models import zoo


def zoo_networks(doc: str, default: tuple[str, ...]) -> list[str]:
    """The zoo networks named on the command line (``default`` if none); an
    unknown name is a usage error (exit status 2)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("networks", nargs="*", metavar="network",
                        help=f"zoo networks (default: {' '.join(default)})")
    networks = parser.parse_args().networks
    unknown = [name for name in networks if name not in zoo.NETWORKS]
    if unknown:
        parser.error(f"unknown network {unknown[0]!r}; the zoo has {', '.join(zoo.NETWORKS)}")
    return networks or list(default)
