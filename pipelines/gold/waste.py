"""Waste, stated once: per-job CPU, memory, GPU, VRAM and time efficiency, wasted hours and dollars.

Every formula jobfit uses for waste lives here (docs/waste.md states them in prose):

- CPU: allocated core-hours `alloc_cpus × elapsed`; used `total_cpu`; wasted `max(alloc − used, 0)`.
- Memory: `(req_mem − peak_mem) × elapsed` in GiB-hours (≥ 0), `req_mem` falling back to the allocation.
- GPU (from telemetry samples attributed to the job): allocated GPU-hours in full-GPU equivalents
  `alloc_gpus × elapsed × share × mig_fraction`; mean utilisation over the sampled GPU-time; idle =
  allocated GPU-time × share of sampled time below the idle threshold; under-use = allocated GPU-time ×
  (1 − mean utilisation). A GPU scraped as N label copies (N jobs sharing it) counts 1/N per job.
- Missing telemetry is unknown: GPU figures are null, and coverage (share of the job's GPU-time with
  samples) stands beside them.
- VRAM: peak used vs the card (or MIG slice), and the smallest GPU or MIG profile of the cluster that fits.
- Failed runs: a job that failed for a cause its user could fix wastes its whole allocation.
- jobstats summaries (silver.jobstats, docs/jobstats.md): CPU and memory use per node where a job has one;
  GPU utilisation and VRAM per GPU where it has no DCGM samples (DCGM wins; a disagreement is flagged).
- Time limit: `Timelimit = Partition_Limit` resolves to the partition's MaxTime (cluster yaml, else an
  ingested `scontrol show partition` dump); otherwise time efficiency is null and says why.
- Dollars: hours × the cluster's price sheet (per core-hour, GiB-hour, GPU-hour by model).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from conf import ClusterConfig, Prices
from pipelines.schemas import GOLD_JOB_USAGE, SILVER_JOBSTATS
from pipelines.silver.attribution import with_raw_job_ids_resolved
from pipelines.states import FAILED_STATES
from pipelines.units import GIB, MIG_PROFILE_RE, MIG_SLICES_PER_GPU, mig_slices_col, parse_mig_profile

# A GPU sample whose utilisation is below this (percent) counts as idle. DCGM_FI_DEV_GPU_UTIL is an
# integer percent of time with a kernel running; Job Defense Shield counts only exact 0 % as idle, we
# also count the near-zero ticks of a job that only polls its GPU.
IDLE_UTIL_BELOW_PCT = 5.0
# dcgm-exporter's default collect interval (-c 30000 ms): what one sample covers when a series has a
# single sample and so no interval of its own.
DEFAULT_SAMPLE_INTERVAL_S = 30.0
# State-based fallback when gold.failures has no cause for a job: these final states are the user's to fix
# (raise --time, raise --mem). NODE_FAIL, BOOT_FAIL and PREEMPTED are the system's; FAILED alone (a non-zero
# exit with no diagnosed cause) is not counted, so the failed-run waste is a lower bound.
USER_FIXABLE_STATES: frozenset[str] = frozenset({"TIMEOUT", "OUT_OF_MEMORY"})
# Where a job has both, DCGM's sampled mean wins over jobstats' summary; when the two utilisations differ by
# more than this many points the job is flagged (`has_gpu_source_conflict`), never silently reconciled.
GPU_SOURCE_CONFLICT_PCT = 10.0


def price_sheet_json(cluster: ClusterConfig) -> str:
    """The prices a build used, as canonical JSON (stored in gold so a price change triggers a rebuild)."""
    return json.dumps(cluster.prices.model_dump(), sort_keys=True)


def normalise_model(name: str) -> str:
    """A GPU model name comparable across sources: lower case, no 'NVIDIA ' prefix, spaces as '-'."""
    name = name.strip().lower()
    name = name.removeprefix("nvidia").strip()
    return re.sub(r"\s+", "-", name)


def _normalise_model_col(col: Column) -> Column:
    return F.regexp_replace(F.trim(F.regexp_replace(F.lower(F.trim(col)), r"^nvidia", "")), r"\s+", "-")


def vram_fit_options(cluster: ClusterConfig) -> list[tuple[str, int]]:
    """Every whole GPU and MIG profile of the cluster as (label, bytes), smallest first.

    A MIG profile's size is `parse_mig_profile`'s: the number in its name read as GB (docs/waste.md says why).
    Ties go to fewer compute slices; a profile that is not a MIG profile name is left out."""
    options: list[tuple[int, int, str]] = []
    for model, spec in cluster.gpu_models.items():
        options.append((int(spec.memory_gib * GIB), MIG_SLICES_PER_GPU, model))
        for profile in spec.mig_profiles:
            try:
                slices, size = parse_mig_profile(profile)
            except ValueError:
                continue
            options.append((size, slices, f"{model} {profile}"))
    return [(label, size) for size, _, label in sorted(options)]


def with_copies(samples: DataFrame) -> DataFrame:
    """Add `copies_n`: label copies of the same GPU sample (N jobs sharing a GPU emit N copies)."""
    same_sample = Window.partitionBy("cluster", "host", "device", "ts")
    return samples.withColumn("copies_n", F.count(F.lit(1)).over(same_sample))


def with_sample_weights(samples: DataFrame, jobs: DataFrame) -> DataFrame:
    """Attributed samples inside their job's window, with `weight_s`: the seconds of GPU-time each covers.

    A sample covers [ts, ts + interval) clipped to the job's [start, end), the interval being its series'
    median gap (a missed scrape leaves a hole, so coverage drops) or DEFAULT_SAMPLE_INTERVAL_S."""
    windows = jobs.select("cluster", "job_id", "start_ts", "end_ts")
    attributed = samples.filter(F.col("job_id").isNotNull()).join(
        windows, on=["cluster", "job_id"], how="inner"
    )
    series = Window.partitionBy("cluster", "job_id", "host", "device", "label_job").orderBy("ts")
    whole = Window.partitionBy("cluster", "job_id", "host", "device", "label_job")
    gap_s = F.unix_micros(F.lead("ts").over(series)) / 1e6 - F.unix_micros(F.col("ts")) / 1e6
    ts_s = F.unix_micros(F.col("ts")) / 1e6
    covered_until = ts_s + F.coalesce(F.least(F.col("gap_s"), F.col("interval_s")), F.col("interval_s"))
    return (
        attributed.withColumn("gap_s", gap_s)
        .withColumn(
            "interval_s",
            F.coalesce(F.percentile_approx("gap_s", 0.5).over(whole), F.lit(DEFAULT_SAMPLE_INTERVAL_S)),
        )
        .withColumn(
            "weight_s",
            F.greatest(
                F.lit(0.0),
                F.least(covered_until, F.unix_micros("end_ts") / 1e6)
                - F.greatest(ts_s, F.unix_micros("start_ts") / 1e6),
            ),
        )
        .filter(F.col("weight_s") > 0)
    )


def job_gpu_telemetry(samples: DataFrame, jobs: DataFrame, idle_below_pct: float) -> DataFrame:
    """Per job: seconds of GPU-time sampled, its 1/N shares, mean utilisation, idle share, VRAM peak."""
    weighted = with_sample_weights(with_raw_job_ids_resolved(with_copies(samples), jobs), jobs)
    share_s = F.col("weight_s") / F.col("copies_n")
    has_util = F.col("gpu_util_pct").isNotNull()
    util_s = F.sum(F.when(has_util, share_s))
    return weighted.groupBy("cluster", "job_id").agg(
        F.sum("weight_s").alias("gpu_sampled_s"),
        F.sum(share_s).alias("gpu_share_s"),
        (F.sum(F.when(has_util, share_s * F.col("gpu_util_pct"))) / util_s).alias("gpu_util_mean_pct"),
        (
            F.coalesce(F.sum(F.when(F.col("gpu_util_pct") < idle_below_pct, share_s)), F.lit(0.0)) / util_s
        ).alias("gpu_idle_frac"),
        F.max("fb_used_bytes").alias("vram_peak_bytes"),
        F.max("fb_total_bytes").alias("vram_card_bytes"),
        F.max("mig_profile").alias("mig_profile"),
        F.max("model_name").alias("sample_model"),
    )


def with_failure_cause(jobs: DataFrame, failures: DataFrame | None) -> DataFrame:
    """Add `failure_cause`, `failure_cause_from` and `is_user_fixable_failure`.

    Only jobs in a failed state (pipelines.states.FAILED_STATES; not CANCELLED, not COMPLETED) can be failed
    runs. `failures` (gold.failures: cluster, job_id, cause, user_fixable) wins where it has the job;
    otherwise the state decides: TIMEOUT and OUT_OF_MEMORY are the user's to fix, other states are not."""
    failed_state = F.col("state").isin(*sorted(FAILED_STATES))
    by_state = F.col("state").isin(*sorted(USER_FIXABLE_STATES))
    state_cause = F.when(by_state, F.lower(F.col("state")))
    if failures is None:
        return jobs.select(
            "*",
            state_cause.alias("failure_cause"),
            F.when(by_state, F.lit("state")).alias("failure_cause_from"),
            by_state.alias("is_user_fixable_failure"),
        )
    diagnosed = failures.select(
        "cluster",
        "job_id",
        F.col("cause").alias("_cause"),
        F.col("user_fixable").cast("boolean").alias("_fixable"),
    )
    joined = jobs.join(diagnosed, on=["cluster", "job_id"], how="left")
    known = F.col("_cause").isNotNull()
    return joined.select(
        *[F.col(c) for c in jobs.columns],
        F.when(known, F.col("_cause")).otherwise(state_cause).alias("failure_cause"),
        F.when(known, F.lit("gold.failures")).when(by_state, F.lit("state")).alias("failure_cause_from"),
        (failed_state & F.when(known, F.coalesce(F.col("_fixable"), F.lit(False))).otherwise(by_state)).alias(
            "is_user_fixable_failure"
        ),
    )


