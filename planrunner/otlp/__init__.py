"""`run --otlp`: the run's records and aggregations sent to an OpenTelemetry receiver.

    config.py    --otlp URL and the OTEL_* environment -> OtlpConfig
    resource.py  the resource of a traced process (service, host, pid, command, container)
    convert.py   records -> spans (nested spans as trees) and log records, AggSnapshots
                 -> metrics, as opentelemetry-proto messages; the monotonic->epoch clock
    sender.py    the run's side: a bounded queue, a feeder thread that hands rows to
                 the exporter process, what it could not send counted
    wire.py      the pipes between them: records as rows (tuples), pickled frames
    exporter.py  the exporter process: converts, builds and sends the requests
                 (batches, retries with backoff over HTTP/protobuf or gRPC)
    view.py      OtlpTap: a View wrapper commands/run.py puts around the run's view

Like prometheus/, an output: it knows nothing of the runtime (records.py is the
contract) and is imported only with --otlp; opentelemetry-proto, protobuf and grpcio are
imported by the exporter process only, so the run's own process never pays them.
"""

from __future__ import annotations
