"""`jobfit ingest sacct` writes the same rows, quarantine and counts as the snapshot recorded before the
ingest was made faster (issue 18): a simulated month (with injected bad records and jobstats summaries),
reportseff's real sacct lines, a later dump that updates and supersedes stored rows, and a re-ingest.

The snapshot is tests/data/ingest_equivalence/: one sorted CSV per table (every column but `ingested_at`;
file paths relative to the test's folder) and the runs' --json reports. A deliberate change of the
ingest's output re-records it: `JOBFIT_RECORD_GOLDEN=1 .venv/bin/python -m pytest -q
tests/test_ingest_equivalence.py` (then read the diff before committing it)."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from jobs.io.tables import read_table
from pipelines import schemas
from pipelines.silver import sacct
from tests.test_sacct import real_groups
from tests.test_sacct_ingest import DUMP_A, DUMP_B, HEADER

GOLDEN = Path(__file__).parent / "data" / "ingest_equivalence"
# The simulated month, stored rather than simulated at test time: a change to the simulator's draws must not
# read as a change of the ingest. Written by `jobfit simulate`'s `simulate(load_cluster("demo"), "2026-03",
# 120, seed=18, inject_bad=9, jobstats_share=0.5)` (its sacct/ folder).
SIM_SACCT = GOLDEN / "sim_sacct"
RECORD = os.environ.get("JOBFIT_RECORD_GOLDEN") == "1"
TABLES = (schemas.SILVER_JOBS, schemas.SILVER_JOB_STEPS, schemas.SILVER_JOBSTATS, schemas.QUARANTINE)
# Report fields that time the run rather than count it.
_UNCOUNTED = ("phases_s",)


T_SUBMIT, T_START, T_END = "2026-03-02T08:00:00", "2026-03-02T09:00:00", "2026-03-02T10:00:00"


def _job(
    job_id: str, submit: str = T_SUBMIT, start: str = T_START, end: str = T_END, comment: str = ""
) -> str:
    return (
        f"{job_id}|{job_id}|j|dave|lab|gpu|COMPLETED|0:0|{submit}|{start}|{end}|01:00:00|02:00:00|4|16G||1|1|"
        f"cpu=4,mem=16G,node=1,gres/gpu=1|01:00:00||{comment}"
    )


def _step(step_id: str, usage: str = "") -> str:
    times = f"{T_SUBMIT}|{T_START}|{T_END}"
    return f"{step_id}|{step_id}|batch|||gpu|COMPLETED|0:0|{times}|01:00:00||4||1G|1|1||00:30:00|{usage}|"


# Records that parse but fail an expectation (row level: quarantined with the expectation as the reason),
# one failing two, a GPU utilisation that is not a number, and a jobstats comment that does not decode.
CHECKS = [
    HEADER + "|AdminComment",
    _job("700"),
    _step("700.batch"),
    _step("700.0", "cpu=00:30:00,gres/gpuutil=150"),  # utilisation above 100 %
    _job("701", end="2026-03-02T08:30:00"),  # ends before it starts
    _job("702", start="2026-03-02T07:00:00", end="2026-03-02T06:00:00"),  # starts before submit, ends before
    _job("703", comment="JS1:Short"),
    _job("704"),
    _step("704.0", "cpu=00:30:00,gres/gpuutil=NaN"),
    _job("705"),
    _step("705.batch", "gres/gpumem=1000M,gres/gpuutil=55"),
    _job("706"),
    _job("707"),
]


def _real_files(real_data: Path, folder: Path) -> Path:
    """reportseff's real lines, one file per fixture group with its field order as the header line."""
    folder.mkdir()
    groups = real_groups(real_data / "sacct" / "reportseff_tests_sacct_lines.txt")
    for order, (_, (fmt, lines)) in enumerate(groups.items()):
        trailing = "|" if all(line.endswith("|") for line in lines) else ""
        header = "|".join(sacct.split_format(fmt)) + trailing
        (folder / f"group{order:02d}.txt").write_text("\n".join([header, *lines]) + "\n")
    return folder


def _table_csv(ctx, spec: schemas.TableSpec, root: Path) -> str:
    """The table's rows as CSV text: sorted by key and line, without `ingested_at`, paths relative."""
    frame = read_table(ctx.spark, ctx.settings, spec.name).drop("ingested_at").toPandas()
    frame["source_file"] = frame["source_file"].str.replace(f"{root}/", "", regex=False)
    frame = frame.sort_values([*spec.key, "source_file", "line_no"], kind="stable").reset_index(drop=True)
    return frame.to_csv(index=False, lineterminator="\n")


def _rows(text: str) -> list[str]:
    return text.splitlines()


