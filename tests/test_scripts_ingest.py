"""`jobfit ingest scripts`: files named by job id and sacct --batch-script output into silver.scripts and
silver.job_scripts; a job whose script sacct did not store goes to quarantine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.stages.ingest.scripts import job_id_from_name
from pipelines.silver.script_links import with_script_hash
from pipelines.silver.scripts import script_hash

SCRIPT = (
    "#!/bin/bash\n#SBATCH -c 4\n#SBATCH --mem=8G\n#SBATCH --gres=gpu:a100:1\n"
    "python train.py --batch-size 32\n"
)


def test_job_id_from_name() -> None:
    assert job_id_from_name("/x/12345.sh") == "12345"
    assert job_id_from_name("12345_7.sbatch") == "12345_7"
    assert job_id_from_name("99") == "99"
    assert job_id_from_name("train.sh") is None and job_id_from_name("12345.py") is None


@pytest.mark.slow
def test_cli_ingest_scripts(jobfit, tmp_path: Path) -> None:
    tmp_path = tmp_path / "scripts"  # not the test's warehouse folder
    tmp_path.mkdir()
    (tmp_path / "101.sh").write_text(SCRIPT)
    (tmp_path / "102.sh").write_text(SCRIPT)  # same content: one silver.scripts row, two links
    (tmp_path / "template.sh").write_text("#!/bin/bash\n#SBATCH -n 2\nsrun hostname\n")
    rule = "-" * 80
    (tmp_path / "sacct.txt").write_text(
        f"Batch Script for 103\n{rule}\n#!/bin/bash\n#SBATCH -t 10\necho hi\n\n"
        f"Batch Script for 104\n{rule}\nNONE\n\n"
    )
    res = jobfit("ingest", "scripts", str(tmp_path), "--cluster", "demo", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert (out["read"], out["inserted"], out["quarantined"], out["superseded"]) == (5, 3, 1, 1)
    assert out["tables"]["silver.job_scripts"]["inserted"] == 3
    assert out["tables"]["scripts without a job id"] == {"scripts": 1}
    links = json.loads(
        jobfit("sql", "SELECT job_id, script_hash FROM silver.job_scripts ORDER BY job_id", "--json").out
    )
    assert [(r["job_id"], r["script_hash"]) for r in links["rows"]] == [
        ("101", script_hash(SCRIPT)),
        ("102", script_hash(SCRIPT)),
        ("103", script_hash("#!/bin/bash\n#SBATCH -t 10\necho hi\n")),
    ]
    row = json.loads(
        jobfit(
            "sql",
            f"SELECT req_cpus_per_task, req_mem_bytes, req_gpus, gpu_type, batch_size, launcher "
            f"FROM silver.scripts WHERE script_hash = '{script_hash(SCRIPT)}'",
            "--json",
        ).out
    )["rows"]
    assert row == [
        {
            "req_cpus_per_task": 4,
            "req_mem_bytes": 8 * 1024**3,
            "req_gpus": 1,
            "gpu_type": "a100",
            "batch_size": 32,
            "launcher": "python",
        }
    ]
    q = json.loads(jobfit("sql", "SELECT line_no, reason FROM quarantine", "--json").out)["rows"]
    assert q == [{"line_no": 7, "reason": "no script text for job 104 (sacct stored NONE)"}]
    again = json.loads(jobfit("ingest", "scripts", str(tmp_path), "--cluster", "demo", "--json").out)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 3)


# Real sacct lines (reportseff's Princeton fixtures) in the column order the file's header documents.
REAL_SACCT_FORMAT = (
    "AdminComment|AllocCPUS|Elapsed|JobID|JobIDRaw|MaxRSS|NNodes|ReqMem|State|Timelimit|TotalCPU"
)
REAL_GROUPS = ("single_core", "multi_node", "single_gpu", "short_job")


def _real_sacct_dump(real_data: Path) -> str:
    """A header and the lines of 4 real fixtures: array task 39889258_1426, jobs 8205048, 8197399, 8205464."""
    lines = [REAL_SACCT_FORMAT]
    for line in (real_data / "sacct" / "reportseff_tests_sacct_lines.txt").read_text().splitlines():
        prefix, _, raw = line.partition("\t")
        if prefix.split(":")[:2] in [["conftest.py", g] for g in REAL_GROUPS]:
            lines.append(raw)
    return "\n".join(lines) + "\n"


def _real_scripts(real_data: Path, n: int) -> list[str]:
    """`n` job scripts built from real #SBATCH directive sets (distinct texts), with a one-line body."""
    texts: list[str] = []
    for line in (real_data / "scripts" / "sbatch_directives_academic.jsonl").read_text().splitlines():
        rec = json.loads(line)
        text = "\n".join([rec["shebang"], *rec["sbatch_directives"], "srun hostname"]) + "\n"
        if text not in texts:
            texts.append(text)
        if len(texts) == n:
            return texts
    raise AssertionError("not enough real directive sets")


