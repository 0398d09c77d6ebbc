"""The failure taxonomy: every primary cause, whether its owner can fix it, and which jobs get one."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.states import FAILED_STATES


@dataclass(frozen=True)
class Cause:
    """One primary cause: whether the job's owner can fix it (else it is excluded from user waste blame)."""

    name: str
    title: str
    user_fixable: bool


CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause("host_oom", "host out of memory", True),
        Cause("gpu_oom", "GPU out of memory", True),
        Cause("time_limit", "time limit reached", True),
        Cause("nccl_timeout", "NCCL / collective timeout", True),
        Cause("nccl_error", "NCCL / network communication error", False),
        Cause("gpu_hardware", "GPU hardware fault (Xid, ECC)", False),
        Cause("node_failure", "node failure", False),
        Cause("preemption", "preempted", False),
        Cause("software_error", "error in the job's code or environment", True),
        Cause("cancelled", "cancelled", True),
        Cause("k8s_oomkilled", "Kubernetes OOMKilled", True),
        Cause("k8s_exit137", "Kubernetes exit 137 without OOM", False),
        Cause("k8s_evicted", "Kubernetes eviction", False),
        Cause("k8s_image_pull", "Kubernetes image pull error", True),
        Cause("unknown", "unknown", False),
    )
}
# The cause given when nothing explains a failure; a simulator never injects it.
UNKNOWN = "unknown"

# Final states whose jobs get a diagnosis: the failed ones plus cancelled and preempted.
DIAGNOSED_STATES = tuple(sorted(FAILED_STATES | {"CANCELLED"}))

# A peak within 5 % of its limit counts as "at the limit": sacct and DCGM sample, so the true peak is higher.
AT_LIMIT_FRAC = 0.95
