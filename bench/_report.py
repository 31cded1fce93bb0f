"""What the export/replay benches write about where they ran (importable
without TVM): the build's commit beside the export, a heading line naming
device, driver and commit, and the markdown section for docs/benchmarks.md."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

META = "meta.json"


def export_meta(directory: Path, target: str) -> None:
    """Record the commit and target an export was built from."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    (directory / META).write_text(json.dumps({"commit": commit, "target": target}) + "\n")


def device_line(device, directory: Path | None = None) -> str:
    """Date, OpenCL device and driver, and the export's commit and target."""
    meta = {}
    if directory is not None and (directory / META).is_file():
        meta = json.loads((directory / META).read_text())
    built = f"; built at {meta['commit']} for {meta['target']}" if meta else ""
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{device.name.strip()} ({device.platform.name.strip()}, driver "
            f"{device.driver_version.strip()}){built}")


def write_markdown(path, title: str, head: str, lines: list[str]) -> None:
    """Append a section (title, the run's heading line, ``lines``) to ``path``."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"\n## {title}\n\n{head}\n\n" + "\n".join(lines) + "\n")
