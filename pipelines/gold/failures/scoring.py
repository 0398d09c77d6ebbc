"""Scoring failure diagnoses against labels: real error logs' categories, or the simulator's truth."""

from __future__ import annotations

# The category a person gave each real error log (its file-name prefix) -> the cause the classifier must give.
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

# Files whose excerpt alone cannot show their thread's category, and the cause the excerpt does support.
# nccl_1657: the thread is about an NCCL "unhandled system error", but the excerpt kept only torchrun's
# "failed (exitcode: 1)" line, which names no cause (issue 15): `unknown`, not a network fault.
EXCERPT_CAUSE: dict[str, str] = {"nccl_error__NVIDIA_nccl_1657.txt": "unknown"}


def expected_cause(file_name: str) -> str:
    """The cause the classifier must give a real error log: its excerpt's, else its category's."""
    return EXCERPT_CAUSE.get(file_name) or CATEGORY_TO_CAUSE[file_name.split("__", 1)[0]]


def error_log_body(text: str) -> str:
    """The log text of a real error-log file: after its `-----` header line, without the scout's
    annotation lines (those starting with '---' or '#', as each file's NOTE says)."""
    body = text.split("\n-----\n", 1)[1] if "\n-----\n" in text else text
    return "\n".join(line for line in body.splitlines() if not line.startswith(("---", "#")))


def confusion_table(pairs: list[tuple[str, str]]) -> str:
    """A text confusion table of (expected, predicted) pairs: rows expected, columns predicted."""
    expected = sorted({e for e, _ in pairs})
    predicted = sorted({p for _, p in pairs} | set(expected))
    width = max(len(x) for x in [*expected, "expected"])
    head = "expected".ljust(width) + " | " + " ".join(p[:8].rjust(8) for p in predicted)
    lines = [head, "-" * len(head)]
    for e in expected:
        cells = [str(sum(1 for ee, pp in pairs if ee == e and pp == p)) for p in predicted]
        lines.append(e.ljust(width) + " | " + " ".join(c.rjust(8) for c in cells))
    return "\n".join(lines)


def precision_recall(pairs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
    """Per label: support (true count), predicted count, precision and recall (None when undefined)."""
    labels = sorted({e for e, _ in pairs} | {p for _, p in pairs})
    out: dict[str, dict[str, float]] = {}
    for label in labels:
        tp = sum(1 for e, p in pairs if e == label and p == label)
        support = sum(1 for e, _ in pairs if e == label)
        predicted = sum(1 for _, p in pairs if p == label)
        out[label] = {
            "support": support,
            "predicted": predicted,
            "precision": tp / predicted if predicted else None,
            "recall": tp / support if support else None,
        }
    return out


def precision_recall_text(scores: dict[str, dict[str, float]]) -> str:
    """The per-label precision/recall table as text."""
    lines = [f"{'cause':<16} {'support':>7} {'predicted':>9} {'precision':>9} {'recall':>7}"]
    for label, s in scores.items():
        p = "-" if s["precision"] is None else f"{s['precision']:.3f}"
        r = "-" if s["recall"] is None else f"{s['recall']:.3f}"
        lines.append(f"{label:<16} {s['support']:>7} {s['predicted']:>9} {p:>9} {r:>7}")
    return "\n".join(lines)


# Causes GPU telemetry can show without a log (an Xid, VRAM at the card's size).
TELEMETRY_VISIBLE = frozenset({"gpu_hardware", "gpu_oom"})


def has_evidence(source: str, state: str, has_log: bool, telemetry_samples: int, cause: str) -> bool:
    """Whether any archived record could name this truth cause: False for a Slurm job that ended FAILED
    with no log archived, unless telemetry can show its cause and it has samples (accounting alone then
    says only "exit code N")."""
    if source != "slurm" or state != "FAILED" or has_log:
        return True
    return cause in TELEMETRY_VISIBLE and telemetry_samples > 0
