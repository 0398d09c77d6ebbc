"""Synthetic silver.jobs / silver.scripts frames for the prediction tests and bench (pandas, seeded)."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

GIB = 2**30
FRAMEWORKS = ("pytorch", "gromacs", "jax", "lammps")


def _script_text(user: str, k: int, framework: str, batch: int, model: str) -> str:
    return (
        "#!/bin/bash\n#SBATCH --partition=gpu\n"
        f"#SBATCH --job-name={user}-{k}\n"
        f"module load {framework}\n"
        f"srun python train_{framework}.py --model {model} --batch-size {batch}"
        f" --data /scratch/{user}/set{k}\n"
    )


def synthetic_cluster(
    n_jobs: int, n_users: int = 40, seed: int = 0, start: str = "2026-01-01", days: float = 60.0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(jobs, scripts) with silver.jobs / silver.scripts columns. Each user runs a few scripts whose
    needs (memory, VRAM, CPUs, runtime) are fixed up to log-normal noise and grow with the batch size;
    users over-request by a personal factor; a job whose need exceeds its request ends OUT_OF_MEMORY or
    TIMEOUT at the limit."""
    rng = np.random.default_rng(seed)
    scripts = []
    for u in range(n_users):
        for k in range(3):
            framework = FRAMEWORKS[(u + k) % len(FRAMEWORKS)]
            batch = int(rng.choice([8, 16, 32, 64]))
            model = f"net-{int(rng.choice([1, 7, 13]))}b"
            text = _script_text(f"u{u}", k, framework, batch, model)
            scripts.append(
                {
                    "cluster": "demo",
                    "script_hash": hashlib.sha256(text.encode()).hexdigest(),
                    "user": f"u{u}",
                    "mem_need_gib": float(np.exp(rng.normal(1.5, 1.0))) * batch / 16,
                    "vram_need_gib": float(np.clip(np.exp(rng.normal(2.5, 0.6)) * batch / 32, 1, 75)),
                    "cpus_need": float(np.clip(np.exp(rng.normal(1.0, 0.7)), 0.2, 30)),
                    "runtime_need_s": float(np.exp(rng.normal(8.0, 1.0))),
                    "frameworks": framework,
                    "launcher": "srun",
                    "model_name": model,
                    "batch_size": batch,
                    "precision": "bf16",
                    "input_paths": f"/scratch/u{u}/set{k}",
                    "text": text,
                }
            )
    sc = pd.DataFrame(scripts)
    over = {f"u{u}": float(np.exp(rng.uniform(0.3, 2.0))) for u in range(n_users)}
    pick = rng.integers(0, len(sc), n_jobs)
    chosen = sc.iloc[pick].reset_index(drop=True)
    noise = lambda s: np.exp(rng.normal(0, s, n_jobs))  # noqa: E731
    mem_need = chosen["mem_need_gib"].to_numpy() * noise(0.15) * GIB
    vram_need = chosen["vram_need_gib"].to_numpy() * noise(0.1) * GIB
    cpus_need = chosen["cpus_need"].to_numpy() * noise(0.1)
    run_need = chosen["runtime_need_s"].to_numpy() * noise(0.3)
    factor = chosen["user"].map(over).to_numpy()
    req_mem = np.ceil(chosen["mem_need_gib"].to_numpy() * factor) * GIB
    req_cpus = np.ceil(chosen["cpus_need"].to_numpy() * factor).astype(int)
    timelimit = np.ceil(chosen["runtime_need_s"].to_numpy() * factor * 1.5 / 60) * 60
    is_gpu = chosen["frameworks"].isin(["pytorch", "jax"]).to_numpy()
    t0 = pd.Timestamp(start)
    submit = t0 + pd.to_timedelta(np.sort(rng.uniform(0, days * 86400, n_jobs)), unit="s")
    wait = pd.to_timedelta(rng.exponential(600, n_jobs), unit="s")
    oom = mem_need > req_mem
    timeout = (run_need > timelimit) & ~oom
    elapsed = np.where(timeout, timelimit, np.where(oom, run_need * 0.3, run_need)).astype("int64") + 1
    start_ts = submit + wait
    jobs = pd.DataFrame(
        {
            "cluster": "demo",
            "job_id": [str(1000 + i) for i in range(n_jobs)],
            "source": "slurm",
            "job_name": [f"{u}-job" for u in chosen["user"]],
            "user": chosen["user"],
            "account": "acct",
            "partition": np.where(is_gpu, "gpu", "cpu"),
            "qos": "normal",
            "state": np.where(oom, "OUT_OF_MEMORY", np.where(timeout, "TIMEOUT", "COMPLETED")),
            "submit_ts": submit,
            "start_ts": start_ts,
            "end_ts": start_ts + pd.to_timedelta(elapsed, unit="s"),
            "elapsed_s": elapsed,
            "timelimit_s": timelimit.astype("int64"),
            "req_cpus": req_cpus,
            "alloc_cpus": req_cpus,
            "req_mem_bytes": req_mem.astype("int64"),
            "alloc_mem_bytes": req_mem.astype("int64"),
            "req_gpus": np.where(is_gpu, 1, 0),
            "alloc_gpus": np.where(is_gpu, 1, 0),
            "gpu_model": np.where(is_gpu, "A100-SXM4-80GB", None),
            "nodes": 1,
            "ntasks": 1,
            "total_cpu_s": np.minimum(cpus_need, req_cpus) * elapsed,
            "max_rss_bytes": np.minimum(mem_need, req_mem).astype("int64"),
            "gpu_mem_peak_bytes": np.where(is_gpu, np.minimum(vram_need, 80 * GIB), np.nan),
            "gpu_util_peak_pct": np.nan,
            "script_hash": chosen["script_hash"],
        }
    )
    scripts_out = sc.drop(columns=["user", "mem_need_gib", "vram_need_gib", "cpus_need", "runtime_need_s"])
    for col, val in (
        ("req_cpus_per_task", None),
        ("req_ntasks", 1),
        ("req_nodes", 1),
        ("req_mem_bytes", None),
        ("req_gpus", None),
        ("gpu_type", None),
        ("timelimit_s", None),
        ("n_ranks", None),
        ("partition", None),
        ("array_spec", None),
        ("directives_json", "{}"),
    ):
        scripts_out[col] = val
    return jobs, scripts_out