def _lookup(key: Column, table: dict[str, float | str], default: Column) -> Column:
    """A CASE over a small mapping (model → price, partition → model, ...)."""
    expr = default
    for name, value in sorted(table.items(), reverse=True):
        expr = F.when(key == F.lit(name), F.lit(value)).otherwise(expr)
    return expr


def _gpu_model_col(cluster: ClusterConfig) -> Column:
    """The job's GPU model as the cluster's sheet names it: the job's, the samples', or its partition's."""
    known = {normalise_model(m): m for m in {*cluster.prices.gpu_hour_usd, *cluster.gpu_models} - {"default"}}
    by_partition = {p: spec.gpu_model for p, spec in cluster.partitions.items() if spec.gpu_model}
    null = F.lit(None).cast("string")
    return F.coalesce(
        _lookup(_normalise_model_col(F.col("gpu_model")), known, null),
        _lookup(_normalise_model_col(F.col("sample_model")), known, null),
        _lookup(F.col("partition"), by_partition, null),
        F.col("gpu_model"),
        F.col("sample_model"),
    )


def with_vram_fit(df: DataFrame, cluster: ClusterConfig) -> DataFrame:
    """Add `vram_fits`: the smallest whole GPU or MIG profile of the cluster holding `vram_peak_bytes`."""
    fits = F.lit(None).cast("string")
    for label, size in reversed(vram_fit_options(cluster)):
        fits = F.when(F.col("vram_peak_bytes") <= F.lit(size), F.lit(label)).otherwise(fits)
    return df.withColumn("vram_fits", F.when(F.col("vram_peak_bytes").isNotNull(), fits))


