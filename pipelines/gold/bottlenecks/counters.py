"""Bottlenecks of jobs from DCGM profiling counters (jobs without a profiler trace, or beside one).

`counter_profiles` reduces a job's silver.gpu_samples to one row of time-averaged counters over the GPUs it
used (a GPU whose engine never ran is idle waste, already counted in gold.job_usage, and left out here);
`classify` reads that row by a decision list into the trace findings' vocabulary (rules.py). The rules of
thumb and where each threshold comes from are in docs/bottlenecks.md; the thresholds are `dcgm_*` in
`bottlenecks:` of conf/base.yaml. Counters say what kind of bottleneck a job has, never which line causes
it: every finding says so and points at the profiler."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf import BottleneckSettings
from pipelines.gold.bottlenecks.rules import COUNTER_FIXES, NO_LINE

GB = 1e9
# Cards without Tensor Cores (compute capability < 7): Kepler, Maxwell, Pascal. Anything else NVIDIA ships
# to data centres since Volta (V100, T4, A10/A30/A40/A100, L4/L40, H100/H200, B200) has them.
PRE_TENSOR_CORE = re.compile(r"\b(K\d+m?|M\d+|P\d+|GTX|Tesla [KMP]\d+)\b", re.I)
DL_FRAMEWORKS = frozenset({"pytorch", "tensorflow", "jax", "deepspeed", "keras", "lightning"})
_MEANS = {
    "gr": "gr_engine_active_frac",
    "sm": "sm_active_frac",
    "occupancy": "sm_occupancy_frac",
    "tensor": "tensor_active_frac",
    "fp64": "fp64_active_frac",
    "fp32": "fp32_active_frac",
    "fp16": "fp16_active_frac",
    "dram": "dram_active_frac",
}


def counter_profiles(samples: DataFrame) -> DataFrame:
    """One row per attributed job with DCGM profiling samples: `profiled_gpus`, `used_gpus` (GPUs whose
    engine was ever active), `samples` (of the used GPUs), the mean of each ratio over them (`gr`, `sm`,
    `occupancy`, `tensor`, `fp64`, `fp32`, `fp16`, `dram`; null when not exported), `pcie_bps` and
    `nvlink_bps` (TX + RX, bytes/s), `model_name`. `samples` are silver.gpu_samples rows."""
    key = ["cluster", "job_id", "host", "device"]
    prof = samples.where(F.col("job_id").isNotNull() & F.col("gr_engine_active_frac").isNotNull())
    devices = prof.groupBy(*key).agg(F.max("gr_engine_active_frac").alias("max_gr"))
    used = prof.join(devices.where(F.col("max_gr") > 0), on=key, how="inner")
    means = used.groupBy("cluster", "job_id").agg(
        F.count("*").alias("samples"),
        F.count_distinct("host", "device").alias("used_gpus"),
        *[F.avg(c).alias(name) for name, c in _MEANS.items()],
        F.avg(F.col("pcie_tx_bytes_per_s") + F.col("pcie_rx_bytes_per_s")).alias("pcie_bps"),
        F.avg(F.col("nvlink_tx_bytes_per_s") + F.col("nvlink_rx_bytes_per_s")).alias("nvlink_bps"),
    )
    per_job = prof.groupBy("cluster", "job_id").agg(
        F.count_distinct("host", "device").alias("profiled_gpus"),
        F.count("*").alias("all_samples"),
        F.first("model_name", ignorenulls=True).alias("model_name"),
    )
    return per_job.join(means, on=["cluster", "job_id"], how="left").select(
        "cluster",
        "job_id",
        "profiled_gpus",
        F.coalesce("used_gpus", F.lit(0)).alias("used_gpus"),
        F.coalesce("samples", F.lit(0)).alias("samples"),
        "all_samples",
        *_MEANS,
        "pcie_bps",
        "nvlink_bps",
        "model_name",
    )


@dataclass(frozen=True)
class CounterFinding:
    """A job's bottleneck read from its counters: kind, share of the used GPUs' time it accounts for (%),
    evidence, fix (with the note that counters cannot name a line) and the figures behind them."""

    kind: str
    share_pct: float
    evidence: str
    fix: str
    figures: dict[str, float] = field(default_factory=dict)


def has_tensor_cores(model_name: str | None) -> bool | None:
    """Whether an NVIDIA card has Tensor Cores (compute capability >= 7); None when the model is unknown."""
    if not model_name:
        return None
    return not PRE_TENSOR_CORE.search(model_name)


def _pct(x: float | None) -> float:
    return 100.0 * (x or 0.0)


def classify(
    p: dict[str, Any], s: BottleneckSettings, frameworks: str | None = None, alloc_gpus: int | None = None
) -> tuple[str | None, CounterFinding | None]:
    """(class, finding) of one `counter_profiles` row. The class is `unclassified` (too few samples),
    `compute_bound` (no finding: the GPU computes as well as counters can tell) or the finding's kind.
    `frameworks` is the job script's (silver.scripts; comma-separated, None when unknown): a script known
    to use no deep-learning framework (GROMACS, LAMMPS: FP32 by design) gets no `low_tensor_core`."""
    if (p.get("all_samples") or 0) < s.dcgm_min_samples:
        return "unclassified", None
    used = int(p.get("used_gpus") or 0)
    if used == 0:
        figures = {"gr_pct": 0.0, "used_gpus": 0.0}
        evidence = f"GR_ENGINE_ACTIVE 0 on all {p.get('profiled_gpus')} profiled GPU(s): no kernel ran"
        return "idle_gpu", _finding("idle_gpu", 100.0, evidence, figures)
    if (p.get("samples") or 0) < s.dcgm_min_samples:
        return "unclassified", None
    gr, sm, tensor, fp32, dram = (p.get(k) for k in ("gr", "sm", "tensor", "fp32", "dram"))
    pcie_gbps = (p.get("pcie_bps") or 0.0) / GB
    link_gbps = pcie_gbps + (p.get("nvlink_bps") or 0.0) / GB
    figures = {
        "gr_pct": _pct(gr),
        "sm_pct": _pct(sm),
        "tensor_pct": _pct(tensor),
        "fp32_pct": _pct(fp32),
        "dram_pct": _pct(dram),
        "pcie_gbps": pcie_gbps,
        "link_gbps": link_gbps,
        "used_gpus": float(used),
    }
    seen = (
        f"over {p.get('samples')} samples of {used} GPU(s): GR_ENGINE_ACTIVE {gr or 0:.2f}, SM_ACTIVE "
        f"{sm or 0:.2f}, PIPE_TENSOR_ACTIVE {tensor or 0:.3f}, DRAM_ACTIVE {dram or 0:.2f}, PCIe "
        f"{pcie_gbps:.1f} GB/s, NVLink {(p.get('nvlink_bps') or 0.0) / GB:.1f} GB/s"
    )
    idle = 100.0 * (1 - (gr or 0.0))
    if gr is not None and gr < s.dcgm_idle_gr:
        return "idle_gpu", _finding("idle_gpu", idle, f"engine idle {idle:.0f} % {seen}", figures)
    if gr is not None and gr < s.dcgm_busy_gr:
        kind = "memcpy_bound" if pcie_gbps >= s.dcgm_pcie_gbps else "input_bound"
        return kind, _finding(kind, idle, f"engine idle {idle:.0f} % {seen}", figures)
    multi = used > 1 or (alloc_gpus or 0) > 1
    if multi and gr and sm is not None and sm / gr < s.dcgm_comm_sm_ratio and link_gbps >= s.dcgm_comm_gbps:
        share = 100.0 * (gr - sm)
        return "communication_bound", _finding("communication_bound", share, f"SMs idle {seen}", figures)
    if dram is not None and dram >= s.dcgm_dram:
        return "memory_bound", _finding("memory_bound", 100.0 * dram, f"memory busy {seen}", figures)
    dl = None if frameworks is None else bool(DL_FRAMEWORKS & {f.strip() for f in frameworks.split(",")})
    if (
        sm is not None
        and tensor is not None
        and sm >= s.dcgm_sm_active
        and tensor < s.dcgm_tensor
        and (fp32 is None or fp32 >= s.dcgm_fp32)
        and has_tensor_cores(p.get("model_name")) is not False
        and dl is not False
    ):
        return "low_tensor_core", _finding("low_tensor_core", 100.0 * sm, f"no tensor pipe {seen}", figures)
    return "compute_bound", None


def _finding(kind: str, share_pct: float, evidence: str, figures: dict[str, float]) -> CounterFinding:
    share = max(0.0, min(100.0, share_pct))
    fix = COUNTER_FIXES[kind].format(**figures) + NO_LINE
    return CounterFinding(kind, share, f"DCGM counters {evidence}", fix, figures)


def precision_recall(
    found: dict[str, str | None], truth: dict[str, str | None]
) -> dict[str, float | int | None]:
    """Findings against a truth of one bottleneck (or None) per job, over the jobs in both: precision (of
    the findings, the share with the true kind), recall (of the true bottlenecks, the share found with
    their kind), and the findings on jobs whose truth is none."""
    jobs = sorted(set(found) & set(truth))
    predicted = [j for j in jobs if found[j] is not None]
    actual = [j for j in jobs if truth[j] is not None]
    hits = sum(1 for j in predicted if found[j] == truth[j])
    return {
        "jobs": len(jobs),
        "findings": len(predicted),
        "true_bottlenecks": len(actual),
        "precision": hits / len(predicted) if predicted else None,
        "recall": hits / len(actual) if actual else None,
        "false_on_healthy": sum(1 for j in predicted if truth[j] is None),
    }
