"""Per-group history as of submit time: a job sees only its group's jobs that ENDED before its submission."""

from __future__ import annotations

import numpy as np
import pandas as pd

# Statistics kept per (group, value); each becomes a column `<prefix>_<value>_<stat>`.
HISTORY_STATS = ("n", "last", "last2", "p50", "p90", "p95", "max", "trend", "since_s")


def _group_codes(
    history: pd.DataFrame, queries: pd.DataFrame, keys: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """One integer code per distinct key tuple, shared by history and queries (null is a key too)."""
    both = pd.concat([history[keys], queries[keys]], ignore_index=True).astype("string").fillna("\x00")
    codes = both.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    return codes[: len(history)], codes[len(history) :]


def history_stats(history: pd.DataFrame, values: list[str], code: np.ndarray) -> pd.DataFrame:
    """Running stats per group over jobs ordered by end time: the state right after each job ended.

    Values are summarised on a log scale (they are positive quantities); `last2` is the mean of the last
    two values (Tsafrir, Etsion & Feitelson 2007), `trend` the last log value minus the running log mean.
    A job without a value (not measured: NaN) counts in `n` but not in a value's statistics: those are
    over the group's measured jobs only (a filled-in value would drag last-2 and the quantiles down)."""
    frame = pd.DataFrame({"_code": code, "_end": history["end_ts"].to_numpy()})
    for value in values:
        raw = history[value].astype("float64").to_numpy()
        frame[value] = np.where(np.isfinite(raw), np.log(np.clip(raw, 1e-9, None)), np.nan)
    frame = frame.sort_values(["_code", "_end"], kind="mergesort").reset_index(drop=True)
    grouped = frame.groupby("_code", sort=False)
    out = pd.DataFrame({"_code": frame["_code"], "_end": frame["_end"]})
    out["n"] = grouped.cumcount() + 1
    for value in values:
        measured = frame[value].notna()
        if not measured.any():
            for stat in ("last", "last2", "p50", "p90", "p95", "max", "trend"):
                out[f"{value}_{stat}"] = np.nan
            continue
        col, codes = frame.loc[measured, value], frame.loc[measured, "_code"]
        by = col.groupby(codes, sort=False)
        expanding = by.expanding()
        prev = by.shift(1)
        stats = pd.DataFrame(index=col.index)
        stats[f"{value}_last"] = col
        stats[f"{value}_last2"] = np.where(prev.notna(), np.log((np.exp(col) + np.exp(prev)) / 2), col)
        mean = expanding.mean().reset_index(level=0, drop=True)
        for q in (50, 90, 95):
            stats[f"{value}_p{q}"] = expanding.quantile(q / 100).reset_index(level=0, drop=True)
        stats[f"{value}_max"] = by.cummax()
        stats[f"{value}_trend"] = col - mean
        # An unmeasured job leaves the group's statistics as they were after its last measured job.
        full = stats.reindex(frame.index)
        out[full.columns] = full.groupby(frame["_code"], sort=False).ffill()
    # Several jobs of one group ending at the same instant: the state after the last of them.
    return out.drop_duplicates(["_code", "_end"], keep="last")


def with_history(
    history: pd.DataFrame, queries: pd.DataFrame, keys: list[str], values: list[str], prefix: str
) -> pd.DataFrame:
    """Queries plus `<prefix>_n`, `<prefix>_since_s` and, per value, its last/last2/p50/p90/p95/max/trend
    (log scale) over the group's jobs whose `end_ts` is strictly before the query's `submit_ts`.

    `history` needs `end_ts` (no nulls), the key columns and the value columns (positive; NaN = not
    measured, left out of that value's statistics);
    `queries` needs `submit_ts` and the key columns. A group with no ended job gets n = 0 and nulls."""
    hist_code, query_code = _group_codes(history, queries, keys)
    stats = history_stats(history, values, hist_code)
    stats = stats.sort_values("_end", kind="mergesort")
    left = pd.DataFrame(
        {"_code": query_code, "_submit": queries["submit_ts"].to_numpy(), "_row": np.arange(len(queries))}
    ).sort_values("_submit", kind="mergesort")
    joined = pd.merge_asof(
        left,
        stats,
        left_on="_submit",
        right_on="_end",
        by="_code",
        direction="backward",
        allow_exact_matches=False,  # a job that ended at the very second of submission was not visible yet
    ).sort_values("_row")
    result = queries.copy()
    result[f"{prefix}_n"] = joined["n"].fillna(0).astype("int64").to_numpy()
    since = (joined["_submit"] - joined["_end"]).dt.total_seconds()
    result[f"{prefix}_since_s"] = since.to_numpy()
    for value in values:
        for stat in ("last", "last2", "p50", "p90", "p95", "max", "trend"):
            result[f"{prefix}_{value}_{stat}"] = joined[f"{value}_{stat}"].to_numpy()
    return result


def final_states(
    history: pd.DataFrame, keys: list[str], values: list[str]
) -> dict[tuple[str, ...], tuple[int, pd.Timestamp, dict[str, float]]]:
    """Per group (key tuple, null keys as "\\x00"): its jobs, the end of its last job, and each value's
    last/last2/p50/p90/p95/max/trend (`<value>_<stat>`) after that job: what `with_history` gives a query
    submitted after every job of the group ended, computed once for all groups."""
    if not len(history):
        return {}
    names = history[keys].astype("string").fillna("\x00")
    code = names.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    stats = history_stats(history, values, code).groupby("_code", sort=False).tail(1)
    first = pd.DataFrame({"_code": code}).drop_duplicates("_code").index.to_numpy()
    rows = names.to_numpy(dtype=object)
    key_of = {int(code[i]): tuple(str(v) for v in rows[i]) for i in first}
    columns = [f"{v}_{s}" for v in values for s in ("last", "last2", "p50", "p90", "p95", "max", "trend")]
    out = {}
    for row in stats[["_code", "_end", "n", *columns]].itertuples(index=False):
        out[key_of[int(row[0])]] = (
            int(row[2]),
            pd.Timestamp(row[1]),
            dict(zip(columns, map(float, row[3:]), strict=True)),
        )
    return out