def _hours(seconds: Column) -> Column:
    return seconds / 3600.0


def _pct(part: Column, whole: Column) -> Column:
    return F.when(whole > 0, part / whole * 100.0)


def job_usage(
    jobs: DataFrame,
    samples: DataFrame,
    cluster: ClusterConfig,
    failures: DataFrame | None = None,
    idle_below_pct: float = IDLE_UTIL_BELOW_PCT,
    jobstats: DataFrame | None = None,
    partition_limits: Mapping[str, int | None] | None = None,
) -> DataFrame:
    """gold.job_usage for finished jobs of one cluster: efficiencies, wasted hours and dollars per job.

    `jobs` are silver.jobs rows, `samples` silver.gpu_samples rows (attributed or not), `failures`
    gold.failures rows (cluster, job_id, cause, user_fixable) or None, `jobstats` silver.jobstats rows or
    None, `partition_limits` partition → MaxTime seconds (None: UNLIMITED) from silver.partitions. The
    month is the month (UTC) the job ended."""
    finished = jobs.filter(
        F.col("is_final") & F.col("start_ts").isNotNull() & F.col("end_ts").isNotNull()
    ).withColumn("month", F.date_format("end_ts", "yyyy-MM"))
    telemetry = job_gpu_telemetry(samples, finished, idle_below_pct)
    df = with_failure_cause(finished, failures).join(telemetry, on=["cluster", "job_id"], how="left")
    df = with_jobstats_usage(df, jobstats, idle_below_pct)
    df = with_time_limit(df, partition_time_limits(cluster, partition_limits))
    df = with_vram_fit(df.withColumn("gpu_model", _gpu_model_col(cluster)), cluster)
    out = [F.col(_INTERNAL_NAMES.get(c, c)).alias(c) for c in GOLD_JOB_USAGE.columns]
    return with_rounded(_with_efficiency(df, cluster).select(*out))


