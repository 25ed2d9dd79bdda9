"""OtlpTap: `run --otlp` as a View wrapper (output/base.py ViewWrapper).

It hands print records and aggregation snapshots to the sender (sender.py, a queue:
O(1) on the session's thread) and passes everything on to the view it wraps, so text,
JSON and CSV still print as asked. `finish` (after the session) sends what is left for
at most CLOSE_GRACE_S, says what was not exported, and makes the exit status
EXIT_INCOMPLETE when records were lost, as the session does for its own losses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from planrunner.otlp.config import OtlpConfig
from planrunner.otlp.sender import Sender
from planrunner.output.base import View, ViewWrapper
from planrunner.records import AggSnapshot, Record
from planrunner.render.model import RenderedProgram

CLOSE_GRACE_S = 1.0  # a receiver that never answers delays the run's end this long
EXIT_INCOMPLETE = 4  # as runtime/session.py


def warnings_of(program: RenderedProgram) -> list[str]:
    """What the plan's prints will not give the receiver, said once at start."""
    out = []
    for p in program.prints:
        if p.span is None:
            continue
        if not p.span.latency:
            out.append(f"--otlp: output '{p.name}' prints span '{p.probe}' without "
                       "`latency`: sent as log records, not spans (add latency to its "
                       "fields)")
        elif p.span.nested and not p.span.depth:
            out.append(f"--otlp: output '{p.name}' prints nested span '{p.probe}' without "
                       "`depth`: its spans are sent flat, not as trees (add depth to its "
                       "fields)")
    return out


class OtlpTap(ViewWrapper):
    def __init__(self, inner: View, config: OtlpConfig, program: RenderedProgram,
                 stderr: TextIO, sender: Sender | None = None) -> None:
        super().__init__(inner)
        self.stderr = stderr
        self.config = config
        stderr.write(f"Sending spans, log records and metrics over OTLP ({config.protocol}) "
                     f"to {config.endpoint}\n")
        for line in warnings_of(program):
            stderr.write(f"warning: {line}\n")
        self.sender = sender or Sender(config, program, stderr)
        self.sender.start()
        self.finished = False

    def record(self, rec: Record) -> None:
        self.sender.offer((rec,))
        self.inner.record(rec)

    def records(self, batch: Sequence[Record]) -> None:
        self.sender.offer(batch)
        self.inner.records(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.sender.offer_snapshot(snap)
        self.inner.aggregate(snap)

    def finish(self, status: int, has_command: bool) -> int:
        """Send what is left (bounded), report what was not exported; the exit status."""
        self.finished = True
        counts = self.sender.close(CLOSE_GRACE_S)
        lost = []
        if counts.lost_records:
            lost.append(f"{counts.lost_records} of {counts.records} records")
        if counts.lost_points:
            lost.append(f"{counts.lost_points} of {counts.points} metric points")
        sent = counts.points_sent + counts.spans_sent + counts.logs_sent
        if sent:
            self.stderr.write(f"OTLP: sent {counts.spans_sent} spans, {counts.logs_sent} log "
                              f"records and {counts.points_sent} metric points to "
                              f"{self.config.endpoint}\n")
        if counts.orphaned:
            self.stderr.write(f"note: --otlp: {counts.orphaned} nested spans were sent "
                              "without their parent (it was still open at the end, or "
                              "too many waited for theirs)\n")
        if lost:
            self.stderr.write(f"incomplete trace: {' and '.join(lost)} not exported to "
                              f"{self.config.endpoint} (receiver down or too slow, "
                              "queue full)\n")
            if status == 0 and not has_command:
                return EXIT_INCOMPLETE
        return status

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if not self.finished:  # an error ended the run: stop the thread, quietly
                self.finished = True
                self.sender.close(0.0)
