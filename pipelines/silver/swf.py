"""Standard Workload Format (Parallel Workloads Archive) logs into silver.jobs rows.

SWF: one job per line, 18 whitespace-separated numeric fields, `-1` for unknown, header comments starting
with `;` (`UnixStartTime`, `TimeZoneString`, `Queue:`/`Partition:` names). Times are seconds after
`UnixStartTime` (a Unix epoch, so UTC); memory is in KB per processor. Mapping (documented in README):

- submit_ts = UnixStartTime + submit; start_ts = submit_ts + wait; end_ts = start_ts + run time
- elapsed_s = run time; timelimit_s = requested time
- alloc_cpus = allocated processors; req_cpus = requested processors (allocated when -1)
- total_cpu_s = average CPU time per processor x allocated processors
- max_rss_bytes = used memory (KB per processor) x 1024 x allocated processors
- req_mem_bytes = requested memory (KB per processor) x 1024 x requested processors
- user = user id, account = group id (as strings); job_name = executable number
- qos = the queue (its header name when listed), partition = the partition (header name when listed)
- status 1 COMPLETED, 0 FAILED, 5 CANCELLED, 2 PREEMPTED (partial, continued), 3 COMPLETED (last partial
  completed), 4 FAILED (last partial failed), -1 UNKNOWN; the number is kept in state_raw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.schemas import SILVER_JOBS
from pipelines.states import FINAL_STATES
from pipelines.units import KIB

SWF_FIELDS = (
    "job",
    "submit",
    "wait",
    "run",
    "alloc_procs",
    "avg_cpu",
    "used_mem_kb",
    "req_procs",
    "req_time",
    "req_mem_kb",
    "status",
    "user",
    "group",
    "exe",
    "queue",
    "partition",
    "preceding",
    "think",
)
SWF_STATUS: dict[int, str] = {
    1: "COMPLETED",
    0: "FAILED",
    5: "CANCELLED",
    2: "PREEMPTED",
    3: "COMPLETED",
    4: "FAILED",
    -1: "UNKNOWN",
}
_NUMBER_RE = r"^-?[0-9]+(\.[0-9]+)?$"


@dataclass(frozen=True)
class SwfHeader:
    """What a log's header says: its epoch start, time zone, and names of queues and partitions."""

    unix_start_time: int | None
    time_zone_string: str | None = None
    queues: dict[int, str] = field(default_factory=dict)
    partitions: dict[int, str] = field(default_factory=dict)


_HEADER_RE = re.compile(r"^;\s*([A-Za-z]+):\s*(.*?)\s*$")
_NAMED_RE = re.compile(r"^(-?\d+)\s+(\S+)")


def parse_swf_header(lines: list[str]) -> SwfHeader:
    """The header fields of one SWF file (its `;` comment lines; other lines are ignored)."""
    start: int | None = None
    tz: str | None = None
    queues: dict[int, str] = {}
    partitions: dict[int, str] = {}
    for line in lines:
        m = _HEADER_RE.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).split("#", 1)[0].strip()
        if key == "UnixStartTime" and value.lstrip("-").isdigit():
            start = int(value)
        elif key == "TimeZoneString":
            tz = value or None
        elif key in ("Queue", "Partition") and (named := _NAMED_RE.match(value)):
            (queues if key == "Queue" else partitions)[int(named.group(1))] = named.group(2)
    return SwfHeader(unix_start_time=start, time_zone_string=tz, queues=queues, partitions=partitions)


def _map(d: dict) -> Column:
    if not d:
        return F.create_map().cast("map<string,string>")
    return F.create_map(*[F.lit(x) for kv in d.items() for x in (str(kv[0]), str(kv[1]))])


def _known(c: Column) -> Column:
    """A SWF number with -1 (unknown) as null."""
    return F.when(c != -1, c)