def with_rounded(df: DataFrame, digits: int = 6) -> DataFrame:
    """Round every double column, so sums whose order Spark may vary give identical tables run to run."""
    return df.select(
        [
            F.round(F.col(f.name), digits).alias(f.name)
            if f.dataType.typeName() == "double"
            else F.col(f.name)
            for f in df.schema.fields
        ]
    )


def _with_efficiency(df: DataFrame, cluster: ClusterConfig) -> DataFrame:
    prices = cluster.prices
    memory_gib = {m: s.memory_gib * GIB for m, s in cluster.gpu_models.items()}
    gpu_price = {m: p for m, p in prices.gpu_hour_usd.items() if m != "default"}
    elapsed_s = F.coalesce(F.col("elapsed_s"), F.lit(0)).cast("double")
    alloc_cpus = F.coalesce(F.col("alloc_cpus"), F.col("req_cpus"), F.col("_js_cpus"), F.lit(0))
    # jobstats' memory is the nodes' cgroup limits: what was really reserved (ReqMem where it has none).
    mem_bytes = F.coalesce(F.col("_js_mem_total_bytes"), F.col("req_mem_bytes"), F.col("alloc_mem_bytes"))
    alloc_gpus = F.coalesce(F.col("alloc_gpus"), F.col("req_gpus"), F.col("_js_gpus"), F.lit(0))
    mig = F.coalesce(F.col("mig_profile"), F.regexp_extract(F.col("gpu_model"), f"({MIG_PROFILE_RE})", 1))
    mig_frac = mig_slices_col(mig).cast("double") / MIG_SLICES_PER_GPU
    has_telemetry = F.col("gpu_sampled_s") > 0
    gpu_wall_s = alloc_gpus * elapsed_s
    df = df.select(
        "*",
        alloc_cpus.alias("_cpus"),
        # jobstats' CPU efficiency applied to the accounted allocation (equal to its CPU time when its CPUs
        # and run time are the job's, as on a real cluster); else sacct's TotalCPU.
        F.coalesce(F.col("_js_cpu_frac") * alloc_cpus * elapsed_s, F.col("total_cpu_s")).alias(
            "_total_cpu_s"
        ),
        mem_bytes.alias("_mem_bytes"),
        alloc_gpus.alias("_gpus"),
        F.when(mig != "", mig).alias("_mig"),
        F.coalesce(mig_frac, F.lit(1.0)).alias("gpu_fraction"),
        F.when(has_telemetry, F.col("gpu_share_s") / F.col("gpu_sampled_s"))
        .otherwise(F.lit(1.0))
        .alias("gpu_share"),
        F.when(
            alloc_gpus > 0,
            F.least(F.lit(100.0), _pct(F.coalesce(F.col("gpu_sampled_s"), F.lit(0.0)), gpu_wall_s)),
        ).alias("gpu_coverage_pct"),
        F.coalesce(has_telemetry, F.lit(False)).alias("has_gpu_telemetry"),
    )
    cpu_alloc_h = _hours(F.col("_cpus") * elapsed_s)
    cpu_used_h = _hours(F.col("_total_cpu_s"))
    mem_alloc_h = F.col("_mem_bytes") / GIB * _hours(elapsed_s)
    mem_used_h = F.col("max_rss_bytes") / GIB * _hours(elapsed_s)
    gpu_alloc_h = _hours(F.col("_gpus") * elapsed_s) * F.col("gpu_share") * F.col("gpu_fraction")
    util = F.col("gpu_util_mean_pct")
    no_gpus = F.col("_gpus") == 0
    df = df.select(
        "*",
        cpu_alloc_h.alias("cpu_alloc_core_h"),
        cpu_used_h.alias("cpu_used_core_h"),
        # greatest() skips nulls: guard it, so an unknown use stays an unknown waste, not 0.
        F.when(cpu_used_h.isNotNull(), F.greatest(cpu_alloc_h - cpu_used_h, F.lit(0.0))).alias(
            "cpu_wasted_core_h"
        ),
        _pct(F.col("_total_cpu_s"), F.col("_cpus") * elapsed_s).alias("cpu_eff_pct"),
        F.coalesce(mem_alloc_h, F.lit(0.0)).alias("mem_alloc_gib_h"),
        mem_used_h.alias("mem_used_gib_h"),
        F.when(mem_used_h.isNotNull(), F.greatest(mem_alloc_h - mem_used_h, F.lit(0.0))).alias(
            "mem_wasted_gib_h"
        ),
        _pct(F.col("max_rss_bytes").cast("double"), F.col("_mem_bytes").cast("double")).alias("mem_eff_pct"),
        _pct(elapsed_s, F.col("_timelimit_s").cast("double")).alias("time_eff_pct"),
        gpu_alloc_h.alias("gpu_alloc_h"),
        F.when(no_gpus, F.lit(0.0)).otherwise(gpu_alloc_h * util / 100.0).alias("gpu_used_h"),
        F.when(no_gpus, F.lit(0.0)).otherwise(gpu_alloc_h * F.col("gpu_idle_frac")).alias("gpu_idle_h"),
        F.when(no_gpus, F.lit(0.0)).otherwise(gpu_alloc_h * (1.0 - util / 100.0)).alias("gpu_underused_h"),
        F.coalesce(
            F.col("vram_card_bytes"),
            _lookup(F.col("gpu_model"), memory_gib, F.lit(None).cast("double")).cast("long"),
        ).alias("_card_bytes"),
        _lookup(F.col("gpu_model"), gpu_price, F.lit(prices.gpu_hour_usd["default"])).alias("_gpu_usd"),
    )
    return _with_dollars(df, prices)


