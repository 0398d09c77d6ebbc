"""DCGM profiling (DCP) counters of a simulated GPU job, and the job's true bottleneck (truth.parquet).

The bottleneck comes from the job's workload (its kind and parameters: DataLoader workers, precision, GPUs
and nodes, batch size) with some randomness; the counters come from the bottleneck through per-kind
distributions that overlap, per-GPU spread, per-sample noise and the odd checkpoint or evaluation scrape.
Nothing here reads the classifier's thresholds (`bottlenecks:` in conf/base.yaml): the counters describe
what each kind of job does to a GPU, and the classifier has to find it.

Not every host's exporter exports the profiling fields (an older dcgm-exporter, or DCP switched off):
`exports_prof` chooses a stable share of hosts that do (`jobfit simulate --dcgm-prof-share F`; none by
default, so a month simulated without it has the same bytes as before the fields existed)."""

from __future__ import annotations

import math
import random
import zlib

from jobs.simulator.model import Job

GB = 1e9
# The DCP fields the writer adds on such hosts, in file order, with dcgm-exporter's help texts.
_PCIE = "over the PCIe bus - including both protocol headers and data payloads - in bytes per second."
_NVLINK = "over NVLink, not including protocol headers, in bytes per second."
PROF_METRICS = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM."),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active."),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active."),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active."),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", f"The rate of data transmitted {_PCIE}"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", f"The rate of data received {_PCIE}"),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", f"The rate of data transmitted {_NVLINK}"),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", f"The rate of data received {_NVLINK}"),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
)
BOOST_MHZ = {"A100-SXM4-80GB": 1410, "A100-SXM4-40GB": 1410, "H100-SXM5-80GB": 1980, "V100-SXM2-32GB": 1530}
IDLE_MHZ = 210


def exports_prof(host: str, share: float) -> bool:
    """Whether the host's exporter exports the DCP fields, for a `share` of hosts (stable per host)."""
    return zlib.crc32(f"dcp/{host}".encode()) % 100 < share * 100


def job_rng(seed: int, job: Job) -> random.Random:
    """A generator of the job's own, so the counters leave the other telemetry's random stream as it was."""
    return random.Random(zlib.crc32(f"{seed}/{job.job_id}".encode()))


def true_bottleneck(job: Job, rng: random.Random) -> str | None:
    """What holds the job's GPUs back, from its workload (None: nothing; it computes as well as it can)."""
    kind, p = job.project.kind, job.params
    if job.gpus_used == 0 or kind == "notebook":
        return "idle_gpu"  # an interactive session: the GPU waits for a person
    if kind == "dl_train":
        if int(p.get("workers", 4)) <= 2:
            return "input_bound"  # two DataLoader workers cannot decode batches as fast as the GPU eats them
        if job.gpus_used > 1 and rng.random() < (0.6 if job.nodes > 1 else 0.3):
            return "communication_bound"  # gradients all-reduced without overlap
        if p.get("precision") == "fp32":
            return "low_tensor_core"
        return "memcpy_bound" if rng.random() < 0.08 else None  # batches copied from pageable memory
    if kind == "dl_infer":
        r = rng.random()
        if r < 0.25:
            return "memory_bound"  # small-batch decoding reads every weight for few tokens
        return "memcpy_bound" if r < 0.45 else None  # inputs and outputs copied per batch
    if kind == "gmx_gpu":
        return "memory_bound" if p.get("system") in ("spike",) and rng.random() < 0.7 else None
    return None


def _clip(x: float, hi: float = 1.0) -> float:
    return min(hi, max(0.0, x))


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0, sigma))


