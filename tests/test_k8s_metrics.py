"""`jobfit ingest k8s-metrics`: kubelet /metrics/resource (real scrape) and cAdvisor forms, the container=""
/ POD double-count trap, counter resets, gaps, quarantine, and pod CPU/memory waste in gold."""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf import load_cluster
from jobs.context import Context
from jobs.stages.ingest.common import lines_frame, scan_inputs
from pipelines.silver.k8s_metrics import check_k8s_metric_lines, pod_samples, pod_usage, rejects_of
from pipelines.units import GIB

REAL = "kubelet_metrics_resource__kepler_kubelet_test.prom"
T0 = datetime(2026, 11, 3, 10, 0, 0)
T0_MS = int(T0.replace(tzinfo=UTC).timestamp() * 1000)


def ms(seconds: float) -> int:
    return T0_MS + int(seconds * 1000)


CPU, MEM = "container_cpu_usage_seconds_total", "container_memory_working_set_bytes"


def line(metric: str, labels: str, value: object, seconds: float) -> str:
    """One exposition line with a millisecond timestamp `seconds` after T0."""
    return f"{metric}{{{labels}}} {value} {ms(seconds)}"


# cAdvisor form (labels as the shared README describes them): pod ml/train-a has two named containers,
# the pod cgroup (container="", their sum plus the pause container) and the pause container (POD); a per-CPU
# series and a system cgroup without a pod label; pod ml/solo has only its pod cgroup.
POD_A = 'namespace="ml",pod="train-a"'
TRAINER = f'container="trainer",id="/kubepods/burstable/podA/c1",image="t:1",name="c1",{POD_A}'
SIDECAR = f'container="sidecar",id="/kubepods/burstable/podA/c2",image="s:1",name="c2",{POD_A}'
CGROUP = f'container="",id="/kubepods/burstable/podA",image="",name="",{POD_A}'
PAUSE = f'container="POD",id="/kubepods/burstable/podA/p",image="pause:3.9",name="p",{POD_A}'
SOLO = 'container="",id="/kubepods/besteffort/podS",image="",name="",namespace="ml",pod="solo"'
CADVISOR = "\n".join(
    [
        "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.",
        "# TYPE container_cpu_usage_seconds_total counter",
        line(CPU, f'cpu="total",{TRAINER}', 100, 0),
        line(CPU, f'cpu="total",{SIDECAR}', 10, 0),
        line(CPU, f'cpu="total",{CGROUP}', 110.5, 0),
        line(CPU, f'cpu="total",{PAUSE}', 0.5, 0),
        line(CPU, f'cpu="cpu00",{TRAINER}', 50, 0),
        line(CPU, 'container="",cpu="total",id="/system.slice/kubelet.service",image="",name=""', 9999, 0),
        line(CPU, f'cpu="total",{TRAINER}', 160, 60),
        line(CPU, f'cpu="total",{SIDECAR}', 12, 60),
        line(CPU, f'cpu="total",{CGROUP}', 172.6, 60),
        line(CPU, f'cpu="total",{PAUSE}', 0.6, 60),
        line(CPU, f'cpu="total",{SOLO}', 7.25, 0),
        "# HELP container_memory_working_set_bytes Current working set in bytes.",
        "# TYPE container_memory_working_set_bytes gauge",
        line(MEM, TRAINER, 1000, 0),
        line(MEM, SIDECAR, 300, 2),
        line(MEM, CGROUP, 1400, 0),
        line(MEM, PAUSE, 100, 0),
        line(MEM, TRAINER, 1500, 60),
        line(MEM, SIDECAR, 200, 62),
        line(MEM, SOLO, 4096, 0),
    ]
)