def _with_dollars(df: DataFrame, prices: Prices) -> DataFrame:
    core, gib = F.lit(prices.core_hour_usd), F.lit(prices.gib_hour_usd)
    cpu_alloc_usd = F.col("cpu_alloc_core_h") * core
    mem_alloc_usd = F.col("mem_alloc_gib_h") * gib
    gpu_alloc_usd = F.col("gpu_alloc_h") * F.col("_gpu_usd")
    df = df.select(
        "*",
        cpu_alloc_usd.alias("cpu_alloc_usd"),
        mem_alloc_usd.alias("mem_alloc_usd"),
        gpu_alloc_usd.alias("gpu_alloc_usd"),
        (cpu_alloc_usd + mem_alloc_usd + gpu_alloc_usd).alias("alloc_usd"),
        (F.col("cpu_wasted_core_h") * core).alias("cpu_wasted_usd"),
        (F.col("mem_wasted_gib_h") * gib).alias("mem_wasted_usd"),
        (F.col("gpu_idle_h") * F.col("_gpu_usd")).alias("gpu_idle_usd"),
        (F.col("gpu_underused_h") * F.col("_gpu_usd")).alias("gpu_underused_usd"),
        F.col("_card_bytes").alias("vram_card_bytes_"),
    )
    # Idle GPU-time is part of under-use, so only under-use enters the total. A user-fixable failure wastes
    # its whole allocation: what it did use is booked as the failed run, beside its unused resources.
    unused = (
        F.coalesce(F.col("cpu_wasted_usd"), F.lit(0.0))
        + F.coalesce(F.col("mem_wasted_usd"), F.lit(0.0))
        + F.coalesce(F.col("gpu_underused_usd"), F.lit(0.0))
    )
    failed = F.col("is_user_fixable_failure")
    return df.select(
        "*",
        F.when(failed, F.greatest(F.col("alloc_usd") - unused, F.lit(0.0)))
        .otherwise(F.lit(0.0))
        .alias("failed_run_usd"),
        F.when(failed, F.greatest(F.col("alloc_usd"), unused)).otherwise(unused).alias("wasted_usd"),
        _pct(F.col("vram_peak_bytes").cast("double"), F.col("_card_bytes").cast("double")).alias(
            "vram_peak_pct"
        ),
    )