def job_means(job: Job, kind: str | None, rng: random.Random) -> dict[str, float]:
    """The job's typical counters (per used GPU) for its bottleneck `kind`; samples scatter around them."""
    workload = job.project.kind
    amp = workload == "dl_infer" or (workload == "dl_train" and job.params.get("precision") != "fp32")
    gr = {
        "idle_gpu": lambda: rng.uniform(0.0, 0.22),
        "input_bound": lambda: rng.gauss(0.36, 0.07),
        "memcpy_bound": lambda: rng.gauss(0.38, 0.07),
        "communication_bound": lambda: rng.gauss(0.85, 0.06),
    }.get(kind or "", lambda: rng.uniform(0.72, 0.97))()
    gr = _clip(gr, 0.99)
    sm = gr * _clip(rng.gauss(0.42, 0.08) if kind == "communication_bound" else rng.gauss(0.85, 0.05))
    if kind == "low_tensor_core" or workload == "gmx_gpu":
        tensor, fp32, fp16 = rng.uniform(0.0, 0.015) * sm, sm * _clip(rng.gauss(0.5, 0.1)), 0.0
    elif kind == "memory_bound":
        tensor = sm * rng.uniform(0.02, 0.1) if amp else 0.0
        fp32, fp16 = sm * rng.uniform(0.05, 0.15), sm * rng.uniform(0.0, 0.08) if amp else 0.0
    else:
        tensor = sm * _clip(rng.gauss(0.45, 0.1)) if amp else sm * rng.uniform(0.0, 0.02)
        fp32, fp16 = sm * rng.uniform(0.05, 0.2), sm * rng.uniform(0.05, 0.15) if amp else 0.0
    dram = _clip(rng.gauss(0.75, 0.07) if kind == "memory_bound" else rng.gauss(0.33, 0.1)) * (
        gr / 0.85 if kind in ("idle_gpu", "input_bound", "memcpy_bound") else 1.0
    )
    pcie = _lognormal(rng, 9 * GB, 0.4) if kind == "memcpy_bound" else _lognormal(rng, 0.6 * GB, 0.6)
    multi = job.gpus_used > 1
    nvlink = 0.0
    if multi:
        nvlink = _lognormal(rng, (60 if kind == "communication_bound" else 12) * GB, 0.5)
        if job.nodes > 1 and kind == "communication_bound":
            pcie += _lognormal(rng, 8 * GB, 0.4)  # GPUDirect RDMA to the NIC crosses PCIe
    return {
        "gr": gr,
        "sm": sm,
        "occupancy": sm * _clip(rng.gauss(0.45, 0.12)),
        "tensor": tensor,
        "fp64": sm * rng.uniform(0.0, 0.01),
        "fp32": fp32,
        "fp16": fp16,
        "dram": _clip(dram),
        "pcie": pcie,
        "nvlink": nvlink,
    }


def sample(means: dict[str, float], gpu_factor: float, model: str | None, rng: random.Random) -> tuple:
    """One scrape's DCP values (PROF_METRICS order) around the job's means; now and then a scrape lands in a
    checkpoint or evaluation, where the GPU is nearly idle."""
    pause = rng.random() < 0.05
    scale = rng.uniform(0.0, 0.15) if pause else 1.0

    def ratio(key: str) -> float:
        return _clip((means[key] * gpu_factor + rng.gauss(0, 0.04)) * scale)

    def rate(key: str) -> float:
        return max(0.0, means[key] * gpu_factor * rng.uniform(0.7, 1.3) * scale)

    gr = ratio("gr")
    tx_share = rng.uniform(0.1, 0.3)  # most PCIe traffic of a training job flows host-to-device (RX)
    pcie, nvlink = rate("pcie"), rate("nvlink")
    clock = BOOST_MHZ.get(model or "", 1410) if gr > 0.05 else IDLE_MHZ
    return (
        (
            gr,
            ratio("occupancy"),
            ratio("fp64"),
            ratio("fp32"),
            ratio("fp16"),
            ratio("dram"),
            round(pcie * tx_share),
            round(pcie * (1 - tx_share)),
            round(nvlink / 2),
            round(nvlink / 2),
            clock,
        ),
        ratio("sm"),
        ratio("tensor"),
    )


IDLE_SAMPLE = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, IDLE_MHZ)
