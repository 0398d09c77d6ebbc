"""sacct `--parsable`/`--parsable2` lines → typed job and step rows (silver.jobs, silver.job_steps).

One registry (`FIELDS`, slurm2sql/reportseff style) maps each sacct field to its converter, output column
and unit. Field order and set come from each file's header (names case-insensitive) or from `--format`.
Every line ends up as exactly one of: a job row, a step row, a skipped line (header, comment, blank) or
a reject with its reason (`record` column). All parsing is Spark built-ins on the bronze frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines import units as U
from pipelines.schemas import TableSpec
from pipelines.states import FINAL_STATES, JOB_STATES

# record kinds of a parsed line
JOB, STEP, SKIP, REJECT = "job", "step", "skip", "reject"


@dataclass(frozen=True)
class Field:
    """One sacct field: its converter kind, the column(s) it fills and their unit."""

    name: str  # as sacct spells it in --format and headers (matched case-insensitively)
    column: str
    kind: str  # text | int | minutes | duration | mem | req_mem | timestamp | exit | tres | state | jobid
    unit: str = ""


FIELDS: tuple[Field, ...] = (
    Field("JobID", "job_id_text", "jobid"),
    Field("JobIDRaw", "job_id_raw", "text"),
    Field("JobName", "job_name", "text"),
    Field("User", "user", "text"),
    Field("Account", "account", "text"),
    Field("Partition", "partition", "text"),
    Field("QOS", "qos", "text"),
    Field("State", "state_raw", "state"),
    Field("ExitCode", "exit", "exit", "status:signal"),
    Field("DerivedExitCode", "derived_exit", "exit", "status:signal"),
    Field("Submit", "submit_ts", "timestamp", "UTC"),
    Field("Start", "start_ts", "timestamp", "UTC"),
    Field("End", "end_ts", "timestamp", "UTC"),
    Field("Elapsed", "elapsed_s", "duration", "s"),
    Field("ElapsedRaw", "elapsed_s", "int", "s"),
    Field("Timelimit", "timelimit_s", "duration", "s"),
    Field("TimelimitRaw", "timelimit_s", "minutes", "s"),
    Field("TotalCPU", "total_cpu_s", "duration", "s"),
    Field("ReqCPUS", "req_cpus", "int", "cpus"),
    Field("AllocCPUS", "alloc_cpus", "int", "cpus"),
    Field("NCPUS", "alloc_cpus", "int", "cpus"),
    Field("ReqMem", "req_mem", "req_mem", "bytes (per job, cpu or node)"),
    Field("MaxRSS", "max_rss_bytes", "mem", "bytes"),
    Field("AveRSS", "ave_rss_bytes", "mem", "bytes"),
    Field("NNodes", "nodes", "int", "nodes"),
    Field("NodeList", "node_list", "text"),
    Field("NTasks", "ntasks", "int", "tasks"),
    Field("ReqTRES", "req_tres", "tres"),
    Field("AllocTRES", "alloc_tres", "tres"),
    Field("TRESUsageInMax", "tres_usage_in_max", "tres"),
    Field("TRESUsageInTot", "tres_usage_in_tot", "tres"),
    # Princeton jobstats summary (`JS1:...`), decoded into silver.jobstats (pipelines/silver/jobstats.py)
    Field("AdminComment", "admin_comment", "text"),
)
FIELDS_BY_NAME: dict[str, Field] = {f.name.lower(): f for f in FIELDS}
REQUIRED = ("jobid",)

# The typed columns a parse yields (null where the file lacks the field).
_OUTPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id_text", "string"),
    ("job_id_raw", "string"),
    ("job_name", "string"),
    ("user", "string"),
    ("account", "string"),
    ("partition", "string"),
    ("qos", "string"),
    ("state_raw", "string"),
    ("exit_code", "int"),
    ("exit_signal", "int"),
    ("derived_exit_code", "int"),
    ("derived_exit_signal", "int"),
    ("submit_ts", "timestamp"),
    ("start_ts", "timestamp"),
    ("end_ts", "timestamp"),
    ("elapsed_s", "double"),
    ("timelimit_s", "double"),
    ("total_cpu_s", "double"),
    ("req_cpus", "long"),
    ("alloc_cpus", "long"),
    ("req_mem_value_bytes", "long"),
    ("req_mem_kind", "string"),
    ("max_rss_bytes", "long"),
    ("ave_rss_bytes", "long"),
    ("nodes", "long"),
    ("node_list", "string"),
    ("ntasks", "long"),
    ("req_tres", "string"),
    ("alloc_tres", "string"),
    ("tres_usage_in_max", "string"),
    ("tres_usage_in_tot", "string"),
    ("admin_comment", "string"),
    ("is_partition_timelimit", "boolean"),
)

_HEADER_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_JOBID_RE = r"^([0-9]+)(_([0-9]+|\[[^\]]*\]))?(\+([0-9]+))?(\.([A-Za-z0-9_+-]+))?$"
_TS_RE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$"
_NO_TS = ("UNKNOWN", "NONE", "N/A", "")
_INT_RE = r"^[0-9]+$"
# sacct/squeue compact state codes, for dumps that carry them.
STATE_CODES: dict[str, str] = {
    "PD": "PENDING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "OOM": "OUT_OF_MEMORY",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "RV": "REVOKED",
    "SE": "SPECIAL_EXIT",
}


@dataclass(frozen=True)
class Layout:
    """How one file's lines are laid out: its field names in order, whether they came from a header line,
    and the file's position on the command line (later files win ties between equal records)."""

    fields: tuple[str, ...]
    from_header: bool
    file_order: int = 0
    # --parsable ends lines with an extra `|`: True/False when the header line shows it; None (no header)
    # guesses per line (one surplus empty last field is the delimiter's).
    trailing_delimiter: bool | None = None

    @property
    def width(self) -> int:
        return len(self.fields)


