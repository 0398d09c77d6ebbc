"""Script features known at submit time: parsed directives and arguments, and a per-cluster text embedding."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # scikit-learn takes seconds to import: only fitting an embedding loads it
    from scipy.sparse import csr_matrix
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

# silver.scripts columns used as numbers and as categories (LightGBM categorical features).
SCRIPT_NUMERIC = (
    "script_req_cpus_per_task",
    "script_req_ntasks",
    "script_req_nodes",
    "script_req_mem_bytes",
    "script_req_gpus",
    "script_timelimit_s",
    "script_batch_size",
    "script_n_ranks",
    "script_n_inputs",
    "script_model_params",
)
SCRIPT_CATEGORICAL = ("script_launcher", "script_precision", "script_gpu_type", "script_framework")

_PARAMS_RE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bBmMkK])(?![a-zA-Z])")
_SCALE = {"b": 1e9, "m": 1e6, "k": 1e3}


def parse_model_params(model_name: str | None) -> float | None:
    """Parameter count implied by a model name such as `llama-2-7b` or `opt-350m` (None when absent)."""
    if not isinstance(model_name, str) or not model_name:
        return None
    match = _PARAMS_RE.search(model_name)
    if match is None:
        return None
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


# silver.scripts column -> the feature column it becomes (`text` feeds `script_text`).
SCRIPT_COLUMNS = {
    "req_cpus_per_task": "script_req_cpus_per_task",
    "req_ntasks": "script_req_ntasks",
    "req_nodes": "script_req_nodes",
    "req_mem_bytes": "script_req_mem_bytes",
    "req_gpus": "script_req_gpus",
    "timelimit_s": "script_timelimit_s",
    "batch_size": "script_batch_size",
    "n_ranks": "script_n_ranks",
    "launcher": "script_launcher",
    "precision": "script_precision",
    "gpu_type": "script_gpu_type",
    "text": "script_body",
}


def count_inputs(input_paths: str | None) -> int:
    """How many input paths a silver.scripts `input_paths` value lists (comma or space separated)."""
    if not isinstance(input_paths, str):
        return 0
    return len([p for p in re.split(r"[,\s]+", input_paths) if p])


def first_framework(frameworks: str | None) -> str | None:
    """The first detected framework: the one that decides the memory profile (torch, jax, gromacs, ...)."""
    if not isinstance(frameworks, str):
        return None
    return frameworks.split(",")[0].strip() or None


def fallback_text(job_name: object, partition: object, qos: object) -> str:
    """What stands for the script text when there is none: the job name, partition and QoS as words."""
    words = ["" if v is None or pd.isna(v) else str(v) for v in (job_name, partition, qos)]
    return f"{words[0]} partition_{words[1]} qos_{words[2]}"


def script_values(script: Mapping[str, object] | None, job: Mapping[str, object]) -> dict[str, object]:
    """One job's `script_*` features and `script_text` from its silver.scripts row (None: no script), as
    `with_script_features` computes them for a frame (the request path's engine)."""
    values: dict[str, object] = dict.fromkeys(SCRIPT_COLUMNS.values())
    values |= {"script_n_inputs": None, "script_model_params": None, "script_framework": None}
    if script is not None:
        values |= {new: script.get(old) for old, new in SCRIPT_COLUMNS.items()}
        values["script_n_inputs"] = count_inputs(script.get("input_paths"))  # type: ignore[arg-type]
        values["script_model_params"] = parse_model_params(script.get("model_name"))  # type: ignore[arg-type]
        values["script_framework"] = first_framework(script.get("frameworks"))  # type: ignore[arg-type]
    body = values.pop("script_body")
    values["script_text"] = (
        body
        if isinstance(body, str)
        else fallback_text(job.get("job_name"), job.get("partition"), job.get("qos"))
    )
    return values


def with_script_features(jobs: pd.DataFrame, scripts: pd.DataFrame) -> pd.DataFrame:
    """Jobs plus the `script_*` columns of their script (joined on `script_hash`; nulls when unknown) and
    `script_text` for the embedding (the script text, else job name, partition and QoS as words)."""
    table = scripts.drop_duplicates("script_hash", keep="last")
    info = table[["script_hash", *SCRIPT_COLUMNS]].rename(columns=SCRIPT_COLUMNS).copy()
    info["script_n_inputs"] = table["input_paths"].map(count_inputs)
    info["script_model_params"] = table["model_name"].map(parse_model_params)
    info["script_framework"] = table["frameworks"].map(first_framework)
    merged = jobs.merge(info, on="script_hash", how="left")
    fallback = [
        fallback_text(*row)
        for row in zip(merged["job_name"], merged["partition"], merged["qos"], strict=True)
    ]
    merged["script_text"] = merged["script_body"].where(merged["script_body"].notna(), fallback)
    return merged.drop(columns=["script_body"])


@dataclass
class TextEmbedder:
    """Hashing TF-IDF + truncated SVD fitted on one cluster's training scripts; `dims` output columns."""

    vectorizer: HashingVectorizer
    tfidf: TfidfTransformer | None
    svd: TruncatedSVD | None
    dims: int

    @property
    def columns(self) -> list[str]:
        return [f"emb_{i}" for i in range(self.dims)]

    def transform(self, texts: pd.Series) -> pd.DataFrame:
        """The embedding of each text (rows aligned with `texts`); empty frame when dims == 0."""
        if self.dims == 0 or self.tfidf is None or self.svd is None:
            return pd.DataFrame(index=texts.index)
        unique, inverse = np.unique(texts.fillna("").astype(str).to_numpy(), return_inverse=True)
        reduced = self._project(self.vectorizer.transform(unique))
        return pd.DataFrame(reduced[inverse], index=texts.index, columns=self.columns)

    def transform_one(self, text: str) -> np.ndarray:
        """The embedding of one text (`dims` values), as `transform` computes it for a frame."""
        if self.dims == 0 or self.tfidf is None or self.svd is None:
            return np.zeros(0)
        params = self.__dict__.get("_hash_params")
        if params is None:
            params = self.__dict__["_hash_params"] = tuple(sorted(self.vectorizer.get_params().items()))
        return self._project(_hashed_counts(self.vectorizer, params, text))[0]

    def _project(self, counts: csr_matrix) -> np.ndarray:
        """Sublinear tf-idf, l2-normalised per row, projected on the SVD components: what sklearn's
        TfidfTransformer and TruncatedSVD.transform compute, without their per-call checks (a submit
        hook waits on this)."""
        assert self.tfidf is not None and self.svd is not None
        x = counts.tocsr().astype("float64", copy=True)
        x.data = (np.log(x.data) + 1.0) * self.tfidf.idf_[x.indices]
        rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
        norms = np.sqrt(np.bincount(rows, weights=x.data**2, minlength=x.shape[0]))
        x.data /= np.where(norms > 0, norms, 1.0)[rows]
        # A C-ordered copy of the components' transpose, made once: with the transposed view scipy
        # copies the (features x dims) matrix on every product (0.7 ms a text instead of 5 us).
        projection = self.__dict__.get("_projection")
        if projection is None:
            projection = self.__dict__["_projection"] = np.ascontiguousarray(self.svd.components_.T)
        return np.asarray(x @ projection)

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_projection", "_hash_params")}


# Hashed token counts of recent texts, shared by every embedder with the same (stateless) vectorizer: a
# request's four targets hash its script once, and a script submitted again is not hashed again.
_COUNTS: OrderedDict[tuple[object, bytes], csr_matrix] = OrderedDict()
_COUNTS_LOCK = threading.Lock()
_COUNTS_KEPT = 512


def _hashed_counts(vectorizer: HashingVectorizer, params: object, text: str) -> csr_matrix:
    """`vectorizer.transform([text])`, from the cache when the same text was hashed with the same params."""
    key = (params, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
    with _COUNTS_LOCK:
        counts = _COUNTS.get(key)
        if counts is not None:
            _COUNTS.move_to_end(key)
            return counts
    counts = vectorizer.transform([text])
    with _COUNTS_LOCK:
        _COUNTS[key] = counts
        while len(_COUNTS) > _COUNTS_KEPT:
            _COUNTS.popitem(last=False)
    return counts


def fit_text_embedder(texts: pd.Series, dims: int = 16, seed: int = 0) -> TextEmbedder:
    """Fit the embedding on distinct training texts (tokens: words, flags, numbers with units, bigrams)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    vectorizer = HashingVectorizer(
        n_features=2**15,
        token_pattern=r"[A-Za-z0-9_.:=/-]+",
        ngram_range=(1, 2),
        alternate_sign=False,
        norm=None,
        lowercase=True,
    )
    unique = pd.Series(texts.fillna("").astype(str).unique())
    dims = min(dims, len(unique) - 1)
    if dims < 2:
        return TextEmbedder(vectorizer, None, None, 0)
    counts = vectorizer.transform(unique)
    tfidf = TfidfTransformer(sublinear_tf=True).fit(counts)
    svd = TruncatedSVD(n_components=dims, random_state=seed).fit(tfidf.transform(counts))
    return TextEmbedder(vectorizer, tfidf, svd, dims)
