"""Waste formulas on tiny silver rows, each expectation computed by hand in the comments.

Demo price sheet (conf/clusters/demo.yaml): 0.031611 $/core-h, 0.004237 $/GiB-h, A100-SXM4-80GB 2.95 $/GPU-h.
Every job below runs one hour, 2026-11-10 00:00 → 01:00 UTC, unless stated.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conf import DEFAULT_PRICES, default_cluster_config, load_cluster
from pipelines.gold.waste import (
    job_usage,
    vram_fit_options,
)
from pipelines.units import mig_fraction
from tests.rows import GIB, T0, job_row, jobs_frame, sample_rows, samples_frame, use


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The hand-computed month: jobs 1..8 and their telemetry (see each comment)."""
    alice, bob, carol = (
        {"user": u, "account": a, "partition": p}
        for u, a, p in (("alice", "ml", "gpu"), ("bob", "ml", "gpu"), ("carol", "phys", "gpu"))
    )
    jobs = [
        # 1: 2 GPUs, one busy at 80 %, one idle; 8 cores used 4 core-h; 64 GiB requested, 16 GiB peak.
        job_row(
            job_id="1",
            **alice,
            **use(8, 4.0, 64, 16),
            alloc_gpus=2,
            gpu_model="A100-SXM4-80GB",
            timelimit_s=7200,
        ),
        # 2: 1 GPU, no telemetry at all: unknown, not 0 %.
        job_row(job_id="2", **alice, **use(4, 4.0, 8, 8), alloc_gpus=1),
        # 3 and 4: share one GPU (two label copies of every sample) at 60 %.
        job_row(job_id="3", **bob, **use(1, 1.0, 1, 1), alloc_gpus=1),
        job_row(job_id="4", **bob, **use(1, 1.0, 1, 1), alloc_gpus=1),
        # 5: a 3g.40gb MIG slice at 50 % holding 4 GiB.
        job_row(job_id="5", **bob, **use(1, 1.0, 1, 1), alloc_gpus=1),
        # 6: two nodes, one GPU each, attributed by overlap (no hpc_job label); g05 reports only 30 min.
        job_row(job_id="6", **carol, **use(16, 12.0, 32, 32), alloc_gpus=2, nodes=2, node_list="g04,g05"),
        # 7: TIMEOUT after 2 h at full use: the whole allocation is a failed run.
        job_row(
            job_id="7",
            **{**carol, "partition": "cpu"},
            **use(4, 8.0, 8, 8),
            state="TIMEOUT",
            elapsed_s=7200,
            end_ts=T0 + timedelta(hours=2),
            timelimit_s=7200,
        ),
        # 8: NODE_FAIL: the system's fault, only unused resources count.
        job_row(job_id="8", **{**carol, "partition": "cpu"}, **use(2, 1.0, 4, 2), state="NODE_FAIL"),
        # still running: not in gold yet.
        job_row(job_id="9", user="carol", state="RUNNING", is_final=False, end_ts=None, elapsed_s=None),
    ]
    samples = [
        *sample_rows("1", "g01", "GPU-a", 80.0, fb_used_gib=20.0),
        *sample_rows("1", "g01", "GPU-b", 0.0),
        # a labelled sample from before job 1 started: outside its window, ignored.
        *sample_rows("1", "g01", "GPU-a", 100.0, start=T0 - timedelta(minutes=5), seconds=60),
        *sample_rows("3", "g02", "GPU-c", 60.0, fb_used_gib=10.0),
        *sample_rows("4", "g02", "GPU-c", 60.0, fb_used_gib=10.0),
        *sample_rows(
            "5",
            "g03",
            "GPU-d/gi1",
            50.0,
            fb_used_gib=4.0,
            fb_total_gib=40.0,
            mig_gi_id=1,
            mig_profile="3g.40gb",
        ),
        *sample_rows("6", "g04", "GPU-e", 100.0, label_job="", attribution="overlap"),
        *sample_rows("6", "g05", "GPU-f", 50.0, seconds=1800, label_job="", attribution="overlap"),
        # a GPU nobody was attributed, and an ambiguous one: no job's figures.
        *sample_rows(None, "g06", "GPU-g", 0.0, label_job=""),
        *sample_rows(None, "g06", "GPU-h", 0.0, label_job="", attribution="ambiguous"),
    ]
    return jobs, samples


@pytest.fixture(scope="module")
def usage(spark: SparkSession) -> dict[str, dict[str, Any]]:
    jobs, samples = scenario()
    jobs.append(POD)
    df = job_usage(jobs_frame(spark, jobs), samples_frame(spark, samples), load_cluster("demo"))
    return {r["job_id"]: r.asDict() for r in df.collect()}


