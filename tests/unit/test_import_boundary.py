"""Only planrunner/runtime/bcc_backend.py may import bcc: every other module imports
with bcc blocked, in a fresh interpreter (no module cached from other tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = r"""
import importlib, pkgutil, sys
sys.modules['bcc'] = None  # any `import bcc` now raises ImportError
import planrunner
failed = []
for mod in pkgutil.walk_packages(planrunner.__path__, 'planrunner.'):
    if mod.name == 'planrunner.runtime.bcc_backend' or mod.name == 'planrunner.__main__':
        continue
    try:
        importlib.import_module(mod.name)
    except ImportError as exc:
        failed.append(f'{mod.name}: {exc}')
print('\n'.join(failed))
sys.exit(1 if failed else 0)
"""


def test_no_module_but_the_backend_imports_bcc() -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_list_imports_neither_jinja_nor_jsonschema_nor_bcc() -> None:
    """`planrunner list` must start fast: it needs none of the compiler's libraries."""
    code = ("import sys, io; from planrunner.cli import main; "
            "main(['list', '/bin/true'], io.StringIO(), io.StringIO()); "
            "print(sorted(m for m in ('jinja2', 'jsonschema', 'bcc', 'yaml') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
