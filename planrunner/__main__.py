import sys

from planrunner.timing import mark

mark("main")  # interpreter started (PLANRUNNER_TIMING=1 only)
try:
    from planrunner.cli import run_and_exit
except KeyboardInterrupt:  # Ctrl-C while importing: cli.main has not begun to catch it
    sys.exit(130)

run_and_exit()
