"""One rank's bottlenecks from its trace events, and a job's findings from its ranks (plain Python/pandas:
the Spark build applies `analyze_rank` per trace, `jobfit bottlenecks` and the bench call it directly).

Every finding carries its share of step time, the figures it rests on, the fix (pipelines/gold/bottlenecks/
rules.py) and the user's line: the innermost frame of the responsible operator's `Call stack` that is the
user's own code, else the innermost user `python_function` event enclosing it (with_stack=True traces).
"User code" is the failure diagnosis' notion (`pipelines.gold.failures.tracebacks.frame_owner`)."""

from __future__ import annotations

import re
import statistics
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from conf import BottleneckSettings
from pipelines.gold.bottlenecks.breakdown import (
    COMM_KERNEL_RE,
    RUNTIME_CATS,
    Ranges,
    find_steps,
    gpu_breakdown,
    intersect,
    merge,
    prepare,
    step_breakdown,
    subtract,
    total,
    with_launch_ts,
)
from pipelines.gold.bottlenecks.rules import RULES
from pipelines.gold.failures.tracebacks import frame_owner

FRAME_RE = re.compile(r"^\s*(?P<file>.+?)\((?P<line>\d+)\):\s*(?P<function>.*?)\s*$")
# Host calls that block until the GPU is done (runtime API names, and the operators that imply one).
SYNC_RUNTIME_RE = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent)"
)
SYNC_OP_NAMES = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::equal"})
# CUDA/HIP calls that may wait for the device before returning (besides the syncs above).
DEVICE_WAIT_CALL_RE = re.compile(r"^(?:cuda|hip)(?:Memcpy|Memset|Malloc|Free)")
GEMM_RE = re.compile(r"gemm|conv|cutlass|xmma|cublas|implicit_convolve|wgrad|dgrad|fprop|Kernel_mm", re.I)
# Tensor-Core kernels by name (torch-tb-profiler's TC_Allowlist, after NVIDIA PyProf), plus later names.
TENSOR_CORE_RE = re.compile(
    r"h884|s884|h1688|s1688|hmma|i8816|16816|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv1x1|"
    r"conv2d_c1_k1|direct_group|xmma_implicit_gemm|xmma_sparse_conv|xmma_warp_specialized_implicit_gemm|"
    r"xmma_gemm|xmma_sparse_gemm|c1688|tf32|bf16|f16f16|wgmma|tensorop|_tn_|sm90_xmma|sm80_xmma"
)
SAMPLE_FRAMES = 400  # responsible events whose frame is looked up per finding (largest first)


@dataclass(frozen=True)
class Frame:
    """The user's line a finding names."""

    file: str
    line: int
    function: str


@dataclass
class Finding:
    """One bottleneck of one rank (or of a job, for `straggler`)."""

    kind: str
    rank: int | None
    share_pct: float
    evidence: str
    fix: str
    frame: Frame | None = None
    figures: dict[str, float] = field(default_factory=dict)


class Collective(NamedTuple):
    """One NCCL kernel of a rank. A collective's kernel on a rank runs from that rank's arrival to the last
    rank's arrival plus the transfer, so across ranks the shortest is the transfer, the rest waits."""

    us: float  # its duration
    exposed_us: float  # of it, not overlapped with the rank's compute kernels
    step: int  # the step it starts in, from 0; -1 outside the steps
    held_us: float  # exposed_us when it ends inside GPU work the host waited for, else 0 (`collectives_of`)


@dataclass
class RankAnalysis:
    """One rank's breakdowns and findings."""

    rank: int | None
    steps: int
    step_source: str
    mean_step_us: float
    warmup_us: float
    breakdown_pct: dict[str, float]
    gpu_pct: dict[str, float] | None
    idle_split_pct: dict[str, float] | None
    kernels: int
    has_gpu: bool
    has_stacks: bool
    findings: list[Finding]
    notes: list[str]
    collectives: list[Collective] = field(default_factory=list)  # every NCCL kernel, in time order
    # The share of step time each share-judged kind (`SHARE_GATES`) measures on the rank, found or not: a
    # job's finding is judged on their mean over its ranks (`job_findings`).
    shares: dict[str, float] = field(default_factory=dict)
    # Of the first step, how long the GPU still ran work launched before it (`carried_over_us`).
    carried_us: float = 0.0
    # The host's own time over the steps, not blocked on the device (`host_floor_us`); None without marks.
    host_floor_us: float | None = None


def parse_frame(text: str) -> Frame | None:
    """`path(line): function` as a Frame; None when the text is not one (`<built-in method ...>`)."""
    m = FRAME_RE.match(text)
    if not m:
        return None
    return Frame(m.group("file"), int(m.group("line")), m.group("function"))


def user_frame_of_stack(stack: str | None) -> Frame | None:
    """The innermost user frame of a `Call stack` (frames innermost first, `;`-separated)."""
    if not stack:
        return None
    for part in stack.split(";"):
        frame = parse_frame(part)
        if frame is not None and frame_owner(frame.file) == "user":
            return frame
    return None