@pytest.mark.slow
def test_script_hash_reaches_silver_jobs_in_either_order(jobfit, tmp_path: Path, real_data: Path) -> None:
    dump = tmp_path / "sacct" / "dump.txt"
    dump.parent.mkdir()
    dump.write_text(_real_sacct_dump(real_data))
    folder = tmp_path / "scripts"
    folder.mkdir()
    array, multi_node, gpu = _real_scripts(real_data, 3)
    # 39889258.sh is the array's script: task 39889258_1426 runs it. 8205464 has no script.
    for name, text in (("39889258.sh", array), ("8205048.sh", multi_node), ("8197399.sh", gpu)):
        (folder / name).write_text(text)

    def ingest(source: str, path: Path, cluster: str) -> dict:
        res = jobfit("ingest", source, str(path), "--cluster", cluster, "--json")
        assert res.code == 0, res.err
        return json.loads(res.out)

    # Cluster "first": scripts before jobs. Cluster "later": jobs before scripts.
    early = ingest("scripts", folder, "first")
    assert early["tables"]["silver.jobs"] == {"script_hash_set": 0}  # no jobs yet
    assert ingest("sacct", dump, "first")["inserted"] == 4 + 10  # 14 lines: 4 jobs, 10 steps
    assert ingest("sacct", dump, "later")["inserted"] == 14
    late = ingest("scripts", folder, "later")
    assert late["tables"]["silver.jobs"] == {"script_hash_set": 3}
    # The same dump again: the stored rows keep their hash, nothing counts as changed.
    again = ingest("sacct", dump, "later")
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 14)

    rows = json.loads(
        jobfit("sql", "SELECT cluster, job_id, script_hash FROM silver.jobs ORDER BY 1, 2", "--json").out
    )["rows"]
    want = {
        "39889258_1426": script_hash(array),
        "8197399": script_hash(gpu),
        "8205048": script_hash(multi_node),
        "8205464": None,
    }
    for cluster in ("first", "later"):
        assert {r["job_id"]: r["script_hash"] for r in rows if r["cluster"] == cluster} == want, cluster


def test_links_by_own_id_then_array_then_het_job(spark) -> None:
    jobs = spark.createDataFrame(
        [
            ("c", "7_1", "7", None, None),  # array task: the array's script
            ("c", "7_2", "7", None, None),  # its own script beats the array's
            ("c", "9+0", None, "9", None),  # het component: the het job's script
            ("c", "11", None, None, "kept"),  # no link: keeps its hash
            ("d", "7_1", "7", None, None),  # another cluster's job 7 is another job
        ],
        "cluster string, job_id string, array_job_id string, het_job_id string, script_hash string",
    )
    links = spark.createDataFrame(
        [("c", "7", "A"), ("c", "7_2", "B"), ("c", "9", "H")],
        "cluster string, job_id string, script_hash string",
    )
    out = with_script_hash(jobs, links)
    assert out.columns == jobs.columns
    assertDataFrameEqual(
        out.select("cluster", "job_id", "script_hash"),
        spark.createDataFrame(
            [
                ("c", "7_1", "A"),
                ("c", "7_2", "B"),
                ("c", "9+0", "H"),
                ("c", "11", "kept"),
                ("d", "7_1", None),  # another cluster's job 7 is another job
            ],
            "cluster string, job_id string, script_hash string",
        ),
    )


