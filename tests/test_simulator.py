"""The simulator: deterministic per seed, the workload it promises, and files in the real formats (checked by
parsing the simulator's output and the real samples in tests/data/real with the same code)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from conf import load_cluster
from jobs.simulator import simulate
from jobs.simulator.catalog import FAILURE_CAUSES
from jobs.simulator.sacct import FIELDS
from pipelines.silver.sacct import detect_layout, is_header
from pipelines.units import (
    expand_hostlist,
    parse_duration_s,
    parse_exit_code,
    parse_mem_bytes,
    parse_req_mem,
    parse_tres,
)

MONTH = "2026-03"
N_JOBS = 1200
BAD = 9


def _tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate(load_cluster("demo"), MONTH, N_JOBS, seed=7, out=out, inject_bad=BAD)
    return out


@pytest.fixture(scope="module")
def truth(sim: Path) -> pd.DataFrame:
    return pd.read_parquet(sim / "truth.parquet")


def _sacct_rows(sim: Path, skip_bad: set[tuple[str, int]]) -> list[tuple[str, int, dict[str, str]]]:
    """Every data row of every dump as (file, line number, field dict); a JobName holding `|` is rejoined."""
    rows = []
    n = len(FIELDS)
    for path in sorted((sim / "sacct").glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0] == "|".join(FIELDS)
        for i, line in enumerate(lines[1:], start=2):
            if (f"sacct/{path.name}", i) in skip_bad:
                continue
            parts = line.split("|")
            if len(parts) > n:  # only JobName may hold the delimiter
                extra = len(parts) - n
                parts = [*parts[:2], "|".join(parts[2 : 3 + extra]), *parts[3 + extra :]]
            assert len(parts) == n, (path.name, i, line)
            rows.append((path.name, i, dict(zip(FIELDS, parts, strict=True))))
    return rows


def _manifest(sim: Path) -> list[dict]:
    return [json.loads(line) for line in (sim / "bad_records.jsonl").read_text().splitlines()]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    cluster = load_cluster("demo")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    simulate(cluster, MONTH, 150, seed=5, out=a, inject_bad=4)
    simulate(cluster, MONTH, 150, seed=5, out=b, inject_bad=4)
    simulate(cluster, MONTH, 150, seed=6, out=c, inject_bad=4)
    ha, hb, hc = _tree_hashes(a), _tree_hashes(b), _tree_hashes(c)
    assert ha == hb
    assert len(ha) > 150  # scripts, dumps, scrapes, pods, logs, truth, manifest
    assert ha != hc
    assert ha["truth.parquet"] != hc["truth.parquet"]
    # a second run into the same folder replaces its outputs instead of adding to them
    simulate(cluster, MONTH, 150, seed=5, out=c, inject_bad=4)
    assert _tree_hashes(c) == ha


def test_workload_properties(truth: pd.DataFrame) -> None:
    assert len(truth) == N_JOBS
    assert truth.job_id.is_unique
    slurm = truth[truth.source == "slurm"]
    assert set(truth.failure_cause) <= set(FAILURE_CAUSES)
    failed_share = truth.is_failed.mean()
    assert 0.07 <= failed_share <= 0.10, failed_share
    # every Slurm cause of issue 5's taxonomy shows up in a month of this size
    for cause in ("time_limit", "host_oom", "gpu_oom", "software_error", "nccl_timeout", "cancelled"):
        assert (slurm.failure_cause == cause).sum() >= 1, cause
    # memory is requested at 2-10x what jobs use (median over completed jobs), and hardly ever below it
    done = slurm[slurm.failure_cause == "none"]
    ratio = done.req_mem_bytes / done.peak_mem_bytes
    assert 2.0 <= ratio.median() <= 10.0
    assert (ratio >= 1.0).all()
    # out-of-memory jobs reached their limit; timeouts ran past theirs
    oom = slurm[slurm.failure_cause == "host_oom"]
    assert (oom.needed_mem_bytes > oom.limit_mem_bytes).all()
    assert (oom.peak_mem_bytes >= 0.98 * oom.limit_mem_bytes).all()
    to = slurm[slurm.failure_cause == "time_limit"]
    assert (to.runtime_s >= to.timelimit_s).all() and (to.runtime_need_s > to.timelimit_s).all()
    # heavy-tailed runtimes: the longest 10 % of jobs hold most of the core-hours
    core_h = slurm.alloc_cpus * slurm.runtime_s
    top = core_h[slurm.runtime_s >= slurm.runtime_s.quantile(0.9)].sum() / core_h.sum()
    assert top > 0.5
    assert slurm.runtime_s.quantile(0.99) > 20 * slurm.runtime_s.median()
    # generous limits: the median job asks for several times the time it uses
    assert (done.timelimit_s / done.runtime_s).median() > 2
    gpu = slurm[slurm.alloc_gpus > 0]
    assert (gpu.idle_gpus > 0).sum() >= 5 and gpu.exclusive.sum() >= 1
    assert gpu.mig_profile.notna().sum() >= 1
    # GPU waste follows DESIGN.md from the per-GPU utilisation the scrapes show
    row = gpu.iloc[0]
    hours = row.runtime_s / 3600
    assert row.wasted_gpu_underuse_h == pytest.approx(
        sum(hours * (1 - u / 100) for u in row.gpu_util_per_gpu_pct)
    )
    # fixable failures carry their whole allocation as failed-run waste; the others none
    blame = truth.is_failed & truth.user_fixable
    assert (truth.loc[blame, "failed_core_h"] > 0).all() or (truth.loc[blame, "runtime_s"] == 0).any()
    assert (truth.loc[~blame, "failed_core_h"] == 0).all()
    # users change habits: some jobs run after their user's drift point
    assert 0 < slurm.drifted.mean() < 1


def test_sacct_dumps_agree_with_truth_and_parse_like_real_sacct(
    sim: Path, truth: pd.DataFrame, real_data: Path
) -> None:
    bad = {(m["file"], m["line_no"]) for m in _manifest(sim) if m["source"] == "sacct"}
    rows = _sacct_rows(sim, bad)
    finals: dict[str, dict[str, str]] = {}
    running_seen: dict[str, int] = {}
    dumps_per_job: dict[str, set[str]] = defaultdict(set)
    steps: dict[str, list[dict[str, str]]] = defaultdict(list)
    for fname, _, r in rows:
        jid = r["JobID"]
        base = jid.split(".")[0]
        # every field parses with the foundation's sacct unit parsers (the code that reads real sacct lines)
        parse_duration_s(r["Elapsed"])
        parse_exit_code(r["ExitCode"])
        parse_tres(r["AllocTRES"])
        parse_tres(r["TRESUsageInMax"])
        parse_mem_bytes(r["MaxRSS"])
        expand_hostlist(r["NodeList"])
        if "." in jid:
            if r["State"] != "RUNNING":
                steps[base].append(r)
            continue
        assert parse_req_mem(r["ReqMem"])[1] == "job"
        dumps_per_job[jid].add(fname)
        if r["State"] == "RUNNING":
            assert r["End"] == "Unknown"
            running_seen[jid] = running_seen.get(jid, 0) + 1
        else:
            finals[jid] = r
    slurm = truth[truth.source == "slurm"].set_index("job_id")
    assert set(finals) == set(slurm.index)  # every job ends final in some dump
    assert running_seen and set(running_seen) <= set(finals)  # RUNNING in one dump, final in a later one
    assert sum(len(v) > 1 for v in dumps_per_job.values()) > len(finals) / 4  # windows overlap
    for jid, r in finals.items():
        t = slurm.loc[jid]
        assert r["State"].split(" ")[0] == t.state, jid
        assert parse_duration_s(r["Elapsed"]) == t.runtime_s
        assert parse_req_mem(r["ReqMem"])[0] == t.req_mem_bytes
        # the peak memory reportseff computes (max over steps of MaxRSS x NTasks) is the truth's peak
        seen = {s["JobID"]: s for s in steps[jid]}
        peak = max((parse_mem_bytes(s["MaxRSS"]) or 0) * int(s["NTasks"]) for s in seen.values())
        assert peak == t.peak_mem_bytes, jid
        assert abs(parse_duration_s(r["TotalCPU"]) - t.total_cpu_s) < 1.0
    assert any("|" in r["JobName"] for r in finals.values()) or N_JOBS < 1000
    # the real dump's header form is detected the same way as ours
    assert detect_layout(["|".join(FIELDS)], None).fields == tuple(FIELDS)
    real = (real_data / "sacct" / "reportseff_tests_sacct_lines.txt").read_text().splitlines()
    real_rows = [line.split("\t", 1)[1].split("|") for line in real if "\t" in line]
    ours_forms = {_form(r["Elapsed"]) for _, _, r in rows} | {_form(r["TotalCPU"]) for _, _, r in rows}
    real_forms = {_form(f) for parts in real_rows for f in parts if re.fullmatch(r"[\d:.-]+", f) and ":" in f}
    assert ours_forms <= real_forms | {"D-HH:MM:SS"}  # the same time spellings real sacct prints
    assert is_header("|".join(FIELDS))


def _form(value: str) -> str:
    """The spelling of a sacct time: D-HH:MM:SS, HH:MM:SS, MM:SS.mmm."""
    if "-" in value:
        return "D-HH:MM:SS"
    if "." in value:
        return "MM:SS.mmm"
    return {2: "HH:MM:SS"}.get(value.count(":"), "MM:SS")


# Prometheus text exposition, version 0.0.4: comments, and `name{labels} value [timestamp_ms]`.
_EXPO = re.compile(
    r'^(?:#.*|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})?'
    r" (?P<value>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|NaN|[-+]?Inf))(?: (?P<ts>-?\d+))?)$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


def _exposition(lines: list[str]) -> tuple[list[re.Match], list[str]]:
    ok, bad = [], []
    for line in lines:
        if not line.strip():
            continue
        m = _EXPO.match(line)
        (ok if m else bad).append(m if m else line)
    return ok, bad


def test_dcgm_scrapes_follow_the_exposition_grammar_of_real_scrapes(
    sim: Path, truth: pd.DataFrame, real_data: Path
) -> None:
    real_files = [
        *sorted((real_data / "telemetry").glob("dcgm-exporter_*.prom")),
        real_data / "samples" / "hpc_dcgm_exporter_real_metric_lines.txt",
    ]
    real_lines = [
        ln
        for f in real_files
        for ln in f.read_text().splitlines()
        if ln.startswith(("DCGM_", "# HELP", "# TYPE"))
    ]
    real_ok, real_bad = _exposition(real_lines)
    assert real_ok and not real_bad
    real_labels = {k for m in real_ok if m["labels"] for k in _LABEL.findall(m["labels"])}
    bad = {(m["file"], m["line_no"]) for m in _manifest(sim) if m["source"] == "dcgm"}
    samples, hostname_spellings, xids = 0, set(), set()
    per_label: dict[str, int] = defaultdict(int)
    for path in sorted((sim / "dcgm").glob("*.prom")):
        lines = path.read_text().splitlines()
        good = [ln for i, ln in enumerate(lines, start=1) if (f"dcgm/{path.name}", i) not in bad]
        ok, broken = _exposition(good)
        assert not broken, broken[:3]
        for m in ok:
            if not m["name"]:
                continue
            samples += 1
            keys = set(_LABEL.findall(m["labels"]))
            assert keys - {"hpc_job", "hostname"} <= real_labels, keys - real_labels
            hostname_spellings |= keys & {"Hostname", "hostname"}
            per_label["hpc_job" in keys] += 1
            assert int(m["ts"]) > 1_700_000_000_000
            if m["name"] == "DCGM_FI_DEV_XID_ERRORS" and m["value"] != "0":
                xids.add(int(m["value"]))
    assert samples > 1000
    assert hostname_spellings == {"Hostname", "hostname"}
    assert per_label[True] > 0 and per_label[False] > 0  # hpc_job on part of the fleet only
    hw = truth[(truth.failure_cause == "gpu_hardware") & truth.xid.notna() & (truth.telemetry_samples > 0)]
    assert set(hw.xid.astype(int)) <= xids


def test_pods_have_the_shape_of_real_pod_objects(sim: Path, truth: pd.DataFrame, real_data: Path) -> None:
    real_text = (real_data / "samples" / "k8s-pod-status-oomkilled-exit1.txt").read_text().splitlines()
    real_status = json.loads(next(ln for ln in real_text if ln.startswith("{")))
    bad = {(m["file"], m["line_no"]) for m in _manifest(sim) if m["source"] == "k8s"}
    lines = (sim / "k8s" / "pods.jsonl").read_text().splitlines()
    pods = [json.loads(ln) for i, ln in enumerate(lines, start=1) if ("k8s/pods.jsonl", i) not in bad]
    assert len(pods) == (truth.source == "k8s").sum()
    reasons = defaultdict(set)
    for pod in pods:
        assert pod["kind"] == "Pod" and {"name", "namespace", "uid"} <= set(pod["metadata"])
        status = pod["status"]
        assert {"phase", "containerStatuses", "conditions", "qosClass"} <= set(status)
        assert set(status) <= set(real_status) | {"reason", "message"}
        cs = status["containerStatuses"][0]
        assert set(cs) - {"started", "containerID"} <= set(real_status["containerStatuses"][0])
        term = cs["state"].get("terminated")
        if term:
            real_term = real_status["containerStatuses"][0]["state"]["terminated"]
            assert set(real_term) <= set(term)
            reasons[term["reason"]].add(term["exitCode"])
        res = pod["spec"]["containers"][0]["resources"]
        for q in (*res["requests"].values(), *res["limits"].values()):
            assert re.fullmatch(r"\d+(m|Mi|Gi|G)?", q), q
    assert {"Completed", "OOMKilled", "Error"} <= set(reasons)
    assert 137 in reasons["Error"]  # killed without OOM


# The failure's own words, as the real error logs in tests/data/real/errorlogs/ say them: one of the wordings
# the simulator draws from (issue 15: not the only one, so that a diagnosis measured on its logs can miss).
LOG_SIGNATURES = {
    "time_limit": ("slurm_timelimit", "DUE TO TIME LIMIT"),
    "host_oom": ("slurm_oom", "oom-kill event"),
    "gpu_oom": ("cuda_oom", "CUDA out of memory"),
    "nccl_timeout": ("nccl_timeout", "Watchdog caught collective operation timeout"),
    "nccl_error": ("nccl_error", "ncclRemoteError"),
}


def test_logs_use_the_real_wording(sim: Path, truth: pd.DataFrame, real_data: Path) -> None:
    logged = truth[truth.has_log & (truth.source == "slurm")]
    assert len(logged) > 20
    for cause, (category, phrase) in LOG_SIGNATURES.items():
        real = [p.read_text() for p in (real_data / "errorlogs").glob(f"{category}__*.txt")]
        assert any(phrase in text for text in real), (category, phrase)
        texts = [
            (sim / "logs" / f"{j}.err").read_text() for j in logged[logged.failure_cause == cause].job_id
        ]
        carrying = sum(phrase in text for text in texts)
        assert carrying >= 1, (cause, phrase)  # the real wording is among those drawn ...
        if len(texts) >= 5:
            assert carrying < len(texts), (cause, phrase)  # ... but not the only one
    imports = [
        (sim / "logs" / f"{j}.err").read_text()
        for j in logged[logged.failure_detail == "import_error"].job_id
    ]
    assert any("ModuleNotFoundError: No module named" in text for text in imports)
    assert not (truth[~truth.has_log].job_id.map(lambda j: (sim / "logs" / f"{j}.err").exists())).any()


def test_scripts_use_real_directives_and_say_what_drives_use(
    sim: Path, truth: pd.DataFrame, real_data: Path
) -> None:
    real_opts = set()
    for line in (real_data / "scripts" / "sbatch_directives_academic.jsonl").read_text().splitlines():
        for d in json.loads(line)["sbatch_directives"]:
            real_opts.add(d.split()[1].split("=")[0])
    ours = set()
    slurm = truth[truth.source == "slurm"].set_index("job_id")
    for job_id, t in slurm.iterrows():
        path = sim / "scripts" / f"{job_id}.sh"
        text = path.read_bytes()
        assert hashlib.sha256(text).hexdigest() == t.script_hash
        body = text.decode()
        assert body.startswith("#!/bin/bash")
        ours |= {ln.split()[1].split("=")[0] for ln in body.splitlines() if ln.startswith("#SBATCH")}
        if t.workload == "dl_train":
            assert f"--batch-size {int(t.batch_size)}" in body and f"--{t.precision}" in body
    assert ours - {"--account", "--array", "--gpus-per-node", "-N"} <= real_opts, ours - real_opts


def test_bad_records_are_where_the_manifest_says(sim: Path) -> None:
    manifest = _manifest(sim)
    assert len(manifest) == BAD
    assert {m["source"] for m in manifest} == {"sacct", "dcgm", "k8s"}
    for m in manifest:
        lines = (sim / m["file"]).read_text(encoding="utf-8").splitlines()
        assert lines[m["line_no"] - 1] == m["raw"]
