"""Normalised job states shared by every source (Slurm, Kubernetes, SWF), and which of them are final."""

from __future__ import annotations

# Slurm's base job states (`man sacct`, JOB STATE CODES); Kubernetes and SWF map onto them.
JOB_STATES: frozenset[str] = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "REQUEUED",
        "RESIZING",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
        "UNKNOWN",
    }
)

# States a later accounting dump can still change.
ACTIVE_STATES: frozenset[str] = frozenset({"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING"})
FINAL_STATES: frozenset[str] = JOB_STATES - ACTIVE_STATES - {"UNKNOWN"}

# Final states that mean the job did not finish its work.
FAILED_STATES: frozenset[str] = frozenset(
    {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)
