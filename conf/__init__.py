"""Typed settings: YAML (base.yaml, clusters/<name>.yaml, local.yaml) plus JOBFIT_* overrides."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

CONF_DIR = Path(__file__).resolve().parent
ENV_PREFIX = "JOBFIT_"


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
    conf: dict[str, str] = Field(default_factory=dict)


class MlflowSettings(_Strict):
    tracking_uri: str = "sqlite:///./mlflow.db"
    registry_uri: str | None = None


class SmtpSettings(_Strict):
    host: str
    port: int = 587
    user: str | None = None
    password_env: str | None = None
    sender: str
    starttls: bool = True


class PredictSettings(_Strict):
    underprovision_rate: float = Field(0.02, gt=0, lt=0.5)


class Settings(_Strict):
    warehouse: str = "./warehouse"
    outbox: str = "./outbox"
    default_cluster: str = "demo"
    spark: SparkSettings = Field(default_factory=SparkSettings)
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    smtp: SmtpSettings | None = None
    predict: PredictSettings = Field(default_factory=PredictSettings)


class PartitionSpec(_Strict):
    nodes: int = Field(ge=1)
    cores_per_node: int = Field(ge=1)
    mem_gib_per_node: float = Field(gt=0)
    gpus_per_node: int = Field(0, ge=0)
    gpu_model: str | None = None


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


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """JOBFIT_SPARK__MASTER=yarn -> {"spark": {"master": "yarn"}}; values are parsed as YAML scalars."""
    overrides: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == "JOBFIT_CONF_DIR":
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = yaml.safe_load(raw) if raw else raw
    return overrides


def _describe(exc: ValidationError, source: str) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{source}: {where}: {first['msg']}"


def load_settings(environ: Mapping[str, str] | None = None, conf_dir: Path | None = None) -> Settings:
    """Settings from base.yaml, then local.yaml, then JOBFIT_* variables (last wins)."""
    environ = environ or {}
    conf_dir = Path(environ.get("JOBFIT_CONF_DIR", conf_dir or CONF_DIR))
    data = _read_yaml(conf_dir / "base.yaml") if (conf_dir / "base.yaml").exists() else {}
    if (conf_dir / "local.yaml").exists():
        data = _deep_merge(data, _read_yaml(conf_dir / "local.yaml"))
    data = _deep_merge(data, _env_overrides(environ))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, f"settings ({conf_dir})")) from exc


def cluster_names(conf_dir: Path | None = None) -> list[str]:
    """Names of the clusters with a conf/clusters/<name>.yaml."""
    return sorted(p.stem for p in ((conf_dir or CONF_DIR) / "clusters").glob("*.yaml"))


def load_cluster(name: str, conf_dir: Path | None = None) -> ClusterConfig:
    """The cluster's capacity and price sheet from conf/clusters/<name>.yaml."""
    conf_dir = conf_dir or CONF_DIR
    path = conf_dir / "clusters" / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(cluster_names(conf_dir)) or "none"
        raise ConfigError(f"no cluster config {path} (known clusters: {known})")
    try:
        return ClusterConfig.model_validate(_read_yaml(path))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, str(path))) from exc
