"""Attribution of GPU samples to jobs on tiny hand-made frames: a labelled job and an unlabelled one, a GPU
shared by two jobs, a MIG slice, a job on two nodes, overlap ambiguity, GPU indices, no candidate."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from pipelines.schemas import SILVER_GPU_SAMPLES
from pipelines.silver.attribution import with_job_attribution

T0 = datetime(2026, 11, 3, 10, 0, 0)
T1 = datetime(2026, 11, 3, 11, 0, 0)
T2 = datetime(2026, 11, 3, 12, 0, 0)

JOBS_SCHEMA = T.StructType(
    [
        T.StructField("cluster", T.StringType()),
        T.StructField("job_id", T.StringType()),
        T.StructField("start_ts", T.TimestampType()),
        T.StructField("end_ts", T.TimestampType()),
        T.StructField("node_list", T.StringType()),
        T.StructField("alloc_gpus", T.IntegerType()),
        T.StructField("req_gpus", T.IntegerType()),
        T.StructField("gpu_indices", T.StringType()),
    ]
)
JOBS = [
    ("c", "101", T0, T2, "g01", 1, 1, None),  # the job behind the hpc_job label "101"
    ("c", "301", T0, T2, "g[02-03]", 2, 2, None),  # one job on two nodes, no labels
    ("c", "401", T0, T2, "g04", 1, 1, None),  # two jobs on g04 at once: ambiguous
    ("c", "402", T1, None, "g04", 1, 1, None),  # still running (open end)
    ("c", "403", T0, T2, "g04", None, None, None),  # CPU-only job on g04: never a candidate
    ("c", "601", T0, T2, "g05", 1, 1, "0"),  # GPU indices known: g05 GPU 0 ...
    ("c", "602", T0, T2, "g05", 1, 1, "IDX:1-2"),  # ... and GPUs 1-2
    ("c", "701", T0, T1, "g06", 1, 1, None),  # ended at T1: a sample at T1 is not its
    ("other", "901", T0, T2, "g07", 1, 1, None),  # another cluster
]


def _sample(host: str, device: str, gpu: int | None, ts: datetime, label: str = "", gi: int | None = None):
    row = {f.name: None for f in SILVER_GPU_SAMPLES.schema.fields}
    row.update(
        cluster="c",
        host=host,
        device=device,
        gpu=gpu,
        ts=ts,
        label_job=label,
        mig_gi_id=gi,
        attribution="unattributed",
        gpu_util_pct=50.0,
        ingested_at=T0,
    )
    return tuple(row[f.name] for f in SILVER_GPU_SAMPLES.schema.fields)


SAMPLES = [
    _sample("g01", "GPU-1", 0, T1, label="101"),  # labelled job
    _sample("g01", "GPU-1", 0, T2, label=""),  # same GPU, unlabelled, after 101 ended: no candidate
    _sample("g08", "GPU-s", 0, T1, label="201"),  # GPU shared by 201 and 202: two copies
    _sample("g08", "GPU-s", 0, T1, label="202"),
    _sample("g09", "GPU-m/gi3", 0, T1, label="ml/pod-a", gi=3),  # a MIG slice labelled with its pod
    _sample("g02", "GPU-2", 0, T1),  # job 301 on both of its nodes
    _sample("g03", "GPU-3", 1, T1),
    _sample("g04", "GPU-4", 0, T0),  # only 401 has started (402 starts at T1)
    _sample("g04", "GPU-4", 0, T1),  # 401 and 402 both running: ambiguous
    _sample("g05", "GPU-50", 0, T1),  # GPU 0 belongs to 601
    _sample("g05", "GPU-52", 2, T1),  # GPU 2 belongs to 602
    _sample("g06", "GPU-6", 0, T1),  # 701 ended exactly at T1
    _sample("g07", "GPU-7", 0, T1),  # job 901 is on another cluster
]

# (host, device, ts, label_job) of each sample -> (job_id, attribution) it must get.
EXPECTED = [
    ("g01", "GPU-1", T1, "101", "101", "label"),
    ("g01", "GPU-1", T2, "", None, "unattributed"),
    ("g08", "GPU-s", T1, "201", "201", "label"),
    ("g08", "GPU-s", T1, "202", "202", "label"),
    ("g09", "GPU-m/gi3", T1, "ml/pod-a", "ml/pod-a", "label"),
    ("g02", "GPU-2", T1, "", "301", "overlap"),
    ("g03", "GPU-3", T1, "", "301", "overlap"),
    ("g04", "GPU-4", T0, "", "401", "overlap"),
    ("g04", "GPU-4", T1, "", None, "ambiguous"),
    ("g05", "GPU-50", T1, "", "601", "overlap"),  # by GPU index
    ("g05", "GPU-52", T1, "", "602", "overlap"),
    ("g06", "GPU-6", T1, "", None, "unattributed"),
    ("g07", "GPU-7", T1, "", None, "unattributed"),
]
ATTRIBUTED = T.StructType(
    [
        T.StructField("host", T.StringType()),
        T.StructField("device", T.StringType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("label_job", T.StringType()),
        T.StructField("job_id", T.StringType()),
        T.StructField("attribution", T.StringType()),
    ]
)


def test_attribution_rules(spark: SparkSession) -> None:
    samples = spark.createDataFrame(SAMPLES, schema=SILVER_GPU_SAMPLES.schema)
    jobs = spark.createDataFrame(JOBS, schema=JOBS_SCHEMA)
    out = with_job_attribution(samples, jobs)
    assert out.columns == samples.columns
    # one row per sample: copies are kept, nothing added or dropped
    assertDataFrameEqual(out.select(*ATTRIBUTED.names), spark.createDataFrame(EXPECTED, ATTRIBUTED))
    # the shared GPU stays two rows with one utilisation each: a consumer divides, never sums
    assertDataFrameEqual(
        out.where("host = 'g08'").select("label_job", "gpu_util_pct"),
        spark.createDataFrame([("201", 50.0), ("202", 50.0)], "label_job string, gpu_util_pct double"),
    )


def test_without_gpu_indices_two_jobs_on_one_host_are_ambiguous(spark: SparkSession) -> None:
    samples = spark.createDataFrame([_sample("g05", "GPU-50", 0, T1)], schema=SILVER_GPU_SAMPLES.schema)
    jobs = spark.createDataFrame([j for j in JOBS if j[4] == "g05"], schema=JOBS_SCHEMA).drop("gpu_indices")
    (row,) = with_job_attribution(samples, jobs).collect()
    assert (row["job_id"], row["attribution"]) == (None, "ambiguous")


def test_array_task_label_carries_job_id_raw(spark: SparkSession) -> None:
    """dcgm-exporter's hpc_job is SLURM_JOB_ID: an array task's raw id (sacct JobIDRaw), resolved to the
    task's job_id; an id that is itself some job's job_id stays as it is."""
    schema = T.StructType([*JOBS_SCHEMA.fields, T.StructField("job_id_raw", T.StringType())])
    jobs = spark.createDataFrame(
        [
            ("c", "646000236_2", T0, T2, "g01", 1, 1, None, "646000237"),  # array task 2
            ("c", "700", T0, T2, "g02", 1, 1, None, "700"),  # a plain job
            ("c", "800_1", T0, T2, "g03", 1, 1, None, "700"),  # raw id clashing with job 700: not used
        ],
        schema=schema,
    )
    samples = spark.createDataFrame(
        [_sample("g01", "GPU-1", 0, T1, label="646000237"), _sample("g02", "GPU-2", 0, T1, label="700")],
        schema=SILVER_GPU_SAMPLES.schema,
    )
    assertDataFrameEqual(
        with_job_attribution(samples, jobs).select("label_job", "job_id", "attribution"),
        spark.createDataFrame(
            [("646000237", "646000236_2", "label"), ("700", "700", "label")],
            "label_job string, job_id string, attribution string",
        ),
    )