# A Burstable pod: requests 2 CPUs and 4 GiB, may burst to 3.5 CPUs and 8 GiB; its use is unknown.
POD = job_row(
    job_id="ml/infer-0",
    source="k8s",
    user="dave",
    account="ml",
    partition="ml",
    req_cpus=2,
    alloc_cpus=2,
    req_mem_bytes=4 * GIB,
    alloc_mem_bytes=4 * GIB,
    limit_cpu_cores=3.5,
    limit_mem_bytes=8 * GIB,
    qos="Burstable",
)


def test_only_finished_jobs_in_the_month_they_ended(usage: dict[str, dict[str, Any]]) -> None:
    assert sorted(usage) == ["1", "2", "3", "4", "5", "6", "7", "8", "ml/infer-0"]
    assert {r["month"] for r in usage.values()} == {"2026-11"}


def test_two_gpu_job_with_one_idle_gpu(usage: dict[str, dict[str, Any]]) -> None:
    j = usage["1"]
    # CPU: 8 core-h allocated, 14400 s = 4 core-h used, 4 wasted, 50 %.
    assert (j["cpu_alloc_core_h"], j["cpu_used_core_h"], j["cpu_wasted_core_h"], j["cpu_eff_pct"]) == (
        8.0,
        4.0,
        4.0,
        50.0,
    )
    # Memory: (64 − 16) GiB × 1 h = 48 GiB-h wasted of 64; 25 %.
    assert (j["mem_alloc_gib_h"], j["mem_wasted_gib_h"], j["mem_eff_pct"]) == (64.0, 48.0, 25.0)
    assert j["time_eff_pct"] == 50.0  # 1 h of a 2 h limit
    # GPU: 2 GPU-h, fully sampled; mean (80 + 0)/2 = 40 %; the idle GPU = 1 GPU-h; under-use 2 × 0.6 = 1.2.
    assert (j["gpu_alloc_h"], j["gpu_coverage_pct"], j["gpu_util_mean_pct"]) == (2.0, 100.0, 40.0)
    assert (j["gpu_used_h"], j["gpu_idle_h"], j["gpu_underused_h"]) == (0.8, 1.0, 1.2)
    # VRAM: 20 GiB of 80 GiB = 25 %; the smallest card holding 20 GiB is the V100 (32 GiB).
    assert (j["vram_peak_bytes"], j["vram_card_bytes"], j["vram_peak_pct"]) == (20 * GIB, 80 * GIB, 25.0)
    assert j["vram_fits"] == "V100-SXM2-32GB"
    # Dollars: 8 × 0.031611 = 0.252888; 64 × 0.004237 = 0.271168; 2 × 2.95 = 5.9.
    assert (j["cpu_alloc_usd"], j["mem_alloc_usd"], j["gpu_alloc_usd"]) == (0.252888, 0.271168, 5.9)
    assert j["alloc_usd"] == pytest.approx(6.424056, abs=1e-6)
    # Wasted: 4 × 0.031611 + 48 × 0.004237 + 1.2 × 2.95 = 0.126444 + 0.203376 + 3.54 = 3.86982.
    assert (j["cpu_wasted_usd"], j["mem_wasted_usd"], j["gpu_underused_usd"]) == (0.126444, 0.203376, 3.54)
    assert j["gpu_idle_usd"] == 2.95
    assert j["wasted_usd"] == pytest.approx(3.86982, abs=1e-6)
    assert j["failed_run_usd"] == 0.0


def test_no_telemetry_is_unknown_not_zero(usage: dict[str, dict[str, Any]]) -> None:
    j = usage["2"]
    assert j["has_gpu_telemetry"] is False
    assert j["gpu_coverage_pct"] == 0.0
    assert (j["gpu_util_mean_pct"], j["gpu_used_h"], j["gpu_idle_h"], j["gpu_underused_h"]) == (None,) * 4
    assert j["gpu_underused_usd"] is None and j["vram_peak_bytes"] is None and j["vram_fits"] is None
    # Still allocated (1 GPU-h at the partition's A100-80GB price), but no GPU waste is invented.
    assert (j["gpu_alloc_h"], j["gpu_model"], j["gpu_alloc_usd"]) == (1.0, "A100-SXM4-80GB", 2.95)
    assert j["wasted_usd"] == 0.0  # CPU and memory fully used


