"""Script features known at submit time: parsed directives and arguments, and a per-cluster text embedding."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # scikit-learn takes seconds to import: only fitting an embedding loads it
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
    if not model_name:
        return None
    match = _PARAMS_RE.search(model_name)
    if match is None:
        return None
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


def with_script_features(jobs: pd.DataFrame, scripts: pd.DataFrame) -> pd.DataFrame:
    """Jobs plus the `script_*` columns of their script (joined on `script_hash`; nulls when unknown) and
    `script_text` for the embedding (the script text, else job name, partition and QoS as words)."""
    cols = {
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
    table = scripts.drop_duplicates("script_hash", keep="last")
    info = table[["script_hash", *cols]].rename(columns=cols).copy()
    info["script_n_inputs"] = (
        table["input_paths"].fillna("").map(lambda s: len([p for p in re.split(r"[,\s]+", s) if p]))
    )
    info["script_model_params"] = table["model_name"].map(parse_model_params)
    # The first detected framework: the one that decides the memory profile (torch, jax, gromacs, ...).
    info["script_framework"] = table["frameworks"].fillna("").map(lambda s: s.split(",")[0].strip() or None)
    merged = jobs.merge(info, on="script_hash", how="left")
    fallback = (
        merged["job_name"].fillna("").astype(str)
        + " partition_"
        + merged["partition"].fillna("").astype(str)
        + " qos_"
        + merged["qos"].fillna("").astype(str)
    )
    merged["script_text"] = merged["script_body"].fillna(fallback)
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
        reduced = self.svd.transform(self.tfidf.transform(self.vectorizer.transform(unique)))
        return pd.DataFrame(reduced[inverse], index=texts.index, columns=self.columns)


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
