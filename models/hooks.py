"""The Slurm job_submit cache: per (user, script key) and per user, what to ask for (pure).

The format (documented in docs/hooks.md) is read by hooks/slurm/job_submit.lua with plain Lua 5.4:
a first line `jobfit-hooks-cache<TAB>1`, metadata lines `#key<TAB>value`, then one tab-separated line per
entry: user, script key, memory (MiB), time limit (minutes), CPUs, GRES; `-` where there is no value."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pandas as pd

from conf import ClusterConfig
from features.table import TARGETS
from models.recommend import MIN_USER_HISTORY, assemble, query_row, with_query_features
from pipelines.silver.scripts import ScriptInfo
from pipelines.units import MIB

if TYPE_CHECKING:  # LightGBM loads in a second: building the CLI parser must not import it
    from models.train import Predictor

CACHE_MAGIC = "jobfit-hooks-cache"
CACHE_VERSION = 1
# The script key of a user's entry for a script the cache does not know.
ANY_SCRIPT = "*"
CACHE_COLUMNS = ("user", "script_key", "mem_mb", "time_min", "cpus", "gres")


@dataclass(frozen=True)
class CacheEntry:
    """One cache line: the recommendation for a user's script (or, keyed `*`, any script of the user)."""

    user: str
    script_key: str
    mem_mb: int | None
    time_min: int | None
    cpus: int | None
    gres: str | None


def _clean(text: object) -> str:
    """A field value without the characters the line format uses as separators."""
    return str(text).replace("\t", " ").replace("\n", " ").replace("\r", " ")


def _queries(history: pd.DataFrame) -> tuple[pd.DataFrame, list[bool]]:
    """(users, script keys) to recommend for — every user with enough history, once per script key seen
    and once for an unknown script — and whether that group's newest job asked for GPUs."""
    counts = history.groupby("user").size()
    users = sorted(str(u) for u in counts[counts >= MIN_USER_HISTORY].index)
    newest = history.sort_values("end_ts", kind="mergesort")
    keys: list[tuple[str, str]] = []
    has_gpu: list[bool] = []
    for user in users:
        mine = newest[newest["user"] == user]
        groups = [(ANY_SCRIPT, mine)] + [
            (str(k), g) for k, g in mine.groupby("script_key", sort=True) if str(k) not in ("", ANY_SCRIPT)
        ]
        for key, group in groups:
            keys.append((user, key))
            has_gpu.append(bool(pd.notna(group["vram_req_bytes"].iloc[-1])))
    return pd.DataFrame(keys, columns=["user", "script_key"]), has_gpu


def cache_entries(
    history: pd.DataFrame,
    champions: dict[str, Predictor | None],
    cluster: ClusterConfig | None,
    made_at: pd.Timestamp,
) -> list[CacheEntry]:
    """Cache entries from a history snapshot (as `jobfit train` logs it) and the champion Predictors, as
    `jobfit recommend` would answer for a script with no directives submitted at `made_at`. Users with
    fewer than MIN_USER_HISTORY finished jobs get none; VRAM (a GPU or MIG choice) only where the
    group's newest job asked for GPUs."""
    if not len(history) or not any(champions.values()):
        return []
    keys, has_gpu = _queries(history)
    if not len(keys):
        return []
    rows = pd.concat(
        [
            query_row(SimpleNamespace(script_hash=key), user, made_at)
            for user, key in keys.itertuples(index=False)
        ],
        ignore_index=True,
    )
    # The fields the models were trained on: the user's latest account and QOS (as `recommend` fills them).
    latest = history.sort_values("end_ts", kind="mergesort").groupby("user").tail(1).set_index("user")
    for column in ("account", "qos"):
        if column in latest:
            rows[column] = rows["user"].map(latest[column])
    scripts = pd.DataFrame(columns=[f.name for f in fields(ScriptInfo)])
    table = with_query_features(rows, scripts, history)
    predicted = {t: p.predict(table) for t, p in champions.items() if p is not None and t in TARGETS}
    entries = []
    for i, (user, key) in enumerate(keys.itertuples(index=False)):
        values = {t: float(v[i]) for t, v in predicted.items() if t != "vram" or has_gpu[i]}
        answer = assemble(table.iloc[i], values, cluster)["targets"]
        gpu = answer.get("vram", {}).get("gpu") if "vram" in answer else None  # type: ignore[union-attr]
        name = (gpu or {}).get("mig_profile") or (gpu or {}).get("gpu_model")
        entries.append(
            CacheEntry(
                user=user,
                script_key=key,
                mem_mb=math.ceil(values["mem"] / MIB - 1e-9) if "mem" in values else None,
                time_min=max(math.ceil(values["runtime"] / 60 - 1e-9), 1) if "runtime" in values else None,
                cpus=max(math.ceil(values["cpus"] - 1e-9), 1) if "cpus" in values else None,
                gres=f"gpu:{name}" if name else None,
            )
        )
    return entries


def format_cache(entries: list[CacheEntry], meta: dict[str, object]) -> str:
    """The cache file's text: magic and version, `#key<TAB>value` metadata, then one line per entry."""
    lines = [f"{CACHE_MAGIC}\t{CACHE_VERSION}"]
    lines += [f"#{_clean(k)}\t{_clean(v)}" for k, v in meta.items()]
    lines.append("#columns\t" + "\t".join(CACHE_COLUMNS))
    for e in entries:
        values = [getattr(e, c) for c in CACHE_COLUMNS]
        lines.append("\t".join("-" if v is None else _clean(v) for v in values))
    return "\n".join(lines) + "\n"


def parse_cache(text: str) -> tuple[dict[str, str], list[CacheEntry]]:
    """(metadata, entries) of a cache file's text (the inverse of `format_cache`); ValueError if not one."""
    lines = text.splitlines()
    if not lines or lines[0] != f"{CACHE_MAGIC}\t{CACHE_VERSION}":
        raise ValueError(f"not a {CACHE_MAGIC} v{CACHE_VERSION} file: {lines[:1]!r}")
    meta: dict[str, str] = {}
    entries = []
    for line in lines[1:]:
        parts = line.split("\t")
        if line.startswith("#"):
            meta[parts[0][1:]] = "\t".join(parts[1:])
            continue
        if len(parts) != len(CACHE_COLUMNS):
            raise ValueError(f"expected {len(CACHE_COLUMNS)} fields: {line!r}")
        v = [None if p == "-" else p for p in parts]
        num = lambda s: None if s is None else int(s)  # noqa: E731
        entries.append(CacheEntry(v[0] or "", v[1] or "", num(v[2]), num(v[3]), num(v[4]), v[5]))
    return meta, entries