# kubelet form with a counter reset (a restarted container keeps its labels), a cAdvisor-form restart (a
# new cgroup id: a new series), a gap longer than the lookback, and a `promtool tsdb dump` line.
FLAKY = 'container="app",namespace="web",pod="flaky"'
OLD = 'container="app",id="/kubepods/podR/old",namespace="web",pod="restarted"'
NEW = 'container="app",id="/kubepods/podR/new",namespace="web",pod="restarted"'
RESETS = "\n".join(
    [
        *(line(CPU, FLAKY, v, t) for v, t in ((10, 0), (20, 60), (30, 120), (5, 180), (15, 240))),
        *(line(CPU, OLD, v, t) for v, t in ((10, 0), (40, 60))),
        *(line(CPU, NEW, v, t) for v, t in ((3, 120), (8, 180))),
        line(MEM, OLD, 900, 60),
        line(MEM, NEW, 500, 120),
        line(MEM, 'container="a",namespace="web",pod="gappy"', 100, 0),
        line(MEM, 'container="b",namespace="web",pod="gappy"', 50, 0),
        line(MEM, 'container="a",namespace="web",pod="gappy"', 400, 600),
        line(MEM, 'container="b",namespace="web",pod="gappy"', 60, 900),
        f'{{__name__="{MEM}",container="app",namespace="web",pod="dumped"}} 777 {ms(0)}',
    ]
)

BAD_POD = 'container="app",namespace="web",pod="bad"'
BAD = "\n".join(
    [
        line(MEM, BAD_POD, "NaN", 0),
        line(MEM, BAD_POD, "+Inf", 60),
        line(CPU, BAD_POD, -3, 0),
        line(CPU, BAD_POD, "lots", 60),
        line(CPU, 'container="app",pod="no-namespace"', 4, 0),
        f"{CPU}{{{BAD_POD} 4 {ms(0)}",
        "this is not a metric line",
        line(CPU, BAD_POD, 2, 120),
    ]
)


