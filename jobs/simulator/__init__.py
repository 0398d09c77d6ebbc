"""A month of cluster activity in the formats real clusters write, with its ground truth (docs/simulator.md).

`simulate()` streams: jobs are generated in submit order and each writer keeps only what a later record can
still change (running jobs for sacct, the open host-days for DCGM, one row group for the truth table).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from conf import ClusterConfig
from jobs.simulator import jobstats, kineto, logs, scripts
from jobs.simulator.dcgm import DEFAULT_INTERVAL_S, DcgmWriter
from jobs.simulator.inject import inject
from jobs.simulator.k8s import make_pod
from jobs.simulator.k8s_metrics import write_pod_metrics
from jobs.simulator.model import Workload
from jobs.simulator.sacct import SacctDumper
from jobs.simulator.truth import TruthWriter, pod_row, slurm_row

# What simulate() writes under its output folder (and clears first, so a re-run never mixes months).
OUTPUTS = (
    "sacct",
    "scripts",
    "dcgm",
    "k8s",
    "k8s_metrics",
    "logs",
    "truth.parquet",
    "bad_records.jsonl",
    "profiler",
    kineto.TRUTH_FILE,
)
POD_SHARE = 0.1  # share of --jobs that are Kubernetes pods (when the cluster has GPU partitions)


@dataclass
class SimulationResult:
    """What one simulation wrote: counts per source, where, and how long it took."""

    out: str
    cluster: str
    month: str
    seed: int
    jobs: int
    slurm_jobs: int
    pods: int
    files: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    bad_records: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    def text(self) -> str:
        per = ", ".join(f"{s} {self.files[s]} files/{self.lines[s]} lines" for s in self.files)
        return (
            f"simulated {self.slurm_jobs} Slurm jobs and {self.pods} pods on {self.cluster} for {self.month} "
            f"(seed {self.seed}) in {self.seconds:.1f}s → {self.out}\n  {per}; bad records {self.bad_records}"
        )


def simulate(
    cluster: ClusterConfig,
    month: str,
    n_jobs: int,
    seed: int,
    out: Path,
    inject_bad: int = 0,
    dcgm_interval_s: int = DEFAULT_INTERVAL_S,
    progress: Callable[[str], None] | None = None,
    jobstats_share: float = 0.0,
    profiled_share: float = 0.0,
    dcgm_prof_share: float = 0.0,
) -> SimulationResult:
    """Write a month of `n_jobs` jobs (Slurm jobs plus 10 % pods) under `out`; same seed, same bytes.
    `jobstats_share` of the (non-MIG) GPU jobs carry a jobstats summary in AdminComment and no DCGM scrapes
    (nodes without dcgm-exporter, as at a site running jobstats). `profiled_share` of the training jobs also
    leave torch.profiler traces in profiler/job_<id>/ with their truth in profiler_truth.csv (kineto.py).
    `dcgm_prof_share` of the hosts' exporters also export the DCGM profiling fields (counters.py)."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    has_gpu = any(p.gpus_per_node > 0 for p in cluster.partitions.values())
    n_pods = int(n_jobs * POD_SHARE) if has_gpu and n_jobs >= 10 else 0
    workload = Workload(cluster, month, n_jobs - n_pods, seed)
    models = {n: p.gpu_model or "" for n, p in cluster.partitions.items()}
    sacct = SacctDumper(out, workload.t0)
    dcgm = DcgmWriter(out, cluster.name, workload.alloc, dcgm_interval_s, seed, models, dcgm_prof_share)
    truth = TruthWriter(out / "truth.parquet")
    (out / "scripts").mkdir()
    (out / "logs").mkdir()
    (out / "k8s").mkdir()
    (out / "profiler").mkdir()
    profiled = kineto.TruthCsv(out / kineto.TRUTH_FILE)
    log_rng = random.Random(seed * 104729 + 3)
    counts = {"scripts": 0, "logs": 0, "script_lines": 0, "log_lines": 0}
    step = max(1, (n_jobs - n_pods) // 10)
    for i, job in enumerate(workload.generate_jobs(), start=1):
        job.text = scripts.render(job)
        data = job.text.encode("utf-8")
        (out / "scripts" / f"{job.job_id}.sh").write_bytes(data)
        counts["scripts"] += 1
        counts["script_lines"] += job.text.count("\n")
        has_jobstats = jobstats.is_chosen(job, jobstats_share)
        if has_jobstats:
            job.admin_comment, tel = jobstats.summary(job)
        sacct.add(job)
        if not has_jobstats:
            tel = dcgm.add(job) if job.is_gpu else None
        if job.has_log:
            text, frame = logs.render(job, log_rng)
            (out / "logs" / f"{job.job_id}.err").write_text(text, encoding="utf-8", newline="\n")
            counts["logs"] += 1
            counts["log_lines"] += text.count("\n")
        has_label = bool(job.hosts) and all(workload.alloc.by_name[h].hpc_job_label for h in job.hosts)
        row = slurm_row(cluster.name, job, sha256(data).hexdigest(), tel, has_label, has_jobstats)
        if job.has_log and frame is not None:
            row.update(tb_user_file=frame.file, tb_user_line=frame.line, tb_user_function=frame.function)
        truth.add(row)
        if kineto.is_profiled(job, profiled_share):
            model = kineto.draw_model(kineto.facts_of(job), kineto.model_seed(seed, job.job_id_raw))
            paths, rows = kineto.write_job(out, model, cluster.name)
            profiled.add(rows)
            counts["traces"] = counts.get("traces", 0) + len(paths)
        dcgm.flush(job.submit - 3600)
        if progress and i % step == 0:
            progress(f"simulate: {i}/{n_jobs - n_pods} Slurm jobs")
    sacct.finish(workload.t1)
    dcgm.finish()
    pod_lines, (metric_files, metric_lines) = _write_pods(out, cluster.name, workload, n_pods, seed, truth)
    truth.close()
    profiled.close()
    manifest = inject(out, inject_bad, seed) if inject_bad > 0 else []
    if inject_bad <= 0:
        (out / "bad_records.jsonl").write_text("", encoding="utf-8")
    by_source = {m["source"]: 0 for m in manifest}
    for m in manifest:
        by_source[m["source"]] += 1
    result = SimulationResult(
        out=str(out),
        cluster=cluster.name,
        month=month,
        seed=seed,
        jobs=n_jobs,
        slurm_jobs=n_jobs - n_pods,
        pods=n_pods,
        files={
            "sacct": len(sacct.files),
            "scripts": counts["scripts"],
            "dcgm": len(dcgm.files),
            "k8s": 1 if n_pods else 0,
            "k8s_metrics": metric_files,
            "logs": counts["logs"],
            "profiler": counts.get("traces", 0),
        },
        lines={
            "sacct": sacct.lines + by_source.get("sacct", 0),
            "scripts": counts["script_lines"],
            "dcgm": dcgm.lines + by_source.get("dcgm", 0),
            "k8s": pod_lines + by_source.get("k8s", 0),
            "k8s_metrics": metric_lines,
            "logs": counts["log_lines"],
            "profiler": profiled.rows,
        },
        bad_records=len(manifest),
        seconds=round(time.monotonic() - started, 2),
    )
    return result


def _write_pods(
    out: Path, cluster: str, workload: Workload, n_pods: int, seed: int, truth: TruthWriter
) -> tuple[int, tuple[int, int]]:
    """Pod objects into k8s/pods.jsonl and their usage scrapes into k8s_metrics/; (pods, (files, lines))."""
    (out / "k8s_metrics").mkdir(exist_ok=True)
    if n_pods <= 0:
        return 0, (0, 0)
    rng = random.Random(seed * 2654435761 % 2**32 + 11)
    users = workload.users[: max(3, len(workload.users) // 3)]
    times = sorted(rng.randint(workload.t0, workload.t1 - 3600) for _ in range(n_pods))
    written: list[tuple[dict, dict]] = []
    with (out / "k8s" / "pods.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for i, t in enumerate(times):
            pod, row = make_pod(i, rng.choice(users), t, rng, cluster)
            fh.write(json.dumps(pod, separators=(",", ":"), ensure_ascii=False) + "\n")
            truth.add(pod_row(cluster, row))
            written.append((pod, row))
    return n_pods, write_pod_metrics(out, written)
