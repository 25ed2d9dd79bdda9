"""Plan libraries: a plan given by name is looked up in $PLANRUNNER_PATH (':'-separated
folders), then in the bundled plans/ folder."""

from __future__ import annotations

import os
from pathlib import Path

from planrunner.errors import UsageError
from planrunner.resources import data_dir

SUFFIXES = (".yaml", ".yml", ".toml")


def search_path(extra: list[str] | None = None) -> list[Path]:
    dirs = [Path(d) for d in (extra or [])]
    dirs += [Path(d) for d in os.environ.get("PLANRUNNER_PATH", "").split(":") if d]
    try:
        dirs.append(data_dir("plans"))
    except FileNotFoundError:
        pass
    return dirs


def find_plan(name: str, extra: list[str] | None = None) -> str:
    if os.path.exists(name):
        return name
    if "/" not in name:
        for folder in search_path(extra):
            for suffix in ("", *SUFFIXES):
                candidate = folder / f"{name}{suffix}"
                if candidate.is_file():
                    return str(candidate)
    raise UsageError(f"plan '{name}' not found: no such file, and no library plan of that name",
                     hints=("`planrunner plans` lists the library plans",))


def library_plans(extra: list[str] | None = None) -> list[Path]:
    seen: dict[str, Path] = {}
    for folder in search_path(extra):
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.suffix in SUFFIXES and path.stem not in seen:
                    seen[path.stem] = path
    return list(seen.values())
