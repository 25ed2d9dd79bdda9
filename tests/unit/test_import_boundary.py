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


def test_validate_imports_no_jsonschema_and_no_dataclass_without_a_docstring() -> None:
    """`validate` of a valid plan needs neither jsonschema (plan/schema_quick.py) nor the
    renderer; and every dataclass it creates has a docstring: for one without, the
    decorator builds one from inspect.signature (~0.3 ms a class, ~15 ms for 45)."""
    code = (
        "import dataclasses, inspect, io, sys\n"
        "from planrunner.cli import main\n"
        "assert main(['validate', 'tests/golden/span_latency/plan.yaml'], io.StringIO(),"
        " io.StringIO()) == 0\n"
        "bad = sorted(m for m in ('jsonschema', 'jinja2', 'planrunner.render.model')"
        " if m in sys.modules)\n"
        "for name, mod in list(sys.modules.items()):\n"
        "    if not name.startswith('planrunner'):\n"
        "        continue\n"
        "    for obj in vars(mod).values():\n"
        "        if (isinstance(obj, type) and dataclasses.is_dataclass(obj)\n"
        "                and obj.__module__ == name and obj.__doc__ == obj.__name__ + str("
        "inspect.signature(obj)).replace(' -> None', '')):\n"
        "            bad.append(f'{name}.{obj.__qualname__}')\n"
        "print(sorted(set(bad)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
