"""`python -m tests.e2e.in_process ARGS...`: planrunner's CLI (`ARGS` as for
`python -m planrunner`) with no compile worker and no program cache, so that bcc
compiles the program in the run's own process (then loaded as every program is, by
compile_cache.LoadedProgram): the path a run takes when the worker cannot help. Test
code: production has no hook.
"""

from __future__ import annotations

import sys
from typing import Any

from planrunner.cli import run_and_exit
from planrunner.runtime import bcc_backend


class InProcessBackend(bcc_backend.BccBackend):
    def __init__(self, features: Any = None, cache: Any = None, worker: Any = None) -> None:
        if worker is not None:
            worker.close()  # started by `run` before the backend: ended here
        super().__init__(features, cache=None, worker=None)


if __name__ == "__main__":
    # commands/run.py looks the class up in the module when `run` starts
    vars(bcc_backend)["BccBackend"] = InProcessBackend
    run_and_exit(sys.argv[1:])  # exits as the real entry does
