"""`jobfit demo`: simulates, ingests through the `jobfit ingest` runners, runs the later stages (a stage's
error is a failed step, the demo goes on and exits 1), and reports tables; bad arguments exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.commands import demo
from jobs.context import UsageError


@pytest.mark.slow
def test_demo_ingests_through_the_cli_and_summarises(
    jobfit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pods are the quickest source (every source is ingested in test_simulator_ingest.py, and the later
    # stages have their own tests). A source no runner provides is reported as skipped; a stage that
    # refuses its input is a failed step with its message, after which the demo still reports.
    def refuses(ctx, cluster: str, month: str, out: Path) -> dict:
        raise UsageError(f"no gold for {cluster} {month}")

    monkeypatch.setattr(demo, "INGEST_ORDER", (("k8s", "k8s"), ("dcgm", "nonexistent")))
    monkeypatch.setattr(demo, "STAGES", (("refuses", refuses, ("--month", "{month}")),))
    out = tmp_path / "demo"
    res = jobfit("demo", "--jobs", "60", "--seed", "3", "--month", "2026-02", "--out", str(out), "--json")
    assert res.code == 1, res.err
    assert "demo steps failed: refuses" in res.err
    report = json.loads(res.out)
    assert report["month"] == "2026-02" and report["cluster"] == "demo"
    assert report["simulation"]["jobs"] == 60 and report["simulation"]["pods"] == 6
    truth = pd.read_parquet(out / "truth.parquet")
    assert len(truth) == 60
    steps = {s["command"]: s for s in report["steps"]}
    from jobs.commands.ingest import SOURCES

    assert "k8s" in SOURCES
    step = steps["ingest k8s"]
    assert step["exit"] == 0 and step["result"]["quarantined"] == 0
    assert step["argv"] == ["ingest", "k8s", str(out / "k8s"), "--cluster", "demo"]
    assert step["result"]["read"] == 6
    assert report["tables"]["silver.jobs"] == 6
    assert report["skipped"] == ["ingest nonexistent"]
    refused = steps["refuses"]
    assert refused["exit"] == 2 and refused["result"] is None
    assert refused["error"] == "no gold for demo 2026-02"
    assert refused["argv"] == ["refuses", "--cluster", "demo", "--month", "2026-02"]
    assert "quarantine" not in report["tables"] or report["tables"]["quarantine"] == 0
    assert "demo:" in res.err  # progress on stderr, results on stdout


def test_demo_text_summary_and_bad_arguments(jobfit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "INGEST_ORDER", ())
    monkeypatch.setattr(demo, "STAGES", ())
    res = jobfit("demo", "--jobs", "20", "--month", "2026-01", "--out", str(tmp_path / "d"))
    assert res.code == 0, res.err
    assert "simulated on demo for 2026-01" in res.out
    assert (tmp_path / "d" / "sacct").is_dir()
    bad = jobfit("demo", "--jobs", "0", "--out", str(tmp_path / "d"))
    assert bad.code == 2 and bad.err.count("\n") == 1 and "--jobs" in bad.err
    (tmp_path / "file").write_text("x")
    bad = jobfit("demo", "--jobs", "5", "--out", str(tmp_path / "file"))
    assert bad.code == 2 and "not a folder" in bad.err
    bad = jobfit("simulate", "--cluster", "demo", "--month", "2026-13", "--out", str(tmp_path / "s"))
    assert bad.code == 2 and bad.err.count("\n") == 1
