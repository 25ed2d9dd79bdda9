"""`python -m tests.e2e.slow_attach SECONDS [COMPILE_SECONDS] ARGS...`: planrunner's own
CLI (`ARGS` as for `python -m planrunner`) with its backend taking SECONDS more for each
site it attaches (3000 real probes took 82 s) and COMPILE_SECONDS more to compile (a
large plan's compile), saying `test-hook: compiling` on stderr as it starts to compile
and `test-hook: attached N` after each site.
test_stopping.py uses it to signal a run in the middle of its start-up. Test code:
production has no hook.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from planrunner.cli import run_and_exit
from planrunner.render.model import RUN_OWN_SITES, AttachSite, RenderedProgram
from planrunner.runtime import bcc_backend


class SlowBackend(bcc_backend.BccBackend):
    delay_s = 0.0
    compile_s = 0.0
    attached = 0

    def load(self, program: RenderedProgram,
             meanwhile: Callable[[], None] | None = None) -> None:
        sys.stderr.write("test-hook: compiling\n")
        sys.stderr.flush()
        time.sleep(self.compile_s)
        super().load(program, meanwhile)

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        super().attach(site, pid, ref_ctr)
        if site in RUN_OWN_SITES:  # the run's own, no site
            return
        self.attached += 1
        sys.stderr.write(f"test-hook: attached {self.attached}\n")
        sys.stderr.flush()
        time.sleep(self.delay_s)


if __name__ == "__main__":
    SlowBackend.delay_s = float(sys.argv[1])
    args = sys.argv[2:]
    if args and args[0].replace(".", "", 1).isdigit():
        SlowBackend.compile_s = float(args.pop(0))
    # commands/run.py looks the class up in the module when `run` starts
    vars(bcc_backend)["BccBackend"] = SlowBackend
    run_and_exit(args)  # exits as the real entry does
