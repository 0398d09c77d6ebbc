"""Great Expectations suites for the silver tables, declared once and run by `jobs/io/validate.py`.

Each expectation carries `meta={"level": ...}`:
- `row`: the rows it flags are rejected one by one (to quarantine, with the expectation as the reason);
- `table`: any failure fails the whole batch (the command exits 1 with a summary).
A suite's `meta["max_reject_share"]` is the table-level guard over row rejects: when more than that
share of a batch's rows is rejected, the batch is judged broken (a wrong --format, a corrupted dump)
rather than a few bad records, and fails as a whole.
"""

from __future__ import annotations

import great_expectations as gx
from great_expectations import expectations as E

from pipelines.schemas import (
    SILVER_GPU_SAMPLES,
    SILVER_JOB_STEPS,
    SILVER_JOBS,
    SILVER_POD_SAMPLES,
    TableSpec,
)
from pipelines.silver.dcgm import PROF_COLUMNS
from pipelines.states import JOB_STATES

ROW, TABLE = "row", "table"
MAX_REJECT_SHARE = 0.5


def _row(meta: str | None = None) -> dict[str, str]:
    return {"level": ROW, **({"why": meta} if meta else {})}


def _keys(spec: TableSpec) -> list[gx.expectations.Expectation]:
    """Every key column not null (row level); the key unique across the batch (table level)."""
    not_null = [E.ExpectColumnValuesToNotBeNull(column=k, meta=_row()) for k in spec.key]
    unique = E.ExpectCompoundColumnsToBeUnique(column_list=list(spec.key), meta={"level": TABLE})
    return [*not_null, unique]


def _non_negative(*columns: str) -> list[gx.expectations.Expectation]:
    return [E.ExpectColumnValuesToBeBetween(column=c, min_value=0, meta=_row()) for c in columns]


def _pct(*columns: str) -> list[gx.expectations.Expectation]:
    return [
        E.ExpectColumnValuesToBeBetween(column=c, min_value=0, max_value=100, meta=_row()) for c in columns
    ]


def _ordered(later: str, earlier: str) -> E.ExpectColumnPairValuesAToBeGreaterThanB:
    return E.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A=later, column_B=earlier, or_equal=True, ignore_row_if="either_value_is_missing", meta=_row()
    )


def _states(column: str = "state") -> E.ExpectColumnValuesToBeInSet:
    return E.ExpectColumnValuesToBeInSet(column=column, value_set=sorted(JOB_STATES), meta=_row())


def _jobs() -> list[gx.expectations.Expectation]:
    return [
        *_keys(SILVER_JOBS),
        E.ExpectColumnValuesToNotBeNull(column="state", meta=_row()),
        _states(),
        E.ExpectColumnValuesToBeInSet(column="source", value_set=["slurm", "k8s", "swf"], meta=_row()),
        _ordered("end_ts", "start_ts"),
        _ordered("start_ts", "submit_ts"),
        *_non_negative(
            "elapsed_s",
            "timelimit_s",
            "req_cpus",
            "alloc_cpus",
            "req_mem_bytes",
            "alloc_mem_bytes",
            "req_gpus",
            "alloc_gpus",
            "nodes",
            "ntasks",
            "total_cpu_s",
            "max_rss_bytes",
            "gpu_mem_peak_bytes",
        ),
        *_pct("gpu_util_peak_pct"),
    ]


def _job_steps() -> list[gx.expectations.Expectation]:
    return [
        *_keys(SILVER_JOB_STEPS),
        E.ExpectColumnValuesToNotBeNull(column="state", meta=_row()),
        _states(),
        _ordered("end_ts", "start_ts"),
        *_non_negative(
            "elapsed_s",
            "alloc_cpus",
            "ntasks",
            "nodes",
            "total_cpu_s",
            "max_rss_bytes",
            "ave_rss_bytes",
            "gpu_mem_peak_bytes",
        ),
        *_pct("gpu_util_peak_pct"),
    ]


