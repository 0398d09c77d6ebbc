"""On a small simulated month ingested through the real commands, gold recovers the simulator's truth.

truth.parquet (jobs/simulator/truth.py) computes each job's waste from what the simulator knows
(DESIGN.md's formulas over its own utilisation draws); gold computes it from sacct text, DCGM scrapes and
logs. Tolerances, and why:
- CPU core-hours and memory GiB-hours: 0.5 % — sacct prints TotalCPU to the millisecond or second and
  MaxRSS in KiB, the only rounding between the two.
- GPU idle and under-used hours, over the GPU jobs gold has telemetry for: 2 % — gold weights each
  sample by the seconds it covers inside the job (clipped at start and end), truth averages the samples
  per GPU unweighted; both see the same samples. Truth counts MIG hours as whole devices, so gold's
  full-GPU-equivalent hours are divided by the slice fraction before comparing.
- Every Slurm GPU job with at least one scrape in truth has telemetry in gold (attribution works,
  array tasks included).
- User-fixable failed runs: gold's set (via gold.failures) matches truth's on at least 90 % of the failed
  jobs, and their allocated core-hours agree within 5 %.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from jobs.io.tables import read_table

pytestmark = pytest.mark.slow  # a simulated month through ingest and build


def test_gold_recovers_simulated_waste(jobfit, make_ctx, tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    res = jobfit(
        "simulate",
        "--cluster",
        "demo",
        "--month",
        "2026-11",
        "--jobs",
        "200",
        "--seed",
        "3",
        "--dcgm-interval",
        "120",
        "--out",
        str(sim),
    )
    assert res.code == 0, res.err
    for source in ("sacct", "logs", "dcgm"):
        res = jobfit("ingest", source, str(sim / source), "--cluster", "demo")
        assert res.code == 0, res.err
    res = jobfit("build", "--cluster", "demo", "--month", "2026-11")
    assert res.code == 0, res.err

    ctx = make_ctx()
    gold = read_table(ctx.spark, ctx.settings, "gold.job_usage").toPandas()
    truth = pd.read_parquet(sim / "truth.parquet")
    truth = truth[truth["source"] == "slurm"]
    m = truth.merge(gold, on="job_id", how="inner", suffixes=("_t", "_g"))
    assert len(m) >= 0.98 * len(truth)  # finished Slurm jobs of the month (running ones wait for their end)

    def close(truth_sum: float, gold_sum: float, rel: float) -> None:
        assert gold_sum == pytest.approx(truth_sum, rel=rel)

    close(m["wasted_core_h"].sum(), m["cpu_wasted_core_h"].sum(), 0.005)
    close(m["wasted_mem_gib_h"].sum(), m["mem_wasted_gib_h"].sum(), 0.005)

    gpu = m[m["alloc_gpus_t"] > 0]
    scraped = gpu[gpu["telemetry_samples"] > 0]
    assert len(scraped) >= 5 and scraped["has_gpu_telemetry"].all()
    seen = gpu[gpu["has_gpu_telemetry"]]
    device_h = seen["gpu_fraction"] * seen["gpu_share"]
    close(seen["wasted_gpu_idle_h"].sum(), (seen["gpu_idle_h"] / device_h).sum(), 0.02)
    close(seen["wasted_gpu_underuse_h"].sum(), (seen["gpu_underused_h"] / device_h).sum(), 0.02)
    # No telemetry stays unknown: a GPU job without samples has no utilisation, never 0 %.
    blind = gpu[~gpu["has_gpu_telemetry"]]
    assert blind["gpu_util_mean_pct_g"].isna().all() and blind["gpu_underused_h"].isna().all()

    truth_failed = m["is_failed"] & m["user_fixable"]
    gold_failed = m["is_user_fixable_failure"].fillna(False).astype(bool)
    failed = m[truth_failed | gold_failed]
    assert len(failed) >= 3
    assert (truth_failed == gold_failed)[failed.index].mean() >= 0.9
    close(m["failed_core_h"].sum(), m.loc[gold_failed, "cpu_alloc_core_h"].sum(), 0.05)
