"""Parse job scripts: #SBATCH / #PBS directives, frameworks and launchers, resource-driving arguments.

Pure Python (no Spark): `parse_script(text)` returns a `ScriptInfo` whose fields are the columns of
silver.scripts. Slurm reads #SBATCH lines only up to the first command line of the script; so does this
parser. A directive whose value cannot be read (a template placeholder such as `--ntasks=XXXmpiXXX`) is kept
as given in `directives_json` and leaves its typed field empty, never an error."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, fields

from pipelines.units import parse_directive_mem_bytes, parse_duration_s


@dataclass(frozen=True)
class ScriptInfo:
    """What one job script asks for and runs (the silver.scripts columns but cluster and ingested_at)."""

    script_hash: str
    directives_json: str | None
    req_cpus_per_task: int | None
    req_ntasks: int | None
    req_nodes: int | None
    req_mem_bytes: int | None
    req_gpus: int | None
    gpu_type: str | None
    timelimit_s: int | None
    partition: str | None
    array_spec: str | None
    frameworks: str | None
    launcher: str | None
    model_name: str | None
    batch_size: int | None
    precision: str | None
    n_ranks: int | None
    input_paths: str | None
    text: str

    def as_row(self) -> dict[str, object]:
        """The fields as a dict (silver.scripts column -> value)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def script_hash(text: str) -> str:
    """sha256 hex digest of the script text (UTF-8): the silver.scripts key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- directives -------------------------------------------------------------------------------------

# Short Slurm options that take a value, mapped to their long names.
_SBATCH_SHORT = {
    "A": "account",
    "a": "array",
    "b": "begin",
    "C": "constraint",
    "c": "cpus-per-task",
    "D": "chdir",
    "d": "dependency",
    "e": "error",
    "G": "gpus",
    "i": "input",
    "J": "job-name",
    "L": "licenses",
    "M": "clusters",
    "m": "distribution",
    "N": "nodes",
    "n": "ntasks",
    "o": "output",
    "p": "partition",
    "q": "qos",
    "t": "time",
    "w": "nodelist",
    "x": "exclude",
}
# Short Slurm flags that take no value.
_SBATCH_FLAGS = {
    "H": "hold",
    "h": "help",
    "k": "no-kill",
    "O": "overcommit",
    "s": "oversubscribe",
    "v": "verbose",
}
# Long options that never take a value (so `--exclusive` is not followed by a value).
_SBATCH_LONG_FLAGS = {
    "exclusive",
    "no-requeue",
    "requeue",
    "hold",
    "overcommit",
    "oversubscribe",
    "contiguous",
    "spread-job",
    "use-min-nodes",
    "wait",
    "parsable",
    "test-only",
    "no-kill",
    "ignore-pbs",
    "reboot",
    "verbose",
    "quiet",
}
# Aliases Slurm accepts for the same option.
_SBATCH_ALIASES = {"tasks": "ntasks", "name": "job-name", "workdir": "chdir", "mincpus": "mincpus"}

_DIRECTIVE_RE = re.compile(r"^\s*#(SBATCH|PBS)\b\s*(.*)$")


def _tokens(body: str) -> list[str]:
    """A directive line's words, shell-quoted; split on blanks when its quotes do not close."""
    try:
        return shlex.split(body, comments=True, posix=True)
    except ValueError:
        return body.split("#", 1)[0].split()


def _sbatch_options(body: str) -> list[tuple[str, str | None]]:
    """(long option name, value or None) pairs of one #SBATCH line's text."""
    tokens = _tokens(body)
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            name = _SBATCH_ALIASES.get(name, name)
            if eq:
                out.append((name, value))
            elif name in _SBATCH_LONG_FLAGS or i + 1 >= len(tokens) or tokens[i + 1].startswith("-"):
                out.append((name, None))
            else:
                out.append((name, tokens[i + 1]))
                i += 1
        elif tok.startswith("-") and len(tok) >= 2:
            letter, rest = tok[1], tok[2:]
            if letter in _SBATCH_FLAGS and not rest:
                out.append((_SBATCH_FLAGS[letter], None))
            else:
                name = _SBATCH_SHORT.get(letter, letter)
                if rest:
                    out.append((name, rest.lstrip("=")))
                elif i + 1 < len(tokens):
                    out.append((name, tokens[i + 1]))
                    i += 1
                else:
                    out.append((name, None))
        i += 1
    return out


