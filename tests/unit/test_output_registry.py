"""The view registry: names, the View protocol, batching, and the import boundary."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from planrunner.errors import UsageError
from planrunner.output import VIEWS, View, make_view
from planrunner.records import PrintSchema

SCHEMA = PrintSchema("0", "query", ("query",))
REC = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 1, "tid": 1, "comm": "c",
       "probe": "query", "output": "0", "query": "q"}


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.flushes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)

    def flush(self) -> None:
        self.flushes += 1


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_view_is_a_view_and_writes_once_per_batch(name):
    stream = CountingStream()
    view = make_view(name, stream, [SCHEMA])
    assert isinstance(view, View)
    view.records([REC] * 50)
    if name == "folded":  # stacks only: records without one write nothing, ever
        view.close()
        assert stream.writes == 0 and stream.flushes == 1
        return
    assert stream.writes == 1  # the header (text, csv) goes with the batch
    assert stream.flushes == 0  # flushing is the runtime's call
    assert len(stream.getvalue().splitlines()) == 51 if name != "json" else 50
    view.close()
    view.close()
    assert stream.flushes == 1 and not stream.closed  # the caller owns the stream


def test_unknown_view_is_a_usage_error_with_a_hint():
    with pytest.raises(UsageError) as info:
        make_view("jsno", io.StringIO(), [])
    diag = info.value.diagnostics[0]
    assert "unknown output format 'jsno'" in diag.message
    assert diag.hints == ("did you mean 'json'?",)


def test_views_do_not_import_bcc_or_the_runtime():
    code = ("import sys; sys.modules['bcc'] = None\n"
            "import planrunner.output, planrunner.records\n"
            "bad = [m for m in sys.modules if m.startswith(('planrunner.runtime', "
            "'planrunner.elf'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
