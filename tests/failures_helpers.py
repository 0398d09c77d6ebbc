"""Reading the real error logs for the failure-diagnosis tests."""

from __future__ import annotations

import csv
from pathlib import Path

from pipelines.gold.failures.scoring import error_log_body


def real_error_logs(real: Path) -> list[tuple[str, str, str]]:
    """(file name, category a person assigned, log text) for every file in errorlogs/."""
    files = sorted((real / "errorlogs").glob("*.txt"))
    return [(f.name, f.name.split("__", 1)[0], error_log_body(f.read_text(encoding="utf-8"))) for f in files]


def traceback_log_body(text: str) -> str:
    """The log text of a real traceback file: after its `-----` header line, without the scout's annotation
    lines (those starting with '--- [', as its README says; '--- Logging error ---' would be log text)."""
    body = text.split("\n-----\n", 1)[1] if "\n-----\n" in text else text
    return "\n".join(line for line in body.splitlines() if not line.startswith("--- ["))


def real_traceback_logs(real: Path) -> list[tuple[str, dict[str, str], str]]:
    """(file name, its LABELS.tsv row, log text) for every labelled file in tracebacks/."""
    folder = real / "tracebacks"
    with (folder / "LABELS.tsv").open(encoding="utf-8", newline="") as f:
        labels = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [
        (row["file"], row, traceback_log_body((folder / row["file"]).read_text(encoding="utf-8")))
        for row in labels
    ]