def _pbs_options(body: str) -> list[tuple[str, str | None]]:
    """(option, value) pairs of one #PBS line: `-l` resource lists split into `l:<resource>` entries."""
    tokens = _tokens(body)
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-") and len(tok) >= 2:
            letter, rest = tok[1:2], tok[2:]
            value = rest or (
                tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("-") else None
            )
            if not rest and value is not None:
                i += 1
            if letter == "l" and value:
                # `-l nodes=2:ppn=8,mem=16gb,walltime=1:00:00` or `-l select=2:ncpus=8:mem=16gb`
                for part in _split_pbs_resources(value):
                    key, _, val = part.partition("=")
                    out.append((f"l:{key.strip()}", val.strip() or None))
            else:
                out.append((letter, value))
        i += 1
    return out


def _split_pbs_resources(value: str) -> list[str]:
    """Split a PBS resource list on commas, but keep `select=...:ngpus=1` chunks whole."""
    return [p for p in value.split(",") if p.strip()]


def _directive_lines(text: str) -> list[tuple[str, str]]:
    """(kind, body) of the #SBATCH/#PBS lines Slurm/PBS would read: those before the first command."""
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _DIRECTIVE_RE.match(line)
        if m:
            found.append((m.group(1), m.group(2)))
            continue
        if stripped.startswith("#"):
            continue
        break  # the first command line ends the directive block
    return found


def parse_directives(text: str) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The script's Slurm options and PBS options (later repeats win), values as given."""
    slurm: dict[str, str | None] = {}
    pbs: dict[str, str | None] = {}
    for kind, body in _directive_lines(text):
        if kind == "SBATCH":
            slurm.update(_sbatch_options(body))
        else:
            pbs.update(_pbs_options(body))
    return slurm, pbs


# --- typed values -----------------------------------------------------------------------------------


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*", value)
    return int(m.group(1)) if m else None


def _min_int(value: str | None) -> int | None:
    """An int, or the minimum of a Slurm `min-max` range (`--nodes=2-4` -> 2)."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)(?:-\d+)?\s*", value)
    return int(m.group(1)) if m else None


def _mem(value: str | None, bare_is_bytes: bool = False) -> int | None:
    """Bytes of a memory request (`16G`, `8000` = MiB for Slurm; `16gb`, bare bytes for PBS); None when
    unreadable."""
    if value is None:
        return None
    v = value.strip()
    if bare_is_bytes and v.isdigit():
        return int(v)
    try:
        return parse_directive_mem_bytes(v)
    except ValueError:
        return None


def _duration(value: str | None, bare_is_seconds: bool = False) -> int | None:
    """Seconds of a Slurm time string (a bare number is minutes; for PBS walltime, seconds); None for
    UNLIMITED or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if bare_is_seconds and v.isdigit():
        return int(v)
    try:
        seconds = parse_duration_s(v)
    except ValueError:
        return None
    return None if seconds is None else round(seconds)


_GPU_COUNT_RE = re.compile(r"^(?:gres/)?gpu(?::(?P<type>[A-Za-z][\w.\-]*))?(?::(?P<n>\d+))?(?:\(.*\))?$")


def _gres_gpus(gres: str) -> tuple[int | None, str | None]:
    """GPUs per node and type from a --gres list (`gpu:a100:2,tmpfs:10G`)."""
    for part in gres.split(","):
        m = _GPU_COUNT_RE.match(part.strip())
        if m:
            return int(m.group("n") or 1), m.group("type")
    return None, None


def _gpus_value(value: str) -> tuple[int | None, str | None]:
    """Count and type of a --gpus / --gpus-per-node value (`2`, `a100:2`, `gpu:a100:2`)."""
    v = value.strip()
    if v.startswith("gpu:"):
        v = v[4:]
    typ, _, count = v.rpartition(":")
    n = _int(count)
    if n is None and not typ:
        return None, v or None  # a bare type means one GPU of it
    return (n if n is not None else 1), (typ or None)


def _pbs_chunks(pbs: dict[str, str | None]) -> tuple[int | None, dict[str, str]]:
    """Number of chunks and per-chunk resources of `-l nodes=2:ppn=8` or `-l select=2:ncpus=8:...`."""
    for key in ("l:select", "l:nodes"):
        spec = pbs.get(key)
        if spec:
            head, *rest = spec.split(":")
            res = dict(p.partition("=")[::2] for p in rest if "=" in p)
            return (_int(head) if _int(head) is not None else 1), res
    return None, {}


