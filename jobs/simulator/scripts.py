"""Batch scripts as people write them: #SBATCH directives in several spellings, module lines, a workload."""

from __future__ import annotations

from jobs.simulator.catalog import GRES_TYPES, MODEL_BY_NAME
from jobs.simulator.model import Job
from pipelines.units import GIB


def fmt_time(seconds: int) -> str:
    """A --time value: D-HH:MM:SS for a day or more, else HH:MM:SS."""
    d, rem = divmod(int(seconds), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def gres_name(job: Job) -> str:
    """The Slurm gres type of the job's GPUs (MIG instances carry NVML's autodetected name)."""
    if job.mig_profile:
        return f"nvidia_h100_80gb_hbm3_{job.mig_profile}"
    return GRES_TYPES.get(job.gpu_model or "", "gpu")


def _directives(job: Job) -> list[str]:
    style = job.user.style
    per_node_cpus = job.req_cpus // job.nodes
    lines = []
    lines.append(f"--job-name={_quote(job.name)}" if style != 2 else f"-J {_quote(job.name)}")
    lines.append(f"--partition={job.partition}" if style == 0 else f"-p {job.partition}")
    lines.append(f"--account={job.user.account}")
    if job.qos != "normal":
        lines.append(f"--qos={job.qos}")
    lines.append(f"--nodes={job.nodes}" if style != 2 else f"-N {job.nodes}")
    if job.uses_step0 and job.project.kind == "mpi_md":
        lines.append(f"--ntasks-per-node={job.ntasks // job.nodes}")
        lines.append("--cpus-per-task=1")
    elif job.uses_step0:
        lines.append("--ntasks-per-node=1")
        lines.append(f"--cpus-per-task={per_node_cpus}")
    else:
        lines.append("--ntasks=1" if style != 2 else "-n 1")
        lines.append(f"--cpus-per-task={per_node_cpus}" if style != 1 else f"-c {per_node_cpus}")
    if job.exclusive:
        lines.append("--exclusive")
        lines.append("--mem=0")
    elif job.mem_per_cpu:
        per_cpu = job.req_mem_node_bytes // max(1, per_node_cpus) // 1024**2
        lines.append(f"--mem-per-cpu={per_cpu}M" if style == 1 else f"--mem-per-cpu={per_cpu}")
    else:
        gib = job.req_mem_node_bytes // GIB
        lines.append(f"--mem={gib}G" if style != 1 else f"--mem={gib * 1024}M")
    if job.is_gpu:
        g = job.gpus_per_node
        gtype = gres_name(job)
        lines.append(
            [f"--gres=gpu:{gtype}:{g}", f"--gpus-per-node={g}", f"--gres=gpu:{g}"][style]
            if not job.mig_profile
            else f"--gres=gpu:{gtype}:1"
        )
    lines.append(f"--time={fmt_time(job.timelimit_s)}" if style != 2 else f"-t {fmt_time(job.timelimit_s)}")
    if job.array_job_id is not None:
        lines.append(f"--array=1-{job.array_size}")
        lines.append("--output=logs/%x-%A_%a.out")
        lines.append("--error=logs/%x-%A_%a.err")
    else:
        lines.append("--output=logs/%x-%j.out" if style != 2 else "-o slurm-%j.out")
        lines.append("--error=logs/%x-%j.err" if style != 2 else "-e slurm-%j.err")
    if style == 0:
        lines.append(f"--mail-user={job.user.name}@example.edu")
        lines.append("--mail-type=END,FAIL")
    return [f"#SBATCH {line}" for line in lines]


def _quote(name: str) -> str:
    return f'"{name}"' if any(c in name for c in ' |()="') and '"' not in name else name.replace(" ", "_")


def _env(job: Job) -> list[str]:
    kind = job.project.kind
    style = job.user.style
    if kind in ("dl_train", "dl_infer", "notebook"):
        if style == 0:
            return [
                "module purge",
                "module load anaconda3/2024.02 cudatoolkit/12.4",
                "conda activate torch-env",
            ]
        if style == 1:
            return ["source ~/miniconda3/etc/profile.d/conda.sh", "conda activate llm"]
        return ["module load cuda/12.4", "source .venv/bin/activate"]
    if kind == "mpi_md":
        code = job.params["code"]
        mod = "lammps/2Aug2023" if code == "lammps" else "gromacs/2024.1"
        return ["module purge", f"module load gcc/12.2 openmpi/4.1.6 {mod}"]
    if kind == "gmx_gpu":
        return ["module load gcc/12.2 cuda/12.4 gromacs/2024.1-gpu"]
    return (
        ["module load anaconda3/2024.02", "conda activate data"]
        if style != 2
        else ["source env/bin/activate"]
    )


def _body(job: Job) -> list[str]:
    p = job.params
    kind = job.project.kind
    if kind == "dl_train":
        model = MODEL_BY_NAME[str(p["model"])].hf_name
        args = (
            f"--model {model} --batch-size {p['batch_size']} --{p['precision']} --num-workers {p['workers']}"
        )
        args += f" --max-steps {p['steps']}"
        if "lr" in p:
            args += f" --lr {p['lr']}"
        launcher = job.launcher
        g = job.gpus_per_node
        if launcher == "python":
            return [f"python train.py {args}"]
        if launcher == "accelerate":
            mp = "bf16" if p["precision"] == "bf16" else ("fp16" if p["precision"] == "fp16" else "no")
            return [
                f"accelerate launch --num_processes {g * job.nodes} --mixed_precision {mp} train.py {args}"
            ]
        if launcher == "deepspeed":
            cfg = f"configs/ds_zero{p['zero']}.json"
            if job.nodes > 1:
                return [
                    "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)",
                    "export MASTER_PORT=29500",
                    f"srun deepspeed --num_gpus {g} --num_nodes {job.nodes} train.py {args} "
                    f"--deepspeed {cfg}",
                ]
            return [f"deepspeed --num_gpus {g} train.py {args} --deepspeed {cfg}"]
        if job.nodes > 1:
            return [
                "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)",
                "export MASTER_PORT=29500",
                f"srun torchrun --nnodes {job.nodes} --nproc_per_node {g} --rdzv_backend c10d "
                f"--rdzv_endpoint $MASTER_ADDR:$MASTER_PORT train.py {args}",
            ]
        return [f"torchrun --standalone --nproc_per_node {g} train.py {args}"]
    if kind == "dl_infer":
        model = MODEL_BY_NAME[str(p["model"])].hf_name
        return [
            f"python evaluate.py --model {model} --batch-size {p['batch_size']} --{p['precision']} "
            f"--num-samples {p['samples']} --num-workers {p['workers']} --output results/{job.user.name}/"
        ]
    if kind == "notebook":
        return [
            'echo "ssh -N -L ${port}:$(hostname):${port} ${USER}@login.example.edu"',
            f"port={p['port']}",
            "jupyter lab --no-browser --port=${port} --ip=$(hostname)",
        ]
    if kind == "gmx_gpu":
        return [
            f"export OMP_NUM_THREADS={p['ntomp']}",
            f"gmx mdrun -s {p['system']}.tpr -deffnm {p['system']} -nb gpu -pme gpu -ntomp {p['ntomp']} "
            f"-nsteps {p['nsteps']}",
        ]
    if kind == "mpi_md":
        n = job.ntasks
        launch = f"mpirun -np {n}" if job.launcher == "mpirun" else "srun"
        if p["code"] == "lammps":
            return [f"{launch} lmp -in in.lj -var nx {p['nx']} -var steps {p['run_steps']} -log log.lammps"]
        return [
            f"gmx_mpi grompp -f md.mdp -c box_{p['nx']}.gro -p topol.top -o md.tpr",
            f"{launch} gmx_mpi mdrun -s md.tpr -nsteps {p['run_steps']} -deffnm md",
        ]
    if kind == "preprocess":
        return [
            f"python preprocess.py --input /scratch/{job.user.name}/{p['dataset']}/raw/ "
            f"--num-shards {p['shards']} --workers {p['workers']} "
            f"--output /scratch/{job.user.name}/{p['dataset']}/clean/"
        ]
    tool = p["tool"]
    if tool == "bwa":
        return [
            'SAMPLE=$(sed -n "${SLURM_ARRAY_TASK_ID}p" samples.txt)',
            f"bwa mem -t {p['cpus']} ref/GRCh38.fa reads/${{SAMPLE}}_R1.fastq.gz "
            "reads/${SAMPLE}_R2.fastq.gz"
            " > aligned/${SAMPLE}.sam",
        ]
    if tool == "samtools":
        return [
            f"samtools sort -@ {p['cpus']} -o sorted/part_${{SLURM_ARRAY_TASK_ID}}.bam "
            "raw/part_${SLURM_ARRAY_TASK_ID}.bam"
        ]
    return [f"python {tool}.py --config configs/run_${{SLURM_ARRAY_TASK_ID}}.yaml --threads {p['cpus']}"]


def render(job: Job) -> str:
    """The job's batch script text (the same project and parameters give byte-identical text)."""
    shebang = "#!/bin/bash -l" if job.user.style == 1 else "#!/bin/bash"
    lines = [shebang, *_directives(job), ""]
    if job.user.style == 0:
        lines += ["set -euo pipefail", ""]
    lines += _env(job)
    lines += ["", f"cd $HOME/projects/{job.project.name}"]
    lines += _body(job)
    return "\n".join(lines) + "\n"
