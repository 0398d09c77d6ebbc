"""The simulator's Kineto traces (jobs/simulator/kineto.py) without Spark: they read with the ingest's reader,
carry the job id in their path, repeat byte for byte, and `jobfit bottlenecks`' rules find the causes the
workload model injected (precision and recall per finding against the truth, none on healthy jobs)."""

from __future__ import annotations

import ast
import csv
import gzip
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conf import load_settings
from jobs.simulator import kineto, simulate
from pipelines.gold.bottlenecks.analyze import (
    RankAnalysis,
    _transfer_pct,
    collective_waits,
    job_findings,
)
from pipelines.silver.profiler import (
    EventTally,
    Reject,
    job_id_in_path,
    read_trace_events,
    read_trace_meta,
)
from tests.profiler_sim import analyse_ranks, simulate_and_score

SETTINGS = load_settings({}).bottlenecks
N_JOBS, SEED = 60, 3


@pytest.fixture(scope="module")
def scored():
    return simulate_and_score(N_JOBS, SEED, SETTINGS)


def test_the_simulator_never_reads_the_detector() -> None:
    tree = ast.parse(Path(kineto.__file__).read_text(encoding="utf-8"))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in (n.names if isinstance(n, ast.Import) else [n])
    }
    assert not any(m and (m.startswith("pipelines") or m.startswith("conf")) for m in imported), imported


def test_same_model_same_bytes_and_the_reader_takes_every_event(tmp_path: Path) -> None:
    facts = kineto.draw_facts(random.Random(5), 0)
    facts = kineto.JobFacts(**{**facts.__dict__, "ranks": 2, "nodes": 1})
    model = kineto.draw_model(facts, 11)
    a, _ = kineto.write_job(tmp_path / "a", model, "demo")
    b, rows = kineto.write_job(tmp_path / "b", model, "demo")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert {r["kind"] for r in rows} == set(kineto.CAUSES)
    for rank, path in enumerate(a):
        assert job_id_in_path(str(path)) == facts.job_id
        with gzip.open(path) as f:
            meta = read_trace_meta(f)
        assert (meta.rank, meta.world_size, meta.compute_major) == (rank, 2, model.compute_major)
        tally = EventTally()
        with gzip.open(path) as f:
            got = list(read_trace_events(f, tally))
        assert not [r for r in got if isinstance(r, Reject)]
        assert 200 <= tally.kept <= 5000 and tally.has_stacks
        cats = {r[2] for r in got}
        assert {"cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy"} <= cats


@pytest.mark.parametrize(("layers", "buckets"), [(7, 3), (3, 4), (5, 2), (6, 3)])
def test_ddp_reduces_every_gradient_before_the_optimizer(layers: int, buckets: int) -> None:
    # Whatever the layers and buckets, each rank's last backward kernel of a step ends before that step's
    # last all-reduce does (a layer left out of every bucket let a slow rank's tail run past the collective),
    # and the optimizer's kernels start after it.
    facts = kineto.JobFacts(**{**kineto.draw_facts(random.Random(5), 0).__dict__, "ranks": 2, "nodes": 1})
    model = kineto.replace(
        kineto.draw_model(facts, 11),
        layers=layers,
        buckets=buckets,
        overlapped=True,
        slow_rank=1,
        slow_factor=1.5,
    )
    player = kineto.play(model)
    for r in player.ranks:
        gpu = sorted((e for e in r.events if e["cat"] == "kernel"), key=lambda e: e["ts"])
        nccl = [e for e in gpu if e["name"].startswith("ncclDevKernel")]
        optimizer = [e for e in gpu if "multi_tensor_apply" in e["name"]]
        assert len(nccl) == buckets * (kineto.STEPS + 1) and len(optimizer) == 2 * (kineto.STEPS + 1)
        previous = -1.0
        for k in range(kineto.STEPS + 1):
            reduced = max(e["ts"] + e["dur"] for e in nccl[k * buckets : (k + 1) * buckets])
            first, second = optimizer[2 * k : 2 * k + 2]
            model_ops = [e for e in gpu if previous < e["ts"] < first["ts"] and e not in nccl]
            assert max(e["ts"] + e["dur"] for e in model_ops) <= reduced + 0.01  # ts written to 1 ns
            assert first["ts"] >= reduced - 0.01
            previous = second["ts"]


def test_simulate_writes_traces_for_its_training_jobs(tmp_path: Path) -> None:
    from conf import load_cluster

    out = tmp_path / "sim"
    result = simulate(load_cluster("demo"), "2026-03", 150, 4, out, profiled_share=1.0)
    truth = pd.read_parquet(out / "truth.parquet", columns=["job_id", "workload"])
    with (out / kineto.TRUTH_FILE).open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    traced = {p.parent.name for p in (out / "profiler").rglob("*.pt.trace.json.gz")}
    assert rows and result.files["profiler"] == sum(1 for _ in (out / "profiler").rglob("*.gz"))
    jobs = {r["job_id"] for r in rows}
    assert traced == {f"job_{j}" for j in jobs}
    assert jobs <= set(truth.loc[truth["workload"] == "dl_train", "job_id"])
    for path in (out / "profiler").rglob("*.gz"):
        assert job_id_in_path(str(path.relative_to(out))) in jobs
    assert {r["label"] for r in rows} <= {*kineto.CAUSES, "healthy"}
    again = tmp_path / "again"
    simulate(load_cluster("demo"), "2026-03", 150, 4, again, profiled_share=1.0)
    assert (again / kineto.TRUTH_FILE).read_bytes() == (out / kineto.TRUTH_FILE).read_bytes()