class FrameFinder:
    """Finds the user's line behind host events: their own stack, else an enclosing user python_function,
    else (for a runtime call or a GPU event) the operator that launched it."""

    def __init__(self, ev: pd.DataFrame) -> None:
        self.ev = ev
        py = ev[ev["kind"] == "python_function"]
        frames = py["name"].map(parse_frame)
        user = frames.map(lambda f: f is not None and frame_owner(f.file) == "user")
        self.py = py[user.astype(bool)].assign(frame=frames[user.astype(bool)])
        ops = ev[ev["kind"].isin(("cpu_op", "user_annotation")) & ev["external_id"].notna()]
        self.op_by_external = ops.drop_duplicates("external_id", keep="last").set_index("external_id")
        runtime = ev[ev["cat"].isin(RUNTIME_CATS) & ev["correlation"].notna()]
        self.launch_by_correlation = runtime.drop_duplicates("correlation").set_index("correlation")
        self.has_any = bool(ev["call_stack"].notna().any() or len(self.py))

    def _enclosing(self, tid: Any, ts: float, end: float) -> Frame | None:
        cand = self.py[(self.py["tid"] == tid) & (self.py["ts_us"] <= ts) & (self.py["end_us"] >= end)]
        if cand.empty:
            return None
        return cand.loc[cand["ts_us"].idxmax(), "frame"]

    def host_frame(self, row: pd.Series) -> Frame | None:
        frame = user_frame_of_stack(row.get("call_stack"))
        if (
            frame is None
            and pd.notna(row.get("external_id"))
            and row["external_id"] in self.op_by_external.index
        ):
            op = self.op_by_external.loc[row["external_id"]]
            frame = user_frame_of_stack(op.get("call_stack"))
            if frame is None and len(self.py):
                frame = self._enclosing(op["tid"], op["ts_us"], op["end_us"])
        if frame is None and len(self.py):
            frame = self._enclosing(row["tid"], row["ts_us"], row["end_us"])
        return frame

    def gpu_frame(self, row: pd.Series) -> Frame | None:
        corr = row.get("correlation")
        if pd.isna(corr) or corr not in self.launch_by_correlation.index:
            return None
        return self.host_frame(self.launch_by_correlation.loc[corr])

    def top(self, rows: pd.DataFrame, gpu: bool, weight: str = "dur_us") -> Frame | None:
        """The user frame carrying the most `weight` among the rows (the largest SAMPLE_FRAMES rows)."""
        if not self.has_any or rows.empty:
            return None
        sample = rows.nlargest(SAMPLE_FRAMES, weight)
        totals: dict[Frame, float] = {}
        for _, r in sample.iterrows():
            frame = self.gpu_frame(r) if gpu else self.host_frame(r)
            if frame is not None:
                totals[frame] = totals.get(frame, 0.0) + float(r[weight])
        return max(totals, key=lambda f: totals[f]) if totals else None


def _where(frame: Frame | None) -> str:
    return f"{frame.file}:{frame.line} ({frame.function})" if frame else "the training loop"


def _step_of(ts: np.ndarray, steps: list[tuple[float, float]]) -> np.ndarray:
    """Per timestamp, the index of the step it falls in; -1 outside the steps."""
    if not steps or not len(ts):
        return np.full(len(ts), -1)
    lo = np.array([a for a, _ in steps])
    hi = np.array([b for _, b in steps])
    idx = np.searchsorted(lo, ts, side="right") - 1
    ok = (idx >= 0) & (ts < hi[np.clip(idx, 0, None)])
    return np.where(ok, idx, -1)


def _in_steps(df: pd.DataFrame, steps: list[tuple[float, float]]) -> pd.DataFrame:
    if not steps or df.empty:
        return df.iloc[0:0]
    return df[_step_of(df["ts_us"].to_numpy(), steps) >= 0]


def _window_time(df: pd.DataFrame, steps: list[tuple[float, float]]) -> float:
    """Busy time of the rows' union inside the steps (µs)."""
    if df.empty:
        return 0.0
    return total(
        intersect(merge(df["ts_us"].to_numpy(), df["end_us"].to_numpy()), merge(*zip(*steps, strict=True)))
    )


def _covered(ranges: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per interval [start, end), its length covered by `ranges` (sorted, disjoint)."""
    if not ranges.size:
        return np.zeros(len(starts))
    lengths = ranges[:, 1] - ranges[:, 0]
    cum = np.concatenate([[0.0], np.cumsum(lengths)])

    def below(x: np.ndarray) -> np.ndarray:  # covered length before x
        i = np.searchsorted(ranges[:, 0], x, side="right") - 1
        j = np.clip(i, 0, None)
        inside = np.clip(x - ranges[j, 0], 0.0, lengths[j])
        return np.where(i >= 0, cum[j] + inside, 0.0)

    return below(ends) - below(starts)


def collectives_of(ev: pd.DataFrame, steps: list[tuple[float, float]], line: _Timeline) -> list[Collective]:
    """Every NCCL kernel of the rank's trace, in time order. Its exposed time is held when the kernel ends
    inside GPU work the host waited for (`line.waited`; all of it when None): a wait the GPU would otherwise
    have spent idle for the host costs nothing. All of them, not only those in the steps: ranks may keep
    different steps (a cut last step), and collectives are matched across ranks by their order."""
    kernels = ev[ev["kind"] == "kernel"]
    if kernels.empty:
        return []
    comm_mask = kernels["name"].str.contains(COMM_KERNEL_RE.pattern, case=False, regex=True).to_numpy()
    comm = kernels[comm_mask].sort_values("ts_us", kind="stable")
    if comm.empty:
        return []
    comp = kernels[~comm_mask]
    comp_r = merge(comp["ts_us"].to_numpy(), comp["end_us"].to_numpy())
    a, b = comm["ts_us"].to_numpy(dtype=float), comm["end_us"].to_numpy(dtype=float)
    exposed = (b - a) - _covered(comp_r, a, b)
    step = _step_of(a, steps)
    launch = comm["correlation"].map(line.launch_of).to_numpy(dtype=float)
    if steps and not np.isnan(launch).all():
        # A collective launched before the first recorded step belongs to none: the profiler's warm-up step
        # launched it (its launch is not in the trace when recording began after it), and its GPU work may
        # still run when the first step starts.
        step = np.where(np.isnan(launch) | (launch < steps[0][0]), -1, step)
    waited = line.waited
    held = exposed if waited is None else np.where(_within(waited, b), exposed, 0.0)
    return [
        Collective(float(d), float(x), int(i), float(h))
        for d, x, i, h in zip(b - a, exposed, step, held, strict=True)
    ]


def carried_over_us(ev: pd.DataFrame, steps: list[tuple[float, float]], line: _Timeline) -> float:
    """How long, from the first step's start, the GPU still ran work launched before it (the profiler's
    warm-up step; a launch missing from the trace happened before recording began). The steady step is
    GPU end to GPU end: the steps' total less this is what a cause's saving is a share of."""
    if not steps or line.launched.empty:
        return 0.0
    first = steps[0][0]
    gpu = ev[ev["is_gpu"] & ev["correlation"].notna() & (ev["end_us"] > first)]
    launch = gpu["correlation"].map(line.launch_of)
    ends = gpu.loc[launch.isna() | (launch < first), "end_us"]  # unrecorded: before recording began
    return float(min(ends.max(), steps[0][1]) - first) if len(ends) else 0.0


def host_floor_us(ev: pd.DataFrame, steps: list[tuple[float, float]], line: _Timeline) -> float | None:
    """The host's own time over the steps: the ProfilerStep spans less the time the host sat blocked on the
    device in them (`line.blocking`). An eager loop's step is never shorter than what its host needs to issue
    it (load the batch, run the Python, launch the ops), so GPU time a fix removes comes back only down to
    that floor. None when the steps are not the profiler's marks."""
    marks = ev[ev["is_step"]].sort_values("ts_us", kind="stable").head(len(steps))
    if not steps or len(marks) < len(steps):
        return None
    spans = merge(marks["ts_us"].to_numpy(dtype=float), marks["end_us"].to_numpy(dtype=float))
    return total(spans) - (total(intersect(spans, line.blocking)) if line.blocking.size else 0.0)


