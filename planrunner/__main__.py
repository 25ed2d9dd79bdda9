import sys

try:
    from planrunner.timing import mark

    mark("main")  # interpreter started (PLANRUNNER_TIMING=1 only)
    from planrunner.cli import run_and_exit
except KeyboardInterrupt:  # Ctrl-C while importing: cli.main has not begun to catch it
    sys.exit(130)
except RuntimeError as exc:  # the same Ctrl-C inside a class's creation: Python wraps
    if not isinstance(exc.__cause__, KeyboardInterrupt):  # it ("Error calling
        raise                                           # __set_name__")
    sys.exit(130)

run_and_exit()
