"""`run --otlp`: the run's records and aggregations sent to an OpenTelemetry receiver.

    config.py    --otlp URL and the OTEL_* environment -> OtlpConfig
    resource.py  the resource of a traced process (service, host, pid, command, container)
    convert.py   records -> spans (nested spans as trees) and log records, AggSnapshots
                 -> metrics, as opentelemetry-proto messages; the monotonic->epoch clock
    sender.py    the sender thread: a bounded queue, batches, retries with backoff over
                 HTTP/protobuf or gRPC; what it could not send is counted
    view.py      OtlpTap: a View wrapper commands/run.py puts around the run's view

Like prometheus/, an output: it knows nothing of the runtime (records.py is the
contract) and is imported only with --otlp; opentelemetry-proto, protobuf and grpcio are
imported when the sender starts, so a run without --otlp pays none of them.
"""

from __future__ import annotations
