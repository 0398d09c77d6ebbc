"""Failure diagnosis on Spark: the pattern table as rlike/when chains, accounting-only diagnoses, telemetry
Xids, fix messages with the job's numbers, and the `ingest logs` / `failures` commands end to end."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from conf import load_cluster
from jobs.commands.failures import _traceback_lines
from jobs.io.tables import merge_into
from pipelines.gold.failures.diagnose import diagnose_failures, gpu_signals, with_text_diagnosis
from pipelines.gold.failures.explain import explain_log
from pipelines.gold.failures.fix_table import MISSING
from pipelines.gold.failures.patterns import classify_text
from pipelines.gold.failures.scoring import confusion_table, error_log_body, expected_cause
from pipelines.gold.failures.tracebacks import read_tracebacks
from pipelines.schemas import SILVER_GPU_SAMPLES, SILVER_JOB_STEPS, SILVER_JOBS
from tests.failures_helpers import real_error_logs, real_traceback_logs

GIB = 1024**3
T0 = datetime(2026, 11, 3, 0, 0, 0)


def _job(job_id: str, state: str, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {f.name: None for f in SILVER_JOBS.schema.fields}
    row.update(
        cluster="demo",
        job_id=job_id,
        source="slurm",
        state=state,
        user="ada",
        is_final=True,
        ingested_at=T0,
        start_ts=T0,
        end_ts=datetime(2026, 11, 3, 2, 14),
        elapsed_s=8040,
        alloc_cpus=8,
        nodes=1,
    )
    row.update(kw)
    return row


# Hand-built silver.jobs rows; the TIMEOUT and CANCELLED ones transcribe real Princeton sacct lines
# (reportseff conftest `bad_gpu_used` 46044267 and `multi_gpu` 8189521, real/sacct/).
JOBS = [
    _job(
        "1",
        "OUT_OF_MEMORY",
        max_rss_bytes=int(61.8 * GIB),
        req_mem_bytes=64 * GIB,
        exit_code=0,
        exit_signal=9,
    ),
    _job(
        "46044267",
        "TIMEOUT",
        alloc_cpus=12,
        elapsed_s=23 * 3600 + 5 * 60 + 24,
        timelimit_s=23 * 3600,
        req_mem_bytes=48000 * 1024**2,
    ),
    _job("3", "NODE_FAIL", node_list="c101", elapsed_s=3600),
    _job(
        "8189521",
        "CANCELLED",
        cancelled_by="129276",
        alloc_cpus=28,
        elapsed_s=19 * 3600 + 4 * 60 + 47,
        timelimit_s=23 * 3600,
    ),
    _job("5", "CANCELLED", cancelled_by="0"),
    _job("6", "FAILED", exit_code=1, exit_signal=0),
    _job("7", "FAILED", exit_code=1, alloc_gpus=4, gpu_model="A100-SXM4-80GB", node_list="g012"),
    _job("8", "FAILED", exit_code=1, alloc_gpus=2, gpu_model="A100-SXM4-80GB", node_list="g013"),
    _job("9", "FAILED", exit_code=0, exit_signal=9, max_rss_bytes=int(31.9 * GIB), req_mem_bytes=32 * GIB),
    _job("10", "PREEMPTED", elapsed_s=5400),
    _job("11", "FAILED", exit_code=1, alloc_gpus=1, gpu_model="A100-SXM4-80GB", node_list="g014"),
    _job("12", "FAILED", exit_code=2, node_list="g015,g016"),
    # issue 15's misreadings, with accounting beside the log
    _job("13", "FAILED", exit_code=1, alloc_gpus=8, gpu_model="A100-SXM4-80GB", node_list="g017,g018"),
    _job("14", "FAILED", exit_code=0, exit_signal=9, max_rss_bytes=int(31.9 * GIB), req_mem_bytes=32 * GIB),
    _job("15", "FAILED", exit_code=1),
    _job("16", "FAILED", exit_code=1, alloc_gpus=1, gpu_model="A100-SXM4-80GB", node_list="g019"),
    # Kubernetes pods as pipelines/silver/k8s.py writes them: state_raw is phase[:reason[:exit]]
    _job("ml/evicted", "PREEMPTED", source="k8s", state_raw="Failed:Evicted"),
    _job("ml/pull", "PENDING", source="k8s", state_raw="Pending:ImagePullBackOff", end_ts=None),
    _job("ml/killed", "FAILED", source="k8s", state_raw="Failed:Error:exit 137", exit_code=137),
    _job(
        "ml/oom",
        "OUT_OF_MEMORY",
        source="k8s",
        state_raw="Failed:OOMKilled:exit 137",
        exit_code=137,
        req_mem_bytes=4 * GIB,
    ),
]
LOGS = {
    "8": "step 900 loss 1.9\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.15 GiB of which 1.10 GiB is free.",
    "12": "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before "
    "timing out.",
    "5": "slurmstepd: error: *** JOB 5 ON c1 CANCELLED AT 2026-11-03T02:14:00 ***",
    # torchrun's summary alone: the launcher's traceback, no worker's error
    "13": "Traceback (most recent call last):\n"
    '  File "/opt/conda/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    "train.py FAILED\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : 1 (pid: 88)\n",
    "14": "/var/spool/slurmd/job14/slurm_script: line 20: 777 Killed                  python t.py",
    "15": "mkdir: cannot create directory '/shared/x': Permission denied\n"
    "Traceback (most recent call last):\n"
    '  File "/home/ada/train.py", line 9, in <module>\n'
    "    lr = cfg['lr']\n"
    "KeyError: 'lr'",
    "16": "GPU health check: 0 uncorrectable ECC errors\n"
    "Traceback (most recent call last):\n"
    '  File "/home/ada/train.py", line 9, in <module>\n'
    "    lr = cfg['lr']\n"
    "KeyError: 'lr'",
}


def _frame(spark: SparkSession, rows: list[dict[str, object]], schema) -> DataFrame:
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)


def _sample(job_id: str, ts: datetime, xid: int, fb_used_gib: float, gpu: int = 3) -> dict[str, object]:
    return {
        "cluster": "demo",
        "host": "g012" if job_id == "7" else "g014",
        "device": f"GPU-{gpu}",
        "gpu": gpu,
        "ts": ts,
        "xid": xid,
        "fb_used_bytes": int(fb_used_gib * GIB),
        "fb_total_bytes": 80 * GIB,
        "label_job": job_id,
        "job_id": job_id,
        "attribution": "label",
        "ingested_at": T0,
        "model_name": "NVIDIA A100-SXM4-80GB",
    }


@pytest.fixture(scope="module")
def diagnosed(spark: SparkSession) -> dict[str, dict[str, object]]:
    jobs = _frame(spark, JOBS, SILVER_JOBS.schema)
    steps = _frame(
        spark,
        [
            {
                "cluster": "demo",
                "job_id": "9",
                "step_id": "batch",
                "state": "FAILED",
                "exit_signal": 9,
                "ingested_at": T0,
            }
        ],
        SILVER_JOB_STEPS.schema,
    )
    samples = _frame(
        spark,
        [
            _sample("7", datetime(2026, 11, 3, 1, 0), 0, 40.0),
            _sample("7", datetime(2026, 11, 3, 2, 14), 79, 41.0),
            # Xid 79 long after job 7 ended: outside the window, ignored
            _sample("7", datetime(2026, 11, 3, 9, 0), 48, 1.0),
            _sample("11", datetime(2026, 11, 3, 2, 10), 0, 79.6),
        ],
        SILVER_GPU_SAMPLES.schema,
    )
    logs = spark.createDataFrame(
        [("demo", k, v) for k, v in LOGS.items()], "cluster string, job_id string, text string"
    )
    scripts = spark.createDataFrame([("demo", "11", 32)], "cluster string, job_id string, batch_size int")
    out = diagnose_failures(jobs, steps, logs, gpu_signals(samples, jobs), scripts, load_cluster("demo"), T0)
    return {r["job_id"]: r.asDict() for r in out.collect()}


def test_spark_pattern_chain_agrees_with_classify_text_on_real_logs(
    spark: SparkSession, real_data: Path
) -> None:
    logs = real_error_logs(real_data)
    df = spark.createDataFrame([(n, t) for n, _, t in logs], "name string, text string")
    got = {r["name"]: r for r in with_text_diagnosis(df).collect()}
    pairs = [(expected_cause(n), got[n]["log_cause"] or "none") for n, _, _ in logs]
    table = confusion_table(pairs)
    print("\nreal error logs on Spark: expected (rows) vs classified (columns)\n" + table)
    assert all(e == p for e, p in pairs), table
    for name, _, text in logs:
        py = classify_text(text, read_tracebacks(text).exc_type)  # as explain_log calls it
        assert py is not None
        assert (got[name]["log_pattern"], got[name]["log_evidence"]) == (py.pattern_id, py.evidence), name
    assert got["cuda_oom__murong-xu_CADS_4.txt"]["log_gpu_total_gib"] == 31.47
    assert got["gpu_xid__leptonai_gpud_1174.txt"]["log_xid"] == 149


def test_host_oom_from_accounting_quotes_peak_and_limit(diagnosed: dict) -> None:
    d = diagnosed["1"]
    assert (d["cause"], d["rule"], d["user_fixable"], d["confidence"]) == (
        "host_oom",
        "slurm_oom",
        True,
        0.95,
    )
    # 61.8 GiB x 1.25 = 77.25 -> 78G
    assert d["suggested_fix"] == "peak RSS 61.8 GiB hit the 64.0 GiB limit: request --mem=78G (peak + 25 %)"
    assert "no log archived" in d["evidence"]


def test_timeout_quotes_elapsed_and_limit(diagnosed: dict) -> None:
    d = diagnosed["46044267"]
    assert (d["cause"], d["confidence"]) == ("time_limit", 0.95)
    # 23:00:00 x 1.25 = 28:45:00 (already a multiple of 15 min)
    assert d["suggested_fix"].startswith("ran 23:05:24 of a 23:00:00 limit")
    assert "--time=28:45:00" in d["suggested_fix"]
    # 12 cores x 23.09 h x $0.031611 + 46.875 GiB x 23.09 h x $0.004237
    hours = (23 * 3600 + 5 * 60 + 24) / 3600
    assert d["lost_core_hours"] == pytest.approx(12 * hours)
    assert d["lost_usd"] == pytest.approx(12 * hours * 0.031611 + 48000 / 1024 * hours * 0.004237)


def test_system_faults_are_not_blamed_on_the_user(diagnosed: dict) -> None:
    node, preempt, admin = diagnosed["3"], diagnosed["10"], diagnosed["5"]
    assert (node["cause"], node["user_fixable"]) == ("node_failure", False)
    assert node["suggested_fix"].startswith("node c101 failed after 1:00:00")
    assert (preempt["cause"], preempt["user_fixable"]) == ("preemption", False)
    assert (admin["cause"], admin["detail"], admin["user_fixable"]) == ("cancelled", "by_admin", False)


def test_cancelled_by_uid(diagnosed: dict) -> None:
    d = diagnosed["8189521"]
    assert (d["cause"], d["detail"], d["user_fixable"]) == ("cancelled", "by_user", True)
    assert d["suggested_fix"].startswith("cancelled by uid 129276 after 19:04:47 of its 23:00:00 limit")


def test_failed_without_log_gets_a_low_confidence_guess(diagnosed: dict) -> None:
    d = diagnosed["6"]
    assert (d["cause"], d["detail"], d["confidence"]) == ("software_error", "nonzero_exit", 0.3)
    assert "not a certainty" in d["suggested_fix"] and "no log archived" in d["evidence"]


def test_telemetry_xid_in_the_job_window_is_a_hardware_fault(diagnosed: dict) -> None:
    d = diagnosed["7"]
    assert (d["cause"], d["xid"], d["user_fixable"], d["primary_source"]) == (
        "gpu_hardware",
        79,
        False,
        "telemetry",
    )
    assert d["suggested_fix"] == (
        "Xid 79 (GPU has fallen off the bus) on node g012 GPU 3 at 2026-11-03 02:14: hardware fault, "
        "resubmit (--exclude=g012); reported to admins"
    )
    assert d["lost_gpu_hours"] == pytest.approx(4 * 8040 / 3600)


def test_gpu_oom_from_the_log(diagnosed: dict) -> None:
    d = diagnosed["8"]
    assert (d["cause"], d["primary_source"], d["confidence"]) == ("gpu_oom", "log", 0.95)
    assert d["suggested_fix"].startswith(
        "CUDA ran out of memory on a 79.2 GiB GPU (tried to allocate 2.00 GiB more)"
    )


def test_gpu_oom_from_vram_at_card_size_quotes_batch(diagnosed: dict) -> None:
    d = diagnosed["11"]
    assert (d["cause"], d["detail"], d["confidence"]) == ("gpu_oom", "vram_at_limit", 0.55)
    assert d["suggested_fix"].startswith(
        "VRAM peaked at 79.6/80 GiB on A100-SXM4-80GB: reduce the per-GPU batch size from 32"
    )


def test_evidence_quotes_the_gpu_at_the_moment_of_failure(diagnosed: dict) -> None:
    # job 7 ended 02:14: its 01:00 sample is too early, the Xid 79 sample at 02:14 is quoted, 09:00 is after
    assert "GPU before the end: 02:14:00 g012 GPU 3: VRAM 41.0/80 GiB, Xid 79;" in diagnosed["7"]["evidence"]
    assert "01:00:00" not in diagnosed["7"]["evidence"] and "09:00:00" not in diagnosed["7"]["evidence"]
    # job 11: VRAM at the card's size four minutes before the end
    assert "GPU before the end: 02:10:00 g014 GPU 3: VRAM 79.6/80 GiB;" in diagnosed["11"]["evidence"]
    assert "GPU before the end" not in diagnosed["1"]["evidence"]


def test_rss_at_limit_with_sigkill_is_a_likely_host_oom(diagnosed: dict) -> None:
    d = diagnosed["9"]
    assert (d["cause"], d["detail"], d["confidence"]) == ("host_oom", "rss_at_limit", 0.6)


def test_nccl_timeout_quotes_the_wait(diagnosed: dict) -> None:
    d = diagnosed["12"]
    assert d["cause"] == "nccl_timeout"
    assert d["suggested_fix"].startswith("a ALLREDUCE collective waited 1802 s past its 1800 s NCCL timeout")


def test_a_worker_failed_summary_is_unknown_not_the_network(diagnosed: dict) -> None:
    d = diagnosed["13"]
    assert (d["cause"], d["detail"], d["user_fixable"]) == ("unknown", "distributed_worker_failed", False)
    assert d["suggested_fix"].startswith("the launcher (torchrun) reported a failed worker without its error")
    assert d["lost_gpu_hours"] == pytest.approx(8 * 8040 / 3600)


def test_a_killed_line_leaves_the_peak_at_the_limit_to_decide(diagnosed: dict) -> None:
    # the log's "Killed" names no cause; the peak at the request does (as for job 9 without a log)
    d = diagnosed["14"]
    assert (d["cause"], d["detail"], d["confidence"]) == ("host_oom", "rss_at_limit", 0.6)


def test_the_tracebacks_exception_outranks_stray_lines(diagnosed: dict) -> None:
    for job in ("15", "16"):  # a stray "Permission denied"; a health check's "0 uncorrectable ECC errors"
        d = diagnosed[job]
        assert (d["cause"], d["detail"], d["user_fixable"]) == ("software_error", "python_exception", True), (
            job
        )
        assert d["suggested_fix"].startswith("train.py:9 `lr = cfg['lr']`: KeyError: 'lr': fix the error"), (
            job
        )


@pytest.mark.slow
def test_ingest_logs_then_failures_end_to_end(jobfit, make_ctx, real_data: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    src = real_data / "errorlogs"
    # The real logs' text without the header naming their source thread, as a job's own file would be.
    for real, name in (
        ("slurm_oom__Nesvilab_FragPipe_703.txt", "slurm-101.out"),
        ("nccl_error__NVIDIA_nccl_2076.txt", "102_3.err"),
        ("cuda_oom__kerrj_lerf_73.txt", "notes.txt"),
    ):
        (logs / name).write_text(error_log_body((src / real).read_text(encoding="utf-8")), encoding="utf-8")
    # a real traceback: a DataLoader worker OOM-killed under the user's clustering.py:116
    (logs / "slurm-104.out").write_text(
        dict((n[:2], t) for n, _, t in real_traceback_logs(real_data))["18"], encoding="utf-8"
    )
    ctx = make_ctx()
    jobs = [
        _job("101", "FAILED", exit_code=0, exit_signal=9, req_mem_bytes=64 * GIB, max_rss_bytes=20 * GIB),
        _job(
            "102_3",
            "FAILED",
            exit_code=1,
            alloc_gpus=8,
            gpu_model="H100-SXM5-80GB",
            user="bob",
            node_list="g001",
        ),
        _job("103", "FAILED", exit_code=1, end_ts=datetime(2026, 10, 30, 0, 0)),
        _job("104", "FAILED", exit_code=1),
    ]
    merge_into(ctx.spark, ctx.settings, "silver.jobs", _frame(ctx.spark, jobs, SILVER_JOBS.schema))

    res = jobfit("ingest", "logs", str(logs), "--cluster", "demo", "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert (report["files"], report["inserted"], report["quarantined"]) == (4, 3, 1)
    again = json.loads(jobfit("ingest", "logs", str(logs), "--cluster", "demo", "--json").out)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 3)

    res = jobfit("failures", "--cluster", "demo", "--month", "2026-11", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["jobs"] == 3 and out["by_cause"]["host_oom"]["jobs"] == 2
    assert out["by_cause"]["nccl_error"]["lost_gpu_hours"] == pytest.approx(8 * 8040 / 3600, abs=0.01)
    assert out["top_users"][0]["user"] == "bob"

    res = jobfit("failures", "--cluster", "demo", "--job", "101")
    assert res.code == 0, res.err
    assert res.out.startswith(
        "job 101 (ada, FAILED): host_oom / oom_kill (confidence 0.95, fixable by the user)"
    )
    assert "log (slurm_oom_kill): slurmstepd: error: Detected 1 oom-kill event(s)" in res.out
    # sacct's 20 GiB peak missed the spike: the fix sizes on the 64 GiB limit (x 1.25 = 80G)
    assert "ran out of memory at its 64.0 GiB limit (the sampled peak, 20.0 GiB, missed the spike)" in res.out
    assert "--mem=80G (limit + 25 %)" in res.out

    res = jobfit("failures", "--cluster", "demo", "--job", "104", "--json")
    assert res.code == 0, res.err
    d = json.loads(res.out)
    assert d["exception"]["type"] == "RuntimeError" and d["suggested_fix"].startswith("clustering.py:116 ")
    assert d["code"] == {
        "file": "/auto/home/users/d/a/darimez/MIRO/vllmcluster/clustering.py",
        "line": 116,
        "function": "compute_losses",
        "text": "correct += 1",
    }

    assert jobfit("failures", "--cluster", "demo", "--job", "999").code == 2
    assert jobfit("failures", "--cluster", "demo").code == 2
    assert jobfit("ingest", "logs", str(logs), "--cluster", "demo", "--tail-kb", "0").code == 2


def test_kubernetes_pods(diagnosed: dict) -> None:
    got = {
        k: (diagnosed[k]["cause"], diagnosed[k]["user_fixable"])
        for k in ("ml/evicted", "ml/pull", "ml/killed", "ml/oom")
    }
    assert got == {
        "ml/evicted": ("k8s_evicted", False),
        "ml/pull": ("k8s_image_pull", True),
        "ml/killed": ("k8s_exit137", False),
        "ml/oom": ("k8s_oomkilled", True),
    }
    # no peak recorded: the 4 GiB limit x 1.25 = 5Gi
    assert diagnosed["ml/oom"]["suggested_fix"].startswith(
        "the container hit its 4.0 GiB memory limit and was OOMKilled: raise resources.limits.memory to 5Gi"
    )


def test_both_engines_agree_on_every_real_log(spark: SparkSession, real_data: Path) -> None:
    """`jobfit explain` (pure Python) and the gold build (Spark) read the same tables: on every real log, as a
    failed job with nothing but that log, they give the same cause, confidence, exception, user frame and fix
    (the fix up to the first number only accounting knows, which the prompt leaves unknown)."""
    texts = {n: t for n, _, t in real_error_logs(real_data)}
    texts.update({n: t for n, _, t in real_traceback_logs(real_data)})
    ids = {name: str(i) for i, name in enumerate(sorted(texts))}
    jobs = _frame(spark, [_job(ids[n], "FAILED", exit_code=None) for n in texts], SILVER_JOBS.schema)
    logs = spark.createDataFrame(
        [("demo", ids[n], t) for n, t in texts.items()], "cluster string, job_id string, text string"
    )
    steps = _frame(spark, [], SILVER_JOB_STEPS.schema)
    samples = _frame(spark, [], SILVER_GPU_SAMPLES.schema)
    # two jobs with their script: the fix names its lines (batch size for the OOM, --mem for the host OOM)
    oom, host = (n for n in texts if n.startswith(("04_", "18_")))
    script = {oom: "#SBATCH --mem=64G\ntorchrun -m train --per_device_train_batch_size 8\n"}
    script[host] = "#SBATCH --mem=32G\npython main.py --num_workers 16\n"
    scripts = spark.createDataFrame(
        [("demo", ids[n], 8, s) for n, s in script.items()],
        "cluster string, job_id string, batch_size int, script_text string",
    )
    out = diagnose_failures(jobs, steps, logs, gpu_signals(samples, jobs), scripts, load_cluster("demo"), T0)
    rows = {r["job_id"]: r.asDict(recursive=True) for r in out.collect()}
    for name, text in texts.items():
        py, sp = explain_log(text, script.get(name)), rows[ids[name]]
        assert (sp["cause"], sp["detail"], sp["confidence"]) == (py.cause, py.detail, py.confidence), name
        assert (sp["exception"], sp["code"]) == (py.exception, py.code), name
        assert sp["suggested_fix"].startswith(py.suggested_fix.split(MISSING)[0]), name
        knobs = "(job script line 1: `#SBATCH --mem=32G`; line 2: `--num_workers 16`)"
        assert sp["suggested_fix"].endswith(knobs) == (name == host), name
        assert sp["suggested_fix"].endswith("line 2: `--per_device_train_batch_size 8`)") == (name == oom), (
            name
        )
        if py.code is not None:
            assert f"traceback: {py.exception['type'] if py.exception else ''}" in sp["evidence"], name
        for part in py.evidence.split("; "):
            if part.startswith("at the moment: "):
                assert part in sp["evidence"], name


def test_one_jobs_text_shows_the_exception_and_the_users_line() -> None:
    code = {"file": "/home/u/train.py", "line": 9, "function": "main", "text": "loss.backward()"}
    exception = {"type": "RuntimeError", "message": "CUDA error: device-side assert triggered"}
    assert _traceback_lines({"exception": exception, "code": code}) == [
        "  exception: RuntimeError: CUDA error: device-side assert triggered",
        "  your code: /home/u/train.py:9 in main: loss.backward()",
    ]
    assert _traceback_lines({"exception": None, "code": None}) == []
