"""`--prometheus HOST:PORT`: address forms, errors, name clashes found before attaching,
and the /metrics server itself (loopback, real sockets)."""

from __future__ import annotations

import io
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from planrunner.cli import main
from planrunner.errors import BackendError, PlanSemanticError, UsageError
from planrunner.prometheus.config import exporter_config, parse_address
from planrunner.prometheus.exporter import serve
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput, RenderedProgram

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [
    (":9435", ("127.0.0.1", 9435)),            # loopback unless told otherwise
    (" :9435 ", ("127.0.0.1", 9435)),
    ("127.0.0.1:1", ("127.0.0.1", 1)),
    ("0.0.0.0:9435", ("0.0.0.0", 9435)),      # every interface: only when written out
    ("localhost:65535", ("localhost", 65535)),
    ("metrics.example.org:9435", ("metrics.example.org", 9435)),
    ("[::1]:9435", ("::1", 9435)),
    ("[::]:9435", ("::", 9435)),
])
def test_address_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("9435", "no port (did you mean :9435?)"),
    ("localhost", "no port (give a port)"),
    ("", "no port"),
    (":", "port '' is not a number from 1 to 65535"),
    (":0", "port '0' is not a number from 1 to 65535"),
    (":65536", "port '65536' is not a number"),
    (":http", "port 'http' is not a number"),
    ("::1:9435", "write an IPv6 address in brackets: [::1]:9435"),
    ("[::1]9435", "an IPv6 address needs brackets and a port"),
    ("[nope]:9435", "'nope' is not an IPv6 address"),
    ("bad host:9435", "'bad host' is neither an IP address nor a host name"),
    ("-x:9435", "'-x' is neither"),
])
def test_bad_addresses_are_usage_errors(text: str, why: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_address(text)
    assert info.value.exit_code == 2
    diag = info.value.diagnostics[0]
    assert diag.message.startswith(f"--prometheus {text!r}: {why}")
    assert "e.g. :9435 (loopback)" in diag.hints[0]


def test_cli_reports_a_bad_address_before_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    # The plan does not even exist: the address is checked first.
    code = main(["run", "no-such-plan.yaml", "--prometheus", "9435"], out, err)
    assert code == 2
    assert "--prometheus '9435': no port (did you mean :9435?)" in err.getvalue()


def _agg(name: str, kind: str, keys: tuple[KeyField, ...] = ()) -> AggregateOutput:
    return AggregateOutput(name=name, probe="p", kind=kind, map_name="m", key=KeyLayout(keys),
                           value_label="v", unit=None, every_ns=None, top=None, lhist=None,
                           map_size=8)


def _program(*aggs: AggregateOutput) -> RenderedProgram:
    return RenderedProgram(c_source="", sites=(), prints=(), aggregates=aggs, plan_name="p")


def test_exporter_config_names_every_output() -> None:
    config = exporter_config(("127.0.0.1", 9435), "my-plan", "What it does.", _program(
        _agg("0", "count", (KeyField("file", "str", size=64), KeyField("func", "str", size=64))),
        _agg("lat", "hist")))
    assert [(f.name, f.mtype, f.labels) for f in config.families] == [
        ("planrunner_my_plan_0", "counter", ("file", "func")),
        ("planrunner_my_plan_lat", "histogram", ())]
    assert config.display == "127.0.0.1:9435"
    assert exporter_config(("::1", 1), "p", "", _program()).display == "[::1]:1"


def test_clashing_names_fail_before_attaching() -> None:
    with pytest.raises(PlanSemanticError) as info:
        exporter_config(("127.0.0.1", 9435), "p", "",
                        _program(_agg("a.b", "count"), _agg("a-b", "sum")))
    assert info.value.diagnostics[0].message == (
        "--prometheus: output 'a.b' and output 'a-b' would both be exposed as "
        "planrunner_p_a_b_total")
    with pytest.raises(PlanSemanticError, match="planrunner's own metrics"):
        exporter_config(("127.0.0.1", 9435), "events", "", _program(_agg("lost", "count")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _registry() -> CollectorRegistry:
    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            yield GaugeMetricFamily("planrunner_test_value", "a test gauge", value=42)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())
    return registry


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_server_serves_metrics_and_stops() -> None:
    port = _free_port()
    exporter = serve(_registry(), "127.0.0.1", port, f"127.0.0.1:{port}")
    try:
        status, ctype, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert "planrunner_test_value 42.0\n" in body
        assert _get(f"http://127.0.0.1:{port}/")[0] == 200
        assert _get(f"http://127.0.0.1:{port}/nope")[0] == 404
        # The port is taken: a second exporter says so, as a user-facing error.
        with pytest.raises(BackendError, match=f"cannot serve Prometheus metrics on "
                                               f"127.0.0.1:{port}: Address already in use"):
            serve(_registry(), "127.0.0.1", port, f"127.0.0.1:{port}")
    finally:
        exporter.close()
        exporter.close()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_server_on_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("::1 is not configured on this host")
    exporter = serve(_registry(), "::1", port, f"[::1]:{port}")
    try:
        assert "planrunner_test_value 42.0" in _get(f"http://[::1]:{port}/metrics")[2]
    finally:
        exporter.close()