def _within(ranges: Ranges, ts: np.ndarray) -> np.ndarray:
    """Per timestamp, whether it falls in one of `ranges` (sorted, disjoint; ends included)."""
    if not ranges.size:
        return np.zeros(len(ts), dtype=bool)
    k = np.searchsorted(ranges[:, 0], ts, side="right") - 1
    return (k >= 0) & (ts <= ranges[np.clip(k, 0, None), 1])


@dataclass
class _Timeline:
    """What several rules read of one rank's steps: the synchronising calls in them, the steps' ranges
    (`window`), the GPU's work (any kernel, copy or memset: `busy`) and, each on first use, the GPU ops'
    launches, the host's blocking calls and the stretches of GPU work the host waited for (`waited`)."""

    ev: pd.DataFrame
    sync: pd.DataFrame
    window: Ranges
    busy: Ranges

    @cached_property
    def launched(self) -> pd.DataFrame:
        """The GPU ops joined to the host call that launched each (`launch_ts`, by correlation)."""
        ev = self.ev
        return with_launch_ts(ev, ev[ev["is_gpu"] & ev["correlation"].notna()])

    @cached_property
    def launch_of(self) -> pd.Series:
        """Per correlation id, when the host call that launched that GPU op started (`launched`)."""
        return self.launched.drop_duplicates("correlation").set_index("correlation")["launch_ts"]

    @cached_property
    def first_launch(self) -> pd.Series:
        """Per start time of GPU ops, the earliest launch among the ops starting then."""
        return self.launched.groupby("ts_us")["launch_ts"].min()

    @cached_property
    def blocking(self) -> Ranges:
        """Where the host is blocked on the device: the syncs, and the CUDA calls that may wait for it (a
        copy from pageable memory, an allocation)."""
        ev = self.ev
        calls = ev[
            ev["cat"].isin(RUNTIME_CATS) & ev["name"].str.contains(DEVICE_WAIT_CALL_RE.pattern, regex=True)
        ]
        return merge(
            np.concatenate([self.sync["ts_us"].to_numpy(dtype=float), calls["ts_us"].to_numpy(dtype=float)]),
            np.concatenate(
                [self.sync["end_us"].to_numpy(dtype=float), calls["end_us"].to_numpy(dtype=float)]
            ),
        )

    @cached_property
    def waited(self) -> Ranges | None:
        """`_host_waited_for`, computed once for the rules that read it (memcpy_bound, low_tensor_core, the
        collectives). None without launches to join."""
        return _host_waited_for(self)


def _timeline(ev: pd.DataFrame, steps: list[tuple[float, float]]) -> _Timeline:
    sync = ev[
        (ev["cat"].isin(RUNTIME_CATS) & ev["name"].str.match(SYNC_RUNTIME_RE.pattern))
        | (ev["kind"].isin(("cpu_op",)) & ev["name"].isin(SYNC_OP_NAMES))
    ]
    sync = _in_steps(sync, steps)
    window = merge(*zip(*steps, strict=True))
    gpu = ev[ev["is_gpu"]]
    busy = merge(gpu["ts_us"].to_numpy(), gpu["end_us"].to_numpy())
    return _Timeline(ev, sync, window, busy)


