"""Wall-clock times for the text view: record times (ISO 8601 UTC strings) and
interval ends (unix seconds) shown as HH:MM:SS[.ffffff] in a chosen time zone.

The text view shows local time, as bcc's tools do (`tz=None`); JSON and CSV keep UTC.
Converting is cached per second, so a busy stream pays one dict lookup per record.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo


class Clock:
    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz
        # "YYYY-MM-DDTHH:MM:SS" (UTC) -> "HH:MM:SS" in self.tz: a renderer may look it
        # up itself (text.py), calling `seconds` only for a second not seen yet
        self.shown: dict[str, str] = {}

    def seconds(self, prefix: str) -> str:
        """"HH:MM:SS" in self.tz for "YYYY-MM-DDTHH:MM:SS" (UTC)."""
        shown = self.shown.get(prefix)
        if shown is None:
            if len(self.shown) > 4096:  # records arrive in time order: old seconds are done
                self.shown.clear()
            when = datetime.fromisoformat(prefix).replace(tzinfo=UTC)
            shown = when.astimezone(self.tz).strftime("%H:%M:%S")
            self.shown[prefix] = shown
        return shown

    def record_time(self, iso: str) -> str:
        """"HH:MM:SS.ffffff" for "2026-12-03T02:41:07.123456Z"."""
        if len(iso) == 27 and iso[19] == ".":
            return (self.shown.get(iso[:19]) or self.seconds(iso[:19])) + iso[19:26]
        try:  # another precision or offset: parse it fully
            when = datetime.fromisoformat(iso)
        except ValueError:
            return iso
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.astimezone(self.tz).strftime("%H:%M:%S.%f")

    def unix_time(self, seconds: float) -> str:
        """"HH:MM:SS" for unix seconds."""
        return datetime.fromtimestamp(seconds, UTC).astimezone(self.tz).strftime("%H:%M:%S")
