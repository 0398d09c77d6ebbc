"""`jobfit report`: the PDFs read back with pdftotext agree with the gold tables to the cent; fonts are
embedded, pages numbered, the contents list pages; a bare month (one user, no GPU, no failure) renders."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.cli import main
from jobs.io.tables import read_table
from pipelines.gold.failures.taxonomy import CAUSES
from reports.charts import bar_chart, trend_chart
from reports.format import num, pct, usd
from reports.model import sbatch_changes
from tests.report_month import CLUSTER, MONTH, BuiltMonth
from tests.rows import T0, append_silver, job_row, use


def pdf_text(path: Path) -> str:
    """The PDF's text as pdftotext lays it out (one table row per line)."""
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout


def report(built: BuiltMonth, out: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    code = main(
        ["report", "--cluster", CLUSTER, "--month", MONTH, "--out", str(out), "--json", *args],
        ctx=built.ctx(),
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def gold_row(built: BuiltMonth, table: str, **where: str) -> dict[str, Any]:
    ctx = built.ctx()
    df = read_table(ctx.spark, ctx.settings, table).where(
        (F.col("cluster") == CLUSTER) & (F.col("month") == MONTH)
    )
    for column, value in where.items():
        df = df.where(F.col(column) == value)
    rows = df.collect()
    assert len(rows) == 1
    return rows[0].asDict()


def flat(text: str) -> str:
    """The text with every run of white space (line breaks too) made one space, for whole sentences."""
    return " ".join(text.split())


def line_with(text: str, *needles: str) -> str:
    """The one line of `text` holding every needle."""
    lines = [ln for ln in text.splitlines() if all(n in ln for n in needles)]
    assert lines, f"no line with {needles}"
    return lines[0]


@pytest.fixture(scope="module")
def rendered(built_month: BuiltMonth, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every report of the month (admin plus one per account) and one user report, rendered once."""
    out = tmp_path_factory.mktemp("reports")
    ctx = built_month.ctx()
    from jobs.stages.report import make_reports

    everything = make_reports(ctx, CLUSTER, MONTH, None, None, None, out)
    top_user = max(
        read_table(ctx.spark, ctx.settings, "gold.user_month").where(F.col("month") == MONTH).collect(),
        key=lambda r: (r["wasted_usd"], r["user"]),
    )["user"]
    one_user = make_reports(ctx, CLUSTER, MONTH, "user", None, top_user, out)
    return {"all": everything, "user": one_user, "top_user": top_user, "out": out}


pytestmark = pytest.mark.slow  # one simulated month built to gold and trained, shared with test_emails


def test_admin_headline_resources_and_failures_equal_gold_to_the_cent(
    built_month: BuiltMonth, rendered: dict[str, Any]
) -> None:
    admin = next(r for r in rendered["all"]["reports"] if r["audience"] == "admin")
    text = pdf_text(Path(admin["path"]))
    head = gold_row(built_month, "gold.cluster_month")
    assert f"{pct(head['wasted_share_pct'])} of allocated capacity wasted" in flat(text)
    assert f"Wasted: {usd(head['wasted_usd'])} of {usd(head['alloc_usd'])} allocated" in flat(text)
    for label, column in (
        ("CPU", "cpu_wasted_usd"),
        ("Memory", "mem_wasted_usd"),
        ("GPU under-use", "gpu_underused_usd"),
        ("of which idle GPUs", "gpu_idle_usd"),
        ("Failed runs (user-fixable)", "failed_run_usd"),
    ):
        row = line_with(text, label, usd(head[column]), " %")  # the table's row (a chart label has no share)
        assert row.strip().startswith(label), row
    assert usd(head["wasted_usd"]) in line_with(text, "Total wasted")
    # The failure table: one line per cause with its jobs, user-fixable jobs and dollars lost.
    ctx = built_month.ctx()
    causes = (
        read_table(ctx.spark, ctx.settings, "gold.failures")
        .where((F.col("cluster") == CLUSTER) & (F.col("month") == MONTH))
        .groupBy("cause")
        .agg(
            F.count("*").alias("jobs"),
            F.sum(F.col("user_fixable").cast("int")).alias("fixable"),
            F.sum("lost_usd").alias("usd"),
        )
        .collect()
    )
    assert causes, "the simulated month has failures"
    for c in causes:
        title = CAUSES[c["cause"]].title
        rows = [ln for ln in text.splitlines() if ln.strip().startswith(title + " ")]
        table = [ln for ln in rows if re.search(rf"{re.escape(title)}\s+{c['jobs']}\s+{c['fixable']}\s", ln)]
        assert table and table[0].rstrip().endswith(usd(c["usd"])), rows
    assert f"{sum(c['jobs'] for c in causes)} failed or cancelled jobs" in flat(text)
    assert "None" not in text and "nan" not in text.lower().split()


def test_admin_report_ranks_bottlenecks_by_recoverable_gpu_hours_as_gold(
    built_month: BuiltMonth, rendered: dict[str, Any]
) -> None:
    ctx = built_month.ctx()
    findings = (
        read_table(ctx.spark, ctx.settings, "gold.job_bottlenecks")
        .where((F.col("cluster") == CLUSTER) & (F.col("month") == MONTH))
        .collect()
    )
    assert {f["source"] for f in findings} == {"profiler", "dcgm"}, "traces and counters both found some"
    admin = next(r for r in rendered["all"]["reports"] if r["audience"] == "admin")
    text = flat(pdf_text(Path(admin["path"])))
    total_h = sum(f["gpu_hours_recoverable"] or 0.0 for f in findings)
    total_usd = sum(f["usd_recoverable"] or 0.0 for f in findings)
    jobs = len({f["job_id"] for f in findings})
    said = f"{len(findings)} finding(s) on {jobs} profiled or counter-monitored job(s): {num(total_h)} GPU-h"
    assert said in text
    assert f"({usd(total_usd)}) recoverable" in text
    # The costliest finding leads the table, with its job, kind and (from a trace with stacks) the line.
    top = max(findings, key=lambda f: (f["gpu_hours_recoverable"] or 0.0, f["job_id"]))
    section = text.split("Top bottlenecks by recoverable GPU-hours")[1]
    assert section.split()[section.split().index("$") + 1] == top["job_id"], section[:300]
    if top["code"] is not None:
        assert Path(top["code"]["file"]).name in section[:600]
    # A user's report shows only that user's findings.
    user_pdf = flat(pdf_text(Path(rendered["user"]["reports"][0]["path"])))
    theirs = [f for f in findings if f["user"] == rendered["top_user"]]
    assert (
        f"{len(theirs)} finding(s)" in user_pdf if theirs else "No bottleneck finding this month" in user_pdf
    )


def test_every_account_gets_its_report_equal_to_account_month(
    built_month: BuiltMonth, rendered: dict[str, Any]
) -> None:
    ctx = built_month.ctx()
    accounts = {
        r["account"]
        for r in read_table(ctx.spark, ctx.settings, "gold.account_month")
        .where(F.col("month") == MONTH)
        .collect()
    }
    made = {r["account"]: r for r in rendered["all"]["reports"] if r["audience"] == "account"}
    assert set(made) == accounts and len(accounts) >= 2
    account = sorted(accounts)[0]
    text = pdf_text(Path(made[account]["path"]))
    head = gold_row(built_month, "gold.account_month", account=account)
    assert f"Account report: account {account} on {CLUSTER}" in flat(text)
    assert f"Wasted: {usd(head['wasted_usd'])} of {usd(head['alloc_usd'])} allocated" in flat(text)
    assert usd(head["cpu_wasted_usd"]) in line_with(text, "CPU", usd(head["cpu_wasted_usd"]))


def test_user_report_lists_jobs_failures_and_sbatch_lines(
    built_month: BuiltMonth, rendered: dict[str, Any]
) -> None:
    (made,) = rendered["user"]["reports"]
    user = rendered["top_user"]
    text = pdf_text(Path(made["path"]))
    head = gold_row(built_month, "gold.user_month", user=user)
    assert f"Wasted: {usd(head['wasted_usd'])} of {usd(head['alloc_usd'])} allocated" in flat(text)
    assert "3. Your jobs" in text
    assert head["top_jobs"], "the simulated month's busiest user wasted something"
    top_job = head["top_jobs"][0]
    rows = [ln for ln in text.splitlines() if ln.strip().startswith(top_job["job_id"] + " ")]
    assert rows and rows[0].rstrip().endswith(usd(top_job["wasted_usd"])), rows
    assert rendered["user"]["recommendations"]["status"] == "ok"
    assert "#SBATCH --" in text or "No recommendation would have saved money" in flat(text)


def test_print_layout_fonts_pages_and_contents(rendered: dict[str, Any]) -> None:
    admin = next(r for r in rendered["all"]["reports"] if r["audience"] == "admin")
    path = Path(admin["path"])
    fonts = subprocess.run(["pdffonts", str(path)], check=True, capture_output=True, text=True).stdout
    rows = fonts.splitlines()[2:]
    assert rows and all(" yes " in r for r in rows), fonts  # every font embedded (the "emb" column)
    assert any("DejaVu" in r for r in rows)
    text = pdf_text(path)
    pages = admin["pages"]
    assert pages >= 5 and f"page {pages} of {pages}" in text and f"page 1 of {pages}" in text
    toc = line_with(text, "5. Failures", ".")
    assert re.search(r"\.\s*\d+\s*$", toc), toc  # a leader and the section's page number


def test_bare_month_renders_without_none_or_empty_charts(spark, make_ctx, tmp_path: Path, capsys) -> None:
    """One user, CPU only, nothing failed, no recommendation model: every section says so in words."""
    ctx = make_ctx()
    end = T0 + timedelta(hours=2)
    append_silver(
        ctx,
        "silver.jobs",
        [
            job_row(job_id="1", user="solo", account="acct", partition="cpu", **use(4, 2.0, 8, 2)),
            job_row(
                job_id="2",
                user="solo",
                account="acct",
                partition="cpu",
                **use(2, 2.0),
                end_ts=end,
                elapsed_s=7200,
            ),
        ],
    )
    assert main(["build", "--cluster", CLUSTER, "--month", MONTH], ctx=ctx) == 0
    out = tmp_path / "out"
    for args in ((), ("--user", "solo")):
        capsys.readouterr()
        code = main(
            ["report", "--cluster", CLUSTER, "--month", "2026-11", "--out", str(out), "--json", *args],
            ctx=ctx,
        )
        payload = json.loads(capsys.readouterr().out)
        assert code == 0
        for made in payload["reports"]:
            text = flat(pdf_text(Path(made["path"])))
            assert "None" not in text and "nan" not in text.split()
            assert "No job failed this month." in text
            assert "No recommendations: no champion models for cluster demo" in text
            assert "No GPU job has VRAM telemetry this month" in text
    admin = flat(pdf_text(out / "demo-2026-11-admin.pdf"))
    assert "No GPU jobs this month." in admin and "No record of demo has been quarantined." in admin


def test_bad_input_exits_2_with_one_line(jobfit, built_month: BuiltMonth, tmp_path: Path) -> None:
    env = {"warehouse": str(built_month.warehouse)}
    cases = [
        (("--audience", "user"), "--audience user needs --user U"),
        (("--account", "a", "--user", "u"), "not both"),
        (("--audience", "admin", "--user", "u"), "does not go with --user u"),
        (("--user", "nobody"), "user nobody has no finished jobs"),
        (("--account", "nobody"), "account nobody has no finished jobs"),
    ]
    for args, message in cases:
        res = jobfit("report", "--cluster", CLUSTER, "--month", MONTH, "--out", str(tmp_path), *args, **env)
        assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
        assert len(res.err.strip().splitlines()) == 1
    res = jobfit("report", "--cluster", CLUSTER, "--month", "2020-01", "--out", str(tmp_path), **env)
    assert res.code == 2 and "no gold for demo 2020-01" in res.err


def test_charts_and_sbatch_lines() -> None:
    """The pieces the reports lean on: charts refuse empty input, sbatch lines are found by option."""
    assert bar_chart([], usd, "t") is None and bar_chart([("a", 0.0), ("b", None)], usd, "t") is None
    svg = bar_chart([("a<b", 2.0), ("c", 1.0)], usd, "t")
    assert svg is not None and "a&lt;b" in svg and "$2.00" in svg and svg.count("<rect") == 2
    assert trend_chart([("2026-10", None)], pct, "t") is None
    assert trend_chart([("2026-10", None), ("2026-11", 5.0)], pct, "t").count("<rect") == 1  # type: ignore[union-attr]
    script = "#!/bin/bash\n#SBATCH --mem=64G\n#SBATCH -t 12:00:00\n#SBATCH --gres=gpu:a100:1\nsrun x\n"
    changes = sbatch_changes(
        script, ["--mem=12544M", "--time=01:12:00", "--gres=gpu:1g.10gb:1", "--cpus-per-task=2"]
    )
    assert [c["now"] for c in changes] == [
        "#SBATCH --mem=64G",
        "#SBATCH -t 12:00:00",
        "#SBATCH --gres=gpu:a100:1",
        None,
    ]
    assert changes[0]["new"] == "#SBATCH --mem=12544M"
    assert usd(1234.565) in ("$1,234.56", "$1,234.57") and usd(None) == "unknown" and pct(None) == "n/a"
