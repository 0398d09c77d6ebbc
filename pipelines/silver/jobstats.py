"""Princeton jobstats summaries (sacct's `AdminComment` = `JS1:` + base64 of gzip'd JSON) → silver.jobstats.

jobstats' slurmctld epilog stores, for every finished job, what its exporters measured (cgroups for CPU and
memory, DCGM/nvidia-smi for GPUs), summarised per node and per GPU:

    {"gpus": 1, "total_time": 50944,                       # job: GPUs (a count, or a bool), run time (s)
     "nodes": {"della-k1g1": {"cpus": 12,                   # per node: CPUs allocated there,
                              "total_time": 57620.8,        #   CPU time used (s, all its CPUs),
                              "used_memory": 84683702272,   #   peak memory used (bytes),
                              "total_memory": 137438953472, #   memory allocated there (bytes),
                              "gpu_utilization": {"1": 98.6},          # per GPU index: mean util %,
                              "gpu_used_memory": {"1": 83314868224},   #   peak memory used (bytes),
                              "gpu_total_memory": {"1": 85899345920}}}} #   the card's memory (bytes)

Besides summaries the epilog writes `JS1:Short` (the job was too short to be sampled) and `JS1:None` (no
data in Prometheus). docs/jobstats.md states the format and how gold uses it.

One parser (`decode_admin_comment`, plain Python) serves both engines: `jobfit ingest sacct` applies it per
partition through a pandas UDF (`with_jobstats`), tests and a one-job reader call it directly. A value that
does not decode raises `ValueError` with the reason; the ingest quarantines the summary and keeps the job.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.schemas import JOBSTATS_NODE_STRUCT

PREFIX = "JS1:"
# What the epilog stores instead of a summary (jobstats `-b` output other than a gzip stream).
NO_SUMMARY: dict[str, str] = {
    "Short": "the job was too short for jobstats to sample",
    "None": "jobstats found no data for the job",
}
_B64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
# A summary is a few KiB even for large jobs; anything that inflates beyond this is not one.
MAX_JSON_BYTES = 16 << 20


@dataclass(frozen=True)
class Gpu:
    """One GPU of a node as jobstats summarised it; a field the summary lacks is None (never 0)."""

    index: str  # the GPU index on its node, as jobstats keys it ("0", "3")
    util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None


@dataclass(frozen=True)
class Node:
    """One node of a job: CPUs, CPU time, memory peak and allocation, and its GPUs."""

    host: str
    cpus: int | None
    cpu_time_s: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True)
class Summary:
    """A job's jobstats summary: its run time, the GPU count it declares, its nodes."""

    run_time_s: float | None
    gpus_declared: int | None  # "gpus": a count (new jobstats) or a bool (old); None when absent
    nodes: tuple[Node, ...]


def is_jobstats(comment: str | None) -> bool:
    """Whether an AdminComment is jobstats' (starts with `JS`, as reportseff tells them apart); other
    comments are the site's own and are ignored."""
    return comment is not None and comment.strip().startswith("JS")


