"""Where one rank's time went, from its trace events (pandas, one rank at a time; times in µs).

- `find_steps`: the iterations, from `ProfilerStep#N` (each extended to the end of the GPU work it launched,
  as torch-tb-profiler does), else from the DataLoader's `__next__` calls, else from the repeating top-level
  operator; the first derived iteration is left out as warm-up, and the result says which source it used.
- `step_breakdown`: torch-tb-profiler's Overview: each step's wall time split in priority order kernel,
  memcpy, memset, runtime, dataloader, cpu_exec, other; percentages of the mean step time.
- `gpu_breakdown`: HTA's temporal breakdown (idle / compute / non-compute over the span of the rank's GPU
  activity) and its idle split per stream (host wait, kernel wait, other), summed over streams.

Prose and sources: docs/bottlenecks.md."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pipelines.silver.profiler import GPU_KINDS

CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")
DATALOADER_RE = re.compile(r"^(enumerate\(DataLoader\)#.*\.__next__|enumerate\(DataPipe\)#.*)$")
STEP_RE = re.compile(r"^ProfilerStep#\s*(\d+)")
# HTA (hta/utils/utils.py): a kernel is compute unless it is NCCL, a memcpy/memset or a sync.
NON_COMPUTE_KERNEL_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMM_KERNEL_RE = re.compile(r"^nccl.*Kernel|^ncclDevKernel|^rccl|ncclKernel", re.IGNORECASE)
HTA_KERNEL_WAIT_US = 30.0  # HTA's default consecutive_kernel_delay
HOST_KINDS_CPU = ("cpu_op", "user_annotation")
# Raw categories counted as runtime: both generations' runtime and the driver API (cuLaunchKernel).
RUNTIME_CATS = frozenset({"Runtime", "cuda_runtime", "cuda_driver", "runtime"})
MIN_DERIVED_STEPS = 2  # iterations needed before a repeating pattern counts as the loop


Ranges = np.ndarray  # shape (n, 2): [start, end) rows, sorted, non-overlapping after `merge`


def merge(starts: Iterable[float], ends: Iterable[float]) -> Ranges:
    """Union of intervals as sorted disjoint [start, end) rows."""
    s = np.asarray(list(starts) if not isinstance(starts, np.ndarray | pd.Series) else starts, dtype=float)
    e = np.asarray(list(ends) if not isinstance(ends, np.ndarray | pd.Series) else ends, dtype=float)
    if s.size == 0:
        return np.empty((0, 2))
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    out = np.empty((group[-1] + 1, 2))
    out[:, 0] = s[new]
    out[:, 1] = np.maximum.reduceat(run_end, np.flatnonzero(new))
    return out


def total(r: Ranges) -> float:
    return float((r[:, 1] - r[:, 0]).sum()) if r.size else 0.0


def intersect(a: Ranges, b: Ranges) -> Ranges:
    """Intersection of two disjoint sorted range sets."""
    if not a.size or not b.size:
        return np.empty((0, 2))
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if lo < hi:
            out.append((lo, hi))
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return np.array(out) if out else np.empty((0, 2))


def subtract(a: Ranges, b: Ranges) -> Ranges:
    """`a` minus `b` (both disjoint, sorted)."""
    if not a.size or not b.size:
        return a
    out = []
    j = 0
    for lo, hi in a:
        cur = lo
        while j < len(b) and b[j, 1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k, 0] < hi:
            if b[k, 0] > cur:
                out.append((cur, b[k, 0]))
            cur = max(cur, b[k, 1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return np.array(out) if out else np.empty((0, 2))


def prepare(events: pd.DataFrame) -> pd.DataFrame:
    """The events with `end_us` and the derived flags every analysis uses."""
    ev = events.copy()
    ev["end_us"] = ev["ts_us"] + ev["dur_us"]
    ev["is_gpu"] = ev["kind"].isin(GPU_KINDS)
    ev["is_step"] = ev["kind"].isin(HOST_KINDS_CPU) & ev["name"].str.match(STEP_RE.pattern)
    ev["is_dataloader"] = ev["kind"].isin(HOST_KINDS_CPU) & ev["name"].str.match(DATALOADER_RE.pattern)
    return ev


@dataclass
class Steps:
    """The iterations a breakdown is taken over, how they were found, and what was left out."""

    ranges: list[tuple[float, float]]
    source: str  # profiler_step | dataloader | pattern | whole_trace | none
    warmup_us: float = 0.0  # the left-out warm-up iteration's length (0 when none was left out)
    note: str = ""


def _device_extended(ev: pd.DataFrame, host_steps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """torch-tb-profiler's step boundaries: a step ends when the GPU work launched inside it ends; it starts
    no earlier than the previous step's end. Trailing steps that launched no GPU work are dropped (and the
    last one when it launched under 80 % of the previous step's work: the profiler may have cut it)."""
    runtime = ev[ev["cat"].isin(RUNTIME_CATS) & ev["correlation"].notna()]
    gpu = ev[ev["is_gpu"] & ev["correlation"].notna()]
    if runtime.empty or gpu.empty:
        return host_steps
    launched = runtime[["ts_us", "end_us", "correlation"]].merge(
        gpu[["correlation", "ts_us", "end_us"]].rename(columns={"ts_us": "g_ts", "end_us": "g_end"}),
        on="correlation",
        how="inner",
    )
    if launched.empty:
        return host_steps
    out, counts = [], []
    prev_end = host_steps[0][0]
    for lo, hi in host_steps:
        inside = launched[(launched["ts_us"] >= lo) & (launched["end_us"] <= hi)]
        start = max(prev_end, lo)
        end = max(hi, float(inside["g_end"].max())) if len(inside) else max(hi, start)
        out.append((start, end))
        counts.append(len(inside))
        prev_end = end
    last = len(out) - 1
    while last >= 0 and counts[last] == 0:
        last -= 1
    if last >= 0 and len(out) > 1:
        keep = last + 1
        if last > 0 and counts[last - 1] * 0.8 > counts[last]:
            keep = last
        out = out[:keep]
    return out


