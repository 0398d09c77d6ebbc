"""The simulator's Kineto traces scored against their truth, without Spark (tests/test_profiler_sim.py and
bench/profiler_sim.py): each rank's trace goes through the real reader (`read_trace_meta`,
`read_trace_events`) and `analyze_rank`, the job's findings through `job_findings`."""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass, field

import pandas as pd

from conf import BottleneckSettings
from jobs.simulator.kineto import CAUSES, TraceModel, draw_facts, draw_model, play, trace_of, truth_rows
from pipelines.gold.bottlenecks.analyze import Finding, RankAnalysis, analyze_rank, job_findings
from pipelines.silver.profiler import EVENT_COLUMNS, EventTally, Reject, read_trace_events, read_trace_meta

# Kinds the detector may report that the simulation never injects: any of them is a false finding.
EXTRA_KINDS = ("low_occupancy", "idle_gpu")


@dataclass
class JobResult:
    """One simulated job: its truth rows, what the detector found, and the trace sizes."""

    model: TraceModel
    truth: list[dict]
    findings: list[Finding]
    events: int

    @property
    def true_kinds(self) -> set[str]:
        return {r["kind"] for r in self.truth if r["label"] != "healthy"}

    @property
    def found_kinds(self) -> set[str]:
        return {f.kind for f in self.findings}


@dataclass
class Score:
    """Per-kind counts and the figures the issue asks for."""

    tp: dict[str, int] = field(default_factory=dict)
    fp: dict[str, int] = field(default_factory=dict)
    fn: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    healthy_jobs: int = 0
    healthy_with_finding: int = 0
    lines_right: int = 0
    lines_checked: int = 0

    def precision(self, kind: str) -> float | None:
        n = self.tp.get(kind, 0) + self.fp.get(kind, 0)
        return self.tp.get(kind, 0) / n if n else None

    def recall(self, kind: str) -> float | None:
        n = self.tp.get(kind, 0) + self.fn.get(kind, 0)
        return self.tp.get(kind, 0) / n if n else None

    def table(self) -> str:
        rows = [f"{'kind':<20} {'truth':>6} {'found':>6} {'TP':>5} {'precision':>9} {'recall':>7}"]
        for kind in (*CAUSES, *EXTRA_KINDS):
            tp, fp, fn = self.tp.get(kind, 0), self.fp.get(kind, 0), self.fn.get(kind, 0)
            p, r = self.precision(kind), self.recall(kind)
            rows.append(
                f"{kind:<20} {tp + fn:>6} {tp + fp:>6} {tp:>5} "
                f"{'-' if p is None else f'{p:.3f}':>9} {'-' if r is None else f'{r:.3f}':>7}"
            )
        rows.append(
            f"jobs {self.jobs}; healthy (no cause saves >= 10 %) {self.healthy_jobs}, of them with a finding "
            f"{self.healthy_with_finding}; the user's line right on {self.lines_right}/{self.lines_checked} "
            "true findings"
        )
        return "\n".join(rows)


def analyse_ranks(model: TraceModel, settings: BottleneckSettings) -> tuple[list[RankAnalysis], int]:
    """Play a model, read each rank's trace back as Kineto JSON and analyse it: the ranks' analyses and
    the events read."""
    player = play(model)
    ranks, n_events = [], 0
    for r in player.ranks:
        data = json.dumps(trace_of(player, r.rank)).encode()
        if r.rank == 0:  # the top level as the ingest reads it (the other ranks' is the same but the rank)
            meta = read_trace_meta(io.BytesIO(data))
        rows = [x for x in read_trace_events(io.BytesIO(data), EventTally()) if not isinstance(x, Reject)]
        n_events += len(rows)
        events = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
        ranks.append(analyze_rank(events, settings, r.rank, meta.compute_major, meta.device_name))
    return ranks, n_events


def analyse_model(model: TraceModel, settings: BottleneckSettings) -> JobResult:
    """`analyse_ranks`, then the job's findings beside the model's truth."""
    ranks, n_events = analyse_ranks(model, settings)
    hosts = {a.rank: None for a in ranks}
    return JobResult(model, truth_rows(model, "sim"), job_findings(ranks, hosts, settings), n_events)


def simulate_and_score(n_jobs: int, seed: int, settings: BottleneckSettings) -> tuple[Score, list[JobResult]]:
    """`n_jobs` drawn training jobs, analysed and scored per finding kind."""
    rng = random.Random(seed)
    results = [
        analyse_model(draw_model(draw_facts(rng, i), seed * 100_003 + i), settings) for i in range(n_jobs)
    ]
    return score(results), results


def score(results: list[JobResult]) -> Score:
    s = Score()
    for res in results:
        s.jobs += 1
        truth, found = res.true_kinds, res.found_kinds
        if not truth:
            s.healthy_jobs += 1
            s.healthy_with_finding += bool(found)
        for kind in (*CAUSES, *EXTRA_KINDS):
            if kind in truth and kind in found:
                s.tp[kind] = s.tp.get(kind, 0) + 1
            elif kind in found:
                s.fp[kind] = s.fp.get(kind, 0) + 1
            elif kind in truth:
                s.fn[kind] = s.fn.get(kind, 0) + 1
        lines = {r["kind"]: r["line"] for r in res.truth if r["line"] is not None}
        for f in res.findings:
            if f.kind in truth and f.kind in lines:
                s.lines_checked += 1
                s.lines_right += bool(f.frame and f.frame.line == lines[f.kind])
    return s