def parse_swf(bronze: DataFrame, headers: dict[str, SwfHeader]) -> tuple[DataFrame, DataFrame]:
    """(silver.jobs rows, rejects) from bronze SWF lines; `headers` by source_file. Comment and blank
    lines are neither; a line that is not 18 numbers, or a file without UnixStartTime, is a reject."""
    starts = _map({k: h.unix_start_time for k, h in headers.items() if h.unix_start_time is not None})
    queues = {f"{k}\t{q}": n for k, h in headers.items() for q, n in h.queues.items()}
    parts = {f"{k}\t{p}": n for k, h in headers.items() for p, n in h.partitions.items()}
    records = bronze.filter(~F.trim(F.col("raw")).startswith(";") & (F.trim(F.col("raw")) != ""))
    tokens = F.split(F.trim(F.col("raw")), r"\s+")
    numeric = F.forall(tokens, lambda t: t.rlike(_NUMBER_RE))
    start = F.element_at(starts, F.col("source_file")).cast("long")
    checked = records.withColumn("_t", tokens).withColumn(
        "reason",
        F.when(F.size("_t") != 18, F.format_string("expected 18 fields, got %d", F.size("_t")))
        .when(~numeric, F.lit("a field is not a number"))
        .when(start.isNull(), F.lit("file header has no UnixStartTime: times cannot be placed"))
        .when(F.element_at("_t", 1).cast("double") < 0, F.lit("negative job number")),
    )
    rejects = checked.filter(F.col("reason").isNotNull()).select(
        "cluster",
        F.lit("swf").alias("source"),
        "source_file",
        "line_no",
        "raw",
        "reason",
        "ingested_at",
    )
    good = checked.filter(F.col("reason").isNull()).withColumn("_start", start)
    v = {name: F.element_at("_t", i + 1).cast("double") for i, name in enumerate(SWF_FIELDS)}
    n = {name: _known(c.cast("long")) for name, c in v.items()}
    submit = F.col("_start") + n["submit"]
    began = submit + n["wait"]
    ended = began + n["run"]
    alloc = F.when(n["alloc_procs"] > 0, n["alloc_procs"])
    req_procs = F.coalesce(F.when(n["req_procs"] > 0, n["req_procs"]), alloc)
    status = v["status"].cast("int")
    state = F.coalesce(_map(SWF_STATUS)[status.cast("string")], F.lit("UNKNOWN"))
    queue_no, part_no = n["queue"].cast("string"), n["partition"].cast("string")
    key = F.concat_ws("\t", F.col("source_file"), F.lit(""))
    # What SWF records; every other silver.jobs column is null (SILVER_JOBS.columns_from).
    given: dict[str, Column | str] = {
        "cluster": "cluster",
        "job_id": n["job"].cast("string"),
        "source": F.lit("swf"),
        "job_id_raw": n["job"].cast("string"),
        "job_name": n["exe"].cast("string"),
        "user": n["user"].cast("string"),
        "account": n["group"].cast("string"),
        "partition": F.coalesce(_map(parts)[F.concat(key, part_no)], part_no),
        "qos": F.coalesce(_map(queues)[F.concat(key, queue_no)], queue_no),
        "state": state,
        "state_raw": status.cast("string"),
        "submit_ts": F.timestamp_seconds(submit),
        "start_ts": F.timestamp_seconds(began),
        "end_ts": F.timestamp_seconds(ended),
        "elapsed_s": n["run"],
        "timelimit_s": F.when(n["req_time"] > 0, n["req_time"]),
        "req_cpus": req_procs.cast("int"),
        "alloc_cpus": alloc.cast("int"),
        "req_mem_bytes": (F.when(v["req_mem_kb"] >= 0, v["req_mem_kb"]) * KIB * req_procs).cast("long"),
        "total_cpu_s": F.when(v["avg_cpu"] >= 0, v["avg_cpu"]) * alloc,
        "max_rss_bytes": (F.when(v["used_mem_kb"] >= 0, v["used_mem_kb"]) * KIB * alloc).cast("long"),
        "is_final": state.isin(*sorted(FINAL_STATES)),
        "source_file": "source_file",
        "line_no": "line_no",
        "ingested_at": "ingested_at",
    }
    # `raw` is the line itself, for quarantine by the validation step; not a silver.jobs column.
    rows = good.select(*SILVER_JOBS.columns_from(given), "raw")
    return rows, rejects
