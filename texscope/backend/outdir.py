"""Output directories texscope may write into, and the record of what it wrote.

Every export leaves a manifest listing the files it wrote.  A directory that
holds anything and no manifest is the user's: the command refuses it unless
told ``--force``.  A directory with a manifest is texscope's own: the files
the manifest lists are replaced, anything else in it is left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TexscopeError

MANIFEST = ".texscope-manifest.json"


def written_before(directory: Path) -> list[str]:
    """The files an earlier texscope export recorded in ``directory``, or []."""
    try:
        return list(json.loads((Path(directory) / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def check_output_dir(path, force: bool = False) -> Path:
    """Raise unless ``path`` can take texscope's files; creates nothing.

    Parameters
    ----------
    path : str or Path
        The directory the user named.
    force : bool
        Write into a non-empty directory texscope did not write.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise TexscopeError(f"output {out} exists and is not a directory; name a directory")
    if out.is_dir() and not force and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise TexscopeError(
            f"output directory {out} is not empty and texscope did not write it; "
            "name a new or empty directory, or pass --force to write into it anyway")
    return out


def start_export(directory) -> Path:
    """Create ``directory`` and remove the files an earlier export listed (so
    that none is left stale); nothing else is touched."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name in written_before(out):
        stale = out / Path(name).name
        if stale.is_file():
            stale.unlink()
    (out / MANIFEST).unlink(missing_ok=True)
    return out


def record_written(directory, names) -> list[str]:
    """Add ``names`` to the manifest of ``directory``; returns all recorded names."""
    out = Path(directory)
    recorded = sorted(set(written_before(out)) | set(names))
    (out / MANIFEST).write_text(json.dumps({"written_by": "texscope", "files": recorded}, indent=1))
    return recorded
