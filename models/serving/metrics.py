"""Request counts, a latency histogram, model versions and reloads in Prometheus text format
(exposition 0.0.4, written by hand: prometheus_client is not a dependency)."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

from models.serving.state import StateHolder

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Thread-safe counters the HTTP layer feeds and `render` prints."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self._buckets: dict[str, list[int]] = defaultdict(lambda: [0] * len(LATENCY_BUCKETS_S))
        self._sum_s: Counter[str] = Counter()
        self._count: Counter[str] = Counter()

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """One finished request: its endpoint, HTTP status and latency in seconds."""
        with self._lock:
            self.requests[(endpoint, status)] += 1
            buckets = self._buckets[endpoint]
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if seconds <= bound:
                    buckets[i] += 1
            self._sum_s[endpoint] += seconds
            self._count[endpoint] += 1

    def render(self, holder: StateHolder) -> str:
        """The exposition text (reloads and model versions from the holder)."""
        state = holder.state
        lines = [
            "# HELP jobfit_http_requests_total HTTP requests by endpoint and status.",
            "# TYPE jobfit_http_requests_total counter",
        ]
        with self._lock:
            for (endpoint, status), n in sorted(self.requests.items()):
                lines.append(
                    f'jobfit_http_requests_total{{endpoint="{_label(endpoint)}",status="{status}"}} {n}'
                )
            lines += [
                "# HELP jobfit_http_request_duration_seconds Request latency by endpoint.",
                "# TYPE jobfit_http_request_duration_seconds histogram",
            ]
            for endpoint in sorted(self._count):
                ep = _label(endpoint)
                for bound, n in zip(LATENCY_BUCKETS_S, self._buckets[endpoint], strict=True):
                    lines.append(
                        f'jobfit_http_request_duration_seconds_bucket{{endpoint="{ep}",le="{bound}"}} {n}'
                    )
                total = self._count[endpoint]
                lines.append(
                    f'jobfit_http_request_duration_seconds_bucket{{endpoint="{ep}",le="+Inf"}} {total}'
                )
                lines.append(
                    f'jobfit_http_request_duration_seconds_sum{{endpoint="{ep}"}} {self._sum_s[endpoint]:.6f}'
                )
                lines.append(
                    f'jobfit_http_request_duration_seconds_count{{endpoint="{ep}"}} {self._count[endpoint]}'
                )
            lines += [
                "# HELP jobfit_reloads_total Model reloads by result.",
                "# TYPE jobfit_reloads_total counter",
            ]
        # The load at start is not a reload.
        lines.append(f'jobfit_reloads_total{{result="ok"}} {max(holder.reloads - 1, 0)}')
        lines.append(f'jobfit_reloads_total{{result="error"}} {holder.failed_reloads}')
        lines += [
            "# HELP jobfit_model_version Loaded champion version per cluster and target (value: version).",
            "# TYPE jobfit_model_version gauge",
        ]
        for name, cluster in sorted((state.clusters if state else {}).items()):
            for target, version in cluster.versions().items():
                if version is not None and version.isdigit():
                    labels = f'cluster="{_label(name)}",target="{target}",version="{version}"'
                    lines.append(f"jobfit_model_version{{{labels}}} {version}")
        lines += [
            "# HELP jobfit_history_rows Rows of the loaded history snapshot per cluster.",
            "# TYPE jobfit_history_rows gauge",
        ]
        for name, cluster in sorted((state.clusters if state else {}).items()):
            lines.append(f'jobfit_history_rows{{cluster="{_label(name)}"}} {cluster.history_rows}')
        return "\n".join(lines) + "\n"