def split_format(text: str) -> tuple[str, ...]:
    """`--format` text (`JobID,State,...`, as given to sacct; `%N` widths dropped) as field names."""
    names = tuple(n.strip().split("%")[0] for n in text.split(",") if n.strip())
    if not names:
        raise ValueError(f"empty --format: {text!r}")
    return names


def is_header(line: str) -> bool:
    """Whether a line is a sacct header: `|`-separated field names, one of them JobID or JobIDRaw."""
    tokens = line.strip().rstrip("|").split("|")
    return any(t.lower() in ("jobid", "jobidraw") for t in tokens) and all(
        _HEADER_TOKEN.match(t) for t in tokens
    )


def detect_layout(lines: list[str], fmt: tuple[str, ...] | None, file_order: int = 0) -> Layout | None:
    """The layout of one file: its header line (the first line that is not blank or a `#` comment) when it
    has one, else `fmt`; None when it has neither (the caller asks for --format)."""
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        if is_header(line):
            fields = tuple(line.strip().rstrip("|").split("|"))
            return Layout(fields, True, file_order, line.strip().endswith("|"))
        break
    if fmt is None:
        return (
            None
            if any(line.strip() and not line.startswith("#") for line in lines)
            else Layout(("JobID", "State"), False, file_order)
        )
    return Layout(tuple(fmt), False, file_order)


def missing_required(layout: Layout) -> list[str]:
    """Required fields (JobID, or JobIDRaw) the layout lacks, by their sacct names. Without a State
    field every record's state is UNKNOWN."""
    names = {f.lower() for f in layout.fields}
    if "jobidraw" in names:
        names.add("jobid")  # jobstats-style dumps name jobs by JobIDRaw alone
    return [FIELDS_BY_NAME[r].name for r in REQUIRED if r not in names]


# ---- per-field converters: (value columns, well-formed flag) ----------------------------------------


def _blank(v: Column) -> Column:
    return v.isNull() | (F.trim(v) == "")


def _text(v: Column) -> Column:
    t = F.trim(v)
    return F.when(t != "", t)


def _partition_limit(field: Field, v: Column) -> dict[str, Column]:
    """For Timelimit/TimelimitRaw: `is_partition_timelimit` (the job runs under its partition's MaxTime).
    timelimit_s is null for it as for UNLIMITED; gold resolves the partition's limit, never UNLIMITED."""
    if field.column != "timelimit_s":
        return {}
    return {"is_partition_timelimit": F.upper(F.trim(v)) == "PARTITION_LIMIT"}


