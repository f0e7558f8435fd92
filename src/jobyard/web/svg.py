"""Server-side SVG charts with labelled axes: no script, no CDN, no inline CSS (the page's CSP
forbids it; SVG presentation attributes are not CSS). Every text is escaped.

`bars` draws stacked counts per time step (throughput, failures); `lines` draws several series
(percentiles) on one value axis. Both take points with a datetime `t`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from markupsafe import Markup, escape

W: Final = 960
H: Final = 240
LEFT: Final = 56
RIGHT: Final = 12
TOP: Final = 12
BOTTOM: Final = 44
PLOT_W: Final = W - LEFT - RIGHT
PLOT_H: Final = H - TOP - BOTTOM
COLORS: Final = {"ok": "#2f855a", "bad": "#c53030", "p50": "#2b6cb0", "p95": "#b7791f",
                 "p99": "#9b2c2c", "grid": "#e2e8f0", "axis": "#4a5568"}  # fmt: skip


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and a few round values covering `top` (1, 2, 2.5 or 5 × 10^k steps)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step)
    return [round(i * step, 6) for i in range(n + 1)]


def _num(v: float) -> str:
    return f"{v:g}" if v < 10_000 else f"{v / 1000:g}k"


def _time_label(t: datetime, span_s: float) -> str:
    return t.strftime("%H:%M") if span_s <= 2 * 86400 else t.strftime("%a %d")


def _frame(
    ticks: list[float], y_title: str, times: Sequence[datetime], fmt: Callable[[float], str]
) -> list[str]:
    top = ticks[-1]
    parts = []
    for v in ticks:
        y = TOP + PLOT_H - PLOT_H * v / top
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" '
            f'stroke="{COLORS["grid"]}" stroke-width="1"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="{COLORS["axis"]}">{escape(fmt(v))}</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + PLOT_H}" stroke="{COLORS["axis"]}"/>'
        f'<line x1="{LEFT}" y1="{TOP + PLOT_H}" x2="{W - RIGHT}" y2="{TOP + PLOT_H}" '
        f'stroke="{COLORS["axis"]}"/>'
    )
    if times:
        span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else 0.0
        for i in sorted({0, len(times) // 4, len(times) // 2, 3 * len(times) // 4, len(times) - 1}):
            x = LEFT + PLOT_W * (i + 0.5) / len(times)
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP + PLOT_H}" x2="{x:.1f}" y2="{TOP + PLOT_H + 4}" '
                f'stroke="{COLORS["axis"]}"/>'
                f'<text x="{x:.1f}" y="{TOP + PLOT_H + 16}" text-anchor="middle" font-size="11" '
                f'fill="{COLORS["axis"]}">{escape(_time_label(times[i], span))}</text>'
            )
    parts.append(
        f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{H - 6}" text-anchor="middle" font-size="11" '
        f'fill="{COLORS["axis"]}">time (UTC)</text>'
        f'<text x="14" y="{TOP + PLOT_H / 2:.0f}" text-anchor="middle" font-size="11" '
        f'fill="{COLORS["axis"]}" transform="rotate(-90 14 {TOP + PLOT_H / 2:.0f})">'
        f"{escape(y_title)}</text>"
    )
    return parts


def _svg(label: str, parts: list[str]) -> Markup:
    body = "".join(parts)
    return Markup(  # noqa: S704 - every text in `parts` and `label` was escaped when built
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}</title>{body}</svg>'
    )


def bars(
    times: Sequence[datetime],
    stacks: Sequence[tuple[str, str, Sequence[float]]],
    *,
    label: str,
    y_title: str,
) -> Markup:
    """Stacked bars: `stacks` is (name, color key, values) bottom first."""
    totals = [sum(s[2][i] for s in stacks) for i in range(len(times))]
    ticks = nice_ticks(max(totals, default=0))
    top = ticks[-1]
    parts = _frame(ticks, y_title, times, _num)
    slot = PLOT_W / max(len(times), 1)
    width = max(1.0, slot * 0.8)
    for i, t in enumerate(times):
        base = 0.0
        x = LEFT + slot * i + (slot - width) / 2
        for name, color, values in stacks:
            v = float(values[i])
            if v <= 0:
                continue
            y0 = TOP + PLOT_H - PLOT_H * base / top
            h = PLOT_H * v / top
            parts.append(
                f'<rect x="{x:.1f}" y="{y0 - h:.1f}" width="{width:.1f}" height="{h:.1f}" '
                f'fill="{COLORS[color]}" data-series="{escape(name)}">'
                f"<title>{escape(t.strftime('%Y-%m-%d %H:%M'))}Z: {v:g} {escape(name)}</title>"
                "</rect>"
            )
            base += v
    return _svg(label, parts)


def _ms_axis(top_ms: float) -> tuple[list[float], str, float]:
    """Ticks in the unit that reads best (ms or s) and that unit's divisor."""
    if top_ms >= 2000:
        return nice_ticks(top_ms / 1000), "seconds", 1000.0
    return nice_ticks(top_ms), "milliseconds", 1.0


