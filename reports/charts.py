"""SVG charts drawn offline (plain SVG text, no plotting library, no network): horizontal bars and a
monthly trend. A chart with nothing to draw is None, and the template says so in words."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from html import escape

FONT = "DejaVu Sans, sans-serif"
BAR = "#3b6ea8"
ACCENT = "#c0504d"
GRID = "#d0d0d0"
INK = "#222222"


def _svg(width_px: int, height_px: int, body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height_px}" '
        f'viewBox="0 0 {width_px} {height_px}" font-family="{FONT}" font-size="11">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _clip(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[: chars - 1] + "…"


def bar_chart(
    items: Sequence[tuple[str, float | None]],
    value_text: Callable[[float], str],
    title: str,
    width_px: int = 640,
    bar_px: int = 18,
) -> str | None:
    """Horizontal bars, one per (label, value), largest first as given; None when no value is positive."""
    shown = [(label, float(v)) for label, v in items if v is not None and v > 0]
    if not shown:
        return None
    label_px, value_px, pad_px = 170, 90, 6
    plot_px = width_px - label_px - value_px
    top = max(v for _, v in shown)
    height_px = pad_px * 2 + len(shown) * (bar_px + pad_px)
    body = []
    for i, (label, value) in enumerate(shown):
        y = pad_px + i * (bar_px + pad_px)
        w = max(plot_px * value / top, 1.0)
        mid = y + bar_px / 2 + 4
        body += [
            f'<text x="{label_px - 6}" y="{mid:.1f}" text-anchor="end" fill="{INK}">'
            f"{escape(_clip(str(label), 26))}</text>",
            f'<rect x="{label_px}" y="{y}" width="{w:.1f}" height="{bar_px}" fill="{BAR}"/>',
            f'<text x="{label_px + w + 4:.1f}" y="{mid:.1f}" fill="{INK}">{escape(value_text(value))}</text>',
        ]
    return _svg(width_px, height_px, body, title)


def trend_chart(
    points: Sequence[tuple[str, float | None]],
    value_text: Callable[[float], str],
    title: str,
    width_px: int = 640,
    height_px: int = 180,
) -> str | None:
    """Columns per month (oldest first) with the latest one highlighted; None when no month has a value."""
    shown = [(m, v) for m, v in points if v is not None]
    if not shown:
        return None
    top = max(max(v for _, v in shown), 1e-9)
    left_px, bottom_px, top_px = 10, 28, 18
    plot_h = height_px - bottom_px - top_px
    slot = (width_px - 2 * left_px) / len(points)
    col = min(slot * 0.6, 60.0)
    body = [
        f'<line x1="{left_px}" y1="{height_px - bottom_px}" x2="{width_px - left_px}" '
        f'y2="{height_px - bottom_px}" stroke="{GRID}"/>'
    ]
    for i, (month, value) in enumerate(points):
        x = left_px + i * slot + (slot - col) / 2
        centre = x + col / 2
        body.append(
            f'<text x="{centre:.1f}" y="{height_px - 10}" text-anchor="middle" fill="{INK}">'
            f"{escape(month)}</text>"
        )
        if value is None:
            body.append(
                f'<text x="{centre:.1f}" y="{height_px - bottom_px - 4}" text-anchor="middle" fill="{INK}">'
                "n/a</text>"
            )
            continue
        h = max(plot_h * value / top, 1.0)
        y = height_px - bottom_px - h
        fill = ACCENT if i == len(points) - 1 else BAR
        body += [
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{col:.1f}" height="{h:.1f}" fill="{fill}"/>',
            f'<text x="{centre:.1f}" y="{y - 4:.1f}" text-anchor="middle" fill="{INK}">'
            f"{escape(value_text(value))}</text>",
        ]
    return _svg(width_px, height_px, body, title)


def data_uri(svg: str | None) -> str | None:
    """The SVG as a data: URI for an <img> (WeasyPrint draws it as vectors; its labels stay text)."""
    if svg is None:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