def _convert(field: Field, v: Column) -> tuple[dict[str, Column], Column]:
    kind, col = field.kind, field.column
    if kind in ("text", "tres", "state", "jobid"):
        ok = U.tres_ok_col(v) if kind == "tres" else F.lit(True)
        return {col: _text(v)}, ok
    if kind in ("int", "minutes"):
        t = F.trim(v)
        number = F.when(t.rlike(_INT_RE), t.try_cast("long"))
        ok = _blank(v) | number.isNotNull()
        if kind == "minutes":
            ok = ok | F.upper(t).isin(*U.NO_DURATION)
            return {col: number * 60.0, **_partition_limit(field, v)}, ok
        return {col: number}, ok
    if kind == "duration":
        return {col: U.duration_s_col(v), **_partition_limit(field, v)}, U.duration_ok_col(v)
    if kind == "mem":
        return {col: U.mem_bytes_col(v)}, U.mem_ok_col(v)
    if kind == "req_mem":
        value, per = U.req_mem_cols(v)
        return {"req_mem_value_bytes": value, "req_mem_kind": per}, U.req_mem_ok_col(v)
    if kind == "timestamp":
        t = F.trim(v)
        iso = F.try_to_timestamp(t, F.lit("yyyy-MM-dd'T'HH:mm:ss"))
        epoch = F.timestamp_seconds(F.when(t.rlike(_INT_RE), t.try_cast("long")))
        value = F.when(t.rlike(_TS_RE), iso).when(t.rlike(_INT_RE), epoch)
        ok = _blank(v) | F.upper(t).isin(*_NO_TS) | (t.rlike(_TS_RE) & iso.isNotNull()) | t.rlike(_INT_RE)
        return {col: value}, ok
    if kind == "exit":
        code, signal = U.exit_code_cols(v)
        return {f"{col}_code": code, f"{col}_signal": signal}, U.exit_code_ok_col(v)
    raise ValueError(f"unknown converter kind {kind!r} for {field.name}")


def _field_values(layout: Layout, parts: Column, extra: Column) -> list[tuple[str, Column]]:
    """Each header field's text; with `extra` surplus fields, JobName absorbs them (names containing `|`)."""
    lowered = [f.lower() for f in layout.fields]
    j = lowered.index("jobname") if "jobname" in lowered else None
    out = []
    for i, name in enumerate(layout.fields):
        if j is None or i < j:
            v = F.try_element_at(parts, F.lit(i + 1))
        elif i == j:
            v = F.array_join(F.slice(parts, F.lit(j + 1), F.greatest(extra + 1, F.lit(1))), "|")
        else:
            v = F.try_element_at(parts, F.lit(i + 1) + F.greatest(extra, F.lit(0)))
        out.append((name, v))
    return out


def parse_lines(bronze: DataFrame, layout: Layout, file_orders: dict[str, int]) -> DataFrame:
    """Parse the bronze lines of the files in `file_orders` (by content hash → command-line position; all
    laid out as `layout`) into typed columns plus `record` (job | step | skip | reject) and `reason`."""
    shas = sorted(file_orders)
    n = layout.width
    has_jobname = any(f.lower() == "jobname" for f in layout.fields)
    header_text = "|".join(f.lower() for f in layout.fields)
    lines = bronze.where(F.col("file_sha256").isin(*shas))
    raw = F.coalesce(F.col("raw"), F.lit(""))
    parts0 = F.split(raw, r"\|", -1)
    # --parsable (not --parsable2) ends every line with one extra `|`.
    last_empty = F.element_at(parts0, -1) == ""
    if layout.trailing_delimiter is None:
        trailing = (F.size(parts0) == n + 1) & last_empty
    else:
        trailing = F.lit(layout.trailing_delimiter) & (F.size(parts0) > 1) & last_empty
    parts = F.when(trailing, F.slice(parts0, 1, F.size(parts0) - 1)).otherwise(parts0)
    meta = ["cluster", "source_file", "file_sha256", "line_no", "raw", "ingested_at"]
    # Staged selects: each field's text is cut out once, converted once, checked once (Spark does not
    # collapse projections that would repeat a costly expression).
    lines = lines.select(*meta, parts.alias("_parts")).withColumn("_extra", F.size("_parts") - n)
    used = [
        (i, FIELDS_BY_NAME[name.lower()], value)
        for i, (name, value) in enumerate(_field_values(layout, F.col("_parts"), F.col("_extra")))
        if name.lower() in FIELDS_BY_NAME
    ]
    texts = lines.select(
        *meta, "_extra", F.size("_parts").alias("_nparts"), *[v.alias(f"_t{i}") for i, _, v in used]
    )

    columns: dict[str, Column] = {}
    oks: list[Column] = []
    for i, field, _ in used:
        converted, ok = _convert(field, F.col(f"_t{i}"))
        for col, expr in converted.items():
            columns[col] = F.coalesce(columns[col], expr) if col in columns else expr
        oks.append(ok.alias(f"_ok{i}"))
    if "job_id_text" not in columns and "job_id_raw" in columns:
        columns["job_id_text"] = columns["job_id_raw"]
    typed = [
        (columns[c].try_cast(t) if c in columns else F.lit(None).cast(t)).alias(c) for c, t in _OUTPUT_COLUMNS
    ]
    converted = texts.select(
        *meta, "_extra", "_nparts", *[f"_t{i}" for i, _, _ in used], *oks, *typed
    ).withColumn("_state_word", _state_cols(F.coalesce(F.col("state_raw"), F.lit("")))[0])

    count_ok = (F.col("_extra") == 0) | (F.lit(has_jobname) & (F.col("_extra") > 0))
    job_text = F.trim(F.coalesce(F.col("job_id_text"), F.lit("")))
    has_state = any(f.lower() == "state" for f in layout.fields)
    state = _state_cols(F.coalesce(F.col("state_raw"), F.lit("")))[1] if has_state else F.lit("UNKNOWN")
    trimmed = F.trim(F.coalesce(F.col("raw"), F.lit("")))
    is_skip = (
        (trimmed == "")
        | trimmed.startswith("#")
        | (F.lower(F.regexp_replace(trimmed, r"\|$", "")) == header_text)
    )
    reason = F.coalesce(
        F.when(~count_ok, F.format_string(f"expected {n} fields, got %d", F.col("_nparts"))),
        F.when(~job_text.rlike(_JOBID_RE), F.concat(F.lit("bad JobID: '"), job_text, F.lit("'"))),
        *[
            F.when(~F.col(f"_ok{i}"), F.concat(F.lit(f"bad {field.name}: '"), F.col(f"_t{i}"), F.lit("'")))
            for i, field, _ in used
        ],
        F.when(state.isNull(), F.concat(F.lit("unknown State: '"), F.col("_state_word"), F.lit("'"))),
    )
    step = F.regexp_extract(job_text, _JOBID_RE, 7)
    record = (
        F.when(is_skip, F.lit(SKIP))
        .when(reason.isNotNull(), F.lit(REJECT))
        .when(step != "", F.lit(STEP))
        .otherwise(F.lit(JOB))
    )
    orders = F.create_map(*[F.lit(x) for kv in file_orders.items() for x in kv])
    parsed = converted.select(
        *meta,
        orders[F.col("file_sha256")].alias("file_order"),
        record.alias("record"),
        F.when(is_skip, F.lit("header, comment or blank")).otherwise(reason).alias("reason"),
        *[c for c, _ in _OUTPUT_COLUMNS],
        state.alias("state"),
    )
    return with_ids_and_states(parsed)


def _state_cols(state_text: Column) -> tuple[Column, Column]:
    """(first word as written, normalised state or null when unknown); `CANCELLED by 1234` → CANCELLED,
    `COMPLETED+` → COMPLETED, compact codes (CD, CA, TO, OOM, ...) expanded."""
    word = F.upper(F.regexp_replace(F.split(F.trim(state_text), " ").getItem(0), r"\+$", ""))
    codes = F.create_map(*[F.lit(x) for kv in STATE_CODES.items() for x in kv])
    normalised = F.coalesce(F.try_element_at(codes, word), word)
    return word, F.when(normalised.isin(*sorted(JOB_STATES)), normalised)


def with_ids_and_states(parsed: DataFrame) -> DataFrame:
    """Add job_id (without step), step_id, array/het parts, cancelled_by and is_final (from `state`)."""
    jid = F.trim(F.coalesce(F.col("job_id_text"), F.lit("")))
    part = lambda i: F.regexp_extract(jid, _JOBID_RE, i)  # noqa: E731
    blank_to_null = lambda c: F.when(c != "", c)  # noqa: E731
    state = F.col("state")
    return (
        parsed.withColumn("job_id", blank_to_null(F.regexp_extract(jid, r"^([^.]*)", 1)))
        .withColumn("step_id", blank_to_null(part(7)))
        .withColumn("array_job_id", F.when(part(3) != "", part(1)))
        .withColumn("array_task_id", blank_to_null(part(3)))
        .withColumn("het_job_id", F.when(part(5) != "", part(1)))
        .withColumn("het_job_offset", F.when(part(5) != "", part(5).try_cast("int")))
        .withColumn(
            "cancelled_by",
            blank_to_null(F.regexp_extract(F.col("state_raw"), r"(?i)^\s*CANCELLED\s+by\s+(\S+)", 1)),
        )
        .withColumn("is_final", F.coalesce(state.isin(*sorted(FINAL_STATES)), F.lit(False)))
    )


