"""Options in any position for a subcommand: `planrunner list python3.11 -vv NAME`.

argparse stops filling a `nargs="*"` positional at the first option, so a positional
after an option is "unrecognized". `intermixed(parser)` makes a subparser parse with
`parse_known_intermixed_args` (options first, then every positional in order) even
when called by the top-level parser's subparsers action.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


class IntermixedParser(argparse.ArgumentParser):
    _inside = False

    # typeshed declares parse_known_args as overloads on the namespace's type; this
    # override serves the plain call argparse itself makes.
    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        if self._inside:  # parse_known_intermixed_args calls us back twice
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def intermixed(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, now accepting its options before, between and after positionals."""
    parser.__class__ = IntermixedParser
    return parser
