"""Typed settings: YAML (base.yaml, clusters/<name>.yaml, local.yaml) plus JOBFIT_* overrides."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

CONF_DIR = Path(__file__).resolve().parent
ENV_PREFIX = "JOBFIT_"
# The one JOBFIT_* variable that is not a setting: where base.yaml, local.yaml and clusters/ are read from.
CONF_DIR_VAR = "JOBFIT_CONF_DIR"
# Not a setting either: the bearer token `jobfit serve` requires when set (a secret: never in conf/).
SERVE_TOKEN_VAR = "JOBFIT_SERVE_TOKEN"
# Not a setting: the SMTP password `jobfit emails --send` logs in with (a secret: never in conf/). A site may
# name another variable in `smtp.password_env`.
SMTP_PASSWORD_VAR = "JOBFIT_SMTP_PASSWORD"
# The variables jobfit reads that are not settings.
NON_SETTING_VARS = (CONF_DIR_VAR, SERVE_TOKEN_VAR, SMTP_PASSWORD_VAR)


class ConfigError(ValueError):
    """A configuration file or override is missing or invalid (one readable line)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkSettings(_Strict):
    master: str = "local[*]"
    app_name: str = "jobfit"
    driver_memory: str = "4g"
    shuffle_partitions: int = Field(4, ge=1)
    jars_dir: str = "./.jars"
    delta_package: str = "io.delta:delta-spark_4.2_2.13:4.4.0"
    log_level: str = "ERROR"
    # On a master that is not local[...]: zip jobfit's own packages and send them to the executors with the
    # session (SparkContext.addPyFile), so workers need only the third-party requirements, never a checkout.
    ship_code: bool = True
    conf: dict[str, str] = Field(default_factory=dict)


class MlflowSettings(_Strict):
    tracking_uri: str = "sqlite:///./mlflow.db"
    registry_uri: str | None = None


class SmtpSettings(_Strict):
    """The relay `jobfit emails --send` hands messages to; the password comes only from `password_env`."""

    host: str
    port: int = Field(587, ge=1, le=65535)
    user: str | None = None
    password_env: str = SMTP_PASSWORD_VAR
    sender: str
    starttls: bool = True  # STARTTLS after connecting in plain text (port 587)
    ssl: bool = False  # TLS from the first byte (SMTPS, port 465); starttls is then not used
    timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0)  # further attempts after a temporary failure (4xx, lost connection)
    backoff_s: float = Field(2.0, ge=0)  # wait before retry k: backoff_s * 2**(k-1)


class EmailSettings(_Strict):
    """Who gets a monthly digest (`jobfit emails`): thresholds on what is worth saying, an opt-out list."""

    min_wasted_usd: float = Field(5.0, ge=0)  # a digest when the user wasted at least this many dollars ...
    min_wasted_share_pct: float = Field(25.0, ge=0, le=100)  # ... and this share of their allocation,
    min_failed_jobs: int = Field(1, ge=1)  # or had this many failed runs they could have prevented
    max_recommendations: int = Field(3, ge=1)  # sbatch lines per digest, largest saving first
    max_failures: int = Field(5, ge=1)  # failures listed per digest, most dollars lost first
    max_bottlenecks: int = Field(3, ge=1)  # bottleneck findings per digest, most recoverable GPU-hours first
    domain: str = "localhost"  # recipient = <user>@<domain> unless `addresses` names one
    addresses: dict[str, str] = Field(default_factory=dict)  # user -> e-mail address
    opt_out: list[str] = Field(default_factory=list)  # users who receive no digest


class ReferenceFigure(_Strict):
    """A figure published elsewhere that the report puts beside ours, with what it measured."""

    value_pct: float
    source: str
    measures: str


class ReferenceFigures(_Strict):
    """The seed's own public figures, set beside the month's where the measure is comparable."""

    cpu_time_wasted: ReferenceFigure = ReferenceFigure(
        value_pct=59.0,
        source="Expanse blog (ARCHER2, 122,000 jobs, 7 days)",
        measures="core-hour-weighted 1 - TotalCPU / (AllocCPUS x Elapsed) over completed jobs",
    )
    gpu_effective_use: ReferenceFigure = ReferenceFigure(
        value_pct=35.0,
        source="Expanse claim '30-40 % effective utilisation' (no public source found)",
        measures="GPU clusters' effective utilisation (definition not given)",
    )


