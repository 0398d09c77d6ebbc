"""Profiler traces without Spark: streaming parse of the real traces (both category generations, gzip, AMD,
CPU-only, distributed), the anchors of ../shared/notes/profiler-anchors.md, quarantine reasons, the user's
line, and agreement with HTA when it is installed."""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conf import load_settings
from jobs.stages.bottlenecks import _rank_from_json
from jobs.stages.ingest.profiler import scan_trace
from pipelines.gold.bottlenecks.analyze import (
    Collective,
    Finding,
    RankAnalysis,
    _sync_stall,
    _transfer_pct,
    analyze_rank,
    collective_waits,
    job_findings,
    user_frame_of_stack,
)
from pipelines.gold.bottlenecks.breakdown import gpu_breakdown, merge, prepare
from pipelines.silver.profiler import (
    EVENT_COLUMNS,
    EventTally,
    Reject,
    job_id_in_path,
    read_trace_events,
    read_trace_meta,
    worker_in_name,
)
from tests.profiler_traces import LOADER_LINE, USER_FILE, input_bound_trace, write_trace

SETTINGS = load_settings({}).bottlenecks
TRACES = sorted((Path(__file__).parent / "data" / "real" / "profiler").glob("*.gz"))


def _load(path: Path) -> tuple[pd.DataFrame, EventTally, list[Reject]]:
    tally, rejects, rows = EventTally(), [], []
    with gzip.open(path) as f:
        for r in read_trace_events(f, tally):
            (rejects if isinstance(r, Reject) else rows).append(r)
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS)), tally, rejects


def _analyse(name: str):
    path = next(p for p in TRACES if p.name.startswith(name))
    with gzip.open(path) as f:
        meta = read_trace_meta(f)
    events, _, _ = _load(path)
    return analyze_rank(events, SETTINGS, meta.rank, meta.compute_major, meta.device_name)


def test_every_real_trace_parses_with_no_reject() -> None:
    assert len(TRACES) == 9
    for path in TRACES:
        with gzip.open(path) as f:
            read_trace_meta(f)
        events, tally, rejects = _load(path)
        assert not rejects, path.name
        assert tally.kept == len(events) > 0, path.name
        assert events["kind"].ne("other").all(), (
            path.name,
            events.loc[events["kind"] == "other", "cat"].unique(),
        )


def test_both_category_generations_map_to_one_vocabulary() -> None:
    old, _, _ = _load(next(p for p in TRACES if "num_workers_0" in p.name))
    new, _, _ = _load(next(p for p in TRACES if "sampled_rank-0" in p.name))
    assert set(old["cat"]) >= {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"}
    assert set(new["cat"]) >= {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset"}
    for frame in (old, new):
        assert {"cpu_op", "runtime", "kernel", "memcpy", "memset"} <= set(frame["kind"])


def test_distributed_info_and_device_properties() -> None:
    path = next(p for p in TRACES if "sampled_rank-1" in p.name)
    with gzip.open(path) as f:
        meta = read_trace_meta(f)
    assert (meta.rank, meta.world_size, meta.backend) == (1, 128, "nccl")
    path = next(p for p in TRACES if "alexnet" in p.name)
    with gzip.open(path) as f:
        meta = read_trace_meta(f)
    assert meta.device_name == "NVIDIA A100-PG509-200" and meta.compute_major == 8


def test_resnet_num_workers_0_is_input_bound_and_4_is_not() -> None:
    slow = _analyse("kineto_resnet50_autograd_api_num_workers_0")
    assert slow.step_source == "dataloader" and slow.warmup_us > 1_500_000  # the warm-up iteration left out
    assert slow.breakdown_pct["dataloader"] >= 25.0
    assert [f.kind for f in slow.findings] == ["input_bound"]
    fast = _analyse("kineto_resnet50_autograd_api_num_workers_4")
    assert fast.breakdown_pct["dataloader"] < 5.0
    assert not fast.findings  # healthy: no finding


def test_cpu_only_trace_gets_no_gpu_finding_and_says_why() -> None:
    a = _analyse("hta_cpu_only")
    assert not a.has_gpu and a.gpu_pct is None and not a.findings
    assert any("CPU-only" in n for n in a.notes)


def test_amd_trace_counts_its_kernels() -> None:
    a = _analyse("hta_amd_trace")
    assert a.kernels == 14 and a.has_gpu
    assert all(f.kind != "low_tensor_core" for f in a.findings)


def test_breakdown_sums_to_100_on_every_trace() -> None:
    for path in TRACES:
        a = _analyse(path.name[:30])
        if a.steps:
            assert sum(a.breakdown_pct.values()) == pytest.approx(100.0, abs=0.01), path.name
        if a.gpu_pct:
            assert sum(a.gpu_pct.values()) == pytest.approx(100.0, abs=0.01), path.name


def test_malformed_events_are_rejected_with_a_reason_and_the_rest_lands() -> None:
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 5},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12, "dur": -1},
            [1, 2],
            {"ph": "X", "name": "no category", "ts": 1, "dur": 1},
            {"ph": "i", "name": "instant", "ts": 3},
        ]
    }
    tally = EventTally()
    out = list(read_trace_events(io.BytesIO(json.dumps(trace).encode()), tally))
    rejects = [r for r in out if isinstance(r, Reject)]
    assert [r.event_no for r in rejects] == [1, 2, 3, 4]
    assert [r.reason for r in rejects] == [
        "complete event without a numeric ts",
        "negative dur -1.0",
        "event is not a JSON object",
        "event without a category",
    ]
    assert tally.kept == 1 and tally.skipped_phases == {"i": 1}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "not readable JSON"),
        (b'[{"ph": "X"}]', "not a trace: the JSON document is not an object"),
        (b'{"schemaVersion": 1}', "not a trace: no traceEvents array"),
        (gzip.compress(b'{"traceEvents": []}' * 50)[:30], "not a readable gzip file"),
    ],
)
def test_damaged_files_get_a_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    scanned = scan_trace(path, str(path))
    assert scanned.error is not None and scanned.error.startswith(reason)
    assert len(scanned.sha256) == 64


