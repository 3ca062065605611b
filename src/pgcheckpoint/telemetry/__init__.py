"""What pgcheckpoint tells about its work: log context, and OpenTelemetry when it is there.

`Telemetry` (also importable from `pgcheckpoint`) says where a saver's spans
and metrics go; `activity` is what the drivers report of each operation (and
the log context of every record of the `pgcheckpoint` logger); `otel`, the only
module that imports OpenTelemetry, records spans and metrics.

Example:
    >>> from pgcheckpoint.telemetry import Telemetry
    >>> Telemetry().thread_ids
    False
"""

from __future__ import annotations

from .config import Telemetry

__all__ = ["Telemetry"]