def _ingest(jobfit, path: Path | list[Path], cluster: str) -> dict:
    paths = [str(p) for p in (path if isinstance(path, list) else [path])]
    result = jobfit("ingest", "sacct", *paths, "--cluster", cluster, "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    return {k: v for k, v in report.items() if k not in _UNCOUNTED}


def test_sacct_ingest_matches_the_recorded_snapshot(
    jobfit, make_ctx, tmp_path: Path, real_data: Path
) -> None:
    sim = tmp_path / "sim"
    shutil.copytree(SIM_SACCT, sim / "sacct")
    real = _real_files(real_data, tmp_path / "real")
    dump_a, dump_b = tmp_path / "a.txt", tmp_path / "b.txt"
    dump_a.write_text("\n".join(DUMP_A) + "\n")
    dump_b.write_text("\n".join(DUMP_B) + "\n")
    checks = tmp_path / "checks.txt"
    checks.write_text("\n".join(CHECKS) + "\n")

    reports = {
        "simulated month": _ingest(jobfit, sim / "sacct", "demo"),
        "real lines": _ingest(jobfit, real, "real"),
        "dump a": _ingest(jobfit, dump_a, "later"),
        "dump b (updates, supersedes)": _ingest(jobfit, dump_b, "later"),
        "expectations fail": _ingest(jobfit, checks, "checks"),
        "simulated month again": _ingest(jobfit, sim / "sacct", "demo"),
        "both dumps again, b first": _ingest(jobfit, [dump_b, dump_a], "later"),
    }
    ctx = make_ctx()
    tables = {spec.name: _table_csv(ctx, spec, tmp_path) for spec in TABLES}
    reports_text = json.dumps(reports, indent=1, sort_keys=True) + "\n"

    if RECORD:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / "reports.json").write_text(reports_text)
        for name, text in tables.items():
            (GOLDEN / f"{name}.csv").write_text(text)
        pytest.skip(f"recorded the snapshot under {GOLDEN}")

    assert json.loads(reports_text) == json.loads((GOLDEN / "reports.json").read_text())
    for name, text in tables.items():
        expected = (GOLDEN / f"{name}.csv").read_text()
        got_rows, want_rows = _rows(text), _rows(expected)
        assert got_rows[0] == want_rows[0], f"{name}: columns differ"
        missing = sorted(set(want_rows) - set(got_rows))
        extra = sorted(set(got_rows) - set(want_rows))
        assert not missing and not extra and len(got_rows) == len(want_rows), (
            f"{name}: {len(want_rows) - 1} rows recorded, {len(got_rows) - 1} now; "
            f"recorded but not written now (first 5): {missing[:5]}; written but not recorded: {extra[:5]}"
        )
        # Same rows, also by value: the CSV text compares floats and timestamps as written.
        pd.testing.assert_frame_equal(
            pd.read_csv(io.StringIO(text), dtype=str), pd.read_csv(io.StringIO(expected), dtype=str)
        )


def test_spark_verdicts_are_great_expectations_verdicts(spark) -> None:
    # The same batch through GX on pandas (`validate`) and through the compiled predicates: same rows kept,
    # same rejects with the same reasons, same counts.
    from jobs.io.validate import validate, validate_in_spark
    from jobs.stages.ingest.sacct import parse_files
    from tests.test_sacct import bronze_of

    bronze = bronze_of(spark, {"checks": CHECKS}, cluster="checks")
    layout = sacct.detect_layout(CHECKS, None)
    parsed = parse_files(bronze, {bronze.first()["file_sha256"]: layout}).persist()
    steps = sacct.filter_latest(sacct.with_steps(parsed), schemas.SILVER_JOB_STEPS).persist()
    jobs = sacct.filter_latest(sacct.with_jobs(parsed, steps), schemas.SILVER_JOBS).persist()
    for spec, frame in ((schemas.SILVER_JOB_STEPS, steps), (schemas.SILVER_JOBS, jobs)):
        by_gx, by_spark = validate(frame, spec.name, "sacct"), validate_in_spark(frame, spec.name, "sacct")
        assert (by_spark.rows, by_spark.rejected, by_spark.failures) == (
            by_gx.rows,
            by_gx.rejected,
            by_gx.failures,
        )
        assert by_gx.rejected > 0
        assert sorted(by_spark.rejects.collect()) == sorted(by_gx.rejects.collect())
        key = [*spec.key, "line_no"]
        assert sorted(by_spark.valid.select(*key).collect()) == sorted(by_gx.valid.select(*key).collect())
    for frame in (jobs, steps, parsed):
        frame.unpersist()


def test_gpu_sample_verdicts_in_spark_are_great_expectations_verdicts(spark) -> None:
    # The DCGM ingest validates a batch of 100,000 samples or more in Spark (`validate_batch`): on a batch
    # with a utilisation above 100 %, a profiling ratio given as a percentage and a negative power, both paths
    # keep and reject the same rows with the same reasons and counts.
    from pyspark.sql import functions as F

    from jobs.io.validate import validate, validate_in_spark
    from pipelines.schemas import SILVER_GPU_SAMPLES
    from tests.rows import sample_rows, samples_frame

    rows = sample_rows("7", "g001", "0/a", 55.0, seconds=1200) + sample_rows(
        "8", "g002", "1/b", 40.0, seconds=600
    )
    rows[3]["gpu_util_pct"] = 140.0
    rows[11]["sm_active_frac"] = 87.0
    rows[30]["power_w"] = -5.0
    for i, row in enumerate(rows):
        row.update(source_file="g001-20260301.prom", line_no=i + 1)
    frame = samples_frame(spark, rows).withColumn("raw", F.lit("DCGM_FI_DEV_GPU_UTIL 55")).persist()
    by_gx = validate(frame, SILVER_GPU_SAMPLES.name, "dcgm")
    by_spark = validate_in_spark(frame, SILVER_GPU_SAMPLES.name, "dcgm")
    assert (by_spark.rows, by_spark.rejected, by_spark.failures) == (
        by_gx.rows,
        by_gx.rejected,
        by_gx.failures,
    )
    assert by_gx.rejected == 3
    assert sorted(by_spark.rejects.collect()) == sorted(by_gx.rejects.collect())
    key = ["source_file", "line_no"]
    assert sorted(by_spark.valid.select(*key).collect()) == sorted(by_gx.valid.select(*key).collect())
    frame.unpersist()
