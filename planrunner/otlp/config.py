"""--otlp [URL] and the standard OTEL_* environment -> OtlpConfig.

The variables every OpenTelemetry SDK reads: OTEL_EXPORTER_OTLP_ENDPOINT (the base URL;
HTTP appends /v1/traces, /v1/logs, /v1/metrics), OTEL_EXPORTER_OTLP_PROTOCOL
(`http/protobuf`, the default, or `grpc`), OTEL_EXPORTER_OTLP_HEADERS (`k=v,k2=v2`,
values URL-encoded), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES (`k=v,...`). A URL
given to --otlp wins over the endpoint variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from planrunner.errors import UsageError

PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_PORTS = {"http/protobuf": 4318, "grpc": 4317}


@dataclass(frozen=True, slots=True)
class OtlpConfig:
    endpoint: str  # base URL, no trailing slash: http://127.0.0.1:4318
    protocol: str  # one of PROTOCOLS
    headers: tuple[tuple[str, str], ...]
    service_name: str
    resource: tuple[tuple[str, str], ...]  # OTEL_RESOURCE_ATTRIBUTES

    @property
    def host_port(self) -> tuple[str, int, bool]:
        """(host, port, tls) of the endpoint."""
        parts = urlsplit(self.endpoint)
        tls = parts.scheme == "https"
        return parts.hostname or "127.0.0.1", parts.port or (443 if tls else 80), tls

    def url_path(self, signal: str) -> str:
        """The HTTP path of `signal` (traces, logs, metrics) under the endpoint's."""
        base = urlsplit(self.endpoint).path.rstrip("/")
        return f"{base}/v1/{signal}"


def _pairs(text: str, what: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{what}: '{item.strip()}' is not KEY=VALUE",
                             hints=(f"e.g. {what}='key1=value1,key2=value2'",))
        out.append((unquote(key.strip()), unquote(value.strip())))
    return tuple(out)


def otlp_config(url: str | None, plan_name: str, env: Mapping[str, str]) -> OtlpConfig:
    """The exporter's configuration: `url` from --otlp ("" or None: the environment's)."""
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower()
    if protocol not in PROTOCOLS:
        raise UsageError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported",
                         hints=(f"use one of: {', '.join(PROTOCOLS)}",))
    endpoint = url or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or \
        f"http://localhost:{DEFAULT_PORTS[protocol]}"
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--otlp: '{endpoint}' is not an http(s) URL",
                         hints=("e.g. --otlp http://127.0.0.1:4318",))
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise UsageError(f"--otlp: '{endpoint}' has a bad port",
                         hints=("e.g. --otlp http://127.0.0.1:4318",)) from None
    headers = _pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "OTEL_EXPORTER_OTLP_HEADERS")
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
    service = env.get("OTEL_SERVICE_NAME", "").strip() or \
        dict(resource).get("service.name") or plan_name
    return OtlpConfig(endpoint.rstrip("/"), protocol, headers, service,
                      tuple((k, v) for k, v in resource if k != "service.name"))
