"""`planrunner schema`: print the plan JSON Schema (schema/plan.schema.json) to stdout.

Editors use it for completion and checks (yaml-language-server's `$schema` comment).
"""

from __future__ import annotations

import argparse
from typing import TextIO

from planrunner.resources import data_dir


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(name, help="print the plan JSON Schema",
                                   description="Print the JSON Schema (draft 2020-12) of plans.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.plan.validate import SCHEMA_FILE  # lazily: only this command needs it

    text = (data_dir("schema") / SCHEMA_FILE).read_text(encoding="utf-8")
    stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