def _sync_stall(
    sync: pd.DataFrame, busy: Ranges, window: Ranges, host_ops: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """What the synchronising calls cost the GPU (µs), and per sync row its weight for the line; `busy` is
    the rank's GPU work (kernels, copies, memsets on any stream), `window` its steps.

    Two costs. The GPU idle while the host sits in the call (the queue ran dry before it returned, or was dry
    all along: a host-bound loop's `.item()` is host time the GPU waits through). And the lead: while a sync
    blocks, the GPU works off its queue and the host falls behind by that much, a lead it would have kept
    without the sync and kept adding to at each later sync; GPU idle after the call (inside the steps) is
    time the host, that far ahead, would have filled (a DataLoader fetch or the next launches overlapped with
    the drained work), and filling it uses the lead up. So, in time order over the blocking spans
    (overlapping calls merged): the span's idle is its cost; the lead grows by the GPU's busy time in the
    span; the idle from its end to the next span's start takes what it can of the lead, charged to the spans
    whose lead it was, oldest first. A sync ending a GPU-bound step whose next step starts at once costs
    only the idle before that start. The recorded steps are a sample of a loop that repeats: the idle from
    the window's start to the first span follows the last span (the sync that ended the step before the
    window, which the trace does not hold, is the last one's twin), so it is the last span's gap too.

    And the host's work on what it fetched: GPU idle from the call's return to the host's next operator
    (`host_ops`, sorted starts of its operators, annotations and runtime calls), the host in its own Python
    with the value, is the call's whole: work that needs the value cannot start before the call returns,
    and fetching it less often (the fix) removes both. It is charged before the lead, which it leaves whole.
    """
    idle = subtract(window, busy)
    if not idle.size or not busy.size:
        return 0.0, np.zeros(len(sync))
    blocking = merge(sync["ts_us"].to_numpy(), sync["end_us"].to_numpy())
    until = np.append(blocking[1:, 0], max(window[-1, 1], blocking[-1, 1]))
    leads = _covered(busy, blocking[:, 0], blocking[:, 1])
    idles = _covered(idle, blocking[:, 1], until)
    inside = _covered(idle, blocking[:, 0], blocking[:, 1])
    cost = inside.copy()
    if host_ops is not None and host_ops.size:
        k = np.searchsorted(host_ops, blocking[:, 1], side="left")
        resumes = np.minimum(np.append(host_ops, np.inf)[k], until)
        own = _covered(idle, blocking[:, 1], np.maximum(blocking[:, 1], resumes))
        cost += own
        idles -= own
    idles[-1] += float(_covered(idle, window[:1, 0], np.maximum(window[:1, 0], blocking[:1, 0]))[0])
    owed: deque[list[float]] = deque()  # [span, lead left], oldest first
    for i, (lead, gap) in enumerate(zip(leads.tolist(), idles.tolist(), strict=True)):
        if lead > 0:
            owed.append([i, lead])
        while gap > 0 and owed:
            taken = min(gap, owed[0][1])
            cost[int(owed[0][0])] += taken
            gap -= taken
            owed[0][1] -= taken
            if owed[0][1] <= 0:
                owed.popleft()
    # The line: the calls the GPU ran dry in (each stalls the pipeline where it stands); without any, those
    # whose lead the idle took.
    weight = inside if inside.sum() > 0 else cost
    span = np.searchsorted(blocking[:, 0], sync["ts_us"].to_numpy(), side="right") - 1
    return float(cost.sum()), weight[np.clip(span, 0, None)]


def _launch_wait(line: _Timeline) -> float:
    """The GPU idle (µs, in the steps) spent waiting for the host to launch its next op while the host was
    dispatching ops: idle that ends with an op launched after the GPU ran dry (HTA's host wait), covered by
    the host's operator calls that launch GPU work, less the syncs, the DataLoader and the calls that wait
    for the device (a copy from pageable memory, an allocation). An operator that launches nothing is CPU
    work (a CPU tensor's init, a collate), and the host's own Python between ops, its work on a fetched
    value, a DataLoader fetch or a sync are not launch overhead: faster launches (fusion, CUDA graphs) give
    back only the dispatch."""
    ev = line.ev
    idle = subtract(line.window, line.busy)
    first = line.first_launch
    if not idle.size or first.empty:
        return 0.0
    at = first.index.to_numpy()
    k = np.clip(np.searchsorted(at, idle[:, 1], side="left"), 0, len(at) - 1)
    ends_at_op = np.isclose(at[k], idle[:, 1])
    waiting = idle[ends_at_op & (first.to_numpy()[k] > idle[:, 0])]
    if not waiting.size:
        return 0.0
    launches = np.sort(line.launched["launch_ts"].to_numpy(dtype=float))
    ops = ev[(ev["kind"] == "cpu_op") & ~ev["is_dataloader"]]
    starts, ends = ops["ts_us"].to_numpy(dtype=float), ops["end_us"].to_numpy(dtype=float)
    launching = np.searchsorted(launches, ends, side="left") > np.searchsorted(launches, starts, side="left")
    dispatch = merge(starts[launching], ends[launching])
    loader = ev[ev["is_dataloader"]]
    blocked = merge(
        np.concatenate([line.blocking[:, 0], loader["ts_us"].to_numpy(dtype=float)]),
        np.concatenate([line.blocking[:, 1], loader["end_us"].to_numpy(dtype=float)]),
    )
    return total(intersect(waiting, subtract(dispatch, blocked)))


def _critical_memcpy_pct(
    ev: pd.DataFrame, kernels: pd.DataFrame, line: _Timeline, step_total: float, memcpy_pct: float
) -> float:
    """What faster copies could give back, % of step time: copy time with no kernel running (the step
    breakdown's memcpy) inside GPU work the host waited for (`_host_waited_for`, as `low_tensor_core`). A copy
    the GPU runs while the host is still launching the next work — a host-bound loop — only lengthens the
    GPU's idle when it is shortened. The breakdown's share when the trace has no launches to tell by."""
    waited = line.waited
    if waited is None or step_total <= 0:
        return memcpy_pct
    copies = ev[ev["kind"] == "memcpy"]
    copy_r = intersect(merge(copies["ts_us"].to_numpy(), copies["end_us"].to_numpy()), line.window)
    kern_r = merge(kernels["ts_us"].to_numpy(), kernels["end_us"].to_numpy())
    return 100.0 * total(intersect(subtract(copy_r, kern_r), waited)) / step_total


def _pageable_stall(ev: pd.DataFrame, steps: list[tuple[float, float]], line: _Timeline) -> float:
    """What host-to-device copies from pageable memory cost the GPU beyond the copy (µs). Such a copy's CUDA
    call returns only when the copy is done, after the GPU has worked off everything queued before it, so
    the host loses its lead as in a sync (`_sync_stall`): the GPU's busy time during the call on work queued
    before the copy. The GPU idle
    after the call, up to the host's next blocking call (a sync or another device-waiting call, which would
    drain the queue anyway), is what that lead would have filled, up to the lead; plus any idle inside the
    call. Pinned memory (`pin_memory=True`, `non_blocking=True`) makes the call return at once."""
    copies = ev[
        (ev["kind"] == "memcpy") & ev["name"].str.contains("HtoD") & ev["name"].str.contains("Pageable")
    ]
    if copies.empty:
        return 0.0
    calls = _in_steps(ev[ev["cat"].isin(RUNTIME_CATS) & ev["correlation"].isin(copies["correlation"])], steps)
    if calls.empty:
        return 0.0
    spans = merge(calls["ts_us"].to_numpy(dtype=float), calls["end_us"].to_numpy(dtype=float))
    idle = subtract(line.window, line.busy)
    stops = line.blocking[:, 0]
    k = np.searchsorted(stops, spans[:, 1], side="right")
    until = np.maximum(spans[:, 1], np.append(stops, line.window[-1, 1])[k])
    inside = _covered(idle, spans[:, 0], spans[:, 1])
    # The lead is the work queued before the copy; the copy's own time is the critical share's to count.
    own = merge(copies["ts_us"].to_numpy(dtype=float), copies["end_us"].to_numpy(dtype=float))
    lead = _covered(line.busy, spans[:, 0], spans[:, 1]) - _covered(own, spans[:, 0], spans[:, 1])
    after = _covered(idle, spans[:, 1], until)
    return float((inside + np.minimum(after, lead)).sum())


def _host_waited_for(line: _Timeline) -> Ranges | None:
    """The stretches of GPU work the host waited for: back-to-back work (an op after a gap launched before
    the gap opened is queued, HTA's kernel wait, and continues the stretch) that ends while the host is
    blocked — in a sync, or in a CUDA call that waits for the device (`line.blocking`) — or runs to the end
    of the steps. Only work there lengthens the step: a stretch that ends because the host has not launched
    the next op (a host-bound loop, a DataLoader wait) would, done faster, only idle longer. Launches are
    joined to GPU ops by correlation (as HTA's idle split); None when none is in the trace."""
    first, busy, blocking = line.first_launch, line.busy, line.blocking
    if first.empty:
        return None
    # The earliest launch among the ops starting each busy interval: after the previous interval's end, the
    # GPU waited for the host and a new stretch begins.
    starts = first.reindex(busy[:, 0]).to_numpy()
    new = np.ones(len(busy), dtype=bool)
    new[1:] = starts[1:] > busy[:-1, 1]  # launched after the GPU ran dry; an unknown launch continues
    stretch = np.column_stack([busy[new, 0], np.maximum.reduceat(busy[:, 1], np.flatnonzero(new))])
    ends = stretch[:, 1]
    waited = ends >= line.window[-1, 1]
    if blocking.size:
        k = np.searchsorted(blocking[:, 0], ends, side="left") - 1
        waited |= (k >= 0) & (ends <= blocking[np.clip(k, 0, None), 1])
    return stretch[waited]


def analyze_rank(
    events: pd.DataFrame,
    settings: BottleneckSettings,
    rank: int | None = None,
    compute_major: int | None = None,
    device_name: str | None = None,
) -> RankAnalysis:
    """Breakdowns and findings of one rank's trace (events with silver.profiler_events columns)."""
    ev = prepare(events)
    steps = find_steps(ev)
    sb = step_breakdown(ev, steps.ranges)
    gb = gpu_breakdown(ev, settings.kernel_wait_us)
    finder = FrameFinder(ev)
    notes = [steps.note] if steps.note else []
    findings: list[Finding] = []
    shares: dict[str, float] = {}
    has_gpu = gb is not None
    if not has_gpu:
        notes.append("no GPU activity in the trace (CPU-only): GPU findings need kernels, copies or memsets")
    if not finder.has_any:
        notes.append("no Python stacks in the trace: record with with_stack=True to get file and line")
    step_total = sb.mean_step_us * sb.steps
    line = _timeline(ev, steps.ranges) if has_gpu and sb.steps else None
    carried = carried_over_us(ev, steps.ranges, line) if line is not None else 0.0
    if line is not None:
        findings += _rank_findings(
            ev, steps.ranges, line, sb.pct, step_total, carried, gb, finder, settings, compute_major, shares
        )
        if "AMD" in (device_name or "").upper():  # Tensor-Core kernel names are NVIDIA's
            findings = [f for f in findings if f.kind != "low_tensor_core"]
            shares.pop("low_tensor_core", None)
    for f in findings:
        f.rank = rank
    return RankAnalysis(
        rank=rank,
        steps=sb.steps,
        step_source=steps.source,
        mean_step_us=sb.mean_step_us,
        warmup_us=steps.warmup_us,
        breakdown_pct=sb.pct,
        gpu_pct=gb.pct() if gb else None,
        idle_split_pct=gb.idle_split_pct if gb else None,
        kernels=int((ev["kind"] == "kernel").sum()),
        has_gpu=has_gpu,
        has_stacks=finder.has_any,
        findings=findings,
        notes=notes,
        collectives=collectives_of(ev, steps.ranges, line) if line is not None else [],
        shares=shares,
        carried_us=carried,
        host_floor_us=host_floor_us(ev, steps.ranges, line) if line is not None else None,
    )


def _rank_findings(
    ev: pd.DataFrame,
    steps: list[tuple[float, float]],
    line: _Timeline,
    pct: dict[str, float],
    step_total: float,
    carried: float,
    gb: Any,
    finder: FrameFinder,
    s: BottleneckSettings,
    compute_major: int | None,
    shares: dict[str, float],
) -> list[Finding]:
    """The rank's findings; `shares` receives what each share-judged kind measures, above its gate or not."""
    out: list[Finding] = []
    kernels = _in_steps(ev[ev["kind"] == "kernel"], steps)
    shares["input_bound"] = pct["dataloader"]
    # input_bound
    if pct["dataloader"] >= s.input_bound_pct:
        loader = _in_steps(ev[ev["is_dataloader"]], steps)
        frame = finder.top(loader, gpu=False)
        share = pct["dataloader"]
        mean_wait_ms = float(loader["dur_us"].mean()) / 1000 if len(loader) else 0.0
        out.append(
            Finding(
                "input_bound",
                None,
                share,
                f"DataLoader __next__ took {share:.1f} % of step time ({len(loader)} calls, "
                f"mean {mean_wait_ms:.1f} ms) over {len(steps)} step(s)",
                RULES["input_bound"].fix.format(workers=4, where=_where(frame), share=share),
                frame,
                {"dataloader_pct": share},
            )
        )
    sync, window, busy = line.sync, line.window, line.busy
    # What a sync costs is the GPU idle the host's lost lead would have filled (`_sync_stall`), not the host's
    # blocked time, during which the GPU works.
    host = ev[ev["kind"].isin(("cpu_op", "user_annotation")) | ev["cat"].isin(RUNTIME_CATS)]
    host_ops = np.sort(host["ts_us"].to_numpy(dtype=float))
    stall, per_call = (
        _sync_stall(sync, busy, window, host_ops) if len(sync) and step_total > 0 else (0.0, None)
    )
    sync_pct = 100.0 * stall / step_total if step_total > 0 else 0.0
    shares["sync_bound"] = sync_pct
    # The step's GPU idle (no kernel, copy or memset), % of step time: launch_bound's and idle_gpu's.
    idle = max(0.0, 100.0 - pct["kernel"] - pct["memcpy"] - pct["memset"])
    # launch_bound
    if len(kernels):
        short = kernels["dur_us"] < s.launch_short_kernel_us
        short_pct = 100.0 * float(short.mean())
        # The GPU starved by the host: its idle, waiting for the next launch, while the host dispatched ops
        # (`_launch_wait`) — what launching faster (fusion, CUDA graphs) gives back.
        waiting = 100.0 * _launch_wait(line) / step_total if step_total > 0 else 0.0
        starved = waiting >= s.launch_wait_pct
        if (pct["runtime"] >= s.launch_runtime_pct or starved) and short_pct >= s.launch_short_kernel_pct:
            launches = _in_steps(ev[ev["cat"].isin(RUNTIME_CATS) & ev["name"].str.contains("Launch")], steps)
            frame = finder.top(launches.assign(n=1.0), gpu=False, weight="n")
            out.append(
                Finding(
                    "launch_bound",
                    None,
                    max(pct["runtime"], waiting),
                    f"GPU idle {waiting:.1f} % of step time waiting for the host to launch work; CUDA "
                    f"runtime {pct['runtime']:.1f} % of step time; {short_pct:.0f} % of {len(kernels)} "
                    f"kernels under {s.launch_short_kernel_us:.0f} µs "
                    f"(median {kernels['dur_us'].median():.1f} µs)",
                    RULES["launch_bound"].fix.format(
                        short_pct=short_pct, short_us=s.launch_short_kernel_us, where=_where(frame)
                    ),
                    frame,
                    {
                        "runtime_pct": pct["runtime"],
                        "short_kernel_pct": short_pct,
                        "launch_wait_pct": waiting,
                    },
                )
            )
    # sync_bound
    if len(sync) and step_total > 0 and sync_pct >= s.sync_pct:
        blocked_pct = 100.0 * _window_time(sync, steps) / step_total
        stalling = sync.assign(stall_us=per_call)
        frame = finder.top(stalling[stalling["stall_us"] > 0], gpu=False, weight="stall_us")
        top_op = sync.groupby("name")["dur_us"].sum().idxmax()
        out.append(
            Finding(
                "sync_bound",
                None,
                sync_pct,
                f"GPU idle {sync_pct:.1f} % of step time through {len(sync)} synchronising call(s) or "
                f"after them, where the host had fallen behind while blocked ({blocked_pct:.1f} % of the "
                f"step), mostly {top_op}",
                RULES["sync_bound"].fix.format(where=_where(frame), op=top_op),
                frame,
                {"sync_pct": sync_pct, "blocked_pct": blocked_pct},
            )
        )
    # memcpy_bound
    # Shares of the steady steps (less the warm-up's GPU work carried into the first): what a fix shortens.
    steady = step_total - carried
    critical_pct = _critical_memcpy_pct(ev, kernels, line, steady, pct["memcpy"])
    pageable_idle_pct = 100.0 * _pageable_stall(ev, steps, line) / steady if steady > 0 else 0.0
    memcpy_pct = critical_pct + pageable_idle_pct
    shares["memcpy_bound"] = memcpy_pct
    if memcpy_pct >= s.memcpy_pct:
        copies = _in_steps(ev[ev["kind"] == "memcpy"], steps)
        nbytes = copies["bytes"].fillna(0)
        pageable = (
            100.0
            * float(nbytes[copies["name"].str.contains("Pageable")].sum())
            / max(float(nbytes.sum()), 1.0)
        )
        h2d = float(nbytes[copies["name"].str.contains("HtoD")].sum())
        d2h = float(nbytes[copies["name"].str.contains("DtoH")].sum())
        frame = finder.top(copies, gpu=True)
        out.append(
            Finding(
                "memcpy_bound",
                None,
                memcpy_pct,
                f"memcpy {pct['memcpy']:.1f} % of step time, {critical_pct:.1f} % in GPU work the host "
                f"waited for; GPU idle {pageable_idle_pct:.1f} % after host-to-device copies from pageable "
                f"memory blocked the host: {h2d / 2**20:.1f} MiB host-to-device, {d2h / 2**20:.1f} MiB "
                f"device-to-host, {pageable:.0f} % from pageable memory",
                RULES["memcpy_bound"].fix.format(where=_where(frame), pageable_pct=pageable),
                frame,
                {
                    "memcpy_pct": pct["memcpy"],
                    "critical_pct": critical_pct,
                    "pageable_idle_pct": pageable_idle_pct,
                    "pageable_pct": pageable,
                },
            )
        )
    # communication_bound: NCCL kernel time not overlapped with compute kernels
    if len(kernels) and step_total > 0:
        comm_mask = kernels["name"].str.contains(COMM_KERNEL_RE.pattern, case=False, regex=True)
        comm, comp = kernels[comm_mask], kernels[~comm_mask]
        if len(comm):
            comm_r = intersect(merge(comm["ts_us"].to_numpy(), comm["end_us"].to_numpy()), window)
            comp_r = merge(comp["ts_us"].to_numpy(), comp["end_us"].to_numpy())
            exposed = total(comm_r) - total(intersect(comm_r, comp_r))
            exposed_pct = 100.0 * exposed / step_total
            shares["communication_bound"] = exposed_pct
            if exposed_pct >= s.communication_pct:
                frame = finder.top(comm, gpu=True)
                overlap = 100.0 * (1 - exposed / total(comm_r)) if total(comm_r) else 0.0
                out.append(
                    Finding(
                        "communication_bound",
                        None,
                        exposed_pct,
                        f"NCCL kernels {100 * total(comm_r) / step_total:.1f} % of step time, "
                        f"{overlap:.0f} % of it overlapped with compute; {exposed_pct:.1f} % exposed",
                        RULES["communication_bound"].fix.format(exposed_pct=exposed_pct, where=_where(frame)),
                        frame,
                        {"exposed_pct": exposed_pct, "overlap_pct": overlap},
                    )
                )
    # low_tensor_core: FP32 GEMM/conv on a GPU with Tensor Cores (compute capability >= 7)
    if len(kernels) and (compute_major or 0) >= 7:
        kt = float(kernels["dur_us"].sum())
        gemm = kernels[kernels["name"].str.contains(GEMM_RE.pattern, case=False, regex=True)]
        gemm_t = float(gemm["dur_us"].sum())
        if kt > 0 and 100 * gemm_t / kt >= s.tensor_core_gemm_pct:
            fp32 = gemm[~gemm["name"].str.contains(TENSOR_CORE_RE.pattern, regex=True)]
            fp32_pct = 100.0 * float(fp32["dur_us"].sum()) / gemm_t
            # What faster GEMMs could give back: the FP32 GEMM time in the steps in work the host waited for
            # (all of it when the trace has no launches to tell by).
            share = 0.0
            if step_total > 0:
                fp32_r = intersect(merge(fp32["ts_us"].to_numpy(), fp32["end_us"].to_numpy()), window)
                waited = line.waited
                share = 100.0 * total(fp32_r if waited is None else intersect(fp32_r, waited)) / step_total
            if fp32_pct >= s.tensor_core_fp32_pct:
                shares["low_tensor_core"] = share
            if fp32_pct >= s.tensor_core_fp32_pct and share >= s.tensor_core_step_pct:
                frame = finder.top(fp32, gpu=True)
                out.append(
                    Finding(
                        "low_tensor_core",
                        None,
                        share,
                        f"GEMM/conv kernels {100 * gemm_t / kt:.0f} % of kernel time; {fp32_pct:.0f} % of it "
                        f"without Tensor Cores (compute capability {compute_major}.x); {share:.1f} % of step "
                        "time in GPU work the host waited for",
                        RULES["low_tensor_core"].fix.format(where=_where(frame), fp32_pct=fp32_pct),
                        frame,
                        {"fp32_gemm_pct": fp32_pct, "critical_pct": share},
                    )
                )
    # low_occupancy
    occ = kernels[kernels["occupancy_pct"].notna()] if len(kernels) else kernels
    if len(occ) and pct["kernel"] >= s.occupancy_kernel_pct:
        mean_occ = float(np.average(occ["occupancy_pct"], weights=occ["dur_us"].clip(lower=1e-3)))
        if mean_occ < s.occupancy_pct:
            low = occ[occ["occupancy_pct"] < s.occupancy_pct]
            frame = finder.top(low, gpu=True)
            share = pct["kernel"] * float(low["dur_us"].sum()) / max(float(kernels["dur_us"].sum()), 1e-9)
            out.append(
                Finding(
                    "low_occupancy",
                    None,
                    share,
                    f"time-weighted achieved occupancy {mean_occ:.0f} % over {len(occ)} kernels "
                    f"(kernels {pct['kernel']:.0f} % of step time)",
                    RULES["low_occupancy"].fix.format(where=_where(frame), occupancy=mean_occ),
                    frame,
                    {"occupancy_pct": mean_occ},
                )
            )
    # idle_gpu: idle within the steps and nothing above explains it
    if not out and idle >= s.idle_pct:
        out.append(
            Finding(
                "idle_gpu",
                None,
                idle,
                f"GPU idle {idle:.1f} % of step time; HTA idle split over the {gb.span_us / 1000:.1f} ms "
                f"GPU span: host wait "
                f"{gb.idle_split_pct['host_wait']:.0f} %, "
                f"kernel wait {gb.idle_split_pct['kernel_wait']:.0f} %, "
                f"other {gb.idle_split_pct['other']:.0f} % of idle)",
                RULES["idle_gpu"].fix.format(idle_pct=idle),
                None,
                {"idle_pct": idle},
            )
        )
    return out


# Kinds a rank reports when their share of step time reaches a gate (the setting named): a job has one when
# the mean over its GPU ranks of what each measures does (`job_findings`).
SHARE_GATES = {
    "input_bound": "input_bound_pct",
    "memcpy_bound": "memcpy_pct",
    "sync_bound": "sync_pct",
    "communication_bound": "communication_pct",
    "low_tensor_core": "tensor_core_step_pct",
}


def _median_of_others(values: dict[int | None, float], rank: int | None) -> float:
    return statistics.median(v for k, v in values.items() if k != rank)


def straggler(
    ranks: list[RankAnalysis], hosts: dict[int | None, str | None], s: BottleneckSettings
) -> Finding | None:
    """The slowest rank when its mean step is at least `straggler_ratio` × the median of the other ranks'
    (ranks whose collectives could not be matched: their step times differ only if they do not wait for
    each other)."""
    timed = {r.rank: r.mean_step_us for r in ranks if r.steps and r.mean_step_us > 0 and r.rank is not None}
    if len(timed) < 2:
        return None
    slow = max(timed, key=lambda k: timed[k])
    median = _median_of_others(timed, slow)
    ratio = timed[slow] / median
    if ratio < s.straggler_ratio:
        return None
    return Finding(
        "straggler",
        slow,
        100.0 * (timed[slow] - median) / timed[slow],
        f"rank {slow} mean step {timed[slow] / 1000:.1f} ms vs the other ranks' median "
        f"{median / 1000:.1f} ms over {len(timed)} ranks",
        RULES["straggler"].fix.format(rank=slow, ratio=ratio, host=hosts.get(slow) or "unknown"),
        None,
        {"ratio": ratio},
    )


def collective_waits(ranks: list[RankAnalysis]) -> dict[int | None, list[float]] | None:
    """Per rank, the µs each of its collectives waited for the other ranks: its NCCL kernel minus the
    shortest kernel of the same collective over the ranks (the last to arrive waits for nobody). Collectives
    are matched by their order from the start of the traces, over as many as every rank recorded: the
    profiler may cut one rank's last step short, so counts may differ by at most one step's collectives.
    None with fewer than two ranks (each with its rank number) or counts further apart."""
    if len(ranks) < 2 or any(r.rank is None or not r.steps for r in ranks):
        return None
    counts = [len(r.collectives) for r in ranks]
    n = min(counts)
    per_step = max(sum(1 for c in r.collectives if c.step >= 0) / r.steps for r in ranks)
    if n == 0 or max(counts) - n > per_step:
        return None
    shortest = np.min(np.array([[c.us for c in r.collectives[:n]] for r in ranks]), axis=0).tolist()
    return {r.rank: [c.us - t for c, t in zip(r.collectives, shortest, strict=False)] for r in ranks}


def _waiting(r: RankAnalysis, waits: list[float], in_steps: bool = False) -> float:
    """The µs of the rank's exposed NCCL time (not overlapped with compute) spent waiting for its peers, over
    the matched collectives (all, or those that start in the steps)."""
    return sum(
        min(c.exposed_us, w)
        for c, w in zip(r.collectives, waits, strict=False)
        if c.step >= 0 or not in_steps
    )


def _transfer_pct(r: RankAnalysis, waits: list[float]) -> tuple[float, float]:
    """The rank's exposed NCCL time less the time its kernels waited for the other ranks, and that wait, as
    % of its steady step time (over the collectives launched in the steps; the steps' total less the
    warm-up's GPU work carried into the first, `carried_us`). The transfer is at most the steps' time above
    the host's own (`host_floor_us`): without the transfer, a host-paced step is still the host's."""
    step_total = r.mean_step_us * r.steps - r.carried_us
    if step_total <= 0:
        return 0.0, 0.0
    exposed = sum(c.exposed_us for c in r.collectives if c.step >= 0)
    waited = _waiting(r, waits, in_steps=True)  # an unmatched last collective counts as transfer
    transfer = exposed - waited
    if r.host_floor_us is not None:  # no shorter than the host's own time per step
        transfer = min(transfer, max(step_total - r.host_floor_us, 0.0))
    return 100.0 * transfer / step_total, 100.0 * waited / step_total


def _communication_without_waiting(
    r: RankAnalysis, transfer: tuple[float, float], s: BottleneckSettings
) -> list[Finding]:
    """The rank's findings with `communication_bound` judged on the transfer alone (`_transfer_pct`): the
    exposed NCCL time less the time its kernels waited for the other ranks (that is the slowest rank's, see
    `straggler`)."""
    others = [f for f in r.findings if f.kind != "communication_bound"]
    found = next((f for f in r.findings if f.kind == "communication_bound"), None)
    if found is None or r.mean_step_us * r.steps <= 0:
        return r.findings
    pct, waited_pct = transfer
    if pct < s.communication_pct:
        return others
    return [
        *others,
        Finding(
            "communication_bound",
            r.rank,
            pct,
            f"{found.evidence}; of it {waited_pct:.1f} % of step time waiting for the other ranks (matched "
            f"collectives; not counted), {pct:.1f} % exposed transfer",
            RULES["communication_bound"].fix.format(exposed_pct=pct, where=_where(found.frame)),
            found.frame,
            {**found.figures, "exposed_pct": pct, "waiting_pct": waited_pct},
        ),
    ]


def _per_step(r: RankAnalysis, steps: int, held: bool) -> np.ndarray:
    """The rank's NCCL time not overlapped with its compute, per step (the first `steps` of them); with
    `held`, only that of kernels ending in GPU work the host waited for (`collectives_of`)."""
    out = np.zeros(steps)
    for c in r.collectives:
        if 0 <= c.step < steps:
            out[c.step] += c.held_us if held else c.exposed_us
    return out


def straggler_by_waiting(
    ranks: list[RankAnalysis],
    waits: dict[int | None, list[float]],
    hosts: dict[int | None, str | None],
    s: BottleneckSettings,
) -> Finding | None:
    """In synchronous training every step lasts as long as the slowest rank's work: the other ranks wait for
    it inside the collectives. The rank that waits least is the slowest. What it costs the job in a step is
    the NCCL time the other ranks have exposed (not overlapped with their compute) beyond its own — every
    rank moves the same data, so the difference is waiting — counting only their collectives that end in GPU
    work their host waited for: a wait that overlaps the rank's own backward, or that the GPU would have
    spent idle for its host anyway (a host-bound loop, a DataLoader wait), costs nothing. The loss is the
    median over the steps (a rank late only now and then is not a straggler); it is one when its step is at
    least `straggler_ratio` × the step it would have without that."""
    total = {r.rank: _waiting(r, waits[r.rank]) for r in ranks}
    if len(total) < 2:
        return None
    slow_rank = min(total, key=lambda k: total[k])
    slow = next(r for r in ranks if r.rank == slow_rank)
    steps = min(r.steps for r in ranks)
    others = np.median(
        np.array([_per_step(r, steps, held=True) for r in ranks if r.rank != slow_rank]), axis=0
    )
    lost = float(np.median(others - _per_step(slow, steps, held=False)))
    step = slow.mean_step_us
    if lost <= 0 or lost >= step or step / (step - lost) < s.straggler_ratio:
        return None
    ratio = step / (step - lost)
    return Finding(
        "straggler",
        slow_rank,
        100.0 * lost / step,
        f"the other {len(total) - 1} ranks wait for rank {slow_rank} {lost / 1000:.1f} ms per step in "
        f"their collectives, on their step's critical path (median over {steps} steps of their exposed NCCL "
        f"time in GPU work their host waited for, beyond rank {slow_rank}'s; step {step / 1000:.1f} ms)",
        RULES["straggler"].fix.format(rank=slow_rank, ratio=ratio, host=hosts.get(slow_rank) or "unknown"),
        None,
        {"ratio": ratio},
    )


def job_findings(
    ranks: list[RankAnalysis], hosts: dict[int | None, str | None], s: BottleneckSettings
) -> list[Finding]:
    """A job's findings: one per kind (the rank where it is largest), its share the mean over the job's GPU
    ranks, plus `straggler` across ranks; `idle_gpu` only where nothing else holds. A kind judged on its
    share of step time (`SHARE_GATES`) holds for the job when the mean of what every GPU rank measures
    reaches its gate: one rank of eight reading 11 % where the others read 2 % is the largest of eight noisy
    readings, not a job that loses 11 %. Other kinds' share counts absent ranks as 0. When the ranks'
    collectives match (`collective_waits`), the time a rank's NCCL kernels waited for the others is taken
    out of its `communication_bound` and charged to the slowest rank as `straggler`."""
    gpu_ranks = [r for r in ranks if r.has_gpu and r.steps]
    waits = collective_waits(gpu_ranks)
    by_kind: dict[str, list[Finding]] = {}
    shares: list[dict[str, float]] = []  # per rank; communication_bound net of waiting when matched
    for r in gpu_ranks:
        found, measured = r.findings, r.shares
        if waits is not None:
            transfer = _transfer_pct(r, waits[r.rank])
            found = _communication_without_waiting(r, transfer, s)
            if "communication_bound" in measured:
                measured = {**measured, "communication_bound": transfer[0]}
        shares.append(measured)
        for f in found:
            by_kind.setdefault(f.kind, []).append(f)
    out = []
    for kind, found in by_kind.items():
        worst = max(found, key=lambda f: f.share_pct)
        gate = SHARE_GATES.get(kind)
        if gate is None:
            mean_share = sum(f.share_pct for f in found) / len(gpu_ranks)
        else:
            mean_share = sum(max(m.get(kind, 0.0), 0.0) for m in shares) / len(gpu_ranks)
            if mean_share < getattr(s, gate):
                continue
        out.append(
            Finding(
                kind,
                worst.rank,
                mean_share,
                worst.evidence
                + (f"; on {len(found)} of {len(gpu_ranks)} ranks" if len(gpu_ranks) > 1 else ""),
                worst.fix,
                worst.frame,
                worst.figures,
            )
        )
    lag = (
        straggler(gpu_ranks, hosts, s) if waits is None else straggler_by_waiting(gpu_ranks, waits, hosts, s)
    )
    if lag is not None:
        out.append(lag)
    if any(f.kind != "idle_gpu" for f in out):
        out = [f for f in out if f.kind != "idle_gpu"]
    return sorted(out, key=lambda f: -f.share_pct)
