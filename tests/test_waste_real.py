"""Real sacct lines (reportseff's fixtures, Princeton clusters) through `jobfit ingest sacct`, then the
waste formulas: CPU, memory and time efficiency match what seff and reportseff printed for the same jobs
(seff_outputs.txt and reportseff_outputs_and_sacct_fixtures.txt in the shared data folder's samples/)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from conf import load_cluster
from jobs.io.tables import read_table
from pipelines.gold.waste import job_usage

GIB = 1024**3
# Field orders documented in the real file's header, per fixture.
ISSUE_16_FORMAT = (
    "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,Timelimit,TotalCPU"
)
ISSUE_41_FORMAT = (
    "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU,NTasks"
)


def _fixture_lines(real_data: Path, tag: str) -> str:
    text = (real_data / "sacct" / "reportseff_tests_sacct_lines.txt").read_text()
    lines = [line.split("\t", 1)[1] for line in text.splitlines() if f":{tag}:" in line and "\t" in line]
    assert lines, tag
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_real_sacct_jobs_match_seff(jobfit, make_ctx, real_data: Path, tmp_path: Path) -> None:
    for tag, fmt in (("test_issue_16", ISSUE_16_FORMAT), ("issue_41", ISSUE_41_FORMAT)):
        path = tmp_path / f"{tag}.txt"
        path.write_text(_fixture_lines(real_data, tag))
        res = jobfit("ingest", "sacct", str(path), "--cluster", "demo", "--format", fmt)
        assert res.code == 0, res.err

    ctx = make_ctx()
    # These dumps carry no Start/End: give each job a window as long as its Elapsed (gold needs an end).
    start = datetime(2026, 11, 2)
    jobs = (
        read_table(ctx.spark, ctx.settings, "silver.jobs")
        .where(F.col("job_id").isin("65638294", "131042"))
        .withColumn("start_ts", F.lit(start))
        .withColumn(
            "end_ts", F.lit(start) + F.make_dt_interval(secs=F.col("elapsed_s").cast("decimal(18,6)"))
        )
    )
    empty = ctx.spark.createDataFrame([], read_table(ctx.spark, ctx.settings, "silver.gpu_samples").schema)
    rows = {r["job_id"]: r for r in job_usage(jobs, empty, load_cluster("demo")).collect()}

    # Issue #16 (2 nodes × 8 cores): seff "CPU Efficiency: 98.62% of 5-01:36:48 core-walltime",
    # "Memory Efficiency: 24.06% of 32.00 GB"; reportseff TimeEff 4.5 %.
    j16 = rows["65638294"]
    assert j16["cpu_eff_pct"] == pytest.approx(98.62, abs=0.005)
    assert j16["cpu_alloc_core_h"] == pytest.approx((5 * 86400 + 1 * 3600 + 36 * 60 + 48) / 3600, abs=1e-6)
    # 16 × 27363 s − TotalCPU 4-23:56:21 (431781 s) = 6027 core-s = 1.674167 core-h, at 0.031611 $/core-h.
    assert j16["cpu_wasted_core_h"] == pytest.approx(6027 / 3600, abs=1e-6)
    assert j16["cpu_wasted_usd"] == pytest.approx(6027 / 3600 * 0.031611, abs=1e-6)
    assert j16["mem_eff_pct"] == pytest.approx(24.06, abs=0.005)
    assert j16["time_eff_pct"] == pytest.approx(4.5, abs=0.05)
    assert j16["end_ts"] - j16["start_ts"] == timedelta(hours=7, minutes=36, seconds=3)

    # Issue #41 (srun -n 8): seff "CPU Efficiency: 98.58% of 00:07:04" from CPU Utilized rounded to 00:06:58;
    # TotalCPU 06:57.815 itself gives 417.815 / 424 = 98.54 %. "Memory Utilized: 14.86 GB (estimated
    # maximum)" = MaxRSS 1947276K × 8 tasks, of ReqMem 16000M: 95.08 %.
    j41 = rows["131042"]
    assert j41["cpu_eff_pct"] == pytest.approx(98.58, abs=0.05)
    assert j41["max_rss_bytes"] / GIB == pytest.approx(14.86, abs=0.005)
    assert j41["mem_eff_pct"] == pytest.approx(1947276 * 8 / (16000 * 1024) * 100, abs=1e-4)