# ---- job and step rows ------------------------------------------------------------------------------


def step_peak_rss_bytes(steps: DataFrame) -> Column:
    """A step's memory peak in bytes: MaxRSS × NTasks (reportseff: MaxRSS is the largest task's RSS, so
    × NTasks is an upper bound for the step); when MaxRSS is missing, TRESUsageInTot `mem` (seff's
    "sum of memory peaks of all tasks")."""
    tot_mem = U.tres_mem_col(U.tres_map_col(F.col("tres_usage_in_tot")), "mem")
    return F.coalesce(F.try_multiply(F.col("max_rss_bytes"), F.coalesce(F.col("ntasks"), F.lit(1))), tot_mem)


def with_steps(parsed: DataFrame) -> DataFrame:
    """Step rows in silver.job_steps' shape (plus `raw` and the ordering columns)."""
    usage_max = U.tres_map_col(F.col("tres_usage_in_max"))
    return parsed.where(F.col("record") == STEP).select(
        "cluster",
        "job_id",
        "step_id",
        F.col("job_name").alias("step_name"),
        "state",
        "state_raw",
        "exit_code",
        "exit_signal",
        "start_ts",
        "end_ts",
        F.col("elapsed_s").try_cast("long").alias("elapsed_s"),
        F.col("alloc_cpus").try_cast("int").alias("alloc_cpus"),
        F.col("ntasks").try_cast("int").alias("ntasks"),
        F.col("nodes").try_cast("int").alias("nodes"),
        "node_list",
        "total_cpu_s",
        "max_rss_bytes",
        "ave_rss_bytes",
        U.tres_mem_col(usage_max, "gres/gpumem").alias("gpu_mem_peak_bytes"),
        U.tres_number_col(usage_max, "gres/gpuutil").alias("gpu_util_peak_pct"),
        "tres_usage_in_max",
        "tres_usage_in_tot",
        step_peak_rss_bytes(parsed).alias("peak_rss_bytes"),
        "source_file",
        "line_no",
        "ingested_at",
        "raw",
        "is_final",
        "file_order",
    )


def _step_usage(steps: DataFrame) -> DataFrame:
    """Per job, from its steps: peak memory (max over steps of MaxRSS × NTasks), GPU memory and
    utilisation peaks (max over steps of TRESUsageInMax gres/gpumem, gres/gpuutil), summed TotalCPU."""
    return steps.groupBy("cluster", "job_id").agg(
        F.max("peak_rss_bytes").alias("steps_peak_rss_bytes"),
        F.max("gpu_mem_peak_bytes").alias("steps_gpu_mem_peak_bytes"),
        F.max("gpu_util_peak_pct").alias("steps_gpu_util_peak_pct"),
        F.sum("total_cpu_s").alias("steps_total_cpu_s"),
    )


