"""planrunner: trace user-space programs from declarative plans.

Importing the package changes no global state (tests/unit/test_import_side_effects.py):
what only the command line wants (the dataclass cache, the quiet Ctrl-C) is set up by
its entry, planrunner.cli.run_and_exit."""

__version__ = "0.1.0"
