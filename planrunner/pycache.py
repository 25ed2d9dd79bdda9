"""Files kept beside the package's .pyc files (planrunner/__pycache__): code compiled
once and read back by later runs (planrunner/dataclass_cache.py, the compiled
templates of render/environment.py). They are trusted as a .pyc is: read only when
the file and its directory belong to this user or root and no one else may write them;
written (atomically, 0644) unless PYTHONDONTWRITEBYTECODE says no .pyc may be written.
Neither function raises: a file that cannot be used is code compiled again."""

from __future__ import annotations

import os
import sys


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def read(path: str) -> bytes | None:
    """The bytes of the file at `path`, or None: absent, unreadable or not trusted."""
    try:
        if not _trusted(os.stat(os.path.dirname(path))):
            return None
        with open(path, "rb") as fh:
            return fh.read() if _trusted(os.fstat(fh.fileno())) else None
    except OSError:
        return None


def write(path: str, data: bytes) -> bool:
    """Write `data` at `path` (through a temporary file, renamed); False when nothing
    was written."""
    if sys.dont_write_bytecode:
        return False
    directory = os.path.dirname(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        if not _trusted(os.stat(directory)):
            return False
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
