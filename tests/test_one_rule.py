"""One rule per meaning (issue 12): each meaning below used to be stated twice with different answers.

- unknown JOBFIT_* variables are named, with the valid ones listed;
- clusters/<name>.yaml is read from the same conf folder as the settings (JOBFIT_CONF_DIR);
- a MIG profile's size is read one way (its number as GB) by the waste build and by `jobfit recommend`;
- GIB is defined once (pipelines/units.py);
- table column lists are the TableSpecs' (pipelines/schemas.py), not restated by hand.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf import ConfigError, cluster_names, env_names, load_cluster, load_settings, resolve_conf_dir
from jobs.commands.failures import JOB_FIELDS
from jobs.context import Context
from jobs.io.prediction import JOB_COLUMNS
from models.recommend import choose_gpu, gpu_options
from pipelines.gold.waste import SUMMED_COLUMNS, job_usage, vram_fit_options
from pipelines.schemas import GOLD_FAILURES, GOLD_JOB_USAGE, GOLD_USER_MONTH, SILVER_JOBS
from pipelines.silver.k8s import parse_pod
from pipelines.silver.swf import SwfHeader, parse_swf
from pipelines.units import GIB, MEM_FACTORS, mig_fraction, mig_slices_col, parse_mig_profile
from tests.rows import job_row, jobs_frame, samples_frame

REPO = Path(__file__).resolve().parents[1]
GB, BINARY_GIB = 10**9, 1024**3  # independent of pipelines.units on purpose


# ---- 1. unknown JOBFIT_* variables ----------------------------------------------------------------


def test_unknown_variable_is_named_with_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"JOBFIT_SPARK__MASTR": "yarn", "JOBFIT_WAREHOUSE": "./w"})
    message = str(caught.value)
    assert "Extra inputs are not permitted" not in message
    assert "JOBFIT_SPARK__MASTR" in message and "did you mean JOBFIT_SPARK__MASTER?" in message
    valid = message.split("valid variables: ", 1)[1].split(", ")
    assert valid == env_names()
    assert {"JOBFIT_CONF_DIR", "JOBFIT_WAREHOUSE", "JOBFIT_SPARK__MASTER", "JOBFIT_SMTP__HOST"} <= set(valid)
    assert "JOBFIT_PREDICT__UNDERPROVISION_RATE" in valid and "\n" not in message


def test_every_listed_variable_and_group_is_accepted() -> None:
    # Each valid name is one the loader takes (values that validate for their field).
    assert load_settings(
        {"JOBFIT_SPARK__DRIVER_MEMORY": "8g", "JOBFIT_DEFAULT_CLUSTER": "x"}
    ).spark.driver_memory
    settings = load_settings(
        {
            "JOBFIT_SPARK": "{master: yarn}",
            "JOBFIT_SPARK__CONF__SPARK.EXECUTOR.MEMORY": "8g",
            "JOBFIT_SMTP": "null",
        }
    )
    assert settings.spark.master == "yarn" and settings.spark.conf == {"spark.executor.memory": "8g"}
    with pytest.raises(ConfigError, match=r"JOBFIT_WAREHOUSE__DEEP \(no setting warehouse\.deep"):
        load_settings({"JOBFIT_WAREHOUSE__DEEP": "x"})


def test_unknown_variable_through_the_cli_is_one_line_exit_2(jobfit) -> None:
    res = jobfit("sql", "SELECT 1", spark__mastr="yarn")
    assert res.code == 2
    assert res.err.count("\n") == 1 and res.err.startswith("jobfit: error: settings (")
    assert "unknown variable JOBFIT_SPARK__MASTR" in res.err
    assert "JOBFIT_SPARK__MASTER" in res.err and "JOBFIT_MLFLOW__TRACKING_URI" in res.err
    assert "Extra inputs" not in res.err


# ---- 2. one conf folder for settings and clusters ------------------------------------------------


def test_load_cluster_honours_jobfit_conf_dir(tmp_path: Path) -> None:
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "x.yaml").write_text(
        "name: x\nscheduler: slurm\n"
        "prices: {core_hour_usd: 0.5, gib_hour_usd: 0.1, gpu_hour_usd: {default: 3}}\n"
    )
    (tmp_path / "base.yaml").write_text("default_cluster: x\n")
    environ = {"JOBFIT_CONF_DIR": str(tmp_path)}
    assert resolve_conf_dir(environ) == tmp_path
    assert load_settings(environ).default_cluster == "x"
    assert load_cluster("x", environ=environ).prices.core_hour_usd == 0.5
    assert cluster_names(environ=environ) == ["x"]
    with pytest.raises(ConfigError, match=r"known clusters: x\)"):
        load_cluster("demo", environ=environ)
    # Without the variable, the checkout's conf/ (which has no x).
    assert resolve_conf_dir({}) == REPO / "conf" and "x" not in cluster_names()
    # The commands read clusters through their Context, with its environment.
    config, _ = Context(environ=environ).cluster_config("x")
    assert (config.name, config.prices.gpu_hour_usd) == ("x", {"default": 3.0})
    assert Context(environ=environ).cluster("x").name == "x"


# ---- 3. MIG profiles: one parser ----------------------------------------------------------------


def test_parse_mig_profile() -> None:
    assert parse_mig_profile("1g.10gb") == (1, 10 * GB)
    assert parse_mig_profile(" 3G.40GB ") == (3, 40 * GB)
    assert parse_mig_profile("1g.10gb+me") == (1, 10 * GB)
    assert parse_mig_profile("7g.80gb") == (7, 80 * GB)
    for bad in ("a100", "10gb", "1g.10", "g.10gb", ""):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            parse_mig_profile(bad)
    assert (mig_fraction("3g.40gb"), mig_fraction("A100"), mig_fraction(None)) == (3 / 7, 1.0, 1.0)


def test_waste_and_recommend_read_mig_sizes_alike() -> None:
    demo = load_cluster("demo")
    by_waste = dict(vram_fit_options(demo))
    by_recommend = {
        f"{model} {profile}" if profile else model: size for size, model, profile in gpu_options(demo)
    }
    assert by_recommend == pytest.approx(by_waste)
    # A100-40GB's 1g.5gb holds 4.75 GiB (nvidia-smi mig -lgip): its name is GB, not GiB.
    assert by_waste["A100-SXM4-40GB 1g.5gb"] == 5 * GB < 4.75 * BINARY_GIB < 5 * BINARY_GIB


def test_recommend_no_longer_offers_a_slice_smaller_than_the_need() -> None:
    # 9.5 GiB does not fit 1g.10gb (10 GB = 9.31 GiB); recommend used to read it as 10 GiB and offer it.
    choice = choose_gpu(9.5 * BINARY_GIB, load_cluster("demo"))
    assert choice is not None and choice["mig_profile"] != "1g.10gb"
    assert choice["memory_gib"] * BINARY_GIB >= 9.5 * BINARY_GIB
    # A MIG profile holding the whole GPU (7g.80gb) never displaces the GPU itself at the same price.
    whole = choose_gpu(60 * BINARY_GIB, load_cluster("demo"))
    assert whole == {"gpu_model": "A100-SXM4-80GB", "mig_profile": None, "memory_gib": 80.0}


def test_spark_mig_slices_match_the_parser(spark: SparkSession) -> None:
    profiles = ["1g.10gb", "3g.40gb", "7G.80GB", "1g.10gb+me", "2g.20gb", "a100", None]
    rows = spark.createDataFrame([(p,) for p in profiles], "profile string")
    got = {
        r["profile"]: r["slices"]
        for r in rows.select("profile", mig_slices_col(F.col("profile")).alias("slices")).collect()
    }

    def python(text: str | None) -> int | None:
        try:
            return parse_mig_profile(text or "")[0]
        except ValueError:
            return None

    assert got == {p: python(p) for p in profiles}


def test_job_usage_prices_a_mig_job_by_the_same_fraction(spark: SparkSession) -> None:
    demo = load_cluster("demo")
    jobs = [
        job_row(job_id="1", alloc_cpus=1, alloc_gpus=1, gpu_model="a100_3g.40gb"),
        job_row(job_id="2", alloc_cpus=1, alloc_gpus=1, gpu_model="mig-1g.10gb"),
        job_row(job_id="3", alloc_cpus=1, alloc_gpus=1, gpu_model="A100-SXM4-80GB"),
    ]
    rows = {
        r["job_id"]: r for r in job_usage(jobs_frame(spark, jobs), samples_frame(spark, []), demo).collect()
    }
    assert rows["1"]["gpu_fraction"] == pytest.approx(mig_fraction("3g.40gb"))
    assert rows["1"]["mig_profile"] == "3g.40gb"
    assert rows["2"]["gpu_fraction"] == pytest.approx(mig_fraction("1g.10gb"))
    assert rows["3"]["gpu_fraction"] == 1.0 and rows["3"]["mig_profile"] is None


# ---- 4. one GIB ---------------------------------------------------------------------------------


def test_gib_is_defined_once() -> None:
    assert GIB == BINARY_GIB == MEM_FACTORS["G"] and MEM_FACTORS["T"] == 1024 * BINARY_GIB
    definition = re.compile(r"^\s*(GIB|MIB|KIB)\s*(:[^=]+)?=", re.MULTILINE)
    skip = ("tests", ".venv", "pipelines/gold/failures")  # tests keep their own; failures is switching
    defined = [
        str(path.relative_to(REPO))
        for path in REPO.rglob("*.py")
        if not str(path.relative_to(REPO)).startswith(skip) and definition.search(path.read_text())
    ]
    assert defined == ["pipelines/units.py"]


# ---- 5. column lists from the TableSpecs -----------------------------------------------------------


def test_hand_picked_column_lists_are_subsets_of_their_tables() -> None:
    assert set(JOB_FIELDS) <= set(GOLD_FAILURES.columns)
    assert set(JOB_COLUMNS) <= set(SILVER_JOBS.columns)
    # The month tables sum every hour and dollar figure of gold.job_usage, and carry each one.
    assert set(SUMMED_COLUMNS) <= set(GOLD_JOB_USAGE.columns) & set(GOLD_USER_MONTH.columns)
    assert len(SUMMED_COLUMNS) == 20


def test_a_pod_row_has_every_silver_jobs_column() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-11-10T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"},
    }
    row = parse_pod(pod)
    assert tuple(row) == SILVER_JOBS.columns
    assert (row["cluster"], row["script_hash"], row["req_mem_bytes"]) == (None, None, BINARY_GIB)


def test_swf_rows_and_job_usage_follow_their_specs(spark: SparkSession) -> None:
    line = "1 0 5 100 4 90 2048 4 200 4096 1 7 3 11 1 1 -1 -1"
    bronze = spark.createDataFrame(
        [("pwa", "f.swf", "", 1, line, datetime(2026, 12, 1))],
        "cluster string, source_file string, "
        "file_sha256 string, line_no long, raw string, ingested_at timestamp",
    )
    rows, rejects = parse_swf(bronze, {"f.swf": SwfHeader(unix_start_time=1_700_000_000)})
    assert rows.columns == [*SILVER_JOBS.columns, "raw"] and rejects.count() == 0
    assert [f.dataType for f in rows.schema.fields[:-1]] == [f.dataType for f in SILVER_JOBS.schema.fields]
    (row,) = rows.collect()
    assert (row["req_mem_bytes"], row["max_rss_bytes"], row["gpu_model"]) == (
        4096 * 1024 * 4,
        2048 * 1024 * 4,
        None,
    )
    usage = job_usage(
        jobs_frame(spark, [job_row(job_id="1")]), samples_frame(spark, []), load_cluster("demo")
    )
    assert tuple(usage.columns) == GOLD_JOB_USAGE.columns
    with pytest.raises(ValueError, match=r"silver.jobs has no columns \['no_such'\]"):
        SILVER_JOBS.columns_from({"no_such": F.lit(1)})