# What the month tables add up over jobs: every hour (`_h`) and dollar (`_usd`) figure of gold.job_usage,
# in its order.
HOUR_COLUMNS: tuple[str, ...] = tuple(c for c in GOLD_JOB_USAGE.columns if c.endswith("_h"))
USD_COLUMNS: tuple[str, ...] = tuple(c for c in GOLD_JOB_USAGE.columns if c.endswith("_usd"))
SUMMED_COLUMNS: tuple[str, ...] = HOUR_COLUMNS + USD_COLUMNS

# The output contract is gold.job_usage's schema (pipelines/schemas.py): its columns, in its order. These are
# the ones computed under another name here (output name -> internal column).
_INTERNAL_NAMES: dict[str, str] = {
    "alloc_cpus": "_cpus",
    "total_cpu_s": "_total_cpu_s",
    "timelimit_s": "_timelimit_s",
    "req_mem_bytes": "_mem_bytes",
    "alloc_gpus": "_gpus",
    "mig_profile": "_mig",
    "vram_card_bytes": "vram_card_bytes_",
}


# ---- jobstats summaries as a telemetry source --------------------------------------------------------


def job_jobstats(jobstats: DataFrame, idle_below_pct: float = IDLE_UTIL_BELOW_PCT) -> DataFrame:
    """Per job from silver.jobstats: CPU efficiency as a fraction (CPU time / (CPUs × run time), over the
    nodes), memory used and allocated (sums of the nodes' cgroup peaks and limits), GPUs with figures, their
    mean utilisation and idle share (GPUs whose mean is below the idle threshold), VRAM peak and card, and
    the evidence: each figure beside its worst node."""
    run = F.col("run_time_s")
    measured = F.filter(
        "nodes", lambda n: n["cpu_time_s"].isNotNull() & (n["cpus"] > 0) & (F.col("run_time_s") > 0)
    )
    cpu_nodes = F.transform(
        measured, lambda n: F.struct((n["cpu_time_s"] / (n["cpus"] * run) * 100).alias("pct"), n["host"])
    )
    mem_nodes = F.transform(
        F.filter("nodes", lambda n: n["mem_used_bytes"].isNotNull() & (n["mem_total_bytes"] > 0)),
        lambda n: F.struct((n["mem_used_bytes"] / n["mem_total_bytes"] * 100).alias("pct"), n["host"]),
    )
    gpus = F.flatten(F.transform("nodes", lambda n: F.coalesce(n["gpus"], F.array())))
    utils = F.filter(gpus, lambda g: g["util_pct"].isNotNull())
    idle = F.size(F.filter(utils, lambda g: g["util_pct"] < idle_below_pct))
    cpu_frac = F.when(
        (F.col("cpus") > 0) & (run > 0) & F.col("cpu_time_s").isNotNull(),
        F.col("cpu_time_s") / (F.col("cpus") * run),
    )
    mem_known = F.col("mem_used_bytes").isNotNull() & (F.col("mem_total_bytes") > 0)
    worst_cpu, worst_mem = F.array_min(cpu_nodes), F.array_min(mem_nodes)
    return jobstats.select(
        "cluster",
        "job_id",
        cpu_frac.alias("_js_cpu_frac"),
        F.col("cpus").alias("_js_cpus"),
        F.when(mem_known, F.col("mem_used_bytes")).alias("_js_mem_used_bytes"),
        F.when(mem_known, F.col("mem_total_bytes")).alias("_js_mem_total_bytes"),
        F.when(F.col("gpus_n") > 0, F.col("gpus_n")).alias("_js_gpus"),
        F.col("gpu_util_mean_pct").alias("_js_gpu_util_mean_pct"),
        F.when(F.size(utils) > 0, idle / F.size(utils)).alias("_js_gpu_idle_frac"),
        F.col("gpu_mem_peak_bytes").alias("_js_vram_peak_bytes"),
        F.col("gpu_mem_card_bytes").alias("_js_vram_card_bytes"),
        F.concat_ws(
            "; ",
            F.when(
                cpu_frac.isNotNull(),
                F.format_string(
                    "jobstats CPU %.1f %% over %d node(s), worst %s %.1f %%",
                    cpu_frac * 100,
                    F.col("nodes_n"),
                    worst_cpu["host"],
                    worst_cpu["pct"],
                ),
            ),
            F.when(
                mem_known,
                F.format_string(
                    "memory %.1f %% (%.2f of %.2f GiB), worst %s %.1f %%",
                    F.col("mem_used_bytes") / F.col("mem_total_bytes") * 100,
                    F.col("mem_used_bytes") / GIB,
                    F.col("mem_total_bytes") / GIB,
                    worst_mem["host"],
                    worst_mem["pct"],
                ),
            ),
        ).alias("_js_evidence"),
    )


