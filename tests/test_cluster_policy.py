"""One policy for a cluster without conf/clusters/<name>.yaml: every command that prices or sizes it uses the
default price sheet and says so (once `failures --job` refused such a cluster while `build` priced it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conf import DEFAULT_PRICES
from jobs.context import DEFAULT_SHEET

# Two SWF jobs on a cluster with no yaml: job 1 completed, job 2 failed (status 0), 2 processors each.
LOG = """; UnixStartTime: 1767225600
    1   10   5   3600   2   1800   -1   2   7200   -1   1   7   3   -1   1   -1   -1   -1
    2   20   5   1800   2    900   -1   2   7200   -1   0   7   3   -1   1   -1   -1   -1
"""


@pytest.mark.slow
def test_a_cluster_without_yaml_is_priced_by_the_default_sheet_everywhere(jobfit, tmp_path: Path) -> None:
    log = tmp_path / "x.swf"
    log.write_text(LOG)
    assert jobfit("ingest", "swf", str(log), "--cluster", "noyaml").code == 0

    built = jobfit("build", "--cluster", "noyaml", "--json")
    assert built.code == 0, built.err
    report = json.loads(built.out)
    assert report["price_sheets"] == {"noyaml": DEFAULT_SHEET}
    month = report["built"][0]
    assert month["failures"]["jobs"] == 1  # diagnosed too, not skipped for want of a yaml
    assert f"noyaml: no conf/clusters/noyaml.yaml; using {DEFAULT_SHEET}" in built.err
    # 2 cores for 1.5 h in all, at the default core-hour price (no memory request, no GPUs)
    assert month["alloc_usd"] == round(DEFAULT_PRICES.core_hour_usd * 2 * 1.5, 6)

    one = jobfit("failures", "--cluster", "noyaml", "--job", "2", "--json")
    assert one.code == 0, one.err
    diagnosis = json.loads(one.out)
    assert diagnosis["cause"] is not None and diagnosis["price_sheet"] == DEFAULT_SHEET
    summary = jobfit("failures", "--cluster", "noyaml", "--month", "2026-01", "--json")
    assert summary.code == 0 and json.loads(summary.out)["price_sheet"] == DEFAULT_SHEET


def test_simulate_still_needs_the_clusters_capacity(jobfit, tmp_path: Path) -> None:
    res = jobfit("simulate", "--cluster", "noyaml", "--month", "2026-01", "--out", str(tmp_path / "s"))
    assert res.code == 2 and res.err.count("\n") == 1 and "noyaml" in res.err
