import sys

try:
    from planrunner.cli import main
except KeyboardInterrupt:  # Ctrl-C while importing: cli.main has not begun to catch it
    sys.exit(130)

sys.exit(main())
