"""Mean pooling and L2 normalisation of the embedding models' last hidden states: one code for the
passages (models/encoders.py, CTranslate2) and the queries (models/query_encoder.py), so that a
query's vector is rounded as a passage's is; numpy only, so that neither embedder imports the
other's code."""

from __future__ import annotations

import numpy as np

__all__ = ["l2_normalize", "mean_pool"]


def mean_pool(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Masked mean pooling of a batch of last hidden states (b, t, hidden) of sequences of
    ``lengths`` tokens -> (b, hidden) float32: the passages' (models/encoders.py) and the
    queries' pooling, one code so that both round alike."""
    mask = (np.arange(h.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
    summed = np.einsum("bth,bt->bh", h, mask)
    return summed / np.maximum(lengths, 1)[:, None].astype(np.float32)


def l2_normalize(rows: np.ndarray) -> np.ndarray:
    """Each row of a float32 (n, dim) array divided by its L2 norm, in place."""
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows
