"""Every table's schema, grain and key, declared once (used for raw reads and checked before writes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.states import FINAL_STATES

_EPOCH = "TIMESTAMP'1970-01-01 00:00:00'"


@dataclass(frozen=True)
class NewerWins:
    """Which of two records of one key is newer, so that a later dump updates a row and an older one never
    overwrites it: a final state beats a non-final one (finality read from `state`); then the later of
    each `times` column in turn (null, e.g. End=Unknown of a running job, counts as earliest). Equal
    records count as newer, so a re-ingest of an equally final record with the same times wins."""

    times: tuple[str, ...] = ("end_ts", "start_ts")

    def sql(self, s: str = "s", t: str = "t") -> str:
        """SQL condition over aliases `s` (incoming) and `t` (stored): `s` is newer than `t`."""
        finals = ", ".join(f"'{x}'" for x in sorted(FINAL_STATES))
        fin = lambda x: f"cast(coalesce({x}.state IN ({finals}), false) as int)"  # noqa: E731
        at = lambda c, x: f"coalesce({x}.{c}, {_EPOCH})"  # noqa: E731
        cond = f"{at(self.times[-1], s)} >= {at(self.times[-1], t)}"
        for c in reversed(self.times[:-1]):
            cond = f"{at(c, s)} > {at(c, t)} OR ({at(c, s)} = {at(c, t)} AND {cond})"
        return f"({fin(s)} > {fin(t)}) OR ({fin(s)} = {fin(t)} AND ({cond}))"

    def newest_first(self) -> list[Column]:
        """The same rule as a sort order, newest first (ranks the records of one key within a batch)."""
        final = F.coalesce(F.col("state").isin(*sorted(FINAL_STATES)), F.lit(False))
        return [final.desc(), *(F.col(c).desc_nulls_last() for c in self.times)]


@dataclass(frozen=True)
class TableSpec:
    """A Delta table: its name (`layer.table`), schema, natural key (the MERGE condition) and, for a table
    whose rows later records replace, the rule saying which record of a key is newer."""

    name: str
    schema: T.StructType
    key: tuple[str, ...]
    grain: str
    newer: NewerWins | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The table's column names, in schema order."""
        return tuple(self.schema.fieldNames())

    def columns_from(self, given: Mapping[str, Column | str]) -> list[Column]:
        """The table's columns in order: each from `given` by name, a null of its type where not given."""
        unknown = sorted(set(given) - set(self.columns))
        if unknown:
            raise ValueError(f"{self.name} has no columns {unknown}")
        columns = []
        for f in self.schema.fields:
            value = given.get(f.name, F.lit(None).cast(f.dataType))
            columns.append((F.col(value) if isinstance(value, str) else value).alias(f.name))
        return columns

    @property
    def layer(self) -> str:
        return self.name.split(".")[0]

    @property
    def table(self) -> str:
        return self.name.split(".")[-1]


def _fields(*spec: tuple[str, T.DataType, bool]) -> T.StructType:
    return T.StructType([T.StructField(name, dtype, nullable) for name, dtype, nullable in spec])


S, L, INT, D, TS, B = (
    T.StringType(),
    T.LongType(),
    T.IntegerType(),
    T.DoubleType(),
    T.TimestampType(),
    T.BooleanType(),
)

# Raw lines as read, one row per line of a source file. The same file (by content hash) adds nothing twice.
BRONZE_SCHEMA = _fields(
    ("cluster", S, False),
    ("source_file", S, False),
    ("file_sha256", S, False),
    ("line_no", L, False),
    ("raw", S, True),
    ("ingested_at", TS, False),
)
BRONZE_KEY = ("cluster", "file_sha256", "line_no")

QUARANTINE = TableSpec(
    name="quarantine",
    schema=_fields(
        ("cluster", S, False),
        ("source", S, False),  # sacct | k8s | k8s-metrics | scripts | dcgm | swf | logs | profiler
        ("source_file", S, False),
        ("line_no", L, False),
        ("raw", S, True),
        ("reason", S, False),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "source", "source_file", "line_no"),
    grain="one rejected record (a line, or a JSON object) of a source file",
)

# One row per job allocation, Slurm, Kubernetes and SWF alike. Memory in bytes, times in seconds (UTC).
SILVER_JOBS = TableSpec(
    name="silver.jobs",
    schema=_fields(
        ("cluster", S, False),
        (
            "job_id",
            S,
            False,
        ),  # as the scheduler shows it: 123, 123_4, 123+0; k8s: namespace/pod; swf: job no.
        ("source", S, False),  # slurm | k8s | swf
        ("job_id_raw", S, True),  # Slurm JobIDRaw; k8s pod uid
        ("array_job_id", S, True),
        ("array_task_id", S, True),  # a number, or a pending range such as [1-5]
        ("het_job_id", S, True),
        ("het_job_offset", INT, True),
        ("job_name", S, True),
        ("user", S, True),
        ("account", S, True),
        ("partition", S, True),  # Slurm partition; Kubernetes namespace; SWF partition number
        ("qos", S, True),
        ("state", S, False),  # normalised, see pipelines.states.JOB_STATES
        ("state_raw", S, True),
        ("cancelled_by", S, True),  # uid from "CANCELLED by 1234"
        ("exit_code", INT, True),
        ("exit_signal", INT, True),
        ("derived_exit_code", INT, True),
        ("derived_exit_signal", INT, True),
        ("submit_ts", TS, True),
        ("start_ts", TS, True),
        ("end_ts", TS, True),
        ("elapsed_s", L, True),
        ("timelimit_s", L, True),  # null when UNLIMITED or unknown
        ("is_partition_timelimit", B, True),  # Slurm Timelimit = Partition_Limit (gold resolves it)
        ("req_cpus", INT, True),
        ("alloc_cpus", INT, True),
        ("req_mem_bytes", L, True),  # whole-job total (per-CPU/per-node requests multiplied out)
        ("alloc_mem_bytes", L, True),
        ("limit_cpu_cores", D, True),  # k8s: the pod's CPU limit (500m = 0.5); null if unlimited or not k8s
        ("limit_mem_bytes", L, True),  # Kubernetes: the pod's memory limit (its OOM-kill ceiling); idem
        ("req_gpus", INT, True),
        ("alloc_gpus", INT, True),
        ("gpu_model", S, True),
        ("nodes", INT, True),
        ("node_list", S, True),
        ("ntasks", INT, True),
        ("total_cpu_s", D, True),
        ("max_rss_bytes", L, True),  # peak over steps of MaxRSS x tasks (reportseff/seff)
        ("gpu_mem_peak_bytes", L, True),  # from TRESUsageInMax gres/gpumem when Slurm records it
        ("gpu_util_peak_pct", D, True),  # from TRESUsageInMax gres/gpuutil
        ("script_hash", S, True),
        ("is_final", B, False),  # the state is terminal: later dumps cannot change the row
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id"),
    grain="one job allocation (array tasks and het-job components are rows of their own)",
    newer=NewerWins(),
)

SILVER_JOB_STEPS = TableSpec(
    name="silver.job_steps",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("step_id", S, False),  # batch | extern | interactive | 0 | 1 | ...
        ("step_name", S, True),
        ("state", S, False),
        ("state_raw", S, True),
        ("exit_code", INT, True),
        ("exit_signal", INT, True),
        ("start_ts", TS, True),
        ("end_ts", TS, True),
        ("elapsed_s", L, True),
        ("alloc_cpus", INT, True),
        ("ntasks", INT, True),
        ("nodes", INT, True),
        ("node_list", S, True),
        ("total_cpu_s", D, True),
        ("max_rss_bytes", L, True),  # the largest task's RSS on its node
        ("ave_rss_bytes", L, True),
        ("gpu_mem_peak_bytes", L, True),
        ("gpu_util_peak_pct", D, True),
        ("tres_usage_in_max", S, True),
        ("tres_usage_in_tot", S, True),
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id", "step_id"),
    grain="one job step (.batch, .extern, .N)",
    newer=NewerWins(),
)

# Princeton jobstats summaries from sacct's AdminComment (`JS1:`; pipelines/silver/jobstats.py,
# docs/jobstats.md): per job the sums, per node and per GPU the values as jobstats wrote them (nested). A
# figure the summary lacks is null, never 0; a job-level sum is null unless every node reports it.
JOBSTATS_GPU_STRUCT = _fields(
    ("gpu", S, True),  # the GPU's index on its node, as jobstats keys it
    ("util_pct", D, True),  # mean utilisation over the job
    ("mem_used_bytes", L, True),  # peak memory used
    ("mem_total_bytes", L, True),  # the card's memory
)
JOBSTATS_NODE_STRUCT = _fields(
    ("host", S, True),
    ("cpus", INT, True),
    ("cpu_time_s", D, True),  # CPU time used on the node (all its CPUs)
    ("mem_used_bytes", L, True),  # the node's peak memory (cgroup)
    ("mem_total_bytes", L, True),  # memory allocated on the node (cgroup limit; 0 in the JSON → null)
    ("gpus", T.ArrayType(JOBSTATS_GPU_STRUCT, containsNull=True), True),
)
SILVER_JOBSTATS = TableSpec(
    name="silver.jobstats",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("state", S, False),  # of the sacct job record the summary came with (newer-wins)
        ("start_ts", TS, True),
        ("end_ts", TS, True),
        ("run_time_s", D, True),  # the summary's total_time: the job's run time
        ("gpus_declared", INT, True),  # the summary's "gpus" (a bool in old summaries: 0/1)
        ("nodes_n", INT, False),
        ("cpus", INT, True),  # sums over nodes
        ("cpu_time_s", D, True),
        ("mem_used_bytes", L, True),
        ("mem_total_bytes", L, True),
        ("gpus_n", INT, False),  # GPUs the summary has figures for
        ("gpus_util_n", INT, False),  # of which with a utilisation
        ("gpu_util_mean_pct", D, True),  # mean over the GPUs with a utilisation
        ("gpu_mem_peak_bytes", L, True),  # the largest GPU memory peak
        ("gpu_mem_card_bytes", L, True),  # the largest card
        ("nodes", T.ArrayType(JOBSTATS_NODE_STRUCT, containsNull=True), False),
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id"),
    grain="one job's jobstats summary (its nodes and GPUs nested)",
    newer=NewerWins(),
)

# Slurm partitions as `scontrol show partition -o` prints them (jobfit ingest partitions): what resolves a
# job's `Timelimit = Partition_Limit` when the cluster's yaml does not state the partition's max_time.
SILVER_PARTITIONS = TableSpec(
    name="silver.partitions",
    schema=_fields(
        ("cluster", S, False),
        ("partition", S, False),
        ("max_time_s", L, True),  # MaxTime; null when UNLIMITED
        ("is_unlimited", B, False),  # MaxTime=UNLIMITED (no limit, as opposed to unknown)
        ("default_time_s", L, True),  # DefaultTime; null when NONE
        ("state", S, True),  # UP | DOWN | DRAIN | INACTIVE
        ("raw", S, True),
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "partition"),
    grain="one Slurm partition as last dumped",
)


# One GPU (or MIG instance) sample at one time, from dcgm-exporter scrapes or archives. A GPU shared by
# N jobs is scraped as N labelled copies of each series: one row per copy, never summed.
SILVER_GPU_SAMPLES = TableSpec(
    name="silver.gpu_samples",
    schema=_fields(
        ("cluster", S, False),
        ("host", S, False),  # from the Hostname or hostname label
        ("device", S, False),  # the GPU's key: UUID, plus "/gi<N>" for a MIG instance
        ("gpu", INT, True),  # device index (label gpu)
        ("uuid", S, True),
        ("model_name", S, True),
        ("mig_gi_id", INT, True),
        ("mig_profile", S, True),
        ("ts", TS, False),
        ("gpu_util_pct", D, True),  # DCGM_FI_DEV_GPU_UTIL
        ("fb_used_bytes", L, True),  # DCGM_FI_DEV_FB_USED (MiB in the exporter) in bytes
        ("fb_total_bytes", L, True),  # FB_USED + FB_FREE
        ("sm_active_frac", D, True),  # DCGM_FI_PROF_SM_ACTIVE, 0..1
        ("tensor_active_frac", D, True),  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, 0..1
        ("power_w", D, True),  # DCGM_FI_DEV_POWER_USAGE
        ("xid", INT, True),  # DCGM_FI_DEV_XID_ERRORS (last Xid; 0 = none)
        ("label_job", S, False),  # the hpc_job label, or namespace/pod; "" when the series has none
        ("job_id", S, True),  # attributed job (silver.jobs key); null when none or ambiguous
        ("attribution", S, False),  # label | overlap | ambiguous | unattributed
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
        # DCGM profiling (DCP) fields; null when the exporter does not export them. Declared last because a
        # warehouse written before them gains them by ALTER TABLE ADD COLUMNS, which appends (ensure_table).
        ("gr_engine_active_frac", D, True),  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0..1 of time
        ("sm_occupancy_frac", D, True),  # DCGM_FI_PROF_SM_OCCUPANCY, 0..1
        ("fp64_active_frac", D, True),  # DCGM_FI_PROF_PIPE_FP64_ACTIVE, 0..1 of cycles
        ("fp32_active_frac", D, True),  # DCGM_FI_PROF_PIPE_FP32_ACTIVE
        ("fp16_active_frac", D, True),  # DCGM_FI_PROF_PIPE_FP16_ACTIVE
        ("dram_active_frac", D, True),  # DCGM_FI_PROF_DRAM_ACTIVE, 0..1 of cycles
        ("pcie_tx_bytes_per_s", D, True),  # DCGM_FI_PROF_PCIE_TX_BYTES (a rate, bytes/s)
        ("pcie_rx_bytes_per_s", D, True),  # DCGM_FI_PROF_PCIE_RX_BYTES
        ("nvlink_tx_bytes_per_s", D, True),  # DCGM_FI_PROF_NVLINK_TX_BYTES
        ("nvlink_rx_bytes_per_s", D, True),  # DCGM_FI_PROF_NVLINK_RX_BYTES
        ("sm_clock_mhz", D, True),  # DCGM_FI_DEV_SM_CLOCK
    ),
    key=("cluster", "host", "device", "ts", "label_job"),
    grain="one GPU or MIG-instance sample at one timestamp (per label copy)",
)

# One container (or pod cgroup) usage sample of a Kubernetes pod at one time, from kubelet /metrics/resource
# or cAdvisor /metrics/cadvisor scrapes and archives (`jobfit ingest k8s-metrics`; docs/k8s-metrics.md).
SILVER_POD_SAMPLES = TableSpec(
    name="silver.pod_samples",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),  # namespace/pod: silver.jobs' key of the pod
        ("namespace", S, False),
        ("pod", S, False),
        ("container", S, False),  # "" = the pod cgroup (cAdvisor container="", kubelet pod_*); POD = pause
        ("form", S, False),  # resource (kubelet /metrics/resource) | cadvisor (has id/image/name labels)
        ("series", S, False),  # cAdvisor's cgroup `id` (a restarted container is a new one); "" otherwise
        ("ts", TS, False),
        ("cpu_usage_s", D, True),  # container_cpu_usage_seconds_total: the counter's value, core-seconds
        ("mem_working_set_bytes", L, True),  # container_memory_working_set_bytes
        ("host", S, True),  # the node (label node, else instance) when the scrape says
        ("source_file", S, True),
        ("line_no", L, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id", "container", "form", "series", "ts"),
    grain="one container (or pod cgroup) series of a pod at one timestamp",
)

# What a pod used, from silver.pod_samples (pipelines/silver/k8s_metrics.py states the rules); joined to
# silver.jobs (source k8s) by job_id for gold's CPU and memory waste and the features.
SILVER_POD_USAGE = TableSpec(
    name="silver.pod_usage",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),  # namespace/pod
        ("namespace", S, False),
        ("pod", S, False),
        ("cpu_used_s", D, True),  # reset-aware increase of the CPU counters from 0, summed over containers
        ("mem_peak_bytes", L, True),  # max over time of the per-timestamp sum of working sets
        ("level", S, False),  # containers (named, without POD) | pod (the pod cgroup: no named series)
        ("form", S, False),  # resource | cadvisor: the form read (resource when a pod has both)
        ("containers", INT, False),  # container series summed (a restart in cAdvisor form is a new one)
        ("samples", L, False),  # timestamps with a sample
        ("first_ts", TS, False),
        ("last_ts", TS, False),
        ("cpu_resets", INT, False),  # counter drops read as restarts
        ("max_gap_s", D, True),  # the longest time between two samples of one series
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id"),
    grain="one Kubernetes pod with usage samples",
)

# One job script by content; silver.job_scripts links jobs to it.
SILVER_SCRIPTS = TableSpec(
    name="silver.scripts",
    schema=_fields(
        ("cluster", S, False),
        ("script_hash", S, False),  # sha256 of the script text
        ("directives_json", S, True),  # every parsed #SBATCH/#PBS option, as given, as a JSON object
        ("req_cpus_per_task", INT, True),
        ("req_ntasks", INT, True),
        ("req_nodes", INT, True),
        ("req_mem_bytes", L, True),  # whole-job total where computable (per-cpu/per-node multiplied out)
        ("req_gpus", INT, True),
        ("gpu_type", S, True),
        ("timelimit_s", L, True),
        ("partition", S, True),
        ("array_spec", S, True),
        ("frameworks", S, True),  # comma-separated: pytorch, deepspeed, tensorflow, jax, lammps, gromacs, ...
        ("launcher", S, True),  # torchrun | deepspeed | accelerate | mpirun | srun | python | ...
        ("model_name", S, True),
        ("batch_size", INT, True),
        ("precision", S, True),  # bf16 | fp16 | fp32 | int8 | ...
        ("n_ranks", INT, True),
        ("input_paths", S, True),
        ("text", S, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "script_hash"),
    grain="one distinct job script (by content hash)",
)

SILVER_JOB_SCRIPTS = TableSpec(
    name="silver.job_scripts",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("script_hash", S, False),
        ("source_file", S, True),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id"),
    grain="one job's batch script",
)

# The files a job's entry points read (its training script, configs), by content, from an archive's side
# folder of sources per job (`jobfit ingest scripts --sources DIR`); silver.job_sources links jobs to them.
SILVER_SOURCES = TableSpec(
    name="silver.sources",
    schema=_fields(
        ("cluster", S, False),
        ("source_hash", S, False),  # sha256 of the file's bytes
        ("bytes", L, False),
        ("text", S, False),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "source_hash"),
    grain="one distinct source file of a job (by content hash)",
)

SILVER_JOB_SOURCES = TableSpec(
    name="silver.job_sources",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("path", S, False),  # relative to the job's folder, as the job script names it
        ("source_hash", S, False),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id", "path"),
    grain="one source file of one job",
)

# The last bytes of a job's stdout/stderr as archived, for failure diagnosis (jobfit ingest logs).
SILVER_JOB_LOGS = TableSpec(
    name="silver.job_logs",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),  # from the file name: 123, 123_4 (array task)
        ("stream", S, False),  # stderr (.err) | stdout (.out) | log (.log, .txt)
        ("tail_text", S, True),  # the last tail_bytes of the file, decoded as UTF-8
        ("tail_bytes", L, False),
        ("file_bytes", L, False),  # the whole file's size (uncompressed)
        ("file_sha256", S, False),
        ("source_file", S, False),
        ("ingested_at", TS, False),
    ),
    key=("cluster", "job_id", "stream"),
    grain="one output stream (stdout or stderr) of one job",
)

# The exception that ended a run and the user's own frame, as pipelines/gold/failures/tracebacks.py reads.
# (Nested fields nullable: Delta checks a nested NOT NULL even where the whole struct is null.)
EXCEPTION_STRUCT = _fields(("type", S, True), ("message", S, True))
CODE_STRUCT = _fields(("file", S, True), ("line", INT, True), ("function", S, True), ("text", S, True))

# Why each failed job failed (pipelines/gold/failures/, docs/failures.md).
GOLD_FAILURES = TableSpec(
    name="gold.failures",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("month", S, False),  # YYYY-MM (UTC) of end_ts (start or submit when it never ended)
        ("user", S, True),
        ("account", S, True),
        ("partition", S, True),
        ("state", S, False),
        ("exit_code", INT, True),
        ("exit_signal", INT, True),
        ("end_ts", TS, True),
        ("elapsed_s", L, True),
        ("timelimit_s", L, True),
        ("node_list", S, True),
        ("gpu_model", S, True),
        ("gpus", INT, True),
        ("cpus", INT, True),
        ("cause", S, False),  # pipelines.gold.failures.taxonomy.CAUSES
        ("detail", S, True),  # finer label within the cause (ecc, xid, import_error, by_user, ...)
        ("user_fixable", B, False),  # false for hardware, node, network, preemption, admin and unknown
        ("confidence", D, False),  # 0..1
        ("primary_source", S, False),  # accounting | log | telemetry: where the deciding evidence came from
        ("rule", S, False),  # the rule that decided
        ("evidence", S, False),
        ("suggested_fix", S, False),
        ("exception", EXCEPTION_STRUCT, True),  # the run-ending exception in the log: type, message
        ("code", CODE_STRUCT, True),  # the user's innermost frame: file as printed, line, function, text
        ("xid", INT, True),
        ("has_log", B, False),
        ("has_telemetry", B, False),
        ("lost_gpu_hours", D, False),  # allocated GPUs x elapsed
        ("lost_core_hours", D, False),
        ("lost_usd", D, False),  # cores, memory and GPUs x elapsed at the cluster's prices
        ("built_at", TS, False),
    ),
    key=("cluster", "job_id"),
    grain="one failed, timed-out, OOM, node-failed, preempted or cancelled job",
)

# PyTorch profiler (Kineto/CUPTI) traces: one row per trace file, and its complete events as typed columns
# (pipelines/silver/profiler.py). Events belong to their trace; the trace row carries the job it belongs to.
SILVER_PROFILER_TRACES = TableSpec(
    name="silver.profiler_traces",
    schema=_fields(
        ("cluster", S, False),
        ("trace_id", S, False),  # sha256 of the decompressed trace
        ("source_file", S, False),
        ("file_bytes", L, False),  # decompressed size
        ("schema_gen", S, False),  # legacy (PyTorch <= 1.9 categories) | kineto
        ("rank", INT, True),  # distributedInfo.rank, else a rank in the file name
        ("world_size", INT, True),
        ("backend", S, True),  # nccl | gloo | ...
        ("host", S, True),  # host_name in the trace, else from a `<host>_<pid>.<ts>.pt.trace.json` name
        ("pid", L, True),  # the host process with the most events
        ("device_name", S, True),  # deviceProperties[0].name
        ("compute_major", INT, True),
        ("compute_minor", INT, True),
        ("device_mem_bytes", L, True),
        ("start_ts", TS, True),  # first host event, UTC (null when the trace cannot be placed in time)
        ("end_ts", TS, True),
        ("events", L, False),  # complete events kept in silver.profiler_events
        ("rejected_events", L, False),  # events quarantined
        ("has_steps", B, False),  # ProfilerStep#N markers present
        ("has_stacks", B, False),  # Call stack args or python_function events present
        ("job_id", S, True),  # silver.jobs key; null when unattributed
        ("attribution", S, False),  # flag | path | host_time | ambiguous | unattributed
        ("attribution_detail", S, False),  # why: the flag, the path part, the candidates, or what was missing
        ("ingested_at", TS, False),
    ),
    key=("cluster", "trace_id"),
    grain="one profiler trace file (one rank of one run)",
)

SILVER_PROFILER_EVENTS = TableSpec(
    name="silver.profiler_events",
    schema=_fields(
        ("cluster", S, False),
        ("trace_id", S, False),
        ("event_no", L, False),  # index in traceEvents
        # cpu_op | python_function | user_annotation | gpu_user_annotation | runtime | driver | kernel |
        # memcpy | memset | cuda_sync | trace | profiler_range | other
        ("kind", S, False),
        ("cat", S, False),  # the category as written (Operator, cpu_op, Kernel, kernel, ...)
        ("name", S, False),
        ("pid", S, True),
        ("tid", S, True),
        ("ts_us", D, False),  # as written (µs; relative to the trace's baseTimeNanoseconds when small)
        ("dur_us", D, False),
        ("device", INT, True),
        ("stream", L, True),
        ("correlation", L, True),
        ("external_id", L, True),
        ("call_stack", S, True),  # `file(line): function;...`, innermost first (with_stack=True)
        ("bytes", L, True),
        ("occupancy_pct", D, True),  # est. achieved occupancy % of a kernel
        ("blocks_per_sm", D, True),
        ("registers", INT, True),
        ("sync_kind", S, True),
    ),
    key=("cluster", "trace_id", "event_no"),
    grain="one complete (ph X) event of a profiler trace",
)

FRAME_STRUCT = _fields(("file", S, True), ("line", INT, True), ("function", S, True))

# Per rank of a profiled run: torch-tb-profiler's step breakdown and HTA's GPU temporal breakdown
# (pipelines/gold/bottlenecks/, docs/bottlenecks.md).
GOLD_PROFILER_RANKS = TableSpec(
    name="gold.profiler_ranks",
    schema=_fields(
        ("cluster", S, False),
        ("trace_id", S, False),
        ("job_id", S, True),
        ("month", S, True),  # YYYY-MM of the job's end (start while running), else of the trace
        ("rank", INT, True),
        ("source_file", S, False),
        ("steps", INT, False),
        ("step_source", S, False),  # profiler_step | dataloader | pattern | whole_trace | none
        ("mean_step_us", D, False),
        ("warmup_us", D, False),  # the warm-up iteration left out (0 when none)
        ("kernel_pct", D, False),
        ("memcpy_pct", D, False),
        ("memset_pct", D, False),
        ("runtime_pct", D, False),
        ("dataloader_pct", D, False),
        ("cpu_exec_pct", D, False),
        ("other_pct", D, False),
        ("gpu_idle_pct", D, True),  # null: no GPU activity
        ("gpu_compute_pct", D, True),
        ("gpu_non_compute_pct", D, True),
        ("idle_host_wait_pct", D, True),  # shares of the idle time
        ("idle_kernel_wait_pct", D, True),
        ("idle_other_pct", D, True),
        ("kernels", L, False),
        ("has_gpu", B, False),
        ("has_stacks", B, False),
        ("notes", S, True),  # why a figure is missing, how the steps were found
        ("built_at", TS, False),
    ),
    key=("cluster", "trace_id"),
    grain="one rank's trace of a profiled run",
)

# Why a job's GPUs sat idle or slow, with the line to change (pipelines/gold/bottlenecks/rules.py).
GOLD_JOB_BOTTLENECKS = TableSpec(
    name="gold.job_bottlenecks",
    schema=_fields(
        ("cluster", S, False),
        ("job_id", S, False),
        ("kind", S, False),  # pipelines.gold.bottlenecks.rules.FINDING_KINDS
        ("month", S, False),
        ("user", S, True),
        ("account", S, True),
        ("rank", INT, True),  # the rank where it is largest (straggler: the slow rank)
        ("share_pct", D, False),  # of step time, mean over the job's GPU ranks
        ("evidence", S, False),
        ("fix", S, False),
        ("code", FRAME_STRUCT, True),  # the user's line; null when the trace has no stacks
        ("gpu_hours_recoverable", D, True),  # share x the job's GPU-hours; null when they are unknown
        ("usd_recoverable", D, True),
        ("built_at", TS, False),
        # profiler (a trace) | dcgm (profiling counters: no rank, no line). Last: older tables gain it by
        # ALTER TABLE ADD COLUMNS; their rows (null) are the profiler's.
        ("source", S, True),
    ),
    key=("cluster", "job_id", "source", "kind"),
    grain="one finding of one job from one source",
)

# Gold: per-job usage and waste (pipelines/gold/waste.py states the formulas), and the month rollups
# (pipelines/gold/rollups.py). Hours are full-GPU / core / GiB hours; dollars by the cluster's price sheet.
# GPU figures are null when the job has no telemetry ("unknown", never 0 %); coverage stands beside them.
GOLD_JOB_USAGE = TableSpec(
    name="gold.job_usage",
    schema=_fields(
        ("cluster", S, False),
        ("month", S, False),  # YYYY-MM (UTC) of end_ts
        ("job_id", S, False),
        ("source", S, True),
        ("user", S, True),
        ("account", S, True),
        ("partition", S, True),
        ("state", S, True),
        ("start_ts", TS, True),
        ("end_ts", TS, True),
        ("elapsed_s", L, True),
        ("timelimit_s", L, True),  # sacct's, else the partition's MaxTime for Partition_Limit
        ("timelimit_source", S, True),  # sacct | conf (the cluster yaml) | scontrol (silver.partitions)
        ("time_eff_pct", D, True),  # elapsed / time limit
        ("time_eff_note", S, True),  # why time_eff_pct is null (UNLIMITED, an unresolved Partition_Limit)
        ("alloc_cpus", INT, True),
        ("limit_cpu_cores", D, True),  # k8s: the CPU the pod may burst to (its limit); null if unlimited
        ("total_cpu_s", D, True),
        ("cpu_alloc_core_h", D, True),
        ("cpu_used_core_h", D, True),
        ("cpu_wasted_core_h", D, True),
        ("cpu_eff_pct", D, True),
        ("req_mem_bytes", L, True),
        ("max_rss_bytes", L, True),
        ("limit_mem_bytes", L, True),  # k8s: the memory the pod may burst to before its OOM kill
        ("mem_alloc_gib_h", D, True),
        ("mem_used_gib_h", D, True),
        ("mem_wasted_gib_h", D, True),
        ("mem_eff_pct", D, True),
        ("usage_source", S, True),  # where CPU and memory use come from: jobstats | sacct
        ("alloc_gpus", INT, True),
        ("gpu_model", S, True),  # as the price sheet names it when known
        ("mig_profile", S, True),
        ("gpu_fraction", D, True),  # share of a whole GPU per device (MIG: compute slices / 7)
        ("gpu_share", D, True),  # the job's share of its GPUs' sampled time (1/N when N jobs share a GPU)
        ("has_gpu_telemetry", B, True),
        ("gpu_telemetry_source", S, True),  # dcgm | jobstats (DCGM wins where both exist); null: none
        ("gpu_coverage_pct", D, True),  # share of the job's GPU-time with samples; null for CPU-only jobs
        ("gpu_alloc_h", D, True),
        ("gpu_util_mean_pct", D, True),
        ("gpu_used_h", D, True),
        ("gpu_idle_h", D, True),
        ("gpu_underused_h", D, True),
        ("vram_peak_bytes", L, True),
        ("vram_card_bytes", L, True),
        ("vram_peak_pct", D, True),
        ("vram_fits", S, True),  # smallest GPU or MIG profile of the cluster holding the peak
        ("jobstats_gpu_util_pct", D, True),  # jobstats' mean GPU utilisation, beside DCGM's when both exist
        ("has_gpu_source_conflict", B, True),  # jobstats and DCGM utilisation differ by more than 10 points
        ("usage_evidence", S, True),  # jobstats: the worst node's CPU and memory; a source conflict
        ("failure_cause", S, True),
        ("failure_cause_from", S, True),  # gold.failures | state
        ("is_user_fixable_failure", B, True),
        ("cpu_alloc_usd", D, True),
        ("mem_alloc_usd", D, True),
        ("gpu_alloc_usd", D, True),
        ("alloc_usd", D, True),
        ("cpu_wasted_usd", D, True),
        ("mem_wasted_usd", D, True),
        ("gpu_idle_usd", D, True),  # part of gpu_underused_usd, not added to wasted_usd
        ("gpu_underused_usd", D, True),
        ("failed_run_usd", D, True),
        ("wasted_usd", D, True),
    ),
    key=("cluster", "job_id"),
    grain="one finished job allocation, in the month (UTC) it ended",
)