def with_jobs(parsed: DataFrame, steps: DataFrame) -> DataFrame:
    """Job rows in silver.jobs' shape (plus `raw` and ordering columns), with step aggregates joined in.

    Requested memory is the job's total: ReqMem `c` (per CPU) × AllocCPUS, `n` (per node) × NNodes, an
    unsuffixed value as is (reportseff `parsemem`); 0 (`0n`, "whole node") or missing falls back to
    ReqTRES mem, else null. Peak memory `max_rss_bytes` = max over the job's steps of MaxRSS × NTasks
    (reportseff; seff's TRESUsageInTot mem where MaxRSS is missing), else the job line's own MaxRSS × NTasks.
    CPU efficiency (not stored; see `with_efficiency_pct`) = TotalCPU / (AllocCPUS × Elapsed).
    """
    alloc = U.tres_map_col(F.col("alloc_tres"))
    req = U.tres_map_col(F.col("req_tres"))
    alloc_cpus = F.coalesce(F.col("alloc_cpus"), U.tres_count_col(alloc, "cpu"))
    nodes = F.coalesce(F.col("nodes"), U.tres_count_col(alloc, "node"))
    per = F.col("req_mem_kind")
    factor = (
        F.when(per == U.REQ_MEM_PER_CPU, alloc_cpus)
        .when(per == U.REQ_MEM_PER_NODE, nodes)
        .otherwise(F.lit(1))
    )
    req_mem = F.when(F.col("req_mem_value_bytes") > 0, F.try_multiply(F.col("req_mem_value_bytes"), factor))
    own_peak = F.try_multiply(F.col("max_rss_bytes"), F.coalesce(F.col("ntasks"), F.lit(1)))
    jobs = parsed.where(F.col("record") == JOB).join(_step_usage(steps), ["cluster", "job_id"], how="left")
    return jobs.select(
        "cluster",
        "job_id",
        F.lit("slurm").alias("source"),
        "job_id_raw",
        "array_job_id",
        "array_task_id",
        "het_job_id",
        "het_job_offset",
        "job_name",
        "user",
        "account",
        "partition",
        "qos",
        "state",
        "state_raw",
        "cancelled_by",
        "exit_code",
        "exit_signal",
        "derived_exit_code",
        "derived_exit_signal",
        "submit_ts",
        "start_ts",
        "end_ts",
        F.col("elapsed_s").try_cast("long").alias("elapsed_s"),
        F.col("timelimit_s").try_cast("long").alias("timelimit_s"),
        "is_partition_timelimit",
        F.coalesce(F.col("req_cpus"), U.tres_count_col(req, "cpu")).try_cast("int").alias("req_cpus"),
        alloc_cpus.try_cast("int").alias("alloc_cpus"),
        F.coalesce(req_mem, U.tres_mem_col(req, "mem")).alias("req_mem_bytes"),
        U.tres_mem_col(alloc, "mem").alias("alloc_mem_bytes"),
        F.lit(None).cast("double").alias("limit_cpu_cores"),  # Kubernetes only
        F.lit(None).cast("long").alias("limit_mem_bytes"),
        U.tres_count_col(req, "gres/gpu").try_cast("int").alias("req_gpus"),
        U.tres_count_col(alloc, "gres/gpu").try_cast("int").alias("alloc_gpus"),
        F.coalesce(U.tres_gpu_model_col(F.col("alloc_tres")), U.tres_gpu_model_col(F.col("req_tres"))).alias(
            "gpu_model"
        ),
        nodes.try_cast("int").alias("nodes"),
        "node_list",
        F.col("ntasks").try_cast("int").alias("ntasks"),
        F.coalesce(F.col("total_cpu_s"), F.col("steps_total_cpu_s")).alias("total_cpu_s"),
        F.coalesce(F.col("steps_peak_rss_bytes"), own_peak).alias("max_rss_bytes"),
        F.col("steps_gpu_mem_peak_bytes").alias("gpu_mem_peak_bytes"),
        F.col("steps_gpu_util_peak_pct").alias("gpu_util_peak_pct"),
        F.lit(None).cast("string").alias("script_hash"),
        "is_final",
        "source_file",
        "line_no",
        "ingested_at",
        "raw",
        "file_order",
        "admin_comment",  # not stored in silver.jobs: decoded into silver.jobstats
    )


def with_efficiency_pct(jobs: DataFrame) -> DataFrame:
    """Add reportseff's per-job efficiencies in percent (null where undefined, e.g. Elapsed = 0):
    cpu_eff_pct = TotalCPU / (AllocCPUS × Elapsed) × 100; mem_eff_pct = max_rss_bytes / req_mem_bytes × 100;
    time_eff_pct = Elapsed / Timelimit × 100."""
    cpu_den = F.col("alloc_cpus") * F.col("elapsed_s")
    return jobs.withColumns(
        {
            "cpu_eff_pct": F.when(cpu_den > 0, F.col("total_cpu_s") / cpu_den * 100),
            "mem_eff_pct": F.when(
                F.col("req_mem_bytes") > 0, F.col("max_rss_bytes") / F.col("req_mem_bytes") * 100
            ),
            "time_eff_pct": F.when(F.col("timelimit_s") > 0, F.col("elapsed_s") / F.col("timelimit_s") * 100),
        }
    )


# ---- which record of a key wins ---------------------------------------------------------------------


def filter_latest(rows: DataFrame, spec: TableSpec) -> DataFrame:
    """The newest row per key within one batch, by the table's newer-wins rule (`spec.newer`); between
    records of one run, the later file on the command line and the later line."""
    assert spec.newer is not None, f"{spec.name} declares no newer-wins rule"
    order = Window.partitionBy(*spec.key).orderBy(
        *spec.newer.newest_first(), F.col("file_order").desc(), F.col("line_no").desc()
    )
    return rows.withColumn("_rank", F.row_number().over(order)).where(F.col("_rank") == 1).drop("_rank")


def content_hash(df: DataFrame, columns: list[str]) -> Column:
    """A hash of a row's content columns (what decides "unchanged" on re-ingest)."""
    return F.sha2(F.to_json(F.struct(*[F.col(c) for c in columns])), 256)
