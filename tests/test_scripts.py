"""Job-script parsing: real #SBATCH directive sets (hand-checked) and synthetic bodies for launchers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.silver.scripts import parse_directives, parse_script, script_hash, split_batch_script_output

GiB, MiB = 1024**3, 1024**2


def _records(real_data: Path) -> list[dict]:
    path = real_data / "scripts" / "sbatch_directives_academic.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _text(rec: dict) -> str:
    return "\n".join([rec["shebang"] or "#!/bin/bash", *rec["sbatch_directives"], "echo start"]) + "\n"


def test_every_real_record_parses(real_data: Path) -> None:
    records = _records(real_data)
    assert len(records) == 105
    for rec in records:
        info = parse_script(_text(rec))
        assert info.script_hash == script_hash(_text(rec))
        # every directive line is kept, by option, in directives_json
        directives = json.loads(info.directives_json)
        assert len(directives) >= len({d.split()[1].split("=")[0] for d in rec["sbatch_directives"]}) - 1


# (record index in the file, expected fields) — each value read off the raw directive lines by hand.
HAND_CHECKED = [
    (0, dict(req_nodes=1, req_ntasks=1, req_cpus_per_task=12, req_mem_bytes=None, timelimit_s=None)),
    # --nodes=64 --ntasks-per-node=24 --cpus-per-task=2 --time=06:00:00 --partition=batch
    (
        81,
        dict(req_nodes=64, req_ntasks=64 * 24, req_cpus_per_task=2, timelimit_s=6 * 3600, partition="batch"),
    ),
    # -c 1 / -p rc-testing # comment / -t 7-00:00:00 / --mem=450G
    (82, dict(req_cpus_per_task=1, partition="rc-testing", timelimit_s=7 * 86400, req_mem_bytes=450 * GiB)),
    # -t 00:20:00 ... --mem-per-cpu=2G, trailing comments on every line
    (83, dict(req_cpus_per_task=1, timelimit_s=20 * 60, req_mem_bytes=2 * GiB, partition="rc-testing")),
    # --gres=gpu:1, --mem-per-cpu 8000 (MiB, space-separated), --time=00:10:00
    (84, dict(req_gpus=1, gpu_type=None, req_mem_bytes=8000 * MiB, timelimit_s=600, partition="gpu")),
    # -G rtx5000:2, --mem-per-cpu 6000
    (86, dict(req_gpus=2, gpu_type="rtx5000", req_mem_bytes=6000 * MiB, timelimit_s=5 * 3600)),
    # -c 24, --time=59:00 (MM:SS)
    (92, dict(req_cpus_per_task=24, req_gpus=1, timelimit_s=59 * 60)),
    # --mem-per-cpu 64000 with -n 3; --time=00:60:00 (60 minutes)
    (93, dict(req_ntasks=3, req_mem_bytes=64000 * MiB * 3, timelimit_s=3600, partition="medium")),
    # --ntasks=XXXmpinodesXXX (template): task count and the per-CPU memory total are unknown
    (95, dict(req_ntasks=None, req_mem_bytes=None, timelimit_s=24 * 3600, partition="XXXqueueXXX")),
    # --exclusive (no value) before --gres=gpu:2; -n 8; --time=11:59:00
    (100, dict(req_gpus=2, req_ntasks=8, timelimit_s=11 * 3600 + 59 * 60)),
    # -n 16 with --mem-per-cpu 6000
    (101, dict(req_ntasks=16, req_mem_bytes=16 * 6000 * MiB, timelimit_s=10 * 3600)),
    # -G 1, -t 10:00:00, -p gpu
    (103, dict(req_gpus=1, gpu_type=None, timelimit_s=36000, partition="gpu")),
]


@pytest.mark.parametrize(("index", "expected"), HAND_CHECKED)
def test_real_directives_hand_checked(real_data: Path, index: int, expected: dict) -> None:
    info = parse_script(_text(_records(real_data)[index])).as_row()
    assert {k: info[k] for k in expected} == expected


def test_real_exclusive_flag_and_comment_kept(real_data: Path) -> None:
    directives = json.loads(parse_script(_text(_records(real_data)[94])).directives_json)
    assert directives["--exclusive"] is None and directives["--ntasks"] == "1"
    assert (
        json.loads(parse_script(_text(_records(real_data)[82])).directives_json)["--partition"]
        == "rc-testing"
    )


TORCHRUN = """#!/bin/bash
#SBATCH -J llama-ft -A ml-lab
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=a100:4
#SBATCH --cpus-per-task=32
#SBATCH --mem=256G
#SBATCH -t 1-00:00:00
#SBATCH --array=0-9%2
module load cuda/12.1
BS=16
srun torchrun --nnodes=2 --nproc_per_node=4 train.py \\
    --model_name_or_path meta-llama/Llama-2-7b-hf \\
    --per_device_train_batch_size $BS --bf16 \\
    --data_path /scratch/data/alpaca.json