@dataclass(frozen=True)
class _Resources:
    cpus_per_task: int | None
    ntasks: int | None
    nodes: int | None
    mem_bytes: int | None
    gpus: int | None
    gpu_type: str | None
    timelimit_s: int | None
    partition: str | None
    array_spec: str | None


def _slurm_resources(o: dict[str, str | None]) -> _Resources:
    """Typed requests from Slurm options; memory and GPUs multiplied out to the whole job."""
    cpt = _int(o.get("cpus-per-task"))
    nodes = _min_int(o.get("nodes"))
    ntasks = _int(o.get("ntasks"))
    per_node = _int(o.get("ntasks-per-node"))
    if ntasks is None and per_node is not None:
        ntasks = per_node * (nodes or 1)
    tasks, n_nodes = ntasks or 1, nodes or 1
    # A count given but unreadable (a template placeholder) makes every total built on it unknown.
    bad = {
        k
        for k in ("cpus-per-task", "nodes", "ntasks", "ntasks-per-node")
        if o.get(k) and _min_int(o[k]) is None
    }
    gpus, gpu_type = None, None
    if o.get("gpus"):
        gpus, gpu_type = _gpus_value(o["gpus"])
    elif o.get("gpus-per-node"):
        n, gpu_type = _gpus_value(o["gpus-per-node"])
        gpus = None if n is None or "nodes" in bad else n * n_nodes
    elif o.get("gpus-per-task"):
        n, gpu_type = _gpus_value(o["gpus-per-task"])
        gpus = None if n is None or bad & {"ntasks", "ntasks-per-node", "nodes"} else n * tasks
    elif o.get("gres"):
        n, gpu_type = _gres_gpus(o["gres"])
        gpus = None if n is None or "nodes" in bad else n * n_nodes
    mem: int | None = None
    if o.get("mem") is not None:
        per = _mem(o["mem"])
        mem = None if per is None or "nodes" in bad else per * n_nodes
    elif o.get("mem-per-cpu") is not None:
        per = _mem(o["mem-per-cpu"])
        mem = None if per is None or bad else per * (cpt or 1) * tasks
    elif o.get("mem-per-gpu") is not None and gpus is not None:
        per = _mem(o["mem-per-gpu"])
        mem = None if per is None else per * gpus
    return _Resources(
        cpus_per_task=cpt,
        ntasks=ntasks,
        nodes=nodes,
        mem_bytes=mem,
        gpus=gpus,
        gpu_type=gpu_type,
        timelimit_s=_duration(o.get("time")),
        partition=o.get("partition"),
        array_spec=o.get("array"),
    )