def lines(
    times: Sequence[datetime],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    *,
    label: str,
    y_title: str,
) -> Markup:
    """Duration series in ms (gaps where None), drawn in ms or s, whichever reads better."""
    top_ms = max((v for _, _, vs in series for v in vs if v is not None), default=0.0)
    ticks, unit, div = _ms_axis(top_ms)
    top = ticks[-1]
    parts = _frame(ticks, f"{y_title} ({unit})", times, _num)
    slot = PLOT_W / max(len(times), 1)
    for name, color, values in series:
        path: list[str] = []
        for i, v in enumerate(values):
            if v is None:
                continue
            x = LEFT + slot * (i + 0.5)
            y = TOP + PLOT_H - PLOT_H * (v / div) / top
            path.append(f"{'M' if not path else 'L'}{x:.1f},{y:.1f}")
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{COLORS[color]}">'
                f"<title>{escape(name)} {v:.0f} ms</title></circle>"
            )
        if path:
            parts.append(
                f'<path d="{" ".join(path)}" fill="none" stroke="{COLORS[color]}" '
                f'stroke-width="1.5" data-series="{escape(name)}"/>'
            )
    return _svg(label, parts)


def _per(step_s: int) -> str:
    return {60: "minute", 900: "15 minutes", 3600: "hour", 7200: "2 hours"}.get(
        step_s, f"{step_s} s"
    )


def throughput(chart: dict[str, Any]) -> Markup:
    """Finished runs per step of a core.stats.series() chart: succeeded and failed stacked."""
    pts = chart["points"]
    per = _per(int(chart["step_s"]))
    return bars(
        [p["t"] for p in pts],
        [
            ("succeeded", "ok", [p["succeeded"] for p in pts]),
            ("failed", "bad", [p["failed"] for p in pts]),
        ],
        label=f"finished runs per {per}, last {chart['window']}",
        y_title=f"runs per {per}",
    )


def latency(chart: dict[str, Any], key: str, title: str) -> Markup:
    """p50/p95/p99 of `run_ms` or `wait_ms` per step."""
    pts = chart["points"]
    return lines(
        [p["t"] for p in pts],
        [(q, q, [p[key][q] for p in pts]) for q in ("p50", "p95", "p99")],
        label=f"{title} percentiles per step, last {chart['window']}",
        y_title=title,
    )


NODE_W: Final = 300
# Characters of a worker's health that fit its node's third line (11 px text in NODE_W).
HEALTH_CHARS: Final = 46
NODE_H: Final = 64
GAP: Final = 18
Q_X: Final = 20
W_X: Final = 620
TOPO_W: Final = 940