def test_two_jobs_sharing_one_gpu_count_half_each(usage: dict[str, dict[str, Any]]) -> None:
    for job_id in ("3", "4"):
        j = usage[job_id]
        # Each is 1 of 2 label copies: 0.5 GPU-h, 60 % → 0.3 used, 0.2 under-used; sampled all hour.
        assert (j["gpu_share"], j["gpu_coverage_pct"], j["gpu_alloc_h"]) == (0.5, 100.0, 0.5)
        assert (j["gpu_util_mean_pct"], j["gpu_used_h"], j["gpu_underused_h"], j["gpu_idle_h"]) == (
            60.0,
            0.3,
            0.2,
            0.0,
        )
        assert j["gpu_alloc_usd"] == 1.475  # 0.5 × 2.95
    # Together one GPU-hour, never two.
    assert usage["3"]["gpu_alloc_h"] + usage["4"]["gpu_alloc_h"] == 1.0


def test_mig_slice(usage: dict[str, dict[str, Any]]) -> None:
    j = usage["5"]
    # 3g.40gb = 3/7 of an A100: 0.428571 GPU-h; at 50 %, half of it under-used.
    assert (j["mig_profile"], j["gpu_fraction"], j["gpu_alloc_h"]) == ("3g.40gb", 0.428571, 0.428571)
    assert (j["gpu_util_mean_pct"], j["gpu_underused_h"]) == (50.0, 0.214286)
    # 4 GiB of the slice's 40 GiB; 4 GiB = 4.29e9 B fits the 1g.5gb profile (5e9 B), the smallest there is.
    assert (j["vram_peak_pct"], j["vram_fits"]) == (10.0, "A100-SXM4-40GB 1g.5gb")
    assert j["gpu_alloc_usd"] == pytest.approx(3 / 7 * 2.95, abs=1e-6)  # 1.264286


def test_two_nodes_attributed_by_overlap_with_partial_coverage(usage: dict[str, dict[str, Any]]) -> None:
    j = usage["6"]
    # g04 sampled 3600 s at 100 %, g05 1800 s at 50 %: coverage 5400 / 7200 = 75 %;
    # mean (3600 × 100 + 1800 × 50) / 5400 = 83.333 %; 2 GPU-h × (1 − 0.83333) = 0.333333 under-used.
    assert (j["gpu_coverage_pct"], j["gpu_util_mean_pct"]) == (75.0, 83.333333)
    assert (j["gpu_alloc_h"], j["gpu_underused_h"], j["gpu_idle_h"]) == (2.0, 0.333333, 0.0)
    # 16 cores × 1 h = 16 core-h, 43200 s = 12 used: 75 %.
    assert (j["cpu_wasted_core_h"], j["cpu_eff_pct"]) == (4.0, 75.0)


def test_failed_runs(usage: dict[str, dict[str, Any]]) -> None:
    timeout, node_fail = usage["7"], usage["8"]
    # TIMEOUT (user-fixable): 4 cores × 2 h × 0.031611 + 8 GiB × 2 h × 0.004237 = 0.252888 + 0.067792.
    assert timeout["is_user_fixable_failure"] is True
    assert (timeout["failure_cause"], timeout["failure_cause_from"]) == ("timeout", "state")
    assert timeout["alloc_usd"] == pytest.approx(0.32068, abs=1e-6)
    assert timeout["failed_run_usd"] == pytest.approx(0.32068, abs=1e-6)
    assert timeout["wasted_usd"] == pytest.approx(0.32068, abs=1e-6)
    # NODE_FAIL: not the user's; 1 core-h and 2 GiB-h unused = 0.031611 + 0.008474.
    assert node_fail["is_user_fixable_failure"] is False and node_fail["failed_run_usd"] == 0.0
    assert node_fail["wasted_usd"] == pytest.approx(0.040085, abs=1e-6)
    # A CPU-only job has no GPU waste (0, not unknown) and no coverage figure.
    assert (node_fail["gpu_alloc_h"], node_fail["gpu_underused_h"], node_fail["gpu_coverage_pct"]) == (
        0.0,
        0.0,
        None,
    )


def test_pod_limits_beside_request_based_figures_and_unknown_use(usage: dict[str, dict[str, Any]]) -> None:
    pod = usage["ml/infer-0"]
    assert (pod["limit_cpu_cores"], pod["limit_mem_bytes"], pod["req_mem_bytes"]) == (3.5, 8 * GIB, 4 * GIB)
    # Allocated by the requests: 2 core-h and 4 GiB-h = 2 × 0.031611 + 4 × 0.004237 = 0.08017 $.
    assert (pod["cpu_alloc_core_h"], pod["mem_alloc_gib_h"]) == (2.0, 4.0)
    assert pod["alloc_usd"] == pytest.approx(0.08017, abs=1e-6)
    # No CPU time, no memory peak in a pod object: use and waste unknown, not 0; nothing wasted counted.
    unknown = ("cpu_used_core_h", "cpu_wasted_core_h", "cpu_eff_pct", "mem_used_gib_h", "mem_wasted_gib_h")
    assert [pod[c] for c in (*unknown, "mem_eff_pct", "cpu_wasted_usd", "mem_wasted_usd")] == [None] * 8
    assert pod["wasted_usd"] == 0.0
    # Slurm jobs have no limit columns.
    assert (usage["1"]["limit_cpu_cores"], usage["1"]["limit_mem_bytes"]) == (None, None)