def test_the_finding_names_the_users_line(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.pt.trace.json.gz", input_bound_trace())
    events, _, _ = _load(path)
    a = analyze_rank(events, SETTINGS, 0, 8, "NVIDIA A100-SXM4-80GB")
    found = {f.kind: f for f in a.findings}
    assert set(found) == {"input_bound"}
    assert found["input_bound"].frame is not None
    assert (found["input_bound"].frame.file, found["input_bound"].frame.line) == (USER_FILE, LOADER_LINE)
    assert f"{USER_FILE}:{LOADER_LINE}" in found["input_bound"].fix
    assert found["input_bound"].share_pct == pytest.approx(100 * 60_000 / 85_000, abs=0.5)


def test_without_call_stacks_the_enclosing_user_python_function_names_the_line(tmp_path: Path) -> None:
    """A trace recorded with Python tracing but no `Call stack` args: the DataLoader wait is attributed to
    the innermost user `python_function` event around it (a library frame inside it does not count), and
    a wait no user function encloses names no line."""
    trace = input_bound_trace()
    events = trace["traceEvents"]
    loaders = [e for e in events if e["name"].startswith("enumerate(DataLoader)")]
    for e in loaders:
        del e["args"]["Call stack"]
    py = []
    for e in loaders[:-1]:  # the last step's wait has no user function around it
        t, d = e["ts"], e["dur"]
        py.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"{USER_FILE}(88): main",
                "pid": 7,
                "tid": 7,
                "ts": t - 5,
                "dur": d + 10,
                "args": {},
            }
        )
        py.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"{USER_FILE}({LOADER_LINE}): train_epoch",
                "pid": 7,
                "tid": 7,
                "ts": t - 2,
                "dur": d + 4,
                "args": {},
            }
        )
        py.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": LIBRARY_NEXT,
                "pid": 7,
                "tid": 7,
                "ts": t - 1,
                "dur": d + 2,
                "args": {},
            }
        )
    trace["traceEvents"] = events + py
    frame = _input_bound_frame(tmp_path, trace)
    assert frame is not None and (frame.file, frame.line, frame.function) == (
        USER_FILE,
        LOADER_LINE,
        "train_epoch",
    )

    trace["traceEvents"] = events  # no Python events at all: no line, and the fix says where to look
    assert _input_bound_frame(tmp_path, trace) is None


LIBRARY_NEXT = "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py(631): __next__"


def _input_bound_frame(tmp_path: Path, trace: dict):
    events, _, _ = _load(write_trace(tmp_path / "t.pt.trace.json.gz", trace))
    a = analyze_rank(events, SETTINGS, 0, 8, "NVIDIA A100-SXM4-80GB")
    found = {f.kind: f for f in a.findings}
    assert set(found) == {"input_bound"}
    return found["input_bound"].frame


