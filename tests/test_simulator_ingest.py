"""Everything the simulator writes goes through `jobfit ingest` with nothing quarantined except the records it
was asked to break, and every one of those lands in quarantine."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from conf import load_cluster
from jobs.commands.ingest import SOURCES
from jobs.io.tables import read_table
from jobs.simulator import simulate

pytestmark = pytest.mark.slow  # a simulated month through every ingest

# Simulator folder -> ingest source (the demo's order: accounting before what attaches to jobs).
FOLDERS = (("sacct", "sacct"), ("scripts", "scripts"), ("dcgm", "dcgm"), ("k8s", "k8s"), ("logs", "logs"))


def test_every_simulated_record_is_ingested_and_every_bad_one_quarantined(
    jobfit, make_ctx, tmp_path: Path
) -> None:
    out = tmp_path / "sim"
    simulate(load_cluster("demo"), "2026-03", 80, seed=11, out=out, inject_bad=9)
    manifest = [json.loads(line) for line in (out / "bad_records.jsonl").read_text().splitlines()]
    ran = []
    for folder, source in FOLDERS:
        if source not in SOURCES:
            continue
        res = jobfit("ingest", source, str(out / folder), "--cluster", "demo", "--json")
        assert res.code == 0, res.err
        report = json.loads(res.out)
        expected_bad = sum(1 for m in manifest if m["source"] == source)
        assert report["quarantined"] == expected_bad, (source, report)
        ran.append(source)
    assert "sacct" in ran
    ctx = make_ctx()
    assertDataFrameEqual(
        read_table(ctx.spark, ctx.settings, "quarantine").select("source", "source_file", "line_no"),
        ctx.spark.createDataFrame(
            [(m["source"], str(out / m["file"]), m["line_no"]) for m in manifest if m["source"] in ran],
            "source string, source_file string, line_no long",
        ),
    )
    jobs = read_table(ctx.spark, ctx.settings, "silver.jobs")
    n_slurm = jobs.filter("source = 'slurm'").count()
    assert n_slurm == 72  # 80 jobs, 10 % of them pods

    # Pods keep their limits; every Slurm job carries its script's hash (scripts were ingested after sacct).
    truth = pd.read_parquet(out / "truth.parquet")
    silver = jobs.select("job_id", "limit_cpu_cores", "limit_mem_bytes", "script_hash").toPandas()
    both = truth.merge(silver, on="job_id", how="inner", suffixes=("_truth", ""))
    pods = both[both.source == "k8s"]
    assert len(pods) == (truth.source == "k8s").sum()  # bad records are extra lines, not lost pods
    assert (pods.limit_mem_bytes == pods.limit_mem_bytes_truth).all()
    assert (pods.limit_cpu_cores == pods.limit_cpu_cores_truth).all()
    slurm = both[both.source == "slurm"]
    assert len(slurm) == n_slurm and slurm.limit_mem_bytes.isna().all() and slurm.limit_cpu_cores.isna().all()
    assert (slurm.script_hash == slurm.script_hash_truth).all()
