"""Locate the top-level data folders (templates/, schema/, plans/).

Installed from a wheel they live in planrunner/_data/; in a checkout or an
editable install they are at the repository root, beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder `name` (templates, schema or plans), installed or from a checkout."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"planrunner data folder {name!r} not found beside {_PACKAGE}")
