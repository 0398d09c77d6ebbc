"""What the service answers from: per cluster, the champions, the history snapshot by user and the
price sheet; held behind one reference that a reload swaps after the new state is fully built."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from conf import ClusterConfig
from features.query import HistoryIndex, history_index
from features.table import history_snapshot_columns
from models.serving.answer import Champion


@dataclass(frozen=True)
class ClusterState:
    """One cluster as loaded: champion (predictor, version) per target (None: no champion), the history
    snapshot indexed by user and script, and where the snapshot came from (None: `jobfit train` never
    logged one)."""

    name: str
    config: ClusterConfig | None
    champions: Mapping[str, tuple[Champion, str] | None]
    history: HistoryIndex
    source: dict[str, object] | None
    gpu_mem_bytes: dict[str, float]
    history_rows: int

    @property
    def has_champion(self) -> bool:
        return any(c is not None for c in self.champions.values())

    def versions(self) -> dict[str, str | None]:
        """Champion version per target (None where there is none)."""
        return {t: (c[1] if c is not None else None) for t, c in self.champions.items()}


def cluster_state(
    name: str,
    config: ClusterConfig | None,
    champions: Mapping[str, tuple[Champion, str] | None],
    snapshot: pd.DataFrame | None,
    source: dict[str, object] | None,
    gpu_mem_bytes: dict[str, float],
) -> ClusterState:
    """A ClusterState with the snapshot indexed once (a request then looks its user and script up by key)."""
    frame = snapshot if snapshot is not None else pd.DataFrame(columns=history_snapshot_columns())
    return ClusterState(
        name=name,
        config=config,
        champions=dict(champions),
        history=history_index(frame),
        source=source if snapshot is not None else None,
        gpu_mem_bytes=gpu_mem_bytes,
        history_rows=len(frame),
    )


@dataclass(frozen=True)
class ServingState:
    """Every served cluster, as loaded at `loaded_at` (UTC)."""

    clusters: Mapping[str, ClusterState]
    loaded_at: str

    @property
    def ready(self) -> bool:
        return any(c.has_champion for c in self.clusters.values())


@dataclass
class StateHolder:
    """The current ServingState. A request reads `state` once and answers from that object; `reload`
    builds the next state completely, then swaps the reference (in-flight requests keep the old one)."""

    loader: Callable[[], ServingState]
    state: ServingState | None = None
    reloads: int = 0  # successful loads, the one at start included
    failed_reloads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reload(self) -> ServingState:
        """Load a fresh state and make it current; one reload at a time. A failing load keeps the old
        state and raises."""
        with self._lock:
            try:
                fresh = self.loader()
            except Exception:
                self.failed_reloads += 1
                raise
            self.state = fresh
            self.reloads += 1
            return fresh
