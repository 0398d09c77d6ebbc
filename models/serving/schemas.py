"""Request and response models of `jobfit serve` (they are the OpenAPI schema at /openapi.json)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Names as Slurm and Kubernetes allow them: no spaces, no shell or path tricks.
_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@+\-]*$"
# Slurm memory: a number with an optional K/M/G/T suffix (a bare number is MiB, as sbatch reads it).
_MEM = r"^[0-9]{1,9}(\.[0-9]{1,3})?[KkMmGgTt]?[Bb]?$"
# Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = r"^([0-9]{1,3}-)?[0-9]{1,6}(:[0-9]{1,2}){0,2}$"
# GRES/TRES GPU request: gpu, gpu:2, gpu:a100:2, gpu:1g.10gb:1 (comma-separated lists allowed).
_GRES = r"^[A-Za-z0-9_./:\-]+(,[A-Za-z0-9_./:\-]+)*$"
# A file the script names, as named (no control characters), and its text (256 KiB at most).
SourceName = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[^\x00-\x1f]+$")]
SourceText = Annotated[str, StringConstraints(max_length=256 * 1024)]


class RecommendRequest(BaseModel):
    """One job about to be submitted: who, where, the script (optional) and what the submit hook sees.
    A field given here overrides the script's own #SBATCH directive (sbatch's command line wins too)."""

    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(min_length=1, max_length=64, pattern=_NAME, examples=["demo"])
    user: str = Field(min_length=1, max_length=64, pattern=_NAME, examples=["u1"])
    script: str | None = Field(None, max_length=512 * 1024, description="the job script text (never logged)")
    partition: str | None = Field(None, max_length=64, pattern=_NAME)
    account: str | None = Field(None, max_length=64, pattern=_NAME)
    job_name: str | None = Field(None, max_length=200, pattern=r"^[^\r\n]*$")
    nodes: int | None = Field(None, ge=1, le=100_000)
    ntasks: int | None = Field(None, ge=1, le=1_000_000)
    cpus_per_task: int | None = Field(None, ge=1, le=10_000)
    mem_per_node: str | None = Field(None, pattern=_MEM, examples=["64G"], description="sbatch --mem")
    mem_per_cpu: str | None = Field(
        None, pattern=_MEM, examples=["4000M"], description="sbatch --mem-per-cpu"
    )
    time_limit: str | None = Field(None, pattern=_TIME, examples=["12:00:00"], description="sbatch --time")
    gres: str | None = Field(None, max_length=200, pattern=_GRES, examples=["gpu:a100:2"])
    array_size: int | None = Field(None, ge=1, le=1_000_000, description="tasks in the job array")
    sources: dict[SourceName, SourceText] | None = Field(
        None,
        max_length=8,
        description="the files the script's entry points name (path as named -> text; at most 8, 256 KiB "
        "each): the training script and its --config/--deepspeed files, read statically (docs/vram.md)",
    )


class FilesRequest(BaseModel):
    """A job script whose entry points' files a submit hook is about to read (`POST /v1/workload/files`)."""

    model_config = ConfigDict(extra="forbid")

    script: str = Field(max_length=512 * 1024, description="the job script text (never logged)")


class FilesResponse(BaseModel):
    """The files the script's entry points name, as named (features/workload.py `referenced_files`), and
    the bounds the server reads them under (`sources` of /v1/recommend)."""

    files: list[str] = Field(examples=[["train.py", "configs/lora.yaml"]])
    max_files: int
    max_file_bytes: int
    max_total_bytes: int


class HistorySource(BaseModel):
    """Where the user's history came from: the snapshot `jobfit train` logged (run id, when taken)."""

    model_config = ConfigDict(extra="allow")

    source: str | None
    run_id: str | None = None
    taken_at: str | None = None
    newest_end_ts: str | None = None


class RecommendResponse(BaseModel):
    """The same object `jobfit recommend --json` prints (docs/cli.md), or, when the service cannot answer
    (unknown cluster, no champion), `status` and `why` saying so and nothing else (hooks fail open)."""

    model_config = ConfigDict(extra="allow")

    cluster: str
    user: str
    script_hash: str | None = None
    history_jobs: int | None = None
    history_source: HistorySource | None = None
    script_runs: int | None = None
    status: str = Field(
        description="ok | not_enough_history | unknown_cluster | no_champion | no_history_snapshot",
        examples=["ok"],
    )
    why: str | None = None
    flags: list[str] = Field(default_factory=list, examples=[["--mem=12G", "--time=02:00:00"]])
    targets: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per target (mem, cpus, vram, runtime): status, why or values"
    )
    expected_saving: dict[str, float | None] | None = None
    code_estimate: dict[str, Any] | None = Field(
        None,
        description="the estimate from the workload's own code and config: status, why, "
        "peak_allocated_bytes, peak_vram_bytes, terms, gpu_model, gpu_mem_bytes, fits, changes_that_fit "
        "(docs/vram.md)",
    )


class ErrorResponse(BaseModel):
    """Any refused request: one line saying why."""

    error: str


class Health(BaseModel):
    status: str = "alive"


class ClusterReadiness(BaseModel):
    """One loaded cluster: the champion version per target (null: none) and the history snapshot."""

    versions: dict[str, str | None]
    history_run_id: str | None
    history_rows: int
    history_taken_at: str | None


class Readiness(BaseModel):
    """Whether any champion is loaded, and what was loaded when."""

    ready: bool
    loaded_at: str | None
    reloads: int
    clusters: dict[str, ClusterReadiness]


class ReloadResult(Readiness):
    """The readiness after a reload, and how long the reload took."""

    reload_s: float


class AdmissionRequest(BaseModel):
    """The part of an AdmissionReview request the webhook reads (other fields are kept, not checked)."""

    model_config = ConfigDict(extra="allow")

    uid: str = Field(min_length=1, max_length=128)
    kind: dict[str, Any] | None = None
    namespace: str | None = Field(None, max_length=253)
    object: dict[str, Any] | None = None


class AdmissionReview(BaseModel):
    """A Kubernetes `admission.k8s.io/v1` AdmissionReview as the API server posts it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    api_version: str = Field(alias="apiVersion", pattern=r"^admission\.k8s\.io/v1$")
    kind: str = Field(pattern=r"^AdmissionReview$")
    request: AdmissionRequest