def test_failure_cause_from_gold_failures_wins(spark: SparkSession) -> None:
    # 12: cancelled by its user: diagnosed, but a cancelled job is not a failed run.
    jobs = [
        job_row(job_id="10", state="FAILED", **use(2, 1.0, 1, 1)),
        job_row(job_id="11", state="OUT_OF_MEMORY", **use(2, 2.0, 1, 1)),
        job_row(job_id="12", state="CANCELLED", **use(2, 2.0, 1, 1)),
    ]
    failures = spark.createDataFrame(
        [
            ("demo", "10", "python_error", True),
            ("demo", "11", "node_oom_killer", False),
            ("demo", "12", "cancelled", True),
        ],
        "cluster string, job_id string, cause string, user_fixable boolean",
    )
    empty = samples_frame(spark, [])
    rows = {
        r["job_id"]: r
        for r in job_usage(jobs_frame(spark, jobs), empty, load_cluster("demo"), failures).collect()
    }
    # 10: FAILED alone would not count, but the diagnosed cause is the user's: whole 2 core-h + 1 GiB-h.
    assert (rows["10"]["failure_cause"], rows["10"]["failure_cause_from"]) == (
        "python_error",
        "gold.failures",
    )
    assert rows["10"]["wasted_usd"] == pytest.approx(2 * 0.031611 + 0.004237, abs=1e-6)
    # 11: OUT_OF_MEMORY by state, but the diagnosis says the system's: nothing unused, nothing wasted.
    assert rows["11"]["is_user_fixable_failure"] is False and rows["11"]["wasted_usd"] == 0.0
    assert rows["12"]["failure_cause"] == "cancelled" and rows["12"]["is_user_fixable_failure"] is False
    assert rows["12"]["wasted_usd"] == 0.0


def test_cluster_without_yaml_gets_the_default_sheet(spark: SparkSession) -> None:
    cluster = default_cluster_config("elsewhere")
    assert cluster.prices == DEFAULT_PRICES
    jobs = [
        job_row(
            cluster="elsewhere", job_id="1", alloc_cpus=10, total_cpu_s=0.0, alloc_gpus=1, gpu_model="a100"
        )
    ]
    (row,) = job_usage(jobs_frame(spark, jobs), samples_frame(spark, []), cluster).collect()
    # OpenCost's fallback prices: 10 core-h × 0.031611 + 1 GPU-h × 0.95 (no memory requested).
    assert row["alloc_usd"] == pytest.approx(0.31611 + 0.95, abs=1e-6)
    assert row["cpu_wasted_usd"] == pytest.approx(0.31611, abs=1e-6)


def test_vram_options_and_mig_fraction() -> None:
    options = vram_fit_options(load_cluster("demo"))
    assert options[0] == ("A100-SXM4-40GB 1g.5gb", 5 * 10**9)
    assert ("L40S", 48 * GIB) in options
    assert [size for _, size in options] == sorted(size for _, size in options)
    assert (mig_fraction("1g.10gb"), mig_fraction("7g.80gb"), mig_fraction(None)) == (1 / 7, 1.0, 1.0)


def test_array_task_samples_labelled_with_the_raw_job_id(spark: SparkSession) -> None:
    # dcgm-exporter's hpc_job is SLURM_JOB_ID: for array task 20_3 that is its raw id 23.
    jobs = [
        job_row(
            job_id="20_3", job_id_raw="23", array_job_id="20", **use(1, 1.0), alloc_gpus=1, partition="gpu"
        )
    ]
    samples = sample_rows("23", "g07", "GPU-i", 70.0)
    (row,) = job_usage(jobs_frame(spark, jobs), samples_frame(spark, samples), load_cluster("demo")).collect()
    # 1 GPU-h fully sampled at 70 %: 0.3 GPU-h under-used.
    assert (row["job_id"], row["gpu_coverage_pct"], row["gpu_util_mean_pct"], row["gpu_underused_h"]) == (
        "20_3",
        100.0,
        70.0,
        0.3,
    )
