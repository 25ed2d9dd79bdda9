"""Records read through libbpf's ring consumer (runtime/ring_libbpf.py: the reader of
CPUs without total store order, forced here with PLANRUNNER_RING=libbpf) are the
records the mmapped reader gives: every one, in order, none twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan

PLAN = """
planrunner: 1
name: ring-readers
targets: {{a: {{binary: {binary}}}}}
probes: {{value: {{usdt: a:agg:value, args: [{{name: v}}]}}}}
outputs:
  - print: value
    fields: [v]
"""


def _values(tmp_path: Path, build: Path, env: dict[str, str]) -> list[int]:
    import os

    plan = write_plan(tmp_path, PLAN.format(binary=build / "agg"))
    done = run_planrunner(["run", plan, "-f", "json", "--no-cache", "-c",
                           f"{build / 'agg'} 1 0 values"], timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return [r["v"] for r in json_records(done.stdout)]


@pytest.mark.parametrize("reader", ["libbpf", "mmap"])
def test_each_ring_reader_gives_every_record_once_in_order(tmp_path, fixtures_built,
                                                           reader):
    values = _values(tmp_path, fixtures_built,
                     {"PLANRUNNER_RING": "libbpf" if reader == "libbpf" else ""})
    assert values == list(range(1, 1001))