def _top_level(host: pd.DataFrame) -> pd.DataFrame:
    """Host events not nested in another host event of the same thread."""
    rows = []
    for _, g in host.sort_values(["tid", "ts_us", "dur_us"], ascending=[True, True, False]).groupby("tid"):
        ends = g["end_us"].to_numpy()
        starts = g["ts_us"].to_numpy()
        prev_max = np.concatenate([[-np.inf], np.maximum.accumulate(ends)[:-1]])
        rows.append(g[starts >= prev_max])
    return pd.concat(rows) if rows else host.iloc[0:0]


def _from_starts(starts: np.ndarray, last_end: float) -> list[tuple[float, float]]:
    """Iterations between consecutive starts; the last one up to `last_end` when it is not much shorter."""
    starts = np.sort(starts)
    ranges = [(float(a), float(b)) for a, b in itertools.pairwise(starts)]
    if ranges:
        median = float(np.median([b - a for a, b in ranges]))
        tail = last_end - float(starts[-1])
        if tail >= 0.5 * median:
            ranges.append((float(starts[-1]), float(min(last_end, starts[-1] + 2 * median))))
    return ranges


def find_steps(ev: pd.DataFrame) -> Steps:
    """The iterations of the rank (see the module's docstring)."""
    host = ev[ev["kind"].isin(("cpu_op", "user_annotation", "python_function", "runtime", "driver"))]
    if host.empty:
        return Steps([], "none", note="no host-side events in the trace")
    marks = ev[ev["is_step"]].sort_values("ts_us")
    if len(marks):
        steps = _device_extended(ev, list(zip(marks["ts_us"], marks["end_us"], strict=True)))
        return Steps(steps, "profiler_step")
    last_end = float(
        max(host["end_us"].max(), ev.loc[ev["is_gpu"], "end_us"].max() if ev["is_gpu"].any() else 0)
    )
    loader = ev[ev["is_dataloader"]].sort_values("ts_us")
    source, ranges = "whole_trace", []
    if len(loader) >= MIN_DERIVED_STEPS + 1:
        source, ranges = "dataloader", _from_starts(loader["ts_us"].to_numpy(), last_end)
    else:
        top = _top_level(ev[ev["kind"].isin(HOST_KINDS_CPU)].copy())
        best: tuple[float, str] | None = None
        for name, g in top.groupby("name"):
            if len(g) < MIN_DERIVED_STEPS + 1:
                continue
            gaps = np.diff(np.sort(g["ts_us"].to_numpy()))
            if gaps.mean() <= 0:
                continue
            cv = float(gaps.std() / gaps.mean())
            span = float(gaps.sum())
            # the most regular repetition that covers the most of the trace
            score = span / (1.0 + cv)
            if cv < 0.5 and (best is None or score > best[0]):
                best = (score, str(name))
        if best is not None:
            starts = top.loc[top["name"] == best[1], "ts_us"].to_numpy()
            source, ranges = "pattern", _from_starts(starts, last_end)
    if source != "whole_trace" and len(ranges) >= MIN_DERIVED_STEPS:
        warm = ranges[0]
        return Steps(
            ranges[1:],
            source,
            warmup_us=warm[1] - warm[0],
            note=f"no ProfilerStep markers: {len(ranges) - 1} iteration(s) from "
            + (
                "the DataLoader's __next__ calls"
                if source == "dataloader"
                else "the repeating top-level operator"
            )
            + f"; the first ({(warm[1] - warm[0]) / 1000:.1f} ms) left out as warm-up",
        )
    cpu = ev[ev["kind"].isin(("cpu_op", "user_annotation", "python_function"))]
    span = (float(cpu["ts_us"].min()), float(cpu["end_us"].max())) if len(cpu) else (0.0, 0.0)
    return Steps(
        [span] if span[1] > span[0] else [], "whole_trace", note="no iterations found: the whole trace"
    )


