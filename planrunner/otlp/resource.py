"""The resource of a traced process: who made a span, log record or metric.

`service.name` (OTEL_SERVICE_NAME, else the plan's name), `host.name`, then per process
`process.pid`, `process.executable.path`, `process.command_line` and `container.id`
when its cgroup names one: docker (`/docker/ID`, `docker-ID.scope`), containerd
(`cri-containerd-ID.scope`, `/containerd/ID`), CRI-O (`crio-ID.scope`) and podman
(`libpod-ID.scope`) all put the 64-hex id in the last path part, as OpenTelemetry's
own container detectors read it. A process that is gone keeps only its pid.
"""

from __future__ import annotations

import os
import re
import socket

from planrunner.otlp.config import OtlpConfig

# a 64-hex id as the last part of a cgroup path, bare or in `RUNTIME-ID.scope`
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


def container_id(cgroup_text: str) -> str | None:
    """The container id a /proc/PID/cgroup names (v1 or v2 lines), else None."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1].strip()
        for part in reversed(path.split("/")):
            found = _CONTAINER_ID.search(part)
            if found:
                return found.group(1)
    return None


def process_attributes(pid: int, proc: str = "/proc") -> list[tuple[str, str | int]]:
    """What /proc says of `pid` (read once per process by the caller)."""
    attrs: list[tuple[str, str | int]] = [("process.pid", pid)]
    try:
        attrs.append(("process.executable.path", os.readlink(f"{proc}/{pid}/exe")))
    except OSError:
        pass
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
        if argv != [b""]:
            attrs.append(("process.command_line",
                          " ".join(a.decode(errors="backslashreplace") for a in argv)))
    except OSError:
        pass
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            cid = container_id(f.read())
        if cid:
            attrs.append(("container.id", cid))
    except OSError:
        pass
    return attrs


def base_attributes(config: OtlpConfig) -> list[tuple[str, str | int]]:
    """The attributes every resource of the run has."""
    attrs: list[tuple[str, str | int]] = [("service.name", config.service_name),
                                          ("host.name", socket.gethostname())]
    attrs.extend(config.resource)
    return attrs