def test_truth_has_mild_causes_and_healthy_jobs(scored) -> None:
    _, results = scored
    injected_mild = [r for res in results for r in res.truth if r["injected"] and r["label"] == "healthy"]
    assert injected_mild, "some injected causes must be too mild to be a bottleneck"
    assert sum(1 for res in results if not res.true_kinds) >= N_JOBS // 5


# Measured on this sample (N_JOBS, SEED: see the table this test prints; docs/bottlenecks.md gives the 500-job
# figures), minus a margin. The goal (>= 0.90 everywhere, nothing on healthy jobs) is not reached for
# low_tensor_core here (one FP32 GEMM finding whose speed-up saves 5.7 %); at 500 jobs communication_bound's
# precision and memcpy_bound's recall also miss it. The sample has no straggler worth 10 % (the 500-job bench
# has 15; tests/test_profiler.py checks the rule on matched ranks).
FLOORS = {
    "input_bound": (0.90, 0.90),
    "memcpy_bound": (0.70, 0.90),  # measured 4 of 4, none false
    "sync_bound": (0.90, 0.85),  # measured 13 of 14, none false
    "launch_bound": (0.90, 0.90),  # measured 14 of 14, none false
    "low_tensor_core": (0.75, 0.90),  # measured 4 of 5, all found
    "communication_bound": (0.60, 0.90),  # measured 2 of 2, none false
}


def test_findings_against_the_truth(scored) -> None:
    score, _ = scored
    print("\n" + score.table())
    for kind, (p_min, r_min) in FLOORS.items():
        p, r = score.precision(kind), score.recall(kind)
        assert p is None or p >= p_min, (kind, p)
        assert r is None or r >= r_min, (kind, r)
    assert score.fp.get("low_occupancy", 0) == 0 and score.fp.get("idle_gpu", 0) <= 1
    assert score.fp.get("straggler", 0) == 0
    assert score.healthy_with_finding <= 1  # measured 0 of 26
    assert score.lines_right >= 0.95 * score.lines_checked  # measured 42 of 44


def test_single_rank_healthy_jobs_get_no_finding(scored) -> None:
    _, results = scored
    healthy = [res for res in results if not res.true_kinds and res.model.facts.ranks == 1]
    assert healthy
    # FP32 GEMMs on a Tensor-Core GPU used to be flagged by torch-tb-profiler's rule even when AMP would not
    # shorten the step (a host-bound loop): low_tensor_core now counts only GEMMs the host waited for.
    assert {k for res in healthy for k in res.found_kinds} == set()


def _bench_job(seed: int, job: int) -> tuple[kineto.TraceModel, list[RankAnalysis]]:
    """Job `job` of bench/profiler_sim.py's draw for `seed`, played, read back and analysed per rank."""
    rng = random.Random(seed)
    facts = [kineto.draw_facts(rng, i) for i in range(job + 1)][job]
    model = kineto.draw_model(facts, seed * 100_003 + job)
    return model, analyse_ranks(model, SETTINGS)[0]


def test_the_warm_up_steps_collectives_are_no_recorded_steps() -> None:
    """A GPU that lags its host still runs the profiler's warm-up step's all-reduce when the first recorded
    step starts (its launch is not in the trace). It belongs to no step, the first step's share of it is
    taken off the steps' time, and the transfer then reads what removing it saves (seed 13, job 19 of
    the bench's draw: 8 ranks, DDP buckets after the backward, 15 % of the step not overlapped)."""
    model, ranks = _bench_job(13, 19)
    assert "communication_bound" in model.injected and model.facts.ranks > 1
    waits = collective_waits(ranks)
    assert waits is not None
    truth = {t["kind"]: t for t in kineto.truth_rows(model, "sim")}
    saving = truth["communication_bound"]["saving_pct"]
    for a in ranks:
        per_step = np.bincount([c.step for c in a.collectives if c.step >= 0], minlength=a.steps)
        assert per_step.tolist() == [model.buckets] * a.steps  # the warm-up's buckets in none
        assert sum(c.step < 0 for c in a.collectives) >= model.buckets and a.carried_us > 0
        assert _transfer_pct(a, waits[a.rank])[0] == pytest.approx(saving, abs=0.5)


def test_a_copy_from_pageable_memory_costs_the_lead_it_drains() -> None:
    """A copy from pageable memory returns only when done, after the GPU has worked off everything queued
    before it: the host loses its lead as in a sync, and the GPU then idles while it launches the next ops.
    Seed 13, job 85 of the bench's draw: 4 ranks, a 14 µs pageable copy a step whose own time is 1 % of the
    step, where pinning it saves 12.6 %."""
    model, ranks = _bench_job(13, 85)
    assert not model.pinned and model.h2d_us < 20
    saving = {t["kind"]: t for t in kineto.truth_rows(model, "sim")}["memcpy_bound"]["saving_pct"]
    for a in ranks:
        assert a.shares["memcpy_bound"] == pytest.approx(saving, abs=1.5)
    found = job_findings(ranks, {a.rank: None for a in ranks}, SETTINGS)
    copy = next(f for f in found if f.kind == "memcpy_bound")
    assert copy.figures["critical_pct"] < 2 < 10 < copy.figures["pageable_idle_pct"]
