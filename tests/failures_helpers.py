"""Reading the real error logs for the failure-diagnosis tests."""

from __future__ import annotations

from pathlib import Path

from pipelines.gold.failures.scoring import error_log_body


def real_error_logs(real: Path) -> list[tuple[str, str, str]]:
    """(file name, category a person assigned, log text) for every file in errorlogs/."""
    files = sorted((real / "errorlogs").glob("*.txt"))
    return [(f.name, f.name.split("__", 1)[0], error_log_body(f.read_text(encoding="utf-8"))) for f in files]
