"""planrunner: trace user-space programs from declarative plans."""

import sys


def _quiet_interrupt(kind: type[BaseException], value: BaseException,
                     tb: object) -> None:
    """Ctrl-C while the CLI is still importing (before cli.main can catch it) ends it
    without a traceback; anything else is shown as Python would."""
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)  # type: ignore[arg-type]


# the CLI only (`python -m planrunner`, whose argv[0] is "-m" while the package is
# imported, or the `planrunner` script): a program importing planrunner keeps its hook
_argv0 = (getattr(sys, "argv", None) or [""])[0]  # embedded interpreters may have none
if _argv0 == "-m" or _argv0.endswith("/planrunner"):
    sys.excepthook = _quiet_interrupt

from planrunner import dataclass_cache  # noqa: E402 - after the hook: imports take time

__version__ = "0.1.0"

# before any class of the package is made: their methods' code is kept between runs
dataclass_cache.install()