def _pbs_resources(p: dict[str, str | None]) -> _Resources:
    """Typed requests from PBS/Torque options (`-l nodes=N:ppn=P`, `-l select=N:ncpus=P:mem=..`)."""
    chunks, res = _pbs_chunks(p)
    ppn = _int(res.get("ppn") or res.get("ncpus") or p.get("l:ppn") or p.get("l:ncpus"))
    mpi = _int(res.get("mpiprocs"))
    mem: int | None = None
    if res.get("mem"):
        per = _mem(res["mem"], bare_is_bytes=True)
        mem = None if per is None else per * (chunks or 1)
    elif p.get("l:mem"):
        mem = _mem(p["l:mem"], bare_is_bytes=True)
    elif p.get("l:pmem"):
        per = _mem(p["l:pmem"], bare_is_bytes=True)
        mem = None if per is None else per * (ppn or 1) * (chunks or 1)
    ngpus = _int(res.get("ngpus") or res.get("gpus") or p.get("l:ngpus"))
    gpus = None if ngpus is None else ngpus * (chunks or 1)
    if mpi:  # PBS Pro: mpiprocs ranks per chunk share its ncpus
        ntasks, cpt = (chunks or 1) * mpi, (ppn // mpi if ppn else 1)
    elif ppn:  # Torque nodes=N:ppn=P: P single-CPU processes per node
        ntasks, cpt = (chunks or 1) * ppn, 1
    else:
        ntasks, cpt = chunks, None
    return _Resources(
        cpus_per_task=cpt,
        ntasks=ntasks,
        nodes=chunks,
        mem_bytes=mem,
        gpus=gpus,
        gpu_type=res.get("gpu_type") or res.get("gputype"),
        timelimit_s=_duration(p.get("l:walltime"), bare_is_seconds=True),
        partition=p.get("q"),
        array_spec=p.get("J") or p.get("t"),
    )


def _merge(slurm: _Resources, pbs: _Resources) -> _Resources:
    """Slurm values where given, PBS ones otherwise."""
    return _Resources(
        *(
            s if s is not None else q
            for s, q in zip(slurm.__dict__.values(), pbs.__dict__.values(), strict=True)
        )
    )


# --- the body: launchers, frameworks, arguments -----------------------------------------------------

_LAUNCHERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("torchrun", re.compile(r"\btorchrun\b|\bpython[\d.]*\s+-m\s+torch\.distributed\.(?:run|launch)\b")),
    ("deepspeed", re.compile(r"(?:^|[\s;&|(])deepspeed\s")),
    ("accelerate", re.compile(r"\baccelerate\s+launch\b")),
    ("horovodrun", re.compile(r"\bhorovodrun\b")),
    ("mpirun", re.compile(r"\b(?:mpirun|mpiexec(?:\.hydra)?|aprun|ibrun)\b")),
    ("srun", re.compile(r"(?:^|[\s;&|(])srun\b")),
    ("python", re.compile(r"\bpython[\d.]*\b|\.py\b")),
)

# Frameworks and HPC codes, each recognised by its commands, modules or imports in the script body.
_FRAMEWORKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pytorch", re.compile(r"\btorch(?:run|\.distributed|vision)?\b|\bpytorch\b|\blightning\b", re.I)),
    ("deepspeed", re.compile(r"\bdeepspeed\b", re.I)),
    ("accelerate", re.compile(r"\baccelerate\s+(?:launch|config)\b")),
    ("transformers", re.compile(r"\btransformers\b|--model_name_or_path\b")),
    ("megatron", re.compile(r"\bmegatron\b", re.I)),
    ("vllm", re.compile(r"\bvllm\b", re.I)),
    ("tensorflow", re.compile(r"\btensorflow\b|\bkeras\b", re.I)),
    ("jax", re.compile(r"\bjax\b|\bflax\b", re.I)),
    ("horovod", re.compile(r"\bhorovod(?:run)?\b", re.I)),
    ("lammps", re.compile(r"\blmp(?:_\w+)?\b|\blammps\b", re.I)),
    ("gromacs", re.compile(r"\bgmx(?:_mpi|_d)?\b|\bgromacs\b|\bmdrun\b", re.I)),
    ("vasp", re.compile(r"\bvasp(?:_std|_gam|_ncl|_gpu)?\b", re.I)),
    ("namd", re.compile(r"\bnamd[23]?\b", re.I)),
    (
        "openfoam",
        re.compile(
            r"\bopenfoam\b|\b(?:simple|pimple|ico|interFoam|rhoSimple|buoyant\w*)Foam\b|\bblockMesh\b|\bsnappyHexMesh\b|\bdecomposePar\b",
            re.I,
        ),
    ),
    (
        "quantum-espresso",
        re.compile(r"\b(?:pw|ph|cp|neb|pp|dos|projwfc)\.x\b|\bquantum[-_ ]?espresso\b|\bqe/\d", re.I),
    ),
    ("cp2k", re.compile(r"\bcp2k(?:\.\w+)?\b", re.I)),
    ("gaussian", re.compile(r"\bg(?:09|16)\b|\bgaussian\b", re.I)),
    ("orca", re.compile(r"(?:^|[\s/])orca\b", re.I)),
    ("amber", re.compile(r"\bpmemd(?:\.\w+)?\b|\bsander\b|\bamber\b", re.I)),
    ("nwchem", re.compile(r"\bnwchem\b", re.I)),
    ("cryosparc", re.compile(r"\bcryosparc\w*\b", re.I)),
    ("relion", re.compile(r"\brelion\w*\b", re.I)),
    ("alphafold", re.compile(r"\balphafold\b|\bcolabfold\b", re.I)),
    ("wrf", re.compile(r"\bwrf\.exe\b|\breal\.exe\b", re.I)),
    ("matlab", re.compile(r"\bmatlab\b", re.I)),
    ("r", re.compile(r"\bRscript\b")),
    ("julia", re.compile(r"\bjulia\b")),
)

