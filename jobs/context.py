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
        """The cluster's config (capacity, prices); a UsageError when it has no conf/clusters/<name>.yaml."""
        from conf import ConfigError

        try:
            return load_cluster(name)
        except ConfigError as exc:
            raise UsageError(str(exc)) from exc

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
