"""Shared helpers for the failure-diagnosis tests: the real error logs and their human-assigned categories."""

from __future__ import annotations

from pathlib import Path

# The category a person gave each real error log (file-name prefix) -> the cause the classifier must give.
CATEGORY_TO_CAUSE: dict[str, str] = {
    "cuda_illegal_access": "software_error",
    "cuda_oom": "gpu_oom",
    "gpu_ecc": "gpu_hardware",
    "gpu_xid": "gpu_hardware",
    "k8s_exit137_not_oom": "k8s_exit137",
    "k8s_oomkilled": "k8s_oomkilled",
    "nccl_error": "nccl_error",
    "nccl_timeout": "nccl_timeout",
    "slurm_oom": "host_oom",
    "slurm_timelimit": "time_limit",
}


def log_body(path: Path) -> str:
    """The log text of a real error-log file: after the `-----` header, without the scout's annotation
    lines (those starting with '---' or '#', as the file's NOTE says)."""
    body = path.read_text(encoding="utf-8").split("\n-----\n", 1)[1]
    return "\n".join(line for line in body.splitlines() if not line.startswith(("---", "#")))


def real_error_logs(real: Path) -> list[tuple[str, str, str]]:
    """(file name, category, text) for every file in errorlogs/."""
    files = sorted((real / "errorlogs").glob("*.txt"))
    return [(f.name, f.name.split("__", 1)[0], log_body(f)) for f in files]


def confusion_table(pairs: list[tuple[str, str]]) -> str:
    """A text confusion table of (expected, predicted) pairs: rows expected, columns predicted."""
    expected = sorted({e for e, _ in pairs})
    predicted = sorted({p for _, p in pairs} | set(expected))
    width = max(len(x) for x in expected + predicted)
    head = " " * width + " | " + " ".join(p[:6].rjust(6) for p in predicted)
    lines = [head, "-" * len(head)]
    for e in expected:
        cells = [str(sum(1 for ee, pp in pairs if ee == e and pp == p)) for p in predicted]
        lines.append(e.ljust(width) + " | " + " ".join(c.rjust(6) for c in cells))
    return "\n".join(lines)
