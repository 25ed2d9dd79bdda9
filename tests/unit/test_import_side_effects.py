"""`import planrunner` changes no global state of the importing program: no patched
standard library module, no hook, no exit handler, no other module imported. The
command line's start-up work (the dataclass cache, planrunner/dataclass_cache.py) is
done by its entry, planrunner.cli.run_and_exit. Each check runs in a fresh interpreter:
this one has long imported planrunner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Everything an import could change, as comparable text: hooks, the dataclasses
# module's globals (where dataclass_cache puts its exec), exit handlers, signal
# handlers, warning filters, modules, builtins, sys.path and the environment.
STATE = """
import atexit, builtins, dataclasses, json, os, signal, sys, warnings
def state():
    return {
        "excepthook": repr(sys.excepthook),
        "displayhook": repr(sys.displayhook),
        "dataclasses": sorted(vars(dataclasses)),
        "dataclasses_exec": repr(vars(dataclasses).get("exec")),
        "atexit": atexit._ncallbacks(),
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if isinstance(s, signal.Signals)},
        "warnings": repr(warnings.filters),
        "modules": sorted(m for m in sys.modules if m != "planrunner"),
        "builtins": sorted(vars(builtins)),
        "path": sys.path,
        "environ": dict(os.environ),
        "meta_path": repr(sys.meta_path),
    }
"""


def _child(code: str, argv0: str) -> str:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    program = f"import sys\nsys.argv[0] = {argv0!r}\n{STATE}\n{code}"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# the old package hooked Ctrl-C when its importer looked like the CLI: argv[0] "-m"
# (python -m planrunner) or a path ending in /planrunner
def test_import_planrunner_changes_no_global_state() -> None:
    code = ("before = state()\nimport planrunner\nafter = state()\n"
            "print(json.dumps({k: [before[k], after[k]] for k in before "
            "if before[k] != after[k]}))\n")
    for argv0 in ("-c", "-m", "/usr/local/bin/planrunner"):
        changed = json.loads(_child(code, argv0))
        assert changed == {}, (argv0, changed)


def test_the_command_line_entry_installs_the_dataclass_cache() -> None:
    """The start-up gain of the cache is kept for the CLI: its entry installs it before
    any class of planrunner is made (none is made by importing planrunner.cli)."""
    # (run_and_exit ends the process after the exit functions: the last one reports)
    code = ("import atexit\n"
            "import planrunner.cli\n"
            "made = sorted(m for m in sys.modules if m.startswith('planrunner.'))\n"
            "atexit.register(lambda: print(json.dumps([made, "
            "getattr(vars(dataclasses).get('exec'), '__module__', None)])))\n"
            "planrunner.cli.run_and_exit(['--version'])\n")
    out = _child(code, "-c").splitlines()  # and its status is 0
    assert out[0] == "planrunner 0.1.0"
    made, exec_module = json.loads(out[-1])
    assert made == ["planrunner.cli"]
    assert exec_module == "planrunner.dataclass_cache"
