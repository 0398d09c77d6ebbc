"""Jinja2 (StrictUndefined, autoescape) and WeasyPrint: report HTML and PDF bytes, e-mail text and HTML."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from reports.format import FILTERS

TEMPLATES = Path(__file__).resolve().parent / "templates"


@cache
def environment() -> Environment:
    """The one template environment: a missing value is an error, HTML is escaped (plain text is not)."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=True, default=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(FILTERS)
    return env


def render(template: str, context: dict[str, Any]) -> str:
    """One template rendered with `context` (a missing name raises jinja2.UndefinedError)."""
    return environment().get_template(template).render(**context)


def pdf_bytes(html: str) -> tuple[bytes, int]:
    """The HTML laid out by WeasyPrint as a PDF (fonts embedded, stylesheet from the templates folder), and
    its number of pages."""
    from weasyprint import HTML  # loads Pango: only when a PDF is made

    document = HTML(string=html, base_url=str(TEMPLATES)).render()
    return document.write_pdf(), len(document.pages)


def report_pdf(report: dict[str, Any]) -> tuple[bytes, int]:
    """A month report (reports.model.month_report) as PDF bytes, and its number of pages."""
    return pdf_bytes(render("report.html", report))
