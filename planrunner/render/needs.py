"""What a generated program needs besides its own statements, as data.

Emitters (render/expr_c.py, render/bodies.py) report each helper they call; the
program includes a helper's code only when something needs it, because clang pays for
every function it compiles (expr_helpers.h ~25 ms, each string reader ~15 ms).
"""

from __future__ import annotations

from enum import Enum


class Helper(Enum):
    """Optional parts of templates/: the value is the switch the template tests."""

    EXPR = "expr_helpers.h"  # the whole header
    READ_STR = "PR_USE_READ_STR"  # runtime_helpers.h, pr_read_str
    READ_KSTR = "PR_USE_READ_KSTR"  # pr_read_kstr
    READ_LSTR = "PR_USE_READ_LSTR"  # pr_read_lstr


# The string readers, in the order their macros are defined.
STRING_READERS = (Helper.READ_STR, Helper.READ_KSTR, Helper.READ_LSTR)