@pytest.fixture(scope="module")
def parsed(spark: SparkSession, real_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("k8s_metrics")
    shutil.copy(real_data / "k8s_metrics" / REAL, d / REAL)
    (d / "cadvisor.prom").write_text(CADVISOR)
    (d / "resets.prom").write_text(RESETS)
    (d / "bad.prom").write_text(BAD)
    ctx = Context(environ={}, quiet=True)
    ctx.use_spark(spark)
    refs = scan_inputs([str(d)])
    checked = check_k8s_metric_lines(lines_frame(ctx, refs, "t"), {}, []).cache()
    samples = pod_samples(checked).drop("raw", "superseded_lines").cache()
    usage = {r["job_id"]: r.asDict() for r in pod_usage(samples).collect()}
    tally: dict[str, int] = {}
    for r in checked.filter("outcome = 'not kept'").groupBy("tally").count().collect():
        tally[r["tally"]] = r["count"]
    return {
        "usage": usage,
        "samples": samples.collect(),
        "rejects": sorted(
            (Path(r["source_file"]).name, r["line_no"], r["reason"]) for r in rejects_of(checked).collect()
        ),
        "tally": tally,
    }


def test_real_kubelet_resource_scrape(parsed: dict) -> None:
    usage = parsed["usage"]
    kepler, busybox = usage["kepler/kepler-exporter-rksvt"], usage["default/busybox"]
    assert kepler["cpu_used_s"] == pytest.approx(22.985283)
    assert kepler["mem_peak_bytes"] == 109776896
    assert kepler["first_ts"] == datetime(2022, 12, 2, 3, 7, 11, 811000)
    assert (kepler["form"], kepler["level"], kepler["containers"]) == ("resource", "containers", 1)
    assert busybox["cpu_used_s"] == pytest.approx(0.035062)
    assert busybox["mem_peak_bytes"] == 246897321
    # The node's own series are counted, not kept.
    assert parsed["tally"]["node_cpu_usage_seconds_total"] == 1
    assert parsed["tally"]["node_memory_working_set_bytes"] == 1


def test_cadvisor_pod_cgroup_and_pause_are_not_counted_twice(parsed: dict) -> None:
    pod = parsed["usage"]["ml/train-a"]
    # Named containers only: trainer 160 + sidecar 12, not + the pod cgroup (172.6) or the pause container.
    assert pod["cpu_used_s"] == pytest.approx(172.0)
    # At 0 s trainer 1000 + sidecar 300 (sampled 2 s later); at 60 s 1500 + 300 (the sidecar's sample of
    # 2 s still stands; its next one is at 62 s); at 62 s 1500 + 200.
    assert pod["mem_peak_bytes"] == 1800
    assert (pod["form"], pod["level"], pod["containers"]) == ("cadvisor", "containers", 2)
    # A pod with only its cgroup series is read from it.
    solo = parsed["usage"]["ml/solo"]
    assert (solo["cpu_used_s"], solo["mem_peak_bytes"], solo["level"]) == (7.25, 4096, "pod")
    assert parsed["tally"]["container_cpu_usage_seconds_total (per-CPU series)"] == 1
    assert parsed["tally"]["container_cpu_usage_seconds_total (no pod label)"] == 1
    # Every series is kept in silver.pod_samples (the choice is made when usage is computed).
    containers = {r["container"] for r in parsed["samples"] if r["job_id"] == "ml/train-a"}
    assert containers == {"trainer", "sidecar", "", "POD"}


def test_counter_resets_and_restarts(parsed: dict) -> None:
    flaky = parsed["usage"]["web/flaky"]
    # 10 → 20 → 30, reset, 5 → 15: 30 before the restart and 15 after.
    assert (flaky["cpu_used_s"], flaky["cpu_resets"]) == (45.0, 1)
    restarted = parsed["usage"]["web/restarted"]
    # cAdvisor gives the restarted container a new cgroup id: two series, 40 + 8, no reset.
    assert (restarted["cpu_used_s"], restarted["cpu_resets"], restarted["containers"]) == (48.0, 0, 2)
    # The old container's memory does not linger after its last sample: the peak is 900, not 1400.
    assert restarted["mem_peak_bytes"] == 900


def test_gaps_and_dump_lines(parsed: dict) -> None:
    gappy = parsed["usage"]["web/gappy"]
    # At 600 s, b's latest sample (0 s) is older than the 5-minute lookback: a's 400 alone, not 450.
    assert gappy["mem_peak_bytes"] == 400
    assert gappy["max_gap_s"] == 900.0
    assert gappy["cpu_used_s"] is None
    assert parsed["usage"]["web/dumped"]["mem_peak_bytes"] == 777


def test_bad_records_go_to_quarantine_with_reasons(parsed: dict) -> None:
    assert parsed["rejects"] == [
        ("bad.prom", 1, "value NaN is not a finite number"),
        ("bad.prom", 2, "value +Inf is not a finite number"),
        ("bad.prom", 3, "value -3 is negative"),
        ("bad.prom", 4, "value lots is not a number"),
        ("bad.prom", 5, "pod label without a namespace label"),
        ("bad.prom", 6, "not a Prometheus sample line"),
        ("bad.prom", 7, "not a Prometheus sample line"),
    ]
    # The good line of the same pod lands.
    assert parsed["usage"]["web/bad"]["cpu_used_s"] == 2.0


def _pod(name: str, cpu: str, mem: str, start: str, end: str) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"user": "ann"}},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
        },
        "status": {
            "phase": "Succeeded",
            "startTime": start,
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": end}},
                }
            ],
        },
    }


