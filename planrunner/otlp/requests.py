"""Export requests of the three signals, serialized: spans and log records grouped by
the process that made them (one Resource each, resource.py), metrics under the run's."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from planrunner import __version__
from planrunner.otlp.attributes import key_values
from planrunner.otlp.config import OtlpConfig
from planrunner.otlp.convert import SCOPE, FlatSpans, LogItem, SpanItem
from planrunner.otlp.resource import base_attributes, process_attributes
from planrunner.otlp.wire import PID

SCOPE.version = __version__
MAX_PROCESSES = 4096  # resources kept; a run over more processes builds them again


class ResourceCache:
    """The Resource of each process: `processes` holds what /proc said of it when it
    was first seen (sender.py reads it then); read now if it is not there."""

    def __init__(self, config: OtlpConfig,
                 processes: dict[int, list[tuple[str, str | int]]]) -> None:
        self.base = base_attributes(config)
        self.run = Resource(attributes=key_values(self.base))
        self.processes = processes
        self.by_pid: dict[int, Resource] = {}

    def of(self, pid: int) -> Resource:
        res = self.by_pid.get(pid)
        if res is None:
            if len(self.by_pid) >= MAX_PROCESSES:
                self.by_pid.clear()
            known = self.processes.get(pid)
            res = self.by_pid[pid] = Resource(attributes=key_values(
                self.base + (known if known is not None else process_attributes(pid))))
        return res


def _by_pid(items: Sequence[Any]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = defaultdict(list)
    for item in items:
        groups[item.pid].append(item)
    return groups


def batches(spans: Sequence[SpanItem | FlatSpans], size: int
            ) -> Iterator[tuple[list[SpanItem | FlatSpans], int]]:
    """`spans` cut into requests of at most `size` spans: (items, how many spans)."""
    part: list[SpanItem | FlatSpans] = []
    n = 0
    for item in spans:
        while isinstance(item, FlatSpans) and n + len(item) > size:
            head, item = item.split(size - n)
            yield [*part, head], size
            part, n = [], 0
        if isinstance(item, FlatSpans) and not len(item):
            continue
        part.append(item)
        n += len(item) if isinstance(item, FlatSpans) else 1
        if n >= size:
            yield part, n
            part, n = [], 0
    if part:
        yield part, n


def traces_request(resources: ResourceCache, spans: Sequence[SpanItem | FlatSpans]) -> bytes:
    """The spans in one request: nested ones written in place, flat ones merged as their
    writer serialized them (span_writer.py)."""
    req = ExportTraceServiceRequest()
    scopes: dict[int, Any] = {}

    def scope_of(pid: int) -> Any:
        ss = scopes.get(pid)
        if ss is None:
            rs = req.resource_spans.add()
            rs.resource.CopyFrom(resources.of(pid))
            ss = scopes[pid] = rs.scope_spans.add()
            ss.scope.CopyFrom(SCOPE)
        return ss

    for item in spans:
        if isinstance(item, FlatSpans):
            _write_flat(item, scope_of)
            continue
        span = scope_of(item.pid).spans.add()
        span.trace_id = item.trace_id
        span.span_id = item.span_id
        if item.parent:
            span.parent_span_id = item.parent
        plan = item.plan
        span.name = plan.name
        span.kind = plan.kind
        span.start_time_unix_nano = item.start
        span.end_time_unix_nano = item.end
        plan.attrs.fill(span.attributes, item.row)
    data: bytes = req.SerializeToString()
    return data


def _write_flat(flat: FlatSpans, scope_of: Callable[[int], Any]) -> None:
    """Each process's rows, serialized by the output's writer as one ScopeSpans, merged
    into that process's (concatenated messages are their merge: the spans append)."""
    writer = flat.plan.writer
    assert writer is not None
    rows = flat.rows
    pid = rows[0][PID] if rows else 0
    groups: dict[int, Sequence[tuple[Any, ...]]] = {pid: rows}
    if not all(row[PID] == pid for row in rows):
        by_pid: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
        for row in rows:
            by_pid[row[PID]].append(row)
        groups = dict(by_pid)
    at = 0
    for pid, part in groups.items():
        ids = flat.ids[24 * at:24 * (at + len(part))]  # random: any of the batch's will do
        at += len(part)
        scope_of(pid).MergeFromString(writer.write(part, flat.offset, ids))


def logs_request(resources: ResourceCache, logs: Sequence[LogItem]) -> bytes:
    req = ExportLogsServiceRequest()
    for pid, group in _by_pid(logs).items():
        rl = req.resource_logs.add()
        rl.resource.CopyFrom(resources.of(pid))
        sl = rl.scope_logs.add()
        sl.scope.CopyFrom(SCOPE)
        out = sl.log_records
        for item in group:
            log = out.add()
            log.time_unix_nano = log.observed_time_unix_nano = item.time
            log.severity_number = SeverityNumber.SEVERITY_NUMBER_INFO
            log.event_name = item.plan.name
            log.body.string_value = item.plan.name
            item.plan.attrs.fill(log.attributes, item.row)
    data: bytes = req.SerializeToString()
    return data


def metrics_request(resources: ResourceCache, metrics: Sequence[Metric]) -> bytes:
    data: bytes = ExportMetricsServiceRequest(resource_metrics=[
        ResourceMetrics(resource=resources.run,
                        scope_metrics=[ScopeMetrics(scope=SCOPE, metrics=metrics)])
    ]).SerializeToString()
    return data
