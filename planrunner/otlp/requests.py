"""Export requests of the three signals, serialized: spans and log records grouped by
the process that made them (one Resource each, resource.py), metrics under the run's."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from planrunner import __version__
from planrunner.otlp.attributes import key_values
from planrunner.otlp.config import OtlpConfig
from planrunner.otlp.convert import SCOPE
from planrunner.otlp.resource import base_attributes, process_attributes

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


def _by_pid(items: Sequence[tuple[int, Any]]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = defaultdict(list)
    for pid, msg in items:
        groups[pid].append(msg)
    return groups


def traces_request(resources: ResourceCache, spans: Sequence[tuple[int, Span]]) -> bytes:
    data: bytes = ExportTraceServiceRequest(resource_spans=[
        ResourceSpans(resource=resources.of(pid),
                      scope_spans=[ScopeSpans(scope=SCOPE, spans=group)])
        for pid, group in _by_pid(spans).items()]).SerializeToString()
    return data


def logs_request(resources: ResourceCache, logs: Sequence[tuple[int, LogRecord]]) -> bytes:
    data: bytes = ExportLogsServiceRequest(resource_logs=[
        ResourceLogs(resource=resources.of(pid),
                     scope_logs=[ScopeLogs(scope=SCOPE, log_records=group)])
        for pid, group in _by_pid(logs).items()]).SerializeToString()
    return data


def metrics_request(resources: ResourceCache, metrics: Sequence[Metric]) -> bytes:
    data: bytes = ExportMetricsServiceRequest(resource_metrics=[
        ResourceMetrics(resource=resources.run,
                        scope_metrics=[ScopeMetrics(scope=SCOPE, metrics=metrics)])
    ]).SerializeToString()
    return data