def _number(value: Any, what: str, integer: bool = False) -> float | int | None:
    """A non-negative finite JSON number (bools refused); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is not a number: {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} is not a non-negative number: {value!r}")
    if integer:
        if value != int(value):
            raise ValueError(f"{what} is not a whole number: {value!r}")
        return int(value)
    return float(value)


def _per_gpu(node: dict[str, Any], key: str, host: str) -> dict[str, Any]:
    value = node.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"node {host}: {key} is not an object")
    return value


def _node(host: str, node: Any) -> Node:
    if not isinstance(node, dict):
        raise ValueError(f"node {host} is not an object")
    util = _per_gpu(node, "gpu_utilization", host)
    used = _per_gpu(node, "gpu_used_memory", host)
    total = _per_gpu(node, "gpu_total_memory", host)
    indices = sorted({*util, *used, *total}, key=lambda i: (len(i), i))
    gpus = tuple(
        Gpu(
            index=i,
            util_pct=_number(util.get(i), f"node {host} GPU {i} utilization"),
            mem_used_bytes=_number(used.get(i), f"node {host} GPU {i} used memory", integer=True),
            mem_total_bytes=_number(total.get(i), f"node {host} GPU {i} total memory", integer=True),
        )
        for i in indices
    )
    for g in gpus:
        if g.util_pct is not None and g.util_pct > 100:
            raise ValueError(f"node {host} GPU {g.index} utilization above 100: {g.util_pct}")
    total_memory = _number(node.get("total_memory"), f"node {host} total_memory", integer=True)
    return Node(
        host=host,
        cpus=_number(node.get("cpus"), f"node {host} cpus", integer=True),
        cpu_time_s=_number(node.get("total_time"), f"node {host} total_time"),
        mem_used_bytes=_number(node.get("used_memory"), f"node {host} used_memory", integer=True),
        # jobstats writes 0 where it could not read the cgroup's limit: unknown, not "nothing allocated".
        mem_total_bytes=total_memory or None,
        gpus=gpus,
    )


def parse_summary(data: Any) -> Summary:
    """A decoded summary (the JSON object) as typed nodes and GPUs; ValueError with the reason."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    nodes = data.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise ValueError("no nodes")
    gpus = data.get("gpus")
    if gpus is not None and not isinstance(gpus, bool | int):
        raise ValueError(f"gpus is neither a count nor a bool: {gpus!r}")
    declared = None if gpus is None else int(gpus)
    if declared is not None and declared < 0:
        raise ValueError(f"gpus is negative: {gpus!r}")
    return Summary(
        run_time_s=_number(data.get("total_time"), "total_time"),
        gpus_declared=declared,
        nodes=tuple(_node(str(host), node) for host, node in sorted(nodes.items())),
    )