#SBATCH --mem=1G
"""


def test_torchrun_script() -> None:
    info = parse_script(TORCHRUN)
    assert info.req_nodes == 2 and info.req_ntasks == 2 and info.req_cpus_per_task == 32
    assert info.req_gpus == 8 and info.gpu_type == "a100"
    assert info.req_mem_bytes == 2 * 256 * GiB  # --mem is per node; the #SBATCH after a command is ignored
    assert info.timelimit_s == 86400 and info.array_spec == "0-9%2"
    assert info.launcher == "torchrun" and "pytorch" in info.frameworks.split(",")
    assert "transformers" in info.frameworks.split(",")
    assert info.model_name == "meta-llama/Llama-2-7b-hf"
    assert info.batch_size == 16 and info.precision == "bf16"
    assert info.n_ranks == 8
    assert info.input_paths == "/scratch/data/alpaca.json"
    assert json.loads(info.directives_json)["--account"] == "ml-lab"


def test_deepspeed_and_accelerate() -> None:
    ds = parse_script(
        "#!/bin/bash\n#SBATCH --gres=gpu:h100:8\n#SBATCH --mem-per-gpu=80G\n"
        "deepspeed --num_gpus 8 --num_nodes 1 finetune.py --model gpt2-xl --train_batch_size=64 --fp16\n"
    )
    assert (ds.launcher, ds.n_ranks, ds.req_gpus, ds.gpu_type) == ("deepspeed", 8, 8, "h100")
    assert ds.req_mem_bytes == 8 * 80 * GiB and ds.precision == "fp16" and ds.batch_size == 64
    assert ds.model_name == "gpt2-xl" and "deepspeed" in ds.frameworks
    acc = parse_script(
        "#!/bin/bash\n#SBATCH --gpus=2\naccelerate launch --num_processes 2 --mixed_precision=bf16 run.py\n"
    )
    assert (acc.launcher, acc.n_ranks, acc.precision, acc.req_gpus) == ("accelerate", 2, "bf16", 2)


def test_mpi_hpc_codes() -> None:
    lmp = parse_script(
        "#!/bin/bash\n#SBATCH -N 4\n#SBATCH --ntasks-per-node=32\n#SBATCH --mem-per-cpu=2000M\n"
        "module load lammps\nmpirun -np 128 lmp_mpi -in in.melt\n"
    )
    assert (lmp.launcher, lmp.n_ranks, lmp.frameworks, lmp.input_paths) == (
        "mpirun",
        128,
        "lammps",
        "in.melt",
    )
    assert lmp.req_ntasks == 128 and lmp.req_mem_bytes == 128 * 2000 * MiB
    gmx = parse_script("#!/bin/bash\n#SBATCH -n 16\nsrun gmx_mpi mdrun -s topol.tpr -deffnm md\n")
    assert (gmx.launcher, gmx.n_ranks, gmx.frameworks, gmx.input_paths) == (
        "srun",
        16,
        "gromacs",
        "topol.tpr",
    )
    for body, code in [
        ("srun vasp_std", "vasp"),
        ("srun namd2 +p32 apoa1.namd", "namd"),
        ("mpirun -np 8 simpleFoam -parallel", "openfoam"),
        ("mpirun -np 8 pw.x -in scf.in > scf.out", "quantum-espresso"),
    ]:
        assert code in parse_script(f"#!/bin/bash\n#SBATCH -n 8\n{body}\n").frameworks.split(",")


def test_pbs_directives() -> None:
    info = parse_script(
        "#!/bin/bash\n#PBS -N sim\n#PBS -q batch\n#PBS -l nodes=2:ppn=8,mem=16gb,walltime=12:30:00\n"
        "#PBS -t 1-4\ncd $PBS_O_WORKDIR\nmpirun ./a.out\n"
    )
    assert (info.req_nodes, info.req_ntasks, info.req_cpus_per_task) == (2, 16, 1)
    assert info.req_mem_bytes == 16 * GiB and info.timelimit_s == 12 * 3600 + 30 * 60
    assert (info.partition, info.array_spec, info.launcher, info.n_ranks) == ("batch", "1-4", "mpirun", 16)
    pro = parse_script("#PBS -l select=2:ncpus=8:mpiprocs=4:mem=4gb:ngpus=1\n#PBS -l walltime=3600\necho\n")
    assert (pro.req_nodes, pro.req_ntasks, pro.req_cpus_per_task, pro.req_gpus) == (2, 8, 2, 2)
    assert pro.req_mem_bytes == 8 * GiB and pro.timelimit_s == 3600


def test_directive_spellings() -> None:
    slurm, _ = parse_directives(
        "#SBATCH -c4 -N2\n#SBATCH --time 30\n#SBATCH --job-name='my job'\n"
        "#SBATCH --gres=gpu:v100:1,tmpfs:10G\n"
    )
    assert slurm == {
        "cpus-per-task": "4",
        "nodes": "2",
        "time": "30",
        "job-name": "my job",
        "gres": "gpu:v100:1,tmpfs:10G",
    }
    info = parse_script("#SBATCH -c4 -N2\n#SBATCH --time 30\n#SBATCH --gres=gpu:v100:1,tmpfs:10G\n")
    assert (info.timelimit_s, info.req_gpus, info.gpu_type) == (1800, 2, "v100")
    assert parse_script("#SBATCH --time=UNLIMITED\n").timelimit_s is None
    empty = parse_script("")
    assert empty.directives_json is None and empty.launcher is None and empty.frameworks is None


def test_sacct_batch_script_output() -> None:
    rule = "-" * 80
    out = (
        f"Batch Script for 4242\n{rule}\n#!/bin/bash\n#SBATCH -c 2\npython x.py\n\n"
        f"Batch Script for 4243_7\n{rule}\nNONE\n\n"
    )
    parts = split_batch_script_output(out)
    assert parts == [("4242", "#!/bin/bash\n#SBATCH -c 2\npython x.py\n"), ("4243_7", "")]
    assert split_batch_script_output("#!/bin/bash\necho\n") is None