_BATCH_SIZE_RE = re.compile(
    r"(?:--|\b)(?:per[_-]device[_-]train[_-]batch[_-]size|train[_-]batch[_-]size|global[_-]batch[_-]size|"
    r"micro[_-]batch[_-]size|batch[_-]size|batchsize|bs)(?:\s*=\s*|\s+)([$\w{}]+)",
    re.I,
)
_MODEL_RE = re.compile(
    r"(?:--|\b)(?:model[_-]name[_-]or[_-]path|model[_-]name|model[_-]id|model[_-]path|pretrained[_-]model|"
    r"base[_-]model|model)(?:\s*=\s*|\s+)(\"[^\"]+\"|'[^']+'|[^\s\\;]+)",
    re.I,
)
_PRECISION_RE = re.compile(
    r"--(?:mixed[_-]precision|precision|dtype|torch[_-]dtype)(?:\s*=\s*|\s+)([\w\-]+)|--(bf16|fp16|fp32|tf32|"
    r"half|load[_-]in[_-]8bit|load[_-]in[_-]4bit)\b",
    re.I,
)
_INPUT_RE = re.compile(
    r"(?:--(?:data[_-]?(?:dir|path|set|root)?|dataset(?:[_-](?:path|dir|name))?|input(?:[_-](?:dir|file|path))?|"
    r"train[_-](?:file|data|dir)|in)(?:\s*=\s*|\s+)|(?:^|\s)-(?:in|i|s)\s+)(\"[^\"]+\"|'[^']+'|[^\s\\;-][^\s\\;]*)",
    re.I,
)
_RANKS_RE: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "mpi",
        re.compile(r"\b(?:mpirun|mpiexec|aprun|srun)\b[^\n]*?\s(?:-np|-n|--ntasks|--np)(?:\s*=\s*|\s+)(\d+)"),
    ),
    ("nproc", re.compile(r"--nproc[_-]per[_-]node(?:\s*=\s*|\s+)(\d+)")),
    ("nnodes", re.compile(r"--nnodes(?:\s*=\s*|\s+)(\d+)")),
    ("ds_gpus", re.compile(r"\bdeepspeed\b[^\n]*?--num[_-]gpus(?:\s*=\s*|\s+)(\d+)")),
    ("ds_nodes", re.compile(r"\bdeepspeed\b[^\n]*?--num[_-]nodes(?:\s*=\s*|\s+)(\d+)")),
    ("acc", re.compile(r"\baccelerate\s+launch\b[^\n]*?--num[_-]processes(?:\s*=\s*|\s+)(\d+)")),
)
_PRECISION_NAMES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "bf16-mixed": "bf16",
    "bf16-true": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "16": "fp16",
    "16-mixed": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "32": "fp32",
    "32-true": "fp32",
    "float": "fp32",
    "tf32": "tf32",
    "fp8": "fp8",
    "int8": "int8",
    "load_in_8bit": "int8",
    "load-in-8bit": "int8",
    "int4": "int4",
    "load_in_4bit": "int4",
    "load-in-4bit": "int4",
    "no": "fp32",
}
_ASSIGN_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|[^\s;#]*)")


def _body(text: str) -> str:
    """The script's commands: comments dropped, `\\` continuations joined, shell variables substituted
    where the script assigns them a literal value."""
    joined = re.sub(r"\\\r?\n", " ", text)
    lines = [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    variables: dict[str, str] = {}
    for line in lines:
        m = _ASSIGN_RE.match(line)
        if m and "$" not in m.group(2) and "`" not in m.group(2):
            variables[m.group(1)] = m.group(2).strip("\"'")
    body = "\n".join(lines)
    for name, value in variables.items():
        body = re.sub(rf"\$\{{{name}\}}|\${name}\b", lambda _m, v=value: v, body)
    return body


def script_commands(text: str) -> str:
    """The script's command lines as the shell would run them (comments dropped, `\\` continuations
    joined, literal variables substituted): what the workload capture reads entry points from."""
    return _body(text)


def _first(pattern: re.Pattern[str], body: str) -> str | None:
    m = pattern.search(body)
    if not m:
        return None
    return next((g for g in m.groups() if g is not None), None)


def _precision(body: str) -> str | None:
    m = _PRECISION_RE.search(body)
    if not m:
        return None
    raw = (m.group(1) or m.group(2) or "").lower()
    return _PRECISION_NAMES.get(raw, raw or None)


def _n_ranks(body: str, launcher: str | None, ntasks: int | None) -> int | None:
    """Processes the launcher starts: explicit counts first, else the Slurm task count for srun/mpirun."""
    found = {name: int(m.group(1)) for name, rx in _RANKS_RE if (m := rx.search(body))}
    if launcher == "torchrun" and "nproc" in found:
        return found["nproc"] * found.get("nnodes", 1)
    if launcher == "deepspeed" and "ds_gpus" in found:
        return found["ds_gpus"] * found.get("ds_nodes", 1)
    if launcher == "accelerate" and "acc" in found:
        return found["acc"]
    if "mpi" in found:
        return found["mpi"]
    if launcher in ("srun", "mpirun"):
        return ntasks
    return None


def _input_paths(body: str) -> str | None:
    paths: list[str] = []
    for m in _INPUT_RE.finditer(body):
        p = m.group(1).strip("\"'")
        if p not in paths:
            paths.append(p)
    return ",".join(paths) or None


def parse_script(text: str) -> ScriptInfo:
    """Parse one job script's text (never raises on odd content: unreadable values are left empty)."""
    slurm, pbs = parse_directives(text)
    res = _merge(_slurm_resources(slurm), _pbs_resources(pbs))
    body = _body(text)
    launcher = next((name for name, rx in _LAUNCHERS if rx.search(body)), None)
    frameworks = [name for name, rx in _FRAMEWORKS if rx.search(body)]
    batch = _first(_BATCH_SIZE_RE, body)
    model = _first(_MODEL_RE, body)
    directives = {**{f"--{k}": v for k, v in slurm.items()}, **{f"pbs:{k}": v for k, v in pbs.items()}}
    return ScriptInfo(
        script_hash=script_hash(text),
        directives_json=json.dumps(directives, sort_keys=True) if directives else None,
        req_cpus_per_task=res.cpus_per_task,
        req_ntasks=res.ntasks,
        req_nodes=res.nodes,
        req_mem_bytes=res.mem_bytes,
        req_gpus=res.gpus,
        gpu_type=res.gpu_type,
        timelimit_s=res.timelimit_s,
        partition=res.partition,
        array_spec=res.array_spec,
        frameworks=",".join(frameworks) or None,
        launcher=launcher,
        model_name=model.strip("\"'") if model else None,
        batch_size=_int(batch),
        precision=_precision(body),
        n_ranks=_n_ranks(body, launcher, res.ntasks),
        input_paths=_input_paths(body),
        text=text,
    )


# --- sacct --batch-script output --------------------------------------------------------------------

_BATCH_HEADER_RE = re.compile(r"^Batch Script for (\S+)\s*$")
_RULE_RE = re.compile(r"^-{20,}\s*$")


def split_batch_script_output(text: str) -> list[tuple[str, str]] | None:
    """(job id, script text) pairs of `sacct --batch-script` output, or None when the text is not such
    output. A job whose script was not stored (`NONE`) yields an empty script text."""
    lines = text.splitlines()
    if not lines or not _BATCH_HEADER_RE.match(lines[0]):
        return None
    out: list[tuple[str, str]] = []
    job_id: str | None = None
    chunk: list[str] = []
    i = 0
    while i < len(lines):
        m = _BATCH_HEADER_RE.match(lines[i])
        if m and i + 1 < len(lines) and _RULE_RE.match(lines[i + 1]):
            if job_id is not None:
                out.append((job_id, _script_text(chunk)))
            job_id, chunk = m.group(1), []
            i += 2
            continue
        chunk.append(lines[i])
        i += 1
    if job_id is not None:
        out.append((job_id, _script_text(chunk)))
    return out


def _script_text(chunk: list[str]) -> str:
    """A script as sacct printed it: the blank line sacct appends dropped; `NONE` means not stored."""
    while chunk and not chunk[-1].strip():
        chunk = chunk[:-1]
    if [c.strip() for c in chunk] == ["NONE"]:
        return ""
    return "\n".join(chunk) + "\n"
