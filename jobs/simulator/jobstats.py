"""Princeton jobstats summaries for simulated GPU jobs: what a site running jobstats (and no dcgm-exporter)
records in sacct's AdminComment at job end (`JS1:` + base64 of gzip'd JSON, pipelines.silver.jobstats).

The summary holds what jobstats measures, rounded as it prints it (times and utilisation to 0.1): per node
its CPUs, CPU time and memory peak and limit; per GPU its mean utilisation and memory peak and size. The
truth table takes the same per-GPU means (`tel`), as it takes DCGM's sampled means for scraped jobs.
"""

from __future__ import annotations

from jobs.simulator.model import Job
from pipelines.silver.jobstats import encode_summary
from pipelines.units import MIB


def is_chosen(job: Job, share: float) -> bool:
    """Whether a GPU job carries a jobstats summary instead of DCGM scrapes: a fixed hash of its raw id
    below `share` (the same jobs for the same seed, whatever else is simulated). MIG jobs never do."""
    if share <= 0 or not job.is_gpu or job.mig_profile or not job.gpu_units:
        return False
    return (job.job_id_raw * 2654435761 % 2**32) / 2**32 < share


def summary(job: Job) -> tuple[str, dict[str, object]]:
    """The job's AdminComment and the telemetry record the truth table reads (per-GPU means, VRAM peak)."""
    hosts = job.hosts or [u[0] for u in job.gpu_units]
    base, extra = divmod(job.alloc_cpus, len(hosts))
    total_cpu_s = job.cpus_used * job.elapsed_s
    peak_mib = min(job.peak_vram_bytes // MIB, job.vram_card_bytes // MIB)
    nodes: dict[str, dict[str, object]] = {}
    means: list[float] = []
    for k, host in enumerate(hosts):
        cpus = base + (1 if k < extra else 0)
        nodes[host] = {
            "cpus": cpus,
            "total_time": round(total_cpu_s * cpus / job.alloc_cpus, 1),
            "used_memory": job.peak_mem_node_bytes,
            "total_memory": job.req_mem_node_bytes,
            "gpu_utilization": {},
            "gpu_used_memory": {},
            "gpu_total_memory": {},
        }
    for i, (host, gpu, _) in enumerate(job.gpu_units):
        util = round(job.gpu_util_mean[i] if i < len(job.gpu_util_mean) else 0.0, 1)
        means.append(util)
        node = nodes[host]
        node["gpu_utilization"][str(gpu)] = util  # type: ignore[index]
        node["gpu_used_memory"][str(gpu)] = peak_mib * MIB if util > 0 else 0  # type: ignore[index]
        node["gpu_total_memory"][str(gpu)] = job.vram_card_bytes  # type: ignore[index]
    data = {"gpus": len(job.gpu_units), "nodes": nodes, "total_time": job.elapsed_s}
    return encode_summary(data), {"util_means": means, "peak_mib": peak_mib, "samples": 0, "xid_ts": None}