def with_jobstats_usage(
    df: DataFrame, jobstats: DataFrame | None, idle_below_pct: float = IDLE_UTIL_BELOW_PCT
) -> DataFrame:
    """Jobs with DCGM telemetry joined (`job_gpu_telemetry`), plus jobstats where a summary exists.

    CPU and memory: jobstats' figures replace sacct's (its cgroup figures are measured per node; MaxRSS is
    one task's). GPUs: DCGM samples win; a job without them takes jobstats' GPUs, each covering the whole
    run (coverage = GPUs with figures / allocated GPUs, as DCGM's counts sampled GPU-time). Where both have a
    utilisation they are compared, and a gap above GPU_SOURCE_CONFLICT_PCT points is flagged."""
    if jobstats is None:
        jobstats = df.sparkSession.createDataFrame([], SILVER_JOBSTATS.schema)
    per_job = job_jobstats(jobstats, idle_below_pct)
    joined = df.join(per_job, on=["cluster", "job_id"], how="left")
    dcgm = F.col("gpu_sampled_s") > 0
    js_gpu = ~F.coalesce(dcgm, F.lit(False)) & F.col("_js_gpus").isNotNull()
    elapsed_s = F.coalesce(F.col("elapsed_s"), F.lit(0)).cast("double")
    js_gpu_s = F.col("_js_gpus") * elapsed_s
    gap = F.abs(F.col("gpu_util_mean_pct") - F.col("_js_gpu_util_mean_pct"))
    conflict = F.when(
        dcgm & F.col("gpu_util_mean_pct").isNotNull() & F.col("_js_gpu_util_mean_pct").isNotNull(),
        gap > GPU_SOURCE_CONFLICT_PCT,
    )
    js_used = F.col("_js_cpu_frac").isNotNull() | F.col("_js_mem_used_bytes").isNotNull()
    replaced = {
        "max_rss_bytes": F.coalesce(F.col("_js_mem_used_bytes"), F.col("max_rss_bytes")),
        "gpu_sampled_s": F.when(js_gpu, js_gpu_s).otherwise(F.col("gpu_sampled_s")),
        "gpu_share_s": F.when(js_gpu, js_gpu_s).otherwise(F.col("gpu_share_s")),
        "gpu_util_mean_pct": F.when(js_gpu, F.col("_js_gpu_util_mean_pct")).otherwise(
            F.col("gpu_util_mean_pct")
        ),
        "gpu_idle_frac": F.when(js_gpu, F.col("_js_gpu_idle_frac")).otherwise(F.col("gpu_idle_frac")),
        "vram_peak_bytes": F.when(js_gpu, F.col("_js_vram_peak_bytes")).otherwise(F.col("vram_peak_bytes")),
        "vram_card_bytes": F.when(js_gpu, F.col("_js_vram_card_bytes")).otherwise(F.col("vram_card_bytes")),
    }
    source = F.col("source")
    evidence = F.concat_ws(
        "; ",
        F.col("_js_evidence"),
        F.when(
            conflict,
            F.format_string(
                "GPU utilisation: DCGM %.1f %% vs jobstats %.1f %% (differ by %.1f points; DCGM used)",
                F.col("gpu_util_mean_pct"),
                F.col("_js_gpu_util_mean_pct"),
                gap,
            ),
        ),
    )
    return joined.withColumns(
        {
            **replaced,
            "usage_source": F.when(js_used, F.lit("jobstats"))
            .when(source == "slurm", F.lit("sacct"))
            .otherwise(source),
            "gpu_telemetry_source": F.when(dcgm, F.lit("dcgm")).when(js_gpu, F.lit("jobstats")),
            "jobstats_gpu_util_pct": F.col("_js_gpu_util_mean_pct"),
            "has_gpu_source_conflict": conflict,
            "usage_evidence": F.when(evidence != "", evidence),
        }
    )