@pytest.mark.slow
def test_cli_ingest_build_and_waste(jobfit, tmp_path: Path) -> None:
    pods = [
        _pod("measured", "2", "4Gi", "2026-11-03T10:00:00Z", "2026-11-03T11:00:00Z"),
        _pod("unmeasured", "1", "2Gi", "2026-11-03T10:00:00Z", "2026-11-03T12:00:00Z"),
    ]
    (tmp_path / "pods.jsonl").write_text("\n".join(json.dumps(p) for p in pods) + "\n")
    assert jobfit("ingest", "k8s", str(tmp_path / "pods.jsonl"), "--cluster", "demo").code == 0
    scrape = tmp_path / "scrapes"
    scrape.mkdir()
    lines = []
    measured = 'container="main",namespace="ml",pod="measured"'
    for i, (cpu, mem) in enumerate([(0.0, 0.25), (600.0, 0.75), (1200.0, 1.0), (1800.0, 0.5)]):
        lines += [line(CPU, measured, cpu, i * 1200), line(MEM, measured, int(mem * GIB), i * 1200)]
    lines.append(line(MEM, measured, "NaN", 5))
    (scrape / "node-1.prom.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    # The same samples again, UTF-16 with a byte-order mark (as a Windows export writes): nothing new.
    (scrape / "copy.prom").write_bytes(("\n".join(lines[:4]) + "\n").encode("utf-16"))

    first = jobfit("ingest", "k8s-metrics", str(scrape), "--cluster", "demo", "--json")
    assert first.code == 0, first.err
    report = json.loads(first.out)
    assert (report["source"], report["files"], report["read"], report["quarantined"]) == (
        "k8s-metrics",
        2,
        13,
        1,
    )
    assert report["inserted"] == 4 and report["superseded"] == 4  # copy.prom repeats 2 samples (4 lines)
    assert report["tables"]["silver.pod_usage"]["inserted"] == 1
    assert report["tables"]["pods"] == {"in silver.jobs": 1, "not in silver.jobs yet": 0}
    again = json.loads(jobfit("ingest", "k8s-metrics", str(scrape), "--cluster", "demo", "--json").out)
    assert (again["read"], again["inserted"], again["tables"]["files already ingested"]) == (
        0,
        0,
        {"files": 2},
    )

    q = json.loads(jobfit("sql", "SELECT source, reason FROM quarantine", "--json").out)["rows"]
    assert q == [{"source": "k8s-metrics", "reason": "value NaN is not a finite number"}]

    assert jobfit("build", "--cluster", "demo", "--month", "2026-11").code == 0
    rows = json.loads(
        jobfit(
            "sql",
            "SELECT job_id, total_cpu_s, max_rss_bytes, cpu_wasted_core_h, mem_wasted_gib_h, cpu_wasted_usd, "
            "mem_wasted_usd FROM gold.job_usage ORDER BY job_id",
            "--json",
        ).out
    )["rows"]
    prices = load_cluster("demo").prices
    measured, unmeasured = rows
    # 2 cores x 1 h allocated, 1800 core-s used; 4 GiB requested, peak 1 GiB, for 1 h.
    assert measured["total_cpu_s"] == 1800.0 and measured["max_rss_bytes"] == GIB
    assert measured["cpu_wasted_core_h"] == pytest.approx(1.5)
    assert measured["mem_wasted_gib_h"] == pytest.approx(3.0)
    assert measured["cpu_wasted_usd"] == pytest.approx(1.5 * prices.core_hour_usd, abs=1e-6)
    assert measured["mem_wasted_usd"] == pytest.approx(3.0 * prices.gib_hour_usd, abs=1e-6)
    assert unmeasured["cpu_wasted_core_h"] is None and unmeasured["mem_wasted_gib_h"] is None

    waste = jobfit("waste", "--cluster", "demo", "--month", "2026-11", "--json")
    k8s = json.loads(waste.out)["kubernetes"]
    assert (k8s["pods"], k8s["pods_with_usage"], k8s["coverage_pct"]) == (2, 1, 50.0)
    assert k8s["cpu"]["allocated"] == pytest.approx(2.0) and k8s["cpu"]["wasted"] == pytest.approx(1.5)
    assert k8s["memory"]["used"] == pytest.approx(1.0) and k8s["memory"]["wasted"] == pytest.approx(3.0)
    text = jobfit("waste", "--cluster", "demo", "--month", "2026-11").out
    assert "Kubernetes: 1 of 2 pod(s) with usage data (coverage 50.0 %" in text


def test_cli_bad_inputs_exit_2(jobfit, tmp_path: Path) -> None:
    missing = jobfit("ingest", "k8s-metrics", str(tmp_path / "nope.prom"), "--cluster", "demo")
    assert missing.code == 2 and missing.err.strip().count("\n") == 0 and "no such file" in missing.err
    broken = tmp_path / "broken.prom.gz"
    broken.write_bytes(gzip.compress(b"container_cpu_usage_seconds_total 1\n" * 50)[:-12])
    damaged = jobfit("ingest", "k8s-metrics", str(broken), "--cluster", "demo")
    assert damaged.code == 2 and "not a readable gzip file" in damaged.err
    assert "Traceback" not in damaged.err


@pytest.mark.slow
def test_simulated_month_pod_waste_equals_truth(jobfit, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "sim"
    sim = jobfit(
        "simulate", "--cluster", "demo", "--month", "2026-03", "--out", str(out), "--jobs", "200", "--json"
    )
    assert sim.code == 0, sim.err
    files = json.loads(sim.out)["files"]
    assert files["k8s_metrics"] >= 2
    text = "\n".join(p.read_text() for p in (out / "k8s_metrics").iterdir())
    assert 'container="POD"' in text and 'container=""' in text  # the cAdvisor nodes' double-count trap
    assert jobfit("ingest", "k8s", str(out / "k8s"), "--cluster", "demo").code == 0
    ingest = jobfit("ingest", "k8s-metrics", str(out / "k8s_metrics"), "--cluster", "demo", "--json")
    assert ingest.code == 0, ingest.err
    assert json.loads(ingest.out)["quarantined"] == 0
    assert jobfit("build", "--cluster", "demo", "--month", "2026-03").code == 0

    truth = pd.read_parquet(out / "truth.parquet")
    truth = truth[(truth.source == "k8s") & (truth.runtime_s > 0)].set_index("job_id")
    gold = pd.DataFrame(
        json.loads(
            jobfit(
                "sql",
                "SELECT job_id, elapsed_s, alloc_cpus, req_mem_bytes, total_cpu_s, max_rss_bytes, "
                "cpu_wasted_core_h, mem_wasted_gib_h FROM gold.job_usage WHERE source = 'k8s'",
                "--json",
                "--limit",
                "1000",
            ).out
        )["rows"]
    ).set_index("job_id")
    assert len(gold) == len(truth) > 5
    joined = gold.join(truth[["total_cpu_s", "peak_mem_bytes"]], rsuffix="_truth")
    # What the pods used, read back from the scrapes, is the truth's.
    assert (joined.total_cpu_s - joined.total_cpu_s_truth).abs().max() < 1e-3
    assert (joined.max_rss_bytes == joined.peak_mem_bytes).all()
    # Waste is DESIGN.md's formula over silver.jobs' allocation (from the pod's startTime) and that use.
    cpu = (joined.alloc_cpus * joined.elapsed_s - joined.total_cpu_s_truth).clip(lower=0) / 3600
    mem = (joined.req_mem_bytes - joined.peak_mem_bytes).clip(lower=0) / GIB * joined.elapsed_s / 3600
    assert (joined.cpu_wasted_core_h - cpu).abs().max() < 1e-5
    assert (joined.mem_wasted_gib_h - mem).abs().max() < 1e-5
    k8s = json.loads(jobfit("waste", "--cluster", "demo", "--month", "2026-03", "--json").out)["kubernetes"]
    assert (k8s["pods"], k8s["pods_with_usage"], k8s["coverage_pct"]) == (len(gold), len(gold), 100.0)
    assert k8s["cpu"]["wasted"] == pytest.approx(cpu.sum(), abs=1e-4)
    assert k8s["memory"]["wasted"] == pytest.approx(mem.sum(), abs=1e-4)