def _gpu_samples() -> list[gx.expectations.Expectation]:
    return [
        *_keys(SILVER_GPU_SAMPLES),
        E.ExpectColumnValuesToBeInSet(
            column="attribution", value_set=["label", "overlap", "ambiguous", "unattributed"], meta=_row()
        ),
        *_pct("gpu_util_pct"),
        *_non_negative("fb_used_bytes", "fb_total_bytes", "power_w"),
        E.ExpectColumnValuesToBeBetween(column="sm_active_frac", min_value=0, max_value=1, meta=_row()),
        E.ExpectColumnValuesToBeBetween(column="tensor_active_frac", min_value=0, max_value=1, meta=_row()),
        # DCGM profiling fields: ratios 0..1 (a 0-100 percentage, as some exporters relabel them, is rejected)
        *[
            E.ExpectColumnValuesToBeBetween(column=c, min_value=0, max_value=1, meta=_row())
            for c in PROF_COLUMNS
            if c.endswith("_frac")
        ],
        *_non_negative(*(c for c in PROF_COLUMNS if not c.endswith("_frac"))),
    ]


def _pod_samples() -> list[gx.expectations.Expectation]:
    return [
        *_keys(SILVER_POD_SAMPLES),
        E.ExpectColumnValuesToBeInSet(column="form", value_set=["resource", "cadvisor"], meta=_row()),
        *_non_negative("cpu_usage_s", "mem_working_set_bytes"),
    ]


_SUITES = {
    SILVER_JOBS.name: _jobs,
    SILVER_JOB_STEPS.name: _job_steps,
    SILVER_GPU_SAMPLES.name: _gpu_samples,
    SILVER_POD_SAMPLES.name: _pod_samples,
}


def suite_for(table: str) -> gx.ExpectationSuite:
    """The declared suite of a silver table (`silver.jobs`, `silver.job_steps`, `silver.gpu_samples`,
    `silver.pod_samples`)."""
    if table not in _SUITES:
        raise KeyError(f"no expectation suite for {table!r}; known: {', '.join(sorted(_SUITES))}")
    return gx.ExpectationSuite(
        name=table,
        expectations=_SUITES[table](),
        meta={"max_reject_share": MAX_REJECT_SHARE},
    )


def suite_tables() -> list[str]:
    """Tables that have a declared suite."""
    return sorted(_SUITES)


def expectation_columns(suite: gx.ExpectationSuite) -> list[str]:
    """Every column an expectation of the suite reads, in first-use order."""
    seen: dict[str, None] = {}
    for exp in suite.expectations:
        kwargs = exp.configuration.kwargs
        for key in ("column", "column_A", "column_B"):
            if key in kwargs:
                seen.setdefault(kwargs[key], None)
        for col in kwargs.get("column_list", []):
            seen.setdefault(col, None)
    return list(seen)


def _number(value: object) -> object:
    """0.0 → 0 for readable reasons (GX stores bounds as floats)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def describe(config_type: str, kwargs: dict) -> str:
    """A readable one-line name of an expectation: `gpu_util_peak_pct between 0 and 100`."""
    col = kwargs.get("column")
    if config_type == "expect_column_values_to_not_be_null":
        return f"{col} not null"
    if config_type == "expect_column_values_to_be_between":
        lo, hi = (_number(kwargs.get(k)) for k in ("min_value", "max_value"))
        return f"{col} >= {lo}" if hi is None else f"{col} between {lo} and {hi}"
    if config_type == "expect_column_values_to_be_in_set":
        return f"{col} in the allowed set"
    if config_type == "expect_column_pair_values_a_to_be_greater_than_b":
        return f"{kwargs['column_A']} >= {kwargs['column_B']}"
    if config_type == "expect_compound_columns_to_be_unique":
        return f"({', '.join(kwargs['column_list'])}) unique"
    return config_type