def partition_time_limits(
    cluster: ClusterConfig, dumped: Mapping[str, int | None] | None = None
) -> dict[str, tuple[int | None, str]]:
    """Partition → (MaxTime in seconds or None for UNLIMITED, where it was stated: `conf` or `scontrol`).
    The cluster yaml's `partitions.<name>.max_time` wins over an ingested `scontrol show partition` dump."""
    limits: dict[str, tuple[int | None, str]] = {p: (s, "scontrol") for p, s in (dumped or {}).items()}
    for name, spec in cluster.partitions.items():
        if spec.max_time is not None:
            limits[name] = (spec.max_time_s, "conf")
    return limits


def with_time_limit(df: DataFrame, limits: Mapping[str, tuple[int | None, str]]) -> DataFrame:
    """Add `_timelimit_s` (sacct's, else the partition's MaxTime for `Partition_Limit`), `timelimit_source`
    and `time_eff_note` (why there is no time efficiency: UNLIMITED, an unresolved Partition_Limit)."""
    partition = F.col("partition")
    null_long, null_str = F.lit(None).cast("long"), F.lit(None).cast("string")
    known = {p: s for p, (s, _) in limits.items() if s is not None}
    unlimited = {p: src for p, (s, src) in limits.items() if s is None}
    resolved = _lookup(partition, known, null_long).cast("long")
    source = _lookup(partition, {p: src for p, (_, src) in limits.items()}, null_str)
    is_pt = F.coalesce(F.col("is_partition_timelimit"), F.lit(False))
    own = F.col("timelimit_s")
    limit = F.when(own.isNotNull(), own).when(is_pt, resolved)
    note = (
        F.when(limit.isNotNull(), null_str)
        .when(
            is_pt & partition.isin(*sorted(unlimited)),
            F.format_string("Partition_Limit: partition '%s' has MaxTime=UNLIMITED (%s)", partition, source),
        )
        .when(
            is_pt,
            F.format_string(
                "Partition_Limit: partition '%s' has no max_time in the cluster yaml and no ingested "
                "scontrol dump (jobfit ingest partitions)",
                F.coalesce(partition, F.lit("?")),
            ),
        )
        .when(F.col("source") == "slurm", F.lit("no time limit: UNLIMITED, or no Timelimit in the dump"))
        .otherwise(F.lit("no time limit recorded"))
    )
    return df.withColumns(
        {
            "_timelimit_s": limit,
            "timelimit_source": F.when(own.isNotNull(), F.lit("sacct")).when(limit.isNotNull(), source),
            "time_eff_note": note,
        }
    )