@dataclass
class StepBreakdown:
    """Mean step time (µs) and each category's share of it (%), over `steps` steps."""

    steps: int
    mean_step_us: float
    pct: dict[str, float] = field(default_factory=dict)
    step_us: list[float] = field(default_factory=list)


def role_ranges(ev: pd.DataFrame, runtime_cats: frozenset[str] = RUNTIME_CATS) -> dict[str, Ranges]:
    """Each category's busy time as merged ranges (before priority)."""

    def of(mask: pd.Series) -> Ranges:
        sel = ev[mask]
        return merge(sel["ts_us"].to_numpy(), sel["end_us"].to_numpy())

    cpu_exec = ev["kind"].isin(HOST_KINDS_CPU) & ~ev["is_step"] & ~ev["is_dataloader"]
    return {
        "kernel": of(ev["kind"] == "kernel"),
        "memcpy": of(ev["kind"] == "memcpy"),
        "memset": of(ev["kind"] == "memset"),
        "runtime": of(ev["cat"].isin(runtime_cats)),
        "dataloader": of(ev["is_dataloader"]),
        "cpu_exec": of(cpu_exec),
    }


def step_breakdown(
    ev: pd.DataFrame, steps: list[tuple[float, float]], runtime_cats: frozenset[str] = RUNTIME_CATS
) -> StepBreakdown:
    """torch-tb-profiler's Overview over the given steps (priority order; `other` is what is left)."""
    if not steps:
        return StepBreakdown(0, 0.0, dict.fromkeys(CATEGORIES, 0.0))
    roles = role_ranges(ev, runtime_cats)
    slots = merge([a for a, _ in steps], [b for _, b in steps])
    claimed: dict[str, Ranges] = {}
    for name in CATEGORIES[:-1]:
        claimed[name] = intersect(slots, roles[name])
        slots = subtract(slots, claimed[name])
    claimed["other"] = slots
    sums = dict.fromkeys(CATEGORIES, 0.0)
    lengths = []
    for lo, hi in steps:
        window = np.array([[lo, hi]])
        lengths.append(hi - lo)
        for name in CATEGORIES:
            sums[name] += total(intersect(window, claimed[name]))
    mean_step = float(np.mean(lengths))
    n = len(steps)
    pct = {k: (100.0 * v / n / mean_step if mean_step > 0 else 0.0) for k, v in sums.items()}
    return StepBreakdown(n, mean_step, pct, lengths)