class ReportSettings(_Strict):
    """What `jobfit report` shows: rows per ranking, months of trend, the reference figures."""

    top_n: int = Field(10, ge=1)
    trend_months: int = Field(6, ge=1, le=36)
    user_jobs: int = Field(40, ge=1)  # jobs listed in a user report, most wasted dollars first
    references: ReferenceFigures = Field(default_factory=ReferenceFigures)


class PredictSettings(_Strict):
    underprovision_rate: float = Field(0.02, gt=0, lt=0.5)


class BottleneckSettings(_Strict):
    """Thresholds of the bottleneck findings (`jobfit bottlenecks`; sources in docs/bottlenecks.md)."""

    input_bound_pct: float = Field(10.0, ge=0, le=100)  # DataLoader share of step time
    launch_runtime_pct: float = Field(20.0, ge=0, le=100)  # CUDA runtime share of step time ...
    launch_short_kernel_us: float = Field(10.0, gt=0)  # ... and most kernels shorter than this
    launch_short_kernel_pct: float = Field(50.0, ge=0, le=100)
    launch_wait_pct: float = Field(10.0, ge=0, le=100)  # ... or the GPU idle waiting on launches, of the step
    sync_pct: float = Field(10.0, ge=0, le=100)  # GPU idle the synchronising calls cost (sync_bound)
    memcpy_pct: float = Field(10.0, ge=0, le=100)  # memcpy share of step time
    communication_pct: float = Field(10.0, ge=0, le=100)  # NCCL time not overlapped with compute
    tensor_core_gemm_pct: float = Field(20.0, ge=0, le=100)  # GEMM/conv share of kernel time ...
    tensor_core_fp32_pct: float = Field(80.0, ge=0, le=100)  # ... of which ran without Tensor Cores
    tensor_core_step_pct: float = Field(10.0, ge=0, le=100)  # ... on the critical path this share of step
    occupancy_pct: float = Field(25.0, ge=0, le=100)  # time-weighted achieved occupancy below this
    occupancy_kernel_pct: float = Field(30.0, ge=0, le=100)  # when kernels fill this share of the step
    straggler_ratio: float = Field(1.11, gt=1)  # the slow rank's step over its step without the others' wait
    idle_pct: float = Field(50.0, ge=0, le=100)  # HTA idle share of the GPU span
    kernel_wait_us: float = Field(30.0, ge=0)  # HTA's consecutive_kernel_delay
    dcgm_min_samples: int = Field(3, ge=1)  # DCGM profiling samples a job needs to be classified
    # DCGM profiling counters (pipelines/gold/bottlenecks/counters.py): ratios 0..1, rates in GB/s
    dcgm_idle_gr: float = Field(0.2, ge=0, le=1)  # GR_ENGINE_ACTIVE below: idle_gpu
    dcgm_busy_gr: float = Field(0.5, ge=0, le=1)  # below: the GPU waits for the host
    dcgm_pcie_gbps: float = Field(4.0, ge=0)  # PCIe TX + RX from which a waiting GPU is copying
    dcgm_comm_sm_ratio: float = Field(0.6, ge=0, le=1)  # SM_ACTIVE / GR_ENGINE_ACTIVE below, with traffic
    dcgm_comm_gbps: float = Field(1.0, ge=0)  # NVLink + PCIe that counts as traffic
    dcgm_dram: float = Field(0.6, ge=0, le=1)  # DRAM_ACTIVE from which the job is memory_bound
    dcgm_sm_active: float = Field(0.5, ge=0, le=1)  # SM_ACTIVE from which the SMs count as busy
    dcgm_tensor: float = Field(0.05, ge=0, le=1)  # PIPE_TENSOR_ACTIVE below (busy SMs, Tensor-Core GPU)
    dcgm_fp32: float = Field(0.2, ge=0, le=1)  # ... with PIPE_FP32_ACTIVE at or above: low_tensor_core


class Settings(_Strict):
    warehouse: str = "./warehouse"
    outbox: str = "./outbox"
    default_cluster: str = "demo"
    spark: SparkSettings = Field(default_factory=SparkSettings)
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    smtp: SmtpSettings | None = None
    emails: EmailSettings = Field(default_factory=EmailSettings)
    reports: ReportSettings = Field(default_factory=ReportSettings)
    predict: PredictSettings = Field(default_factory=PredictSettings)
    bottlenecks: BottleneckSettings = Field(default_factory=BottleneckSettings)


