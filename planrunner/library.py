"""Plan libraries: a plan given by name (no '/', no such file) is looked up in the
--plans folders, then $PLANRUNNER_PATH (':'-separated folders), then the bundled plans/
folder; the first `NAME`, `NAME.yaml`, `NAME.yml` or `NAME.toml` found wins."""

from __future__ import annotations

import os
from pathlib import Path

from planrunner.errors import UsageError
from planrunner.resources import data_dir

SUFFIXES = (".yaml", ".yml", ".toml")


def search_path(extra: list[str] | None = None) -> list[Path]:
    """The folders searched, in order. A --plans folder that does not exist is a usage
    error (a typo there would otherwise silently pick a bundled plan of the same name)."""
    dirs = []
    for d in extra or []:
        if not os.path.isdir(d):
            raise UsageError(f"--plans {d}: no such directory")
        dirs.append(Path(d))
    dirs += [Path(d) for d in os.environ.get("PLANRUNNER_PATH", "").split(":") if d]
    try:
        dirs.append(data_dir("plans"))
    except FileNotFoundError:
        pass
    return dirs


def find_plan(name: str, extra: list[str] | None = None) -> str:
    """The path of plan `name`: the file itself if it exists, else a library plan."""
    if os.path.exists(name):
        return name
    folders = search_path(extra)
    if "/" not in name:
        for folder in folders:
            for suffix in ("", *SUFFIXES):
                candidate = folder / f"{name}{suffix}"
                if candidate.is_file():
                    return str(candidate)
    raise UsageError(f"plan '{name}' not found: no such file, and no library plan of that name",
                     hints=("`planrunner plans` lists the library plans",))


def library_plans(extra: list[str] | None = None) -> list[Path]:
    """Every library plan, one per name (the first in search order wins)."""
    seen: dict[str, Path] = {}
    for folder in search_path(extra):
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.suffix in SUFFIXES and path.stem not in seen:
                    seen[path.stem] = path
    return list(seen.values())