def test_user_frame_skips_libraries_and_the_standard_library() -> None:
    stack = (
        "/usr/lib/python3.11/threading.py(320): wait;"
        "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py(800): synchronize;"
        "/home/bob/exp/loop.py(17): step;/home/bob/exp/main.py(5): <module>"
    )
    frame = user_frame_of_stack(stack)
    assert frame is not None and (frame.file, frame.line, frame.function) == (
        "/home/bob/exp/loop.py",
        17,
        "step",
    )
    assert user_frame_of_stack("<built-in method item>") is None


def test_job_and_worker_from_paths() -> None:
    assert job_id_in_path("/scratch/alice/job_123/rank0.pt.trace.json.gz") == "123"
    assert job_id_in_path("/scratch/alice/slurm-4567_3/trace.json") == "4567_3"
    assert job_id_in_path("/runs/98765/trace.json") == "98765"
    assert job_id_in_path("/home/alice/traces/hta_trace_filter_sampled_rank-0.json.gz") is None
    assert worker_in_name("/t/gpu-a01_31337.1712000000000.pt.trace.json.gz") == ("gpu-a01", 31337)


HTA_TEMPORAL = {  # HTA 0.5.0 get_temporal_breakdown on these traces (idle, compute, non-compute %)
    "hta_amd_trace": (98.53, 1.08, 0.39),
    "hta_critical_path": (99.49, 0.08, 0.43),
    "hta_trace_filter_sampled_rank-0": (53.56, 17.71, 28.74),
    "hta_trace_filter_sampled_rank-1": (54.72, 22.57, 22.72),
    "kineto_resnet50_autograd_api_num_workers_0": (81.32, 18.40, 0.28),
    "kineto_resnet50_autograd_api_num_workers_4": (82.66, 16.96, 0.37),
}


@pytest.mark.parametrize("name", sorted(HTA_TEMPORAL))
def test_gpu_breakdown_agrees_with_hta_within_one_point(name: str) -> None:
    """The figures HTA printed for these files (bench/profiler.py recomputes them with HTA installed)."""
    events, _, _ = _load(next(p for p in TRACES if p.name.startswith(name)))
    gb = gpu_breakdown(prepare(events))
    assert gb is not None
    pct = gb.pct()
    for ours, theirs in zip(
        (pct["idle"], pct["compute"], pct["non_compute"]), HTA_TEMPORAL[name], strict=True
    ):
        assert abs(ours - theirs) <= 1.0


def _rank(rank: int, collectives: list[Collective], comm_pct: float) -> RankAnalysis:
    """A rank of 4 steps of 10 ms whose uncorrected communication_bound is `comm_pct`."""
    found = [Finding("communication_bound", rank, comm_pct, "NCCL kernels", "fix", None, {})]
    breakdown = dict.fromkeys(
        ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other"), 0.0
    )
    return RankAnalysis(
        rank,
        4,
        "profiler_step",
        10_000.0,
        0.0,
        breakdown,
        None,
        None,
        10,
        True,
        False,
        found,
        [],
        collectives,
        {"communication_bound": comm_pct},
    )