@pytest.mark.slow
def test_ingest_scripts_stores_a_side_folder_of_sources_by_hash(
    jobfit, make_ctx, tmp_path: Path, real_data: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    job = "#!/bin/bash\n#SBATCH --gres=gpu:a10g:1\nsrun litgpt finetune_lora --config configs/lora.yaml\n"
    (scripts / "201.sh").write_text(job)
    (scripts / "202.sh").write_text(job)
    config = (real_data / "vram" / "configs" / "43c4432" / "mistral-7b" / "lora.yaml").read_bytes()
    side = tmp_path / "sources"
    for job_id in ("201", "202"):  # the same config archived with two jobs: one stored copy
        (side / job_id / "configs").mkdir(parents=True)
        (side / job_id / "configs" / "lora.yaml").write_bytes(config)
    (side / "201" / "train.py").write_text("import litgpt\n")
    (side / "202" / "ckpt.bin").write_bytes(b"\x00\xff" * 10)  # not text: left out
    (side / "202" / "big.yaml").write_text("k: v\n" * 60_000)  # over 256 KiB: left out
    (side / "notes").mkdir()  # not a job id: skipped
    args = ("ingest", "scripts", str(scripts), "--sources", str(side), "--cluster", "demo", "--json")
    res = jobfit(*args)
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["tables"]["silver.sources"]["inserted"] == 2
    assert out["tables"]["silver.job_sources"]["inserted"] == 3
    assert out["tables"]["sources left out"] == {"too_large": 1, "not_text": 1, "not_a_job": 1}
    query = (
        "SELECT l.job_id, l.path, l.source_hash, s.bytes, s.text FROM silver.job_sources l "
        "JOIN silver.sources s ON s.cluster = l.cluster AND s.source_hash = l.source_hash "
        "ORDER BY l.job_id, l.path"
    )
    rows = json.loads(jobfit("sql", query, "--json").out)["rows"]
    sha = hashlib.sha256(config).hexdigest()
    assert [(r["job_id"], r["path"], r["source_hash"]) for r in rows] == [
        ("201", "configs/lora.yaml", sha),
        ("201", "train.py", hashlib.sha256(b"import litgpt\n").hexdigest()),
        ("202", "configs/lora.yaml", sha),
    ]
    assert rows[0]["text"] == config.decode() and rows[0]["bytes"] == len(config)
    # The stored files are what the estimate reads: the job's script with its sources names the model.
    from features.workload import capture

    cap = capture(job, {r["path"]: r["text"] for r in rows if r["job_id"] == "201"})
    assert cap.read == ["configs/lora.yaml"] and cap.workload.model == "checkpoints/mistralai/Mistral-7B-v0.1"
    # What training reads back (jobs.io.prediction): each job's files, turned into the code-aware inputs.
    from features.code import code_values, with_code_features
    from jobs.io.prediction import read_job_sources, read_scripts

    ctx = make_ctx()
    files = read_job_sources(ctx, "demo")
    assert sorted(zip(files["job_id"], files["path"], strict=True)) == [
        ("201", "configs/lora.yaml"),
        ("201", "train.py"),
        ("202", "configs/lora.yaml"),
    ]
    known = read_scripts(ctx, "demo")
    jobs = pd.DataFrame(
        {
            "job_id": ["201", "202", "203"],
            "script_hash": [known["script_hash"].iloc[0]] * 2 + [None],
            "req_gpus": [1, 1, None],
        }
    )
    table = with_code_features(jobs, known, files)
    expected = code_values(job, {r["path"]: r["text"] for r in rows if r["job_id"] == "201"}, 1)
    assert np.isfinite(expected["code_vram_est_log"])
    assert (
        table["code_vram_est_log"].iloc[0]
        == table["code_vram_est_log"].iloc[1]
        == expected["code_vram_est_log"]
    )
    assert np.isnan(table["code_vram_est_log"].iloc[2])  # no script: nothing to read
    # Again: nothing new. A missing folder: exit 2, nothing written.
    again = json.loads(jobfit(*args).out)
    assert again["tables"]["silver.sources"]["inserted"] == 0
    assert again["tables"]["silver.job_sources"]["inserted"] == 0
    missing = jobfit(
        "ingest", "scripts", str(scripts), "--sources", str(tmp_path / "nope"), "--cluster", "demo"
    )
    assert missing.code == 2 and "--sources" in missing.err