@dataclass
class GpuBreakdown:
    """HTA's temporal breakdown of one rank (µs and % of the GPU span) and its idle split (% of idle)."""

    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    kernels: int
    idle_split_pct: dict[str, float]

    def pct(self) -> dict[str, float]:
        if self.span_us <= 0:
            return {"idle": 0.0, "compute": 0.0, "non_compute": 0.0}
        return {
            "idle": 100.0 * self.idle_us / self.span_us,
            "compute": 100.0 * self.compute_us / self.span_us,
            "non_compute": 100.0 * self.non_compute_us / self.span_us,
        }


def hta_gpu_events(ev: pd.DataFrame) -> pd.DataFrame:
    """The GPU events HTA analyses: with two or more distinct `ProfilerStep` names, only those launched (by
    correlation) from a host event that started before the last ProfilerStep started."""
    gpu = ev[ev["is_gpu"]]
    step_names = ev.loc[ev["is_step"], "name"].unique()
    if len(step_names) < 2:
        return gpu
    last_start = float(ev.loc[ev["is_step"], "ts_us"].max())
    host = ev[~ev["is_gpu"] & ev["correlation"].notna() & (ev["ts_us"] < last_start)]
    return gpu[gpu["correlation"].isin(set(host["correlation"]))]


def gpu_breakdown(ev: pd.DataFrame, kernel_wait_us: float = HTA_KERNEL_WAIT_US) -> GpuBreakdown | None:
    """HTA's temporal and idle-time breakdowns of the rank; None when it ran nothing on a GPU."""
    gpu = hta_gpu_events(ev)
    if gpu.empty:
        return None
    busy = merge(gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy())
    span = float(busy[-1, 1] - busy[0, 0])
    idle = span - total(busy)
    compute_mask = ~gpu["name"].str.match(NON_COMPUTE_KERNEL_RE.pattern)
    compute = total(
        merge(gpu.loc[compute_mask, "ts_us"].to_numpy(), gpu.loc[compute_mask, "end_us"].to_numpy())
    )
    split = idle_split(ev, gpu, kernel_wait_us)
    return GpuBreakdown(span, idle, compute, max(span - compute - idle, 0.0), len(gpu), split)


def with_launch_ts(ev: pd.DataFrame, gpu: pd.DataFrame, how: str = "inner") -> pd.DataFrame:
    """GPU ops with `launch_ts`, the start of the host call that launched each (joined by correlation)."""
    launches = ev[~ev["is_gpu"] & ev["correlation"].notna()].drop_duplicates("correlation")
    return gpu.merge(
        launches[["correlation", "ts_us"]].rename(columns={"ts_us": "launch_ts"}), on="correlation", how=how
    )


def idle_split(ev: pd.DataFrame, gpu: pd.DataFrame, kernel_wait_us: float) -> dict[str, float]:
    """HTA's idle categories per stream, summed over streams, as % of the summed idle: host wait (the launch
    came after the previous kernel ended), kernel wait (a gap under `kernel_wait_us`), other."""
    g = with_launch_ts(ev, gpu, how="left").sort_values(["stream", "ts_us"], kind="stable")
    g["prev_end"] = g.groupby("stream", dropna=False)["end_us"].shift(1)
    g = g[g["prev_end"].notna()]
    gap = g["ts_us"] - g["prev_end"]
    host_wait = g["launch_ts"] > g["prev_end"]
    kernel_wait = ~host_wait & (gap < kernel_wait_us)
    sums = {
        "host_wait": float(gap[host_wait].sum()),
        "kernel_wait": float(gap[kernel_wait].sum()),
        "other": float(gap[~host_wait & ~kernel_wait].sum()),
    }
    whole = sum(sums.values())
    return {k: (100.0 * v / whole if whole > 0 else 0.0) for k, v in sums.items()}
