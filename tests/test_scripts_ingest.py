"""`jobfit ingest scripts`: files named by job id and sacct --batch-script output into silver.scripts and
silver.job_scripts; a job whose script sacct did not store goes to quarantine."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.ingest_scripts import job_id_from_name
from pipelines.scripts import script_hash

SCRIPT = (
    "#!/bin/bash\n#SBATCH -c 4\n#SBATCH --mem=8G\n#SBATCH --gres=gpu:a100:1\n"
    "python train.py --batch-size 32\n"
)


def test_job_id_from_name() -> None:
    assert job_id_from_name("/x/12345.sh") == "12345"
    assert job_id_from_name("12345_7.sbatch") == "12345_7"
    assert job_id_from_name("99") == "99"
    assert job_id_from_name("train.sh") is None and job_id_from_name("12345.py") is None


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
