"""Small inline SVG charts for the HTML report: no script, no fonts, no external resources.

The strings are meant for inline use in an HTML5 document (the HTML parser gives ``<svg>`` its
namespace, so there is no ``xmlns`` and hence no URL at all). Every text is XML-escaped; a
``None`` value is drawn as a gap, never as zero.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import TypeGuard

from daemonkit.pages import visible

COLORS = ("#2f6db5", "#e39b2d", "#8795a8", "#b3261e")
MUTED = "#5f6b7a"
GRID = "#d9dee5"
Fmt = Callable[[float], str]


def esc(text: str) -> str:
    """XML-escaped, control characters as visible text (``daemonkit.pages.visible``)."""
    return html.escape(visible(text), quote=True)


def _plain(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:,.2g}" if abs(v) < 1 else f"{v:,.1f}"


def _ok(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(v)


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 × 10^k) up to at least ``top``."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _clip(label: str, chars: int) -> str:
    label = " ".join(label.split())
    return label if len(label) <= chars else label[: max(1, chars - 1)] + "…"


def _svg(title: str, width: int, height: int, body: list[str]) -> str:
    t = esc(title)
    return (
        f'<svg class="chart" role="img" aria-label="{t}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" font-family="system-ui, sans-serif" font-size="12" fill="#1f2933">'
        f'<title>{t}</title><text x="8" y="18" font-size="14" font-weight="600">{t}</text>{"".join(body)}</svg>'
    )


def _text(x: float, y: float, text: str, anchor: str = "middle", **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{esc(v)}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{esc(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{color}">'
        f"<title>{esc(tip)}</title></rect>"
    )


def _legend(names: Sequence[str], width: int, dashed: Sequence[bool] = ()) -> list[str]:
    out, x = [], float(width - 8)
    for i in reversed(range(len(names))):
        x -= 7 * len(names[i]) + 26
        if i < len(dashed) and dashed[i]:
            out.append(
                f'<line x1="{x:.1f}" y1="14" x2="{x + 14:.1f}" y2="14" stroke="{MUTED}" stroke-dasharray="4 3"/>'
            )
        else:
            out.append(f'<rect x="{x:.1f}" y="8" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(_text(x + 18, 18, names[i], "start"))
    return out


def _y_axis(ticks: list[float], x0: float, x1: float, y: Callable[[float], float], fmt: Fmt) -> list[str]:
    out = []
    for t in ticks:
        out.append(f'<line x1="{x0:.1f}" y1="{y(t):.1f}" x2="{x1:.1f}" y2="{y(t):.1f}" stroke="{GRID}"/>')
        out.append(_text(x0 - 6, y(t) + 4, fmt(t), "end", fill=MUTED))
    return out


def bar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float | None],
    second: Sequence[float | None] | None = None,
    names: Sequence[str] = (),
    stacked: bool = False,
    unit: str = "",
    fmt: Fmt = _plain,
    width: int = 560,
    height: int = 260,
) -> str:
    """Vertical bars, one group per label; ``second`` adds a series, ``stacked`` on top or beside."""
    series = [values] if second is None else [values, second]
    groups = list(zip(*series, strict=True)) if labels else []
    tops = [(sum if stacked else max)([v for v in g if _ok(v)] or [0.0]) for g in groups]
    ticks = nice_ticks(max(tops, default=0.0))
    x0, x1, y0, y1 = 58.0, width - 12.0, 48.0, height - 40.0

    def y(v: float) -> float:
        return y1 - (y1 - y0) * v / ticks[-1]

    body = _y_axis(ticks, x0, x1, y, fmt)
    if unit:
        body.append(_text(8, y0 - 12, unit, "start", fill=MUTED))
    gw = (x1 - x0) / max(len(groups), 1)
    bw = gw * (0.6 if stacked or len(series) == 1 else 0.4)
    for i, (label, group) in enumerate(zip(labels, groups, strict=True)):
        left, base = x0 + gw * i + (gw - bw * (1 if stacked else len(series))) / 2, 0.0
        for k, v in enumerate(group):
            if not _ok(v):
                continue
            name = names[k] if k < len(names) else ""
            tip = f"{label}{' · ' + name if name else ''}: {fmt(v)} {unit}".rstrip()
            lo = base if stacked else 0.0
            body.append(_rect(left + (0 if stacked else k * bw), y(lo + v), bw, y(lo) - y(lo + v), COLORS[k], tip))
            base += v
        body.append(_text(x0 + gw * (i + 0.5), y1 + 16, _clip(label, max(3, int(gw / 7))), fill=MUTED))
    body.append(f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="{MUTED}"/>')
    return _svg(title, width, height, body + (_legend(names, width) if names else []))


def hbar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float | None],
    maximum: float = 100.0,
    unit: str = "%",
    fmt: Fmt = _plain,
    width: int = 560,
) -> str:
    """Horizontal bars on a fixed scale (0..``maximum``), e.g. utilisation per host in %."""
    row, x0, y0 = 24, 150.0, 34.0
    height = int(y0 + row * max(len(labels), 1) + 30)
    x1, y1 = width - 64.0, height - 24.0

    def x(v: float) -> float:
        return x0 + (x1 - x0) * min(max(v, 0.0), maximum) / maximum

    body = []
    for t in nice_ticks(maximum):
        body.append(f'<line x1="{x(t):.1f}" y1="{y0:.1f}" x2="{x(t):.1f}" y2="{y1:.1f}" stroke="{GRID}"/>')
        body.append(_text(x(t), y1 + 16, f"{fmt(t)} {unit}".strip(), fill=MUTED))
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        top = y0 + row * i + 4
        body.append(_text(x0 - 8, top + 12, _clip(label, 20), "end"))
        if not _ok(v):
            body.append(_text(x0 + 6, top + 12, "— not measured", "start", fill=MUTED))
            continue
        body.append(_rect(x0, top, x(v) - x0, row - 8, COLORS[0], f"{label}: {fmt(v)} {unit}".strip()))
        body.append(_text(x(v) + 6, top + 12, f"{fmt(v)} {unit}".strip(), "start"))
    body.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="{MUTED}"/>')
    return _svg(title, width, height, body)


def line_chart(
    title: str,
    xs: Sequence[float],
    ys: Sequence[float | None],
    ideal: bool = False,
    name: str = "measured",
    x_unit: str = "",
    fmt: Fmt = _plain,
    width: int = 560,
    height: int = 260,
) -> str:
    """A measured line with dots; ``ideal`` adds the dashed y = x (e.g. speedup vs world size)."""
    points = [(px, py) for px, py in zip(xs, ys, strict=True) if _ok(py)]
    top = max([py for _, py in points] + ([max(xs, default=0.0)] if ideal else []), default=0.0)
    ticks, right = nice_ticks(top), max(xs, default=1.0) or 1.0
    x0, x1, y0, y1 = 58.0, width - 16.0, 48.0, height - 40.0

    def x(v: float) -> float:
        return x0 + (x1 - x0) * v / right

    def y(v: float) -> float:
        return y1 - (y1 - y0) * v / ticks[-1]

    body = _y_axis(ticks, x0, x1, y, fmt)
    for t in xs:
        body.append(_text(x(t), y1 + 16, fmt(t), fill=MUTED))
    if x_unit:
        body.append(_text(x1, y1 + 32, x_unit, "end", fill=MUTED))
    if ideal and xs:
        lo, hi = min(xs), min(max(xs), ticks[-1])
        body.append(
            f'<line x1="{x(lo):.1f}" y1="{y(lo):.1f}" x2="{x(hi):.1f}" y2="{y(hi):.1f}" stroke="{MUTED}" '
            'stroke-width="1.5" stroke-dasharray="6 4"><title>ideal: y = x</title></line>'
        )
    if points:
        coords = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in points)
        body.append(f'<polyline points="{coords}" fill="none" stroke="{COLORS[0]}" stroke-width="2.5"/>')
        for px, py in points:
            body.append(
                f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="4" fill="{COLORS[0]}">'
                f"<title>{esc(f'{fmt(px)}: {fmt(py)}')}</title></circle>"
            )
    body.append(f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="{MUTED}"/>')
    legend = _legend([name, "ideal"] if ideal else [name], width, [False, True])
    return _svg(title, width, height, body + legend)
