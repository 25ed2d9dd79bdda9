import os
import sys
import threading

try:
    from planrunner.cli import main
except KeyboardInterrupt:  # Ctrl-C while importing: cli.main has not begun to catch it
    sys.exit(130)

status = main()
# A stop that abandoned the in-process compile (runtime/session.py _load, when the compile
# worker was killed) leaves its thread inside bcc/LLVM: the interpreter's normal exit ran
# under it and crashed now and then with SIGSEGV instead of the stop's 128+N.
if any(t.name == "planrunner-load" and t.is_alive() for t in threading.enumerate()):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
sys.exit(status)