def _span(seconds: float) -> str:
    s = int(max(0.0, seconds))
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _node(
    x: float, y: float, lines_: Sequence[str], *, dead: bool, attrs: str, href: str | None
) -> str:
    fill, stroke, ink = ("#edf2f7", "#a0aec0", "#718096") if dead else ("#ffffff", "#4a5568",
                                                                          "#1a202c")  # fmt: skip
    bold = ' font-weight="bold"'
    text = "".join(
        f'<text x="{x + 12}" y="{y + 20 + 17 * i}" font-size="{13 if i == 0 else 11}" '
        f'fill="{ink}"{bold if i == 0 else ""}>{escape(line)}</text>'
        for i, line in enumerate(lines_)
    )
    box = (
        f'<g {attrs}><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" '
        f'fill="{fill}" stroke="{stroke}"/>{text}</g>'
    )
    return f'<a href="{escape(href)}">{box}</a>' if href else box


def topology(
    queues: Sequence[dict[str, Any]], workers: Sequence[dict[str, Any]], *, base: str
) -> Markup:
    """Queues (left) and workers (right) as nodes, a connector for each queue a worker serves;
    in flight / capacity on every node; stopped and dead workers grey with uptime frozen."""
    rows = max(len(queues), len(workers), 1)
    height = GAP + rows * (NODE_H + GAP)
    q_y = {q["name"]: GAP + i * (NODE_H + GAP) for i, q in enumerate(queues)}
    parts: list[str] = []
    for i, w in enumerate(workers):
        y = GAP + i * (NODE_H + GAP)
        dead = w["status"] not in ("active", "draining")
        dash = ' stroke-dasharray="4 4"' if dead else ""
        for name in w["queues"]:
            if name not in q_y:
                continue
            y2 = q_y[name] + NODE_H / 2
            parts.append(
                f'<path d="M{W_X},{y + NODE_H / 2:.0f} C{W_X - 150},{y + NODE_H / 2:.0f} '
                f'{Q_X + NODE_W + 150},{y2:.0f} {Q_X + NODE_W},{y2:.0f}" fill="none" '
                f'stroke="{"#cbd5e0" if dead else "#4a5568"}" stroke-width="1.5"'
                f"{dash} "
                f'data-edge="{escape(w["name"])}→{escape(name)}"/>'
            )
    for q in queues:
        cap = q["max_concurrency"] if q["max_concurrency"] is not None else q["worker_capacity"]
        state = "paused" if q["is_paused"] else "active"
        parts.append(
            _node(
                Q_X,
                q_y[q["name"]],
                [
                    f"queue {q['name']} · {state}",
                    f"in flight {q['in_flight']} / {cap}",
                    f"claimable {q['queued']} · scheduled {q['scheduled']}",
                ],
                dead=bool(q["is_paused"]),
                attrs=f'data-queue="{escape(q["name"])}"',
                href=f"{base}/queues/{q['id']}",
            )
        )
    for i, w in enumerate(workers):
        dead = w["status"] not in ("active", "draining")
        uptime = _span(float(w["uptime_s"]))
        host = f"{w['hostname'] or '?'}:{w['pid'] or '?'}"
        parts.append(
            _node(
                W_X,
                GAP + i * (NODE_H + GAP),
                [
                    f"{w['name']} · {w['status']}",
                    f"in flight {w['in_flight']} / {w['capacity']} · {host}",
                    # What is wrong with it now, if anything, in the uptime's place.
                    _clip(" · ".join(w.get("health", ())), HEALTH_CHARS)
                    or f"up {uptime}" + (" (frozen at stop)" if dead else ""),
                ],
                dead=dead,
                attrs=f'data-worker="{w["id"]}" data-status="{escape(w["status"])}"',
                href=f"{base}/workers/{w['id']}",
            )
        )
    label = f"{len(queues)} queues and {len(workers)} workers"
    return Markup(  # noqa: S704 - every text above was escaped when built
        f'<svg class="topology" viewBox="0 0 {TOPO_W} {height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>{''.join(parts)}</svg>"
    )
