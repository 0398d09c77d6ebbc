"""Bottlenecks from DCGM profiling counters: the classifier's decision list (plain Python), the DCP fields
through the DCGM parser (real H100 MIG excerpt, NaN quarantined, missing fields null), a warehouse written
before the fields gaining them, and precision/recall on a simulated month against its truth."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from conf import BottleneckSettings
from jobs.context import Context
from jobs.stages.ingest.common import lines_frame, scan_inputs
from jobs.stages.ingest.dcgm import scrape_time
from pipelines.gold.bottlenecks.counters import classify, has_tensor_cores, precision_recall
from pipelines.schemas import SILVER_GPU_SAMPLES
from pipelines.silver.dcgm import PROF_COLUMNS, parse_dcgm_lines, pivot_samples
from tests.counters_sim import misses, simulate_and_score

S = BottleneckSettings()
T0_MS = 1793700000000  # 2026-11-03T10:00:00Z


def _profile(**over: object) -> dict:
    p = {
        "profiled_gpus": 1,
        "used_gpus": 1,
        "samples": 12,
        "all_samples": 12,
        "gr": 0.9,
        "sm": 0.8,
        "occupancy": 0.4,
        "tensor": 0.35,
        "fp64": 0.0,
        "fp32": 0.1,
        "fp16": 0.1,
        "dram": 0.35,
        "pcie_bps": 0.5e9,
        "nvlink_bps": 0.0,
        "model_name": "NVIDIA A100-SXM4-80GB",
    }
    p.update(over)
    return p


@pytest.mark.parametrize(
    ("over", "frameworks", "alloc", "expected"),
    [
        ({}, "pytorch", 1, "compute_bound"),
        ({"all_samples": 2, "samples": 2}, None, 1, "unclassified"),
        ({"used_gpus": 0, "samples": 0, "gr": None}, None, 1, "idle_gpu"),
        ({"gr": 0.1, "sm": 0.08}, None, 1, "idle_gpu"),
        ({"gr": 0.35, "sm": 0.3}, None, 1, "input_bound"),
        ({"gr": 0.35, "sm": 0.3, "pcie_bps": 9e9}, None, 1, "memcpy_bound"),
        ({"gr": 0.85, "sm": 0.35, "nvlink_bps": 60e9, "used_gpus": 8}, None, 8, "communication_bound"),
        ({"gr": 0.85, "sm": 0.35, "nvlink_bps": 60e9}, None, 1, "compute_bound"),  # one GPU: no collectives
        ({"dram": 0.75, "tensor": 0.02, "fp32": 0.1}, "pytorch", 1, "memory_bound"),
        ({"tensor": 0.01, "fp32": 0.45}, "pytorch", 1, "low_tensor_core"),
        ({"tensor": 0.01, "fp32": 0.45}, None, 1, "low_tensor_core"),  # script unknown: said, not hidden
        ({"tensor": 0.01, "fp32": 0.45}, "gromacs", 1, "compute_bound"),  # MD runs FP32 by design
        ({"tensor": 0.0, "fp32": 0.45, "model_name": "Tesla P100-PCIE-16GB"}, None, 1, "compute_bound"),
        ({"tensor": 0.01, "fp32": None}, "pytorch", 1, "low_tensor_core"),  # exporter without FP pipes
    ],
)
def test_decision_list(over: dict, frameworks: str | None, alloc: int, expected: str) -> None:
    label, finding = classify(_profile(**over), S, frameworks, alloc)
    assert label == expected
    if finding is None:
        assert label in ("compute_bound", "unclassified")
        return
    assert finding.kind == label and 0 <= finding.share_pct <= 100
    assert finding.evidence.startswith("DCGM counters") and "cannot name the line" in finding.fix


def test_finding_figures_and_share() -> None:
    _, f = classify(_profile(gr=0.3, sm=0.25), S, None, 1)
    assert f is not None and f.share_pct == pytest.approx(70.0)
    assert "GR_ENGINE_ACTIVE 0.30" in f.evidence and "busy 30 %" in f.fix and "num_workers" in f.fix


def test_tensor_core_cards() -> None:
    assert has_tensor_cores("Tesla V100-SXM2-32GB") and has_tensor_cores("NVIDIA H100 80GB HBM3")
    assert not has_tensor_cores("Tesla K80") and not has_tensor_cores("Tesla P100-PCIE-16GB")
    assert has_tensor_cores(None) is None


def test_precision_recall_counts() -> None:
    found = {"1": "input_bound", "2": None, "3": "idle_gpu", "4": "memory_bound"}
    truth = {"1": "input_bound", "2": "memcpy_bound", "3": None, "4": "memory_bound", "5": None}
    pr = precision_recall(found, truth)
    assert (pr["precision"], pr["recall"], pr["false_on_healthy"]) == (2 / 3, 2 / 3, 1)


def test_dcp_fields_parse_null_when_absent_and_nan_quarantined(
    spark: SparkSession, real_data: Path, tmp_path: Path
) -> None:
    labels = 'gpu="0",UUID="GPU-p",modelName="NVIDIA A100-SXM4-80GB",Hostname="g7",hpc_job="5"'
    (tmp_path / "dcp.prom").write_text(
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.412000 {T0_MS}\n"
        f"DCGM_FI_PROF_DRAM_ACTIVE{{{labels}}} NaN {T0_MS}\n"
        f"DCGM_FI_PROF_PCIE_RX_BYTES{{{labels}}} 8123456789 {T0_MS}\n"
        f"DCGM_FI_PROF_NVLINK_TX_BYTES{{{labels}}} +Inf {T0_MS}\n"
    )
    mig = real_data / "telemetry" / "dcgm-exporter_scrape_H100_MIG_k8s__NVIDIA_dcgm-exporter_512.prom"
    shutil.copy(mig, tmp_path / "mig-2026-11-03T10:00:00Z.prom")
    ctx = Context(environ={}, quiet=True)
    ctx.use_spark(spark)
    refs = scan_inputs([str(tmp_path / "dcp.prom"), str(tmp_path / "mig-2026-11-03T10:00:00Z.prom")])
    scrape = {r.name: scrape_time(r.name, datetime(2026, 11, 3, 10)) for r in refs}
    samples, rejects, _ = parse_dcgm_lines(lines_frame(ctx, refs, "demo"), scrape, [])
    rows = {(r["host"], r["device"]): r.asDict() for r in pivot_samples(samples).collect()}
    ours = rows[("g7", "GPU-p")]
    assert (ours["gr_engine_active_frac"], ours["pcie_rx_bytes_per_s"]) == (0.412, 8123456789.0)
    assert ours["dram_active_frac"] is None and ours["sm_occupancy_frac"] is None  # NaN line rejected
    assert ours["nvlink_tx_bytes_per_s"] is None and ours["sm_active_frac"] is None
    reasons = sorted(r["reason"] for r in rejects.collect())
    assert reasons == ["value +Inf is not a finite number", "value NaN is not a finite number"]
    # the real H100 MIG excerpt (dcgm-exporter #512): GR_ENGINE_ACTIVE 0 on three MIG instances
    mig_rows = [r for (h, _), r in rows.items() if h == "gsrh100-074"]
    assert {r["mig_gi_id"] for r in mig_rows} >= {7, 8, 9}
    assert {r["gr_engine_active_frac"] for r in mig_rows} == {0.0}
    assert set(PROF_COLUMNS) <= set(SILVER_GPU_SAMPLES.columns)


@pytest.mark.slow
def test_old_warehouse_gains_the_columns_and_cli_finding(
    jobfit, make_ctx, spark: SparkSession, warehouse: Path, tmp_path: Path
) -> None:
    """A silver.gpu_samples written before the DCP columns gains them on ingest; `jobfit bottlenecks --job`
    classifies a job that has counters and no trace, priced, with source dcgm and no line."""
    from datetime import UTC, timedelta

    from conf import load_settings
    from jobs.commands.bottlenecks import _job_text
    from jobs.io.tables import table_path
    from tests.rows import T0, append_silver, job_row

    old = T.StructType([f for f in SILVER_GPU_SAMPLES.schema.fields if f.name not in PROF_COLUMNS])
    settings = load_settings({"JOBFIT_WAREHOUSE": str(warehouse)})
    spark.createDataFrame([], old).write.format("delta").save(table_path(settings, SILVER_GPU_SAMPLES.name))
    job = job_row(job_id="5", user="ana", alloc_gpus=1, gpu_model="A100-SXM4-80GB", elapsed_s=3600)
    append_silver(make_ctx(), "silver.jobs", [job])
    lines = []
    labels = 'gpu="0",UUID="GPU-a",modelName="NVIDIA A100-SXM4-80GB",hostname="g1",hpc_job="5"'
    for k in range(4):
        ms = int((T0 + timedelta(minutes=10 * k)).replace(tzinfo=UTC).timestamp() * 1000)
        lines += [
            f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 50 {ms}",
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.3{k} {ms}",
            f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} 0.25 {ms}",
            f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{labels}}} 0.1 {ms}",
            f"DCGM_FI_PROF_PCIE_RX_BYTES{{{labels}}} 400000000 {ms}",
        ]
    lines.append('DCGM_FI_PROF_SM_OCCUPANCY{gpu="1",UUID="GPU-b",hostname="g1"} 36.9')  # a percentage
    scrape = tmp_path / "g1-2026-11-10T00:00:00Z.prom"
    scrape.write_text("\n".join(lines) + "\n")
    r = json.loads(jobfit("ingest", "dcgm", str(scrape), "--cluster", "demo", "--json").out)
    assert (r["inserted"], r["quarantined"]) == (4, 1)  # the 36.9 "ratio" is rejected by the suite
    b = jobfit("bottlenecks", "--cluster", "demo", "--job", "5", "--json")
    assert b.code == 0, b.err
    d = json.loads(b.out)
    assert (d["ranks"], d["counters"]["class"], d["counters"]["samples"]) == ([], "input_bound", 4)
    (f,) = d["findings"]
    assert (f["kind"], f["source"], f["rank"], f["file"], f["line"]) == (
        "input_bound",
        "dcgm",
        None,
        None,
        None,
    )
    assert f["share_pct"] == pytest.approx(68.5) and f["gpu_hours_recoverable"] == pytest.approx(0.685)
    text = _job_text(d)
    assert "no line from DCGM counters" in text and "DCGM counters (4 samples" in text
    q = "SELECT kind, source, code FROM gold.job_bottlenecks"
    assert json.loads(jobfit("sql", q, "--json").out)["rows"] == [
        {"kind": "input_bound", "source": "dcgm", "code": None}
    ]


@pytest.mark.slow
def test_simulated_month_precision_recall(spark: SparkSession, tmp_path: Path) -> None:
    """A small month: counters drawn from the simulator's workload model (not from the thresholds) through
    the DCGM parser and `counter_profiles`, classified and scored against the truth (the CLI path is the
    test above; bench/bottleneck_counters.py prints the figure for a larger month)."""
    pr, found, truth = simulate_and_score(spark, tmp_path / "sim", 300, 5, 1200, S)
    assert pr["jobs"] >= 30 and pr["true_bottlenecks"] >= 8, pr
    assert pr["precision"] >= 0.85 and pr["recall"] >= 0.85, (pr, misses(found, truth))
    assert pr["false_on_healthy"] <= 1, (pr, misses(found, truth))
