"""`--prometheus HOST:PORT`: the address to serve on, and the names to serve, checked
before anything is attached.

Address forms: ``:PORT`` (loopback, 127.0.0.1: the default, nothing leaves the host),
``HOST:PORT`` with an IPv4 address or a host name, ``[IPV6]:PORT``. A non-loopback
address (``0.0.0.0:9435``, ``[::]:9435``, ``10.0.0.5:9435``) is bound only when written
out like that. Anything else is a UsageError (exit 2) saying what was expected.

Pure: no prometheus_client (the exporter imports it only when it starts).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from dataclasses import dataclass

from planrunner.errors import BackendUnavailable, PlanSemanticError, UsageError
from planrunner.prometheus.naming import Family, NameClash, check_unique, family_of
from planrunner.render.model import RenderedProgram

DEFAULT_HOST = "127.0.0.1"
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*"
                       r"\.?$")
_FORMS = ("expected HOST:PORT, e.g. :9435 (loopback), 127.0.0.1:9435, 0.0.0.0:9435 "
          "(every interface) or [::1]:9435",)

# Sample names of the exporter's own metrics (exporter.py); a plan's may not take them.
SELF_METRICS = (
    "planrunner_build_info", "planrunner_events_lost_total",
    "planrunner_map_full_drops_total", "planrunner_aggregation_keys",
    "planrunner_probes_attached", "planrunner_attach_failures_total",
    "planrunner_semaphore_mode",
)


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    host: str
    port: int
    plan: str
    families: tuple[Family, ...]  # one per program.aggregates entry, same order

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_address(text: str) -> tuple[str, int]:
    """(host, port) from `--prometheus`; `:PORT` means 127.0.0.1."""
    raw = text.strip()
    if raw.startswith("["):
        host, sep, port = raw[1:].partition("]:")
        if not sep:
            raise _bad(text, "an IPv6 address needs brackets and a port: [::1]:9435")
        _check_ip6(text, host)
    else:
        host, sep, port = raw.rpartition(":")
        if not sep:
            hint = f"did you mean :{raw}?" if raw.isdigit() else "give a port"
            raise _bad(text, f"no port ({hint})")
        if ":" in host:
            raise _bad(text, "write an IPv6 address in brackets: [::1]:9435")
        if host and not _HOSTNAME.match(host):
            raise _bad(text, f"'{host}' is neither an IP address nor a host name")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _bad(text, f"port '{port}' is not a number from 1 to 65535")
    return host or DEFAULT_HOST, int(port)


def _check_ip6(text: str, host: str) -> None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise _bad(text, f"'{host}' is not an IPv6 address") from None


def _bad(text: str, why: str) -> UsageError:
    return UsageError(f"--prometheus {text!r}: {why}", hints=_FORMS)


def exporter_config(address: tuple[str, int], plan_name: str, description: str,
                    program: RenderedProgram,
                    plans: tuple[tuple[str, str], ...] = ()) -> ExporterConfig:
    """The names every aggregation output will be served under; a clash between two of
    them (or with the exporter's own metrics) is an error naming both. `plans`: the
    (name, description) of each plan of a run of several (plan_set.py), whose outputs
    are named `PLAN.OUTPUT`: each is served under its own plan's name."""
    if importlib.util.find_spec("prometheus_client") is None:
        raise BackendUnavailable(
            "--prometheus needs the prometheus_client Python module",
            hints=("install Debian's python3-prometheus-client (`make setup` does) or "
                   "`pip install prometheus_client`",))
    if len(plans) > 1:
        from planrunner.plan_set import plan_of

        about = dict(plans)
        owners = [plan_of(agg.name, list(about)) for agg in program.aggregates]
        families = tuple(family_of(agg, plan, about[plan], own)
                         for agg, (plan, own) in zip(program.aggregates, owners, strict=True))
    else:
        families = tuple(family_of(agg, plan_name, description)
                         for agg in program.aggregates)
    try:
        check_unique(families, SELF_METRICS)
    except NameClash as exc:
        raise PlanSemanticError(
            f"--prometheus: {exc}",
            hints=("give one of the outputs another `name:` (metric names keep only "
                   "letters, digits and _)",)) from None
    return ExporterConfig(address[0], address[1], plan_name, families)