def decode_admin_comment(comment: str) -> Summary:
    """One AdminComment (`JS1:<base64 of gzip'd JSON>`) as a Summary; ValueError naming why it is not one:
    another JS version, `JS1:Short`/`JS1:None`, bad base64, a damaged or truncated gzip stream, not JSON,
    or JSON that is not a summary."""
    text = comment.strip()
    if not text.startswith(PREFIX):
        raise ValueError(f"unknown jobstats format {text.split(':', 1)[0][:8]!r} (expected JS1)")
    payload = "".join(text[len(PREFIX) :].split())  # jobstats' docs strip spaces (`tr -d ' '`) too
    if payload in NO_SUMMARY:
        raise ValueError(f"no summary: JS1:{payload} ({NO_SUMMARY[payload]})")
    if not payload:
        raise ValueError("empty JS1 summary")
    if not _B64_RE.match(payload) or len(payload) % 4 == 1:
        raise ValueError("not base64")
    try:
        raw = base64.b64decode(payload + "=" * (-len(payload) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64 ({exc})") from exc
    try:
        inflated = gzip.decompress(raw)
    except EOFError as exc:
        raise ValueError("truncated gzip stream") from exc
    except (OSError, zlib.error) as exc:
        raise ValueError(f"not a gzip stream ({exc})") from exc
    if len(inflated) > MAX_JSON_BYTES:
        raise ValueError(f"summary larger than {MAX_JSON_BYTES} bytes")
    try:
        data = json.loads(inflated)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    return parse_summary(data)


def encode_summary(data: dict[str, Any]) -> str:
    """A summary dict as jobstats stores it (`JS1:` + base64 of gzip'd JSON): the simulator's writer and
    the reverse of `decode_admin_comment` (reportseff's tests build their fixtures the same way)."""
    packed = gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0)
    return PREFIX + base64.b64encode(packed).decode("ascii")


# ---- the summary as Spark columns ----------------------------------------------------------------------

_DECODED = T.StructType(
    [
        T.StructField("error", T.StringType(), True),
        T.StructField("run_time_s", T.DoubleType(), True),
        T.StructField("gpus_declared", T.IntegerType(), True),
        T.StructField("nodes", T.ArrayType(JOBSTATS_NODE_STRUCT, containsNull=True), True),
    ]
)


def summary_record(comment: str | None) -> dict[str, Any]:
    """`decode_admin_comment` as one flat record (`error` set instead of raising): the row the pandas UDF
    returns for a comment."""
    try:
        s = decode_admin_comment(comment or "")
    except ValueError as exc:
        return {"error": str(exc), "run_time_s": None, "gpus_declared": None, "nodes": None}
    return {
        "error": None,
        "run_time_s": s.run_time_s,
        "gpus_declared": s.gpus_declared,
        "nodes": [
            {
                "host": n.host,
                "cpus": n.cpus,
                "cpu_time_s": n.cpu_time_s,
                "mem_used_bytes": n.mem_used_bytes,
                "mem_total_bytes": n.mem_total_bytes,
                "gpus": [
                    {
                        "gpu": g.index,
                        "util_pct": g.util_pct,
                        "mem_used_bytes": g.mem_used_bytes,
                        "mem_total_bytes": g.mem_total_bytes,
                    }
                    for g in n.gpus
                ],
            }
            for n in s.nodes
        ],
    }


@F.pandas_udf(_DECODED)
def _decode_col(comments: pd.Series) -> pd.DataFrame:
    return pd.DataFrame([summary_record(c) for c in comments], columns=[f.name for f in _DECODED.fields])


def _all_known(nodes: Column, field: str) -> Column:
    """Whether every node reports `field` (a sum over nodes is known only then)."""
    return F.forall(nodes, lambda n: n[field].isNotNull())


def _sum_nodes(nodes: Column, field: str, zero: Column) -> Column:
    total = F.aggregate(nodes, zero, lambda acc, n: acc + n[field])
    return F.when(_all_known(nodes, field), total)


def with_jobstats(jobs: DataFrame) -> DataFrame:
    """Jobs (with `admin_comment`) whose comment is jobstats', decoded: the silver.jobstats columns plus
    `error` (the reason a comment did not decode; null for a summary) and the job's `raw` line.

    Per job: nodes, CPUs, CPU time, memory used and allocated (sums over nodes, null unless every node
    reports the figure), GPUs summarised, their mean utilisation (over the GPUs that report one) and peak
    memory; `nodes` keeps every node and GPU as jobstats wrote them."""
    comment = F.trim(F.col("admin_comment"))
    decoded = jobs.where(comment.startswith("JS")).withColumn("_js", _decode_col(comment))
    nodes = F.col("_js.nodes")
    gpus = F.flatten(F.transform(nodes, lambda n: n["gpus"]))
    util = F.filter(gpus, lambda g: g["util_pct"].isNotNull())
    used = F.filter(gpus, lambda g: g["mem_used_bytes"].isNotNull())
    return decoded.select(
        "cluster",
        "job_id",
        "state",
        "start_ts",
        "end_ts",
        F.col("_js.error").alias("error"),
        F.col("_js.run_time_s").alias("run_time_s"),
        F.col("_js.gpus_declared").alias("gpus_declared"),
        F.size(nodes).alias("nodes_n"),
        _sum_nodes(nodes, "cpus", F.lit(0)).alias("cpus"),
        _sum_nodes(nodes, "cpu_time_s", F.lit(0.0)).alias("cpu_time_s"),
        _sum_nodes(nodes, "mem_used_bytes", F.lit(0).cast("long")).alias("mem_used_bytes"),
        _sum_nodes(nodes, "mem_total_bytes", F.lit(0).cast("long")).alias("mem_total_bytes"),
        F.size(gpus).alias("gpus_n"),
        F.size(util).alias("gpus_util_n"),
        F.when(
            F.size(util) > 0,
            F.aggregate(util, F.lit(0.0), lambda acc, g: acc + g["util_pct"]) / F.size(util),
        ).alias("gpu_util_mean_pct"),
        F.when(F.size(used) > 0, F.array_max(F.transform(used, lambda g: g["mem_used_bytes"]))).alias(
            "gpu_mem_peak_bytes"
        ),
        F.array_max(F.transform(gpus, lambda g: g["mem_total_bytes"])).alias("gpu_mem_card_bytes"),
        nodes.alias("nodes"),
        "source_file",
        "line_no",
        "ingested_at",
        "raw",
    )
