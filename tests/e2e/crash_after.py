"""`python -m tests.e2e.crash_after SECONDS ARGS...`: planrunner's own CLI (`ARGS` as for
`python -m planrunner`) with its backend wrapped to raise RuntimeError inside the
session loop SECONDS after the loop's first ring read, i.e. after everything is
attached. test_executor_exit.py uses it to prove that a crash inside planrunner still
detaches every probe and restores every semaphore. Test code: production has no hook.
"""

from __future__ import annotations

import sys
import time

from planrunner.cli import main
from planrunner.runtime import bcc_backend


class CrashingBackend(bcc_backend.BccBackend):
    delay_s = 0.0
    _crash_at: float | None = None

    def read_ring(self, timeout_ms: int) -> list[bytes]:
        now = time.monotonic()
        if self._crash_at is None:
            self._crash_at = now + self.delay_s
        elif now >= self._crash_at:
            raise RuntimeError("simulated crash inside the loop (tests/e2e/crash_after.py)")
        return super().read_ring(timeout_ms)


if __name__ == "__main__":
    CrashingBackend.delay_s = float(sys.argv[1])
    # commands/run.py looks the class up in the module when `run` starts
    vars(bcc_backend)["BccBackend"] = CrashingBackend
    sys.exit(main(sys.argv[2:]))