_MONTH_MEASURES = (
    ("jobs", L, False),
    ("gpu_jobs", L, False),
    ("gpu_jobs_no_telemetry", L, False),
    ("gpu_jobs_jobstats", L, False),  # GPU jobs whose GPU figures come from jobstats (no DCGM samples)
    ("gpu_jobs_source_conflict", L, False),  # jobstats and DCGM disagree by more than 10 points
    ("failed_user_fixable_jobs", L, False),
    ("cpu_alloc_core_h", D, True),
    ("cpu_used_core_h", D, True),
    ("cpu_wasted_core_h", D, True),
    ("mem_alloc_gib_h", D, True),
    ("mem_used_gib_h", D, True),
    ("mem_wasted_gib_h", D, True),
    ("gpu_alloc_h", D, True),
    ("gpu_used_h", D, True),
    ("gpu_idle_h", D, True),
    ("gpu_underused_h", D, True),
    ("cpu_alloc_usd", D, True),
    ("mem_alloc_usd", D, True),
    ("gpu_alloc_usd", D, True),
    ("alloc_usd", D, True),
    ("cpu_wasted_usd", D, True),
    ("mem_wasted_usd", D, True),
    ("gpu_idle_usd", D, True),
    ("gpu_underused_usd", D, True),
    ("failed_run_usd", D, True),
    ("wasted_usd", D, True),
    ("gpu_alloc_known_h", D, True),  # GPU-hours of jobs whose utilisation is known
    ("gpu_coverage_pct", D, True),
    ("cpu_eff_pct", D, True),
    ("mem_eff_pct", D, True),
    ("gpu_util_mean_pct", D, True),
    ("wasted_share_pct", D, True),  # the headline: wasted $ / allocated $
)


def _top(item: str) -> T.ArrayType:
    return T.ArrayType(_fields((item, S, True), ("wasted_usd", D, True)), containsNull=False)


def _month_spec(
    group: str | None, top: str, item: str, extra: tuple[tuple[str, T.DataType, bool], ...] = ()
) -> TableSpec:
    """A month rollup table: per cluster-month (and `group`), the month measures and the column `top`
    listing its largest `item`s by wasted dollars."""
    by = (group,) if group else ()
    return TableSpec(
        name=f"gold.{group or 'cluster'}_month",
        schema=_fields(
            ("cluster", S, False),
            ("month", S, False),
            *((g, S, True) for g in by),
            *_MONTH_MEASURES,
            (top, _top(item), True),
            *extra,
        ),
        key=("cluster", "month", *by),
        grain=f"one {group}'s finished jobs in one cluster-month" if group else "one cluster-month",
    )


GOLD_USER_MONTH = _month_spec("user", "top_jobs", "job_id")
GOLD_ACCOUNT_MONTH = _month_spec("account", "top_users", "user")
GOLD_CLUSTER_MONTH = _month_spec(
    None,
    "top_users",
    "user",
    (
        ("source_watermark_ts", TS, True),  # latest silver ingested_at the month was built from
        ("price_sheet_json", S, True),  # the prices used
    ),
)

# Every monthly digest `jobfit emails` delivered (or could not): a re-run skips the users delivered here, so
# nobody gets the same month twice by the same transport, and a run killed half-way sends only the rest.
OPS_EMAIL_LEDGER = TableSpec(
    name="ops.email_ledger",
    schema=_fields(
        ("cluster", S, False),
        ("month", S, False),
        ("user", S, False),
        ("transport", S, False),  # smtp | outbox
        ("recipient", S, False),
        ("message_id", S, False),  # the Message-ID header (the same for a user's month on every run)
        ("status", S, False),  # sent | written (outbox) | refused (the server refused the recipient)
        ("detail", S, True),  # the server's reply for a refusal; the .eml path for the outbox
        ("attempts", INT, False),
        ("sent_at", TS, False),
    ),
    key=("cluster", "month", "user", "transport"),
    grain="one user's monthly digest by one transport",
)

# Raw sources, one bronze table each.
BRONZE_SOURCES = (
    "sacct",
    "k8s_pods",
    "job_scripts",
    "gpu_samples",
    "swf",
    "logs",
    "k8s_metrics",
    "partitions",
    "profiler",
)


def bronze_spec(source: str) -> TableSpec:
    """The bronze table for a raw source (sacct, k8s_pods, job_scripts, gpu_samples, swf, logs,
    k8s_metrics)."""
    return TableSpec(
        name=f"bronze.{source}",
        schema=BRONZE_SCHEMA,
        key=BRONZE_KEY,
        grain="one raw line (or JSON object) of a source file",
    )


# Every table jobfit writes, by name. A new table declares its TableSpec above and is listed here.
TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        QUARANTINE,
        SILVER_JOBS,
        SILVER_JOB_STEPS,
        SILVER_JOBSTATS,
        SILVER_PARTITIONS,
        SILVER_GPU_SAMPLES,
        SILVER_POD_SAMPLES,
        SILVER_POD_USAGE,
        SILVER_SCRIPTS,
        SILVER_JOB_SCRIPTS,
        SILVER_SOURCES,
        SILVER_JOB_SOURCES,
        SILVER_JOB_LOGS,
        GOLD_FAILURES,
        GOLD_JOB_USAGE,
        GOLD_USER_MONTH,
        GOLD_ACCOUNT_MONTH,
        GOLD_CLUSTER_MONTH,
        OPS_EMAIL_LEDGER,
        SILVER_PROFILER_TRACES,
        SILVER_PROFILER_EVENTS,
        GOLD_PROFILER_RANKS,
        GOLD_JOB_BOTTLENECKS,
    )
}
