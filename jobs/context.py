"""What every command gets: settings, the environment, a lazily started SparkSession, output helpers."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from conf import ClusterConfig, Settings, load_cluster, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Where a cluster's prices came from when it has no yaml (reported beside the figures it priced).
DEFAULT_SHEET = "default price sheet (OpenCost's prices, no GPU models)"


class UsageError(Exception):
    """Bad input from the person running jobfit: printed as one line, exit status 2."""


class DataError(Exception):
    """The data failed a table-level check: printed as a readable summary, exit status 1."""


@dataclass
class Context:
    """Per-invocation state shared by the commands."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    quiet: bool = False
    _spark: SparkSession | None = None

    @cached_property
    def settings(self) -> Settings:
        return load_settings(self.environ)

    def cluster(self, name: str) -> ClusterConfig:
        """The cluster's own config, for commands that need its capacity (simulate, demo); a UsageError
        when it has no conf/clusters/<name>.yaml."""
        from conf import ConfigError

        try:
            return load_cluster(name, environ=self.environ)
        except ConfigError as exc:
            raise UsageError(str(exc)) from exc

    def cluster_config(self, name: str) -> tuple[ClusterConfig, str]:
        """The config every reading stage prices and sizes a cluster by, and where it came from: the
        cluster's yaml, else the default price sheet (OpenCost's prices, no GPU models), said on stderr.

        The one policy for a cluster without conf/clusters/<name>.yaml (an SWF log, a new cluster)."""
        from conf import ConfigError, default_cluster_config

        try:
            return load_cluster(name, environ=self.environ), self._cluster_yaml(name)
        except ConfigError:
            self.progress(f"{name}: no conf/clusters/{name}.yaml; using {DEFAULT_SHEET}")
            return default_cluster_config(name), DEFAULT_SHEET

    def _cluster_yaml(self, name: str) -> str:
        """Where the cluster's yaml was read: `conf/clusters/<name>.yaml`, or its path in JOBFIT_CONF_DIR."""
        from conf import CONF_DIR, resolve_conf_dir

        conf_dir = resolve_conf_dir(self.environ)
        path = conf_dir / "clusters" / f"{name}.yaml"
        return f"conf/clusters/{name}.yaml" if conf_dir == CONF_DIR else str(path)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from jobs.io.spark import build_session

            self.progress("starting Spark ...")
            self._spark = build_session(self.settings)
        return self._spark

    def use_spark(self, session: SparkSession) -> None:
        """Run on an existing session (tests share one)."""
        self._spark = session

    def now(self) -> datetime:
        """The current time in UTC (the one place commands read the clock)."""
        return datetime.now(UTC).replace(tzinfo=None)

    def progress(self, message: str) -> None:
        """A progress line on stderr (never on stdout, which carries results)."""
        if not self.quiet:
            print(f"jobfit: {message}", file=sys.stderr, flush=True)

    def emit(self, payload: Any, as_json: bool, text: str | None = None) -> None:
        """Write the result: JSON on stdout with --json, otherwise the human text."""
        if as_json:
            print(json.dumps(payload, indent=2, sort_keys=False, default=str))
        else:
            print(text if text is not None else payload)
