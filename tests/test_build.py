"""`jobfit build` and `jobfit waste` end to end on silver rows: hand-computed month totals, idempotent
rebuilds, late data rebuilding only its month, and the waste report's text and --json."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from jobs.io.tables import merge_into, read_table
from tests.rows import append_silver, job_row, jobs_frame, use
from tests.test_waste import scenario

OCT = datetime(2026, 10, 15, 0, 0, 0)
DAVE = {"user": "dave", "account": "ml", "partition": "cpu"}

# Per-job dollars of the November scenario, each computed by hand in tests/test_waste.py's comments.
ALLOC_USD = {
    "1": 0.252888 + 0.271168 + 5.9,
    "2": 4 * 0.031611 + 8 * 0.004237 + 2.95,
    "3": 0.031611 + 0.004237 + 0.5 * 2.95,
    "4": 0.031611 + 0.004237 + 0.5 * 2.95,
    "5": 0.031611 + 0.004237 + 3 / 7 * 2.95,
    "6": 16 * 0.031611 + 32 * 0.004237 + 2 * 2.95,
    "7": 8 * 0.031611 + 16 * 0.004237,
    "8": 2 * 0.031611 + 4 * 0.004237,
}
WASTED_USD = {
    "1": 4 * 0.031611 + 48 * 0.004237 + 1.2 * 2.95,
    "2": 0.0,
    "3": 0.2 * 2.95,
    "4": 0.2 * 2.95,
    "5": 3 / 7 * 0.5 * 2.95,
    "6": 4 * 0.031611 + 2 / 6 * 2.95,
    "7": ALLOC_USD["7"],
    "8": 0.031611 + 2 * 0.004237,
}


GOLD = ("gold.job_usage", "gold.user_month", "gold.account_month", "gold.cluster_month")
NOVEMBER = "month = '2026-11'"


def _gold(ctx: Any) -> dict[str, list[dict[str, Any]]]:
    """Every gold table as plain rows (for checks of single values)."""
    return {
        name: [r.asDict(recursive=True) for r in read_table(ctx.spark, ctx.settings, name).collect()]
        for name in GOLD
    }


def _snapshot(ctx: Any) -> dict[str, DataFrame]:
    """Every gold table as it is now: its rows in a frame with the table's schema (for whole-table equality
    after later builds have rewritten the table)."""
    out = {}
    for name in GOLD:
        table = read_table(ctx.spark, ctx.settings, name)
        out[name] = ctx.spark.createDataFrame(table.collect(), table.schema)
    return out


def _month(rows: list[dict[str, Any]], month: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["month"] == month]


@pytest.mark.slow
def test_build_is_incremental_idempotent_and_feeds_waste(jobfit, make_ctx) -> None:
    ctx = make_ctx()
    jobs, samples = scenario()
    october = job_row(job_id="10", **DAVE, **use(2, 1.0), start_ts=OCT, end_ts=OCT + timedelta(hours=1))
    append_silver(ctx, "silver.jobs", [*jobs, october])
    append_silver(ctx, "silver.gpu_samples", samples)

    first = jobfit("build", "--cluster", "demo", "--json")
    assert first.code == 0, first.err
    report = json.loads(first.out)
    assert [(m["month"], m["jobs"]) for m in report["built"]] == [("2026-10", 1), ("2026-11", 8)]
    assert report["price_sheets"] == {"demo": "conf/clusters/demo.yaml"}

    gold = _gold(ctx)
    snapshot = _snapshot(ctx)
    (nov,) = _month(gold["gold.cluster_month"], "2026-11")
    assert (nov["jobs"], nov["gpu_jobs"], nov["gpu_jobs_no_telemetry"], nov["failed_user_fixable_jobs"]) == (
        8,
        6,
        1,
        1,
    )
    assert nov["alloc_usd"] == pytest.approx(sum(ALLOC_USD.values()), abs=1e-5)
    assert nov["wasted_usd"] == pytest.approx(sum(WASTED_USD.values()), abs=1e-5)
    assert nov["wasted_share_pct"] == pytest.approx(
        100 * sum(WASTED_USD.values()) / sum(ALLOC_USD.values()), abs=1e-4
    )
    # CPU: allocated 8+4+1+1+1+16+8+2 = 41 core-h; wasted 4 (job 1) + 4 (job 6) + 1 (job 8) = 9.
    assert (nov["cpu_alloc_core_h"], nov["cpu_wasted_core_h"]) == (41.0, 9.0)
    # GPU: 2 + 1 + 0.5 + 0.5 + 3/7 + 2 allocated; idle only job 1's idle GPU; job 2 (no telemetry) adds none.
    assert nov["gpu_alloc_h"] == pytest.approx(6 + 3 / 7, abs=1e-5)
    assert nov["gpu_idle_h"] == 1.0
    assert nov["gpu_underused_h"] == pytest.approx(1.2 + 0.2 + 0.2 + 3 / 14 + 1 / 3, abs=1e-5)
    assert nov["failed_run_usd"] == pytest.approx(ALLOC_USD["7"], abs=1e-6)
    assert [u["user"] for u in nov["top_users"]] == ["alice", "bob", "carol"]
    users = {r["user"]: r for r in _month(gold["gold.user_month"], "2026-11")}
    assert [j["job_id"] for j in users["bob"]["top_jobs"]] == ["5", "3", "4"]  # 3 and 4 tie: by id
    assert [j["job_id"] for j in users["alice"]["top_jobs"]] == ["1"]  # job 2 wasted nothing
    accounts = {r["account"]: r["wasted_usd"] for r in _month(gold["gold.account_month"], "2026-11")}
    ml = sum(WASTED_USD[j] for j in "12345")
    assert accounts == pytest.approx({"ml": ml, "phys": sum(WASTED_USD[j] for j in "678")}, abs=1e-5)

    # Forcing a month rebuilds it from the same silver: identical rows.
    forced = jobfit("build", "--cluster", "demo", "--month", "2026-11", "--json")
    assert forced.code == 0, forced.err
    for name, expected in snapshot.items():
        assertDataFrameEqual(read_table(ctx.spark, ctx.settings, name), expected, rtol=0, atol=0)

    # Late data for October: only October is rebuilt; November's rows stay exactly as they were.
    late = {**october, "job_id": "11", **use(4, 0.0), "ingested_at": datetime(2026, 12, 2, 6, 0, 0)}
    merge_into(ctx.spark, ctx.settings, "silver.jobs", jobs_frame(ctx.spark, [late]))  # as ingest writes
    after_late = json.loads(jobfit("build", "--json").out)
    assert [m["month"] for m in after_late["built"]] == ["2026-10"]
    assert after_late["up_to_date"] == [{"cluster": "demo", "month": "2026-11"}]
    for name, expected in snapshot.items():
        table = read_table(ctx.spark, ctx.settings, name)
        assertDataFrameEqual(table.where(NOVEMBER), expected.where(NOVEMBER), rtol=0, atol=0)
    regold = _gold(ctx)
    (octo,) = _month(regold["gold.cluster_month"], "2026-10")
    # October: job 10 wastes 1 of 2 core-h, late job 11 all 4 core-h.
    assert (octo["jobs"], octo["cpu_wasted_core_h"]) == (2, 5.0)
    assert octo["wasted_usd"] == pytest.approx(5 * 0.031611, abs=1e-6)

    # jobfit waste: the headline first, then the breakdowns; --json as documented.
    text = jobfit("waste", "--cluster", "demo", "--month", "2026-11")
    assert text.code == 0, text.err
    share = 100 * sum(WASTED_USD.values()) / sum(ALLOC_USD.values())
    first_line = text.out.splitlines()[0]
    assert first_line == (
        f"demo 2026-11: ${sum(WASTED_USD.values()):,.2f} of ${sum(ALLOC_USD.values()):,.2f} allocated "
        f"was wasted ({share:.1f} %)"
    )
    assert "1 GPU job(s) without telemetry" in text.out
    payload = json.loads(jobfit("waste", "--cluster", "demo", "--json", "--top", "2").out)
    assert payload["month"] == "2026-11"  # the latest built month by default
    assert set(payload) == {
        "cluster",
        "month",
        "headline",
        "by_resource",
        "by_partition",
        "by_account",
        "by_user",
        "kubernetes",
        "price_sheet",
    }
    assert payload["kubernetes"]["pods_with_usage"] == 0  # no pod usage ingested (tests/test_k8s_metrics.py)
    assert [r["resource"] for r in payload["by_resource"]] == ["cpu", "memory", "gpu", "failed_runs"]
    assert [r["user"] for r in payload["by_user"]] == ["alice", "bob"]
    assert {r["partition"] for r in payload["by_partition"]} == {"gpu", "cpu"}
    assert payload["price_sheet"]["core_hour_usd"] == 0.031611

    missing = jobfit("waste", "--cluster", "demo", "--month", "2025-01")
    assert missing.code == 2 and missing.err.count("\n") == 1 and "jobfit build" in missing.err
    bad = jobfit("waste", "--month", "2026-13")
    assert bad.code == 2 and bad.err.count("\n") == 1


def test_empty_silver_builds_nothing_and_waste_says_so(jobfit) -> None:
    built = jobfit("build")
    assert built.code == 0 and built.out.strip() == "nothing to build: silver.jobs has no finished jobs"
    res = jobfit("waste", "--cluster", "demo")
    assert res.code == 2 and res.err.count("\n") == 1 and "jobfit build" in res.err