class PartitionSpec(_Strict):
    nodes: int = Field(ge=1)
    cores_per_node: int = Field(ge=1)
    mem_gib_per_node: float = Field(gt=0)
    gpus_per_node: int = Field(0, ge=0)
    gpu_model: str | None = None
    # The partition's MaxTime as slurm.conf states it (`7-00:00:00`, `2-12:00`, `48:00:00`, minutes `2880`,
    # `UNLIMITED`): resolves a job's `Timelimit = Partition_Limit` (docs/jobstats.md). None: not stated.
    max_time: str | None = None

    @field_validator("max_time", mode="before")
    @classmethod
    def _max_time_form(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            max_time_s(value)  # raises ValueError naming the text
        return value

    @property
    def max_time_s(self) -> int | None:
        """MaxTime in seconds; None when UNLIMITED or not stated (`is_unlimited` tells them apart)."""
        return None if self.max_time is None else max_time_s(self.max_time)

    @property
    def is_unlimited(self) -> bool:
        return self.max_time is not None and self.max_time.strip().upper() in ("UNLIMITED", "INFINITE")


def max_time_s(text: str) -> int | None:
    """A slurm.conf MaxTime in seconds: `[D-]HH:MM:SS`, `D-HH[:MM]`, `MM:SS`, `MM` (minutes); UNLIMITED and
    INFINITE → None. ValueError naming the text otherwise."""
    s = text.strip()
    if s.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = s.rpartition("-") if "-" in s else ("0", "", s)
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ValueError(f"not a Slurm time limit: {text!r}")
    nums = [int(p) for p in parts]
    if "-" in s:  # D-HH[:MM[:SS]]
        h, m, sec = [*nums, 0, 0][:3]
    elif len(nums) == 1:  # minutes
        h, m, sec = 0, nums[0], 0
    elif len(nums) == 2:  # MM:SS
        h, m, sec = 0, nums[0], nums[1]
    else:
        h, m, sec = nums
    return int(days) * 86400 + h * 3600 + m * 60 + sec


class GpuModelSpec(_Strict):
    memory_gib: float = Field(gt=0)
    mig_profiles: list[str] = Field(default_factory=list)


class Prices(_Strict):
    core_hour_usd: float = Field(ge=0)
    gib_hour_usd: float = Field(ge=0)
    gpu_hour_usd: dict[str, float]

    @field_validator("gpu_hour_usd")
    @classmethod
    def _has_default(cls, value: dict[str, float]) -> dict[str, float]:
        if "default" not in value:
            raise ValueError("gpu_hour_usd needs a 'default' price")
        return value

    def gpu_hour_for(self, gpu_model: str | None) -> float:
        """USD per GPU-hour for a GPU model, falling back to the default price."""
        return self.gpu_hour_usd.get(gpu_model or "", self.gpu_hour_usd["default"])


class ClusterConfig(_Strict):
    name: str
    scheduler: str = Field(pattern="^(slurm|kubernetes|swf)$")
    prices: Prices
    partitions: dict[str, PartitionSpec] = Field(default_factory=dict)
    gpu_models: dict[str, GpuModelSpec] = Field(default_factory=dict)


# The documented default price sheet for a cluster without conf/clusters/<name>.yaml: OpenCost's fallback
# list (opencost configs/default.json, "Default prices based on GCP us-central1"), in USD per vCPU-hour,
# GiB-hour and GPU-hour.
DEFAULT_PRICES = Prices(core_hour_usd=0.031611, gib_hour_usd=0.004237, gpu_hour_usd={"default": 0.95})


def default_cluster_config(name: str) -> ClusterConfig:
    """The config of a cluster without a yaml: the default price sheet, no partitions or GPU models."""
    return ClusterConfig(name=name, scheduler="slurm", prices=DEFAULT_PRICES)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (`SmtpSettings | None` holds SmtpSettings); None for a plain value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def setting_paths(model: type[BaseModel] = Settings) -> list[tuple[str, ...]]:
    """Every leaf setting's path, in declaration order: ("warehouse",), ("spark", "master"), ..."""
    paths: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        inner = _model_of(field.annotation)
        paths += [(name, *sub) for sub in setting_paths(inner)] if inner else [(name,)]
    return paths


def env_name(path: tuple[str, ...]) -> str:
    """The variable that overrides a setting: ("spark", "master") -> JOBFIT_SPARK__MASTER."""
    return ENV_PREFIX + "__".join(path).upper()


def _env_path(name: str) -> list[str]:
    """The path a variable names: JOBFIT_SPARK__MASTER -> ["spark", "master"] (`env_name` reversed)."""
    return name[len(ENV_PREFIX) :].lower().split("__")


def env_names() -> list[str]:
    """Every JOBFIT_* variable jobfit reads: JOBFIT_CONF_DIR, JOBFIT_SERVE_TOKEN, JOBFIT_SMTP_PASSWORD, then
    one per setting."""
    return [*NON_SETTING_VARS, *(env_name(path) for path in setting_paths())]


def _is_setting(path: list[str], model: type[BaseModel] = Settings) -> bool:
    """Whether a path names a setting, a settings group, or an entry of a mapping (spark.conf.<key>)."""
    field = model.model_fields.get(path[0])
    if field is None or len(path) == 1:
        return field is not None
    inner = _model_of(field.annotation)
    return _is_setting(path[1:], inner) if inner else get_origin(field.annotation) is dict


def _unknown_variables(names: list[str]) -> str:
    """One line naming each variable that is no setting, a close match if any, and the valid variables."""
    valid = env_names()
    described = []
    for name in sorted(names):
        setting = ".".join(_env_path(name))
        close = difflib.get_close_matches(name, valid, n=1)
        described.append(f"{name} (no setting {setting}" + (f"; did you mean {close[0]}?)" if close else ")"))
    plural = "s" if len(names) > 1 else ""
    return f"unknown variable{plural} {', '.join(described)}; valid variables: {', '.join(valid)}"


def _env_overrides(environ: Mapping[str, str], source: str) -> dict[str, Any]:
    """JOBFIT_SPARK__MASTER=yarn -> {"spark": {"master": "yarn"}} (YAML values); unknown name: ConfigError."""
    overrides: dict[str, Any] = {}
    unknown: list[str] = []
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in NON_SETTING_VARS:
            continue
        path = _env_path(name)
        if not _is_setting(path):
            unknown.append(name)
            continue
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = yaml.safe_load(raw) if raw else raw
    if unknown:
        raise ConfigError(f"{source}: {_unknown_variables(unknown)}")
    return overrides


def _describe(exc: ValidationError, source: str) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{source}: {where}: {first['msg']}"


def resolve_conf_dir(environ: Mapping[str, str] | None = None, conf_dir: Path | None = None) -> Path:
    """The conf folder (base.yaml, local.yaml, clusters/): $JOBFIT_CONF_DIR, else `conf_dir`, else conf/."""
    return Path((environ or {}).get(CONF_DIR_VAR) or conf_dir or CONF_DIR)


def load_settings(environ: Mapping[str, str] | None = None, conf_dir: Path | None = None) -> Settings:
    """Settings from base.yaml, then local.yaml, then JOBFIT_* variables (last wins)."""
    environ = environ or {}
    conf_dir = resolve_conf_dir(environ, conf_dir)
    data = _read_yaml(conf_dir / "base.yaml") if (conf_dir / "base.yaml").exists() else {}
    if (conf_dir / "local.yaml").exists():
        data = _deep_merge(data, _read_yaml(conf_dir / "local.yaml"))
    source = f"settings ({conf_dir})"
    data = _deep_merge(data, _env_overrides(environ, source))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


def cluster_names(conf_dir: Path | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Names of the clusters with a clusters/<name>.yaml in the conf folder (see `resolve_conf_dir`)."""
    return sorted(p.stem for p in (resolve_conf_dir(environ, conf_dir) / "clusters").glob("*.yaml"))


def load_cluster(
    name: str, conf_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> ClusterConfig:
    """The cluster's capacity and price sheet from clusters/<name>.yaml in `resolve_conf_dir`'s folder."""
    conf_dir = resolve_conf_dir(environ, conf_dir)
    path = conf_dir / "clusters" / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(cluster_names(conf_dir)) or "none"
        raise ConfigError(f"no cluster config {path} (known clusters: {known})")
    try:
        return ClusterConfig.model_validate(_read_yaml(path))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, str(path))) from exc
