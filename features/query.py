"""One query's features without pandas frames: what a submit hook waits on (`jobfit serve`, `jobfit
recommend`). The same values `features.table` computes for a frame of jobs — the script, request and
history features — from a plain dict and a history index built once; tests/test_query_features.py holds
the two engines equal on real and simulated jobs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from features.code import payload_values
from features.history import final_states
from features.scripts import script_values
from features.table import (
    HISTORY_GROUPS,
    history_feature_columns,
    history_features,
    history_value_columns,
    request_values,
    with_history_values,
)

_STATS = ("last", "last2", "p50", "p90", "p95", "max", "trend")


@dataclass(frozen=True)
class HistoryIndex:
    """A history snapshot (finished jobs, targets computed) indexed by user and by (user, script key):
    each group's final statistics, looked up by key. A query submitted before a group's last job ended
    (a clock behind the snapshot) is answered from the group's rows instead, exactly."""

    states: Mapping[str, Mapping[tuple[str, ...], tuple[int, pd.Timestamp, dict[str, float]]]]
    rows_by_user: Mapping[str, pd.DataFrame]
    rows: int

    def jobs(self, user: str) -> int:
        """The user's finished jobs in the snapshot."""
        state = self.states["u"].get((user,))
        return state[0] if state else 0

    def runs(self, user: str, script_key: str) -> int:
        """The user's finished jobs of this script (by script key) in the snapshot."""
        state = self.states["us"].get((user, script_key))
        return state[0] if state else 0

    def latest(self, user: str, column: str) -> object:
        """The user's value of `column` (account, QOS) on their most recently ended job; None when the
        snapshot has no such column (taken before it was kept) or the user no job."""
        rows = self.rows_by_user.get(user)
        if rows is None or column not in rows or not len(rows):
            return None
        value = rows.sort_values("end_ts", kind="mergesort")[column].iloc[-1]
        return None if value is None or value is pd.NA or value != value else value  # NaN != NaN

    def features(self, user: str, script_key: str, submit_ts: pd.Timestamp) -> dict[str, float]:
        """The `u_*` and `us_*` history features of a query (history_feature_columns())."""
        out: dict[str, float] = {}
        for prefix, keys in HISTORY_GROUPS.items():
            key = tuple({"user": user, "script_key": script_key}[k] for k in keys)
            state = self.states[prefix].get(key)
            if state is None:
                out |= _empty(prefix)
                continue
            n, end, stats = state
            if not end < submit_ts:
                return self._exact(user, script_key, submit_ts)
            out[f"{prefix}_n"] = float(n)
            out[f"{prefix}_since_s"] = (submit_ts - end) / pd.Timedelta(seconds=1)  # ns, not us
            out |= {f"{prefix}_{name}": value for name, value in stats.items()}
        return out

    def _exact(self, user: str, script_key: str, submit_ts: pd.Timestamp) -> dict[str, float]:
        rows = self.rows_by_user.get(user)
        assert rows is not None, "a user with a group state has rows"
        query = pd.DataFrame({"user": [user], "script_key": [script_key], "submit_ts": [submit_ts]})
        query["submit_ts"] = query["submit_ts"].astype(rows["end_ts"].dtype)
        row = history_features(rows, query).iloc[0]
        return {c: float(row[c]) for c in history_feature_columns()}


def _empty(prefix: str) -> dict[str, float]:
    """A group with no finished job: n = 0, every statistic null (as `with_history` leaves it)."""
    out = {f"{prefix}_n": 0.0, f"{prefix}_since_s": math.nan}
    for value in history_value_columns():
        out |= {f"{prefix}_{value}_{stat}": math.nan for stat in _STATS}
    return out


def history_index(history: pd.DataFrame) -> HistoryIndex:
    """Index a history snapshot (`features.table.history_snapshot_columns()`; end_ts not null)."""
    values = with_history_values(history)
    states = {
        prefix: final_states(values, keys, history_value_columns()) for prefix, keys in HISTORY_GROUPS.items()
    }
    by_user = {str(user): rows for user, rows in history.groupby("user", sort=False)}
    return HistoryIndex(states=states, rows_by_user=by_user, rows=len(history))


def query_features(
    query: Mapping[str, object],
    script: Mapping[str, object] | None,
    index: HistoryIndex,
    code: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """A query row (a silver.jobs-like dict with `submit_ts`, `user`, `script_key`) plus its script
    features (`script`: its silver.scripts row, None when unknown), code-aware features (`code`: the
    script's `code_estimate` payload, None when its code was not read), request and history features."""
    out = dict(query)
    out |= script_values(script, query)
    out |= payload_values(code)
    out |= request_values(query)
    out |= index.features(str(query["user"]), str(query["script_key"]), pd.Timestamp(query["submit_ts"]))  # type: ignore[arg-type]
    return out