def _two_a_step(us: float, held: bool = True, steps: int = 4) -> list[Collective]:
    """Two collectives a step, each `us` long and all of it exposed; `held`: ending in GPU work the host
    waited for (else the GPU would have waited for its host anyway)."""
    return [Collective(us, us, k // 2, us if held else 0.0) for k in range(2 * steps)]


def test_waiting_for_a_slow_rank_is_its_straggler_finding_not_communication() -> None:
    # Two collectives a step; rank 2 arrives last, so its kernels (1 ms) are the transfer and ranks 0 and 1
    # wait 2 ms in each (all exposed): their 6 ms of exposed NCCL a 10 ms step is 4 ms waiting, 2 transfer.
    fast, slow = _two_a_step(3_000.0), _two_a_step(1_000.0)
    ranks = [_rank(0, fast, 30.0), _rank(1, fast, 30.0), _rank(2, slow, 10.0)]
    assert collective_waits(ranks) == {0: [2_000.0] * 8, 1: [2_000.0] * 8, 2: [0.0] * 8}
    kinds = {f.kind: f for f in job_findings(ranks, {0: "a", 1: "a", 2: "b"}, SETTINGS)}
    # communication: 1 ms transfer a collective, 2 a step = 20 % on every rank.
    assert kinds["communication_bound"].share_pct == pytest.approx(20.0)
    # straggler: the others wait 4 ms a step for rank 2; its 10 ms step would be 6 ms (ratio 1.67 >= 1.11).
    lag = kinds["straggler"]
    assert lag.rank == 2 and lag.share_pct == pytest.approx(40.0) and "node (b)" in lag.fix


def test_a_wait_the_gpu_would_have_spent_idle_for_its_host_is_no_straggler() -> None:
    # The same waits, but each fast rank's collectives end where its GPU then waits for the host to launch
    # more (a host-bound loop): a rank arriving on time would not have shortened their steps.
    fast, slow = _two_a_step(3_000.0, held=False), _two_a_step(1_000.0)
    ranks = [_rank(0, fast, 30.0), _rank(1, fast, 30.0), _rank(2, slow, 10.0)]
    kinds = {f.kind: f.share_pct for f in job_findings(ranks, {}, SETTINGS)}
    assert "straggler" not in kinds and kinds["communication_bound"] == pytest.approx(20.0)


def test_a_rank_late_in_one_step_only_is_no_straggler() -> None:
    # Rank 1 waits 4 ms for rank 0 in the first step only (its DataLoader's noise, say): the median step
    # loses nothing.
    late_once = [Collective(us, us, k // 2, us) for k, us in enumerate([3_000.0] * 2 + [1_000.0] * 6)]
    ranks = [_rank(0, _two_a_step(1_000.0), 10.0), _rank(1, late_once, 15.0)]
    assert collective_waits(ranks) is not None
    assert "straggler" not in {f.kind for f in job_findings(ranks, {}, SETTINGS)}


def test_collectives_are_not_matched_when_the_ranks_recorded_different_windows() -> None:
    # Counts further apart than one step's collectives: no matching, the ranks' own findings stand, and the
    # step-time straggler rule (equal steps) finds none.
    ranks = [_rank(0, _two_a_step(3_000.0), 30.0), _rank(1, _two_a_step(1_000.0)[:5], 10.0)]
    assert collective_waits(ranks) is None
    kinds = {f.kind: f.share_pct for f in job_findings(ranks, {}, SETTINGS)}
    assert kinds == {"communication_bound": pytest.approx(20.0)}


def test_the_two_real_ranks_transfer_hides_behind_their_host() -> None:
    # HTA's sampled ranks 0 and 1 (of 128): ten collectives each, matched; the waiting comes out of the
    # exposed NCCL time. Each rank's own reading is above 10 % of the step, but their host never blocks on
    # the device in the steps (its own time is > 99 % of them) and the GPU idles half the window, mostly
    # waiting for the host: without the transfer the step would still be the host's, so it is no finding.
    a, b = _analyse("hta_trace_filter_sampled_rank-0"), _analyse("hta_trace_filter_sampled_rank-1")
    assert len(a.collectives) == len(b.collectives) == 10
    waits = collective_waits([a, b])
    assert waits is not None
    raw = [f.share_pct for r in (a, b) for f in r.findings if f.kind == "communication_bound"]
    assert len(raw) == 2 and min(raw) >= SETTINGS.communication_pct
    for r in (a, b):
        assert r.host_floor_us is not None and r.host_floor_us > 0.99 * r.mean_step_us * r.steps
        assert r.gpu_pct is not None and r.gpu_pct["idle"] > 50
        transfer, waited = _transfer_pct(r, waits[r.rank])
        assert transfer < 1.0 < waited
    found = {f.kind for f in job_findings([a, b], {0: "h0", 1: "h1"}, SETTINGS)}
    assert "communication_bound" not in found


def test_the_sync_ending_each_step_costs_the_idle_before_the_next_step_even_the_first() -> None:
    # Three 1 ms steps of a GPU-bound loop: each starts with 200 µs of GPU idle (the next batch fetched) and
    # ends in a `.item()` the host sits in for the second half, while the GPU works off the backward (a
    # 500 µs lead). The idle after steps 1 and 2 is in the window; the one after step 3 is not, but the
    # first step's leading idle followed that same sync of the step before the window.
    starts = np.array([0.0, 1_000.0, 2_000.0])
    busy = np.column_stack([starts + 200.0, starts + 1_000.0])
    sync = pd.DataFrame({"ts_us": starts + 500.0, "end_us": starts + 1_000.0})
    window = merge(starts, starts + 1_000.0)
    cost, weight = _sync_stall(sync, busy, window)
    assert cost == pytest.approx(600.0) and len(weight) == 3


def test_the_hosts_work_on_a_fetched_value_is_the_syncs_cost_not_its_lead() -> None:
    # A host-bound layer loop: the GPU has run dry when each `.item()` starts (no lead to lose), then the
    # host works 200 µs on the value in its own Python (no operator) before launching the next layer's op.
    # That idle is the sync's: the work needs the value and fetching it less often removes both. The idle
    # after the host's next operator starts (its dispatch) is not.
    starts = np.array([0.0, 400.0, 800.0])
    busy = np.column_stack([starts + 30.0, starts + 100.0])
    sync = pd.DataFrame({"ts_us": starts + 100.0, "end_us": starts + 110.0})
    window = merge(np.array([0.0]), np.array([1_200.0]))
    host_ops = np.sort(np.concatenate([starts, starts + 310.0]))  # each layer's op, then a CPU-side op
    without, _ = _sync_stall(sync, busy, window)
    cost, weight = _sync_stall(sync, busy, window, host_ops)
    assert without == pytest.approx(3 * 10.0)  # the idle inside the calls; no lead was lost
    assert cost == pytest.approx(without + 3 * 200.0) and len(weight) == 3


def test_a_rank_analysis_survives_the_json_the_spark_stage_ships() -> None:
    # jobs/stages/bottlenecks.py analyses each trace in applyInPandas and sends it back as JSON: the findings'
    # frames and the collectives must come back as the types the job rules read.
    a = _analyse("hta_trace_filter_sampled_rank-0")
    assert (a.collectives and any(f.frame for f in a.findings)) or a.findings
    back = _rank_from_json(json.dumps(asdict(a)))
    assert back == a and isinstance(back.collectives[0], Collective)


def _syncing_rank(rank: int, sync_pct: float) -> RankAnalysis:
    """A rank whose syncs cost `sync_pct` of its steps (a `sync_bound` finding when that reaches 10 %)."""
    found = [Finding("sync_bound", rank, sync_pct, "syncs", "fix", None, {})] if sync_pct >= 10.0 else []
    rank_analysis = _rank(rank, [], 0.0)
    rank_analysis.findings, rank_analysis.shares = found, {"sync_bound": sync_pct}
    return rank_analysis


def test_a_job_has_a_share_judged_finding_when_its_ranks_mean_reaches_the_gate() -> None:
    # One rank of eight reading 11 % where the others read 2 %: the largest of eight readings, not a job
    # whose syncs cost 10 %.
    one_high = [_syncing_rank(0, 11.0), *(_syncing_rank(k, 2.0) for k in range(1, 8))]
    assert job_findings(one_high, {}, SETTINGS) == []
    # Two ranks at 12 % and 9 %: the mean (10.5 %) holds, counting the rank below the gate at what it reads.
    both = job_findings([_syncing_rank(0, 12.0), _syncing_rank(1, 9.0)], {}, SETTINGS)
    assert [(f.kind, f.rank) for f in both] == [("sync_bound", 0)]
    assert both[0].share_pct == pytest.approx(10.5)
    # One rank: its own reading, as before.
    assert [f.share_pct for f in job_findings([_syncing_rank(0, 10.0)], {}, SETTINGS)] == [10.0]


def _event(cat: str, name: str, ts: float, dur: float, gpu: bool = False, **args: object) -> dict:
    """One complete Chrome-trace event on host thread 1, or (`gpu`) on stream 7 of device 0."""
    where = {"pid": 0, "tid": 7} if gpu else {"pid": 1, "tid": 1}
    if gpu:
        args = {"device": 0, "stream": 7, **args}
    return {"ph": "X", "cat": cat, "name": name, **where, "ts": ts, "dur": dur, "args": args}


def _events_of(events: list[dict]) -> pd.DataFrame:
    rows = read_trace_events(io.BytesIO(json.dumps({"traceEvents": events}).encode()), EventTally())
    return pd.DataFrame([r for r in rows if not isinstance(r, Reject)], columns=list(EVENT_COLUMNS))


def _host_paced_trace(cpu_op_us: float) -> pd.DataFrame:
    """Four 1 ms steps, each: a CPU-only operator of `cpu_op_us` (launches nothing), then ops dispatched
    one after another — each 40 µs of host time with its cudaLaunchKernel, its 5 µs kernel starting as it
    is launched — until the step ends. The GPU waits for the host throughout."""
    events: list[dict] = []
    corr = 0
    for step in range(4):
        t0 = 1_000.0 * step
        events.append(_event("user_annotation", f"ProfilerStep#{step}", t0, 1_000.0))
        if cpu_op_us:
            events.append(_event("cpu_op", "aten::uniform_", t0, cpu_op_us))
        t = t0 + cpu_op_us
        while t + 40.0 <= t0 + 1_000.0:
            corr += 1
            events += [
                _event("cpu_op", "aten::add", t, 40.0),
                _event("cuda_runtime", "cudaLaunchKernel", t + 30.0, 8.0, correlation=corr),
                _event("kernel", "elementwise_kernel", t + 33.0, 5.0, gpu=True, correlation=corr),
            ]
            t += 40.0
    return _events_of(events)


def test_launch_bound_counts_the_gpu_waiting_while_the_host_dispatches_not_its_cpu_work() -> None:
    # Dispatch all step long: the GPU idles ~87 % waiting for launches.
    paced = analyze_rank(_host_paced_trace(0.0), SETTINGS, 0, 8)
    launch = next(f for f in paced.findings if f.kind == "launch_bound")
    assert launch.figures["launch_wait_pct"] > 80.0
    # A 700 µs CPU-only op first: the GPU idles as long, waiting for the host too (HTA's host wait), but
    # faster launches give back only the ~26 % the host spends dispatching.
    busy_cpu = analyze_rank(_host_paced_trace(700.0), SETTINGS, 0, 8)
    launch = next(f for f in busy_cpu.findings if f.kind == "launch_bound")
    assert 20.0 < launch.figures["launch_wait_pct"] < 30.0
    assert busy_cpu.gpu_pct is not None and busy_cpu.gpu_pct["idle"] > 90.0


def _copy_then(host_after_copy: str) -> pd.DataFrame:
    """Four 1 ms steps, each starting with a 200 µs pinned host-to-device copy. Then either the host does
    400 µs of CPU work before launching the step's 300 µs kernel ("cpu": the copy is done long before the
    host needs the GPU), or it launches a 600 µs kernel at once and waits in cudaStreamSynchronize ("sync":
    the copy is on the path the host waits on)."""
    events: list[dict] = []
    for step in range(4):
        t0, corr = 1_000.0 * step, 10 * step
        events += [
            _event("user_annotation", f"ProfilerStep#{step}", t0, 1_000.0),
            _event("cuda_runtime", "cudaMemcpyAsync", t0, 3.0, correlation=corr + 1),
            _event(
                "gpu_memcpy",
                "Memcpy HtoD (Pinned -> Device)",
                t0 + 3.0,
                200.0,
                gpu=True,
                correlation=corr + 1,
                bytes=2**24,
            ),
        ]
        cpu = host_after_copy == "cpu"
        launch_at, kernel_us = (t0 + 410.0, 300.0) if cpu else (t0 + 10.0, 600.0)
        if cpu:
            events.append(_event("cpu_op", "aten::uniform_", t0 + 5.0, 400.0))
        start = max(launch_at + 3.0, t0 + 203.0)
        events += [
            _event("cuda_runtime", "cudaLaunchKernel", launch_at, 5.0, correlation=corr + 2),
            _event("kernel", "sm80_xmma_gemm_bf16", start, kernel_us, gpu=True, correlation=corr + 2),
        ]
        if not cpu:
            events.append(
                _event("cuda_runtime", "cudaStreamSynchronize", t0 + 20.0, start + kernel_us - t0 - 19.0)
            )
    return _events_of(events)


def test_memcpy_bound_counts_copies_on_the_path_the_host_waits_on() -> None:
    waited = analyze_rank(_copy_then("sync"), SETTINGS, 0, 8)
    assert waited.breakdown_pct["memcpy"] == pytest.approx(20.0, abs=0.5)
    found = next(f for f in waited.findings if f.kind == "memcpy_bound")
    assert found.share_pct == pytest.approx(20.0, abs=0.5)
    # The same copies while the host works on the CPU: 20 % of the step, but a faster copy only idles longer.
    hidden = analyze_rank(_copy_then("cpu"), SETTINGS, 0, 8)
    assert hidden.breakdown_pct["memcpy"] == pytest.approx(20.0, abs=0.5)
    assert "memcpy_bound" not in {f.kind for f in hidden.findings}
