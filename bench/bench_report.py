"""Results of `make bench`: rows of numbers, the markdown table, the JSON file."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Stat:
    p50: float
    p95: float | None = None
    n: int = 1

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stat:
        p50 = statistics.median(samples) if samples else math.nan
        return cls(p50, percentile(samples, 95), len(samples))


@dataclass
class Row:
    """One line of the table: a workload measured on both savers."""

    section: str
    name: str
    mode: str  # "sync", "async" or "-"
    unit: str
    ours: Stat
    official: Stat
    higher_is_better: bool = False
    target: float | None = None  # on the ratio ours / official
    note: str = ""
    limit: float | None = None  # on pgcheckpoint's own p50, in the row's unit
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        if self.official.p50 == 0 or math.isnan(self.official.p50):
            return math.nan
        return self.ours.p50 / self.official.p50

    @property
    def verdict(self) -> str:
        if self.limit is not None:
            return "pass" if self.ours.p50 < self.limit else "MISS"
        if self.target is None or math.isnan(self.ratio):
            return ""
        met = self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target
        return "pass" if met else "MISS"

    def target_text(self) -> str:
        if self.limit is not None:
            return f"< {self.limit:g} {self.unit} {self.verdict}"
        if self.target is None:
            return ""
        sign = ">=" if self.higher_is_better else "<="
        return f"{sign} {self.target:g} {self.verdict}"

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratio"] = None if math.isnan(self.ratio) else round(self.ratio, 4)
        out["verdict"] = self.verdict or None
        return out


def _num(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def markdown_table(rows: Sequence[Row]) -> str:
    head = (
        "| workload | mode | unit | pgcheckpoint p50 | p95 | official p50 | p95 "
        "| ratio | target |\n|---|---|---|---:|---:|---:|---:|---:|---|"
    )
    lines = [head]
    for r in rows:
        name = r.name + (f" ({r.note})" if r.note else "")
        lines.append(
            f"| {name} | {r.mode} | {r.unit} | {_num(r.ours.p50)} | {_num(r.ours.p95)} "
            f"| {_num(r.official.p50)} | {_num(r.official.p95)} "
            f"| {_num(r.ratio) if not math.isnan(r.ratio) else '-'} | {r.target_text()} |"
        )
    return "\n".join(lines)


def wire_table(wire: dict[str, dict[str, dict[str, float]]]) -> str:
    """Round trips and KiB per call, from the traced pass."""
    lines = [
        "| operation | pgcheckpoint round trips | KiB sent / received "
        "| official round trips | KiB sent / received |",
        "|---|---:|---:|---:|---:|",
    ]
    for op, by_kind in wire.items():
        cells = []
        for kind in ("ours", "official"):
            w = by_kind.get(kind)
            if w is None:
                cells += ["-", "-"]
            else:
                cells += [
                    f"{w['round_trips']:.1f}",
                    f"{w['kib_sent']:.1f} / {w['kib_received']:.1f}",
                ]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def telemetry_table(rows: Sequence[dict[str, Any]]) -> str:
    """p50 in ms of each call without opentelemetry, with its API alone, and with the SDK."""
    lines = [
        "| operation | mode | without opentelemetry | API, no SDK | ratio "
        "| SDK, in-memory exporter | ratio |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['operation']} | {r['mode']} | {_num(r['none_p50_ms'])} "
            f"| {_num(r['api_p50_ms'])} | {r['api_ratio']:.3f} "
            f"| {_num(r['sdk_p50_ms'])} | {r['sdk_ratio']:.3f} |"
        )
    return "\n".join(lines)
