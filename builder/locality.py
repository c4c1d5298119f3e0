"""Where the HNSW graph's nodes lie in the artifact (kb.toml ``[vectors] order``), and the order
they are added in (``[vectors] add_order``).

usearch gives each node the next slot of its graph and of its vector matrix as it is added. In
chunk-id order, the neighbours of a node then lie anywhere in the artifact, and a one-shot
search's walk of the graph (runtime/graph_walk.py) reads a page for nearly every vector it
compares: at a million chunks most of that walk's time is first touches of pages. With
``clusters``, kb-build moves the finished graph's nodes (formats/hnsw.py ``permuted``: the same
graph, renamed) so that near vectors get near slots, and the walk reads fewer pages.

The adds themselves are faster in that order too: each new node's neighbours were added just
before it, so the graph's search for them stays in memory already read. Added in that order
alone, the graph is worse: its early nodes, all of one cluster, get no long links, and recall
falls. ``add_order``'s ``mixed`` therefore adds a seeded random ``RANDOM_FIRST`` of the vectors
first, then the rest leaf by leaf (figures: bench/notes/2026-12-02-scale-million.md).

The order: a two-level spherical k-means of the vectors, K clusters and K clusters within each
(K about the fourth root of the count, so a leaf holds about its square root), 8 Lloyd
iterations on a seeded sample of each level; leaf by leaf, by position within a leaf. The vectors
are read a block at a time, never copied whole. The orders depend only on the vectors (fixed
seeds), so a build with one graph thread still writes the same bytes every time on the same
machine.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

MIN_CLUSTERED = 4096  # fewer vectors than this stay where they were added: too few to gain
SAMPLE_PER_CLUSTER = 50  # k-means sample: this many vectors per centroid wanted
ITERATIONS = 8
BLOCK_ROWS = 1 << 15  # vectors a pass reads at a time
SEED = 0
RANDOM_FIRST = 0.05  # add_order "mixed": the share of the vectors added first, in random order

Rows = Callable[[np.ndarray], np.ndarray]  # sorted row numbers -> those vectors (float32)


def clusters_per_level(n: int) -> int:
    return int(min(64, max(2, round(n**0.25))))


def unit_rows(x: np.ndarray) -> np.ndarray:
    """``x`` as float32 rows of length 1 (a zero row stays zero)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), np.float32(1e-12))


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, iterations: int = ITERATIONS) -> np.ndarray:
    """``k`` unit centroids of the unit rows ``x`` (spherical Lloyd iterations from k distinct rows)."""
    c = x[np.sort(rng.choice(len(x), k, replace=False))].copy()
    for _ in range(iterations):
        nearest = np.argmax(x @ c.T, axis=1)
        for j in range(k):
            members = x[nearest == j]
            if len(members):
                c[j] = unit_rows(members.sum(0))
    return c


def cluster_order(n: int, rows: Rows, k: int | None = None) -> np.ndarray:
    """The positions 0..n-1 in their new order: leaf by leaf of a two-level k-means with
    ``k`` clusters a level (default ``clusters_per_level(n)``), by position within a leaf.
    ``rows(sorted positions)`` reads vectors."""
    if n < MIN_CLUSTERED:
        return np.arange(n, dtype=np.int64)
    first, second = cluster_labels(n, rows, k)
    return np.lexsort((np.arange(n), second, first))


def cluster_labels(n: int, rows: Rows, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each position's cluster and its cluster within that one (``cluster_order``)."""
    k = k or clusters_per_level(n)
    rng = np.random.default_rng(SEED)
    top = kmeans(unit_rows(rows(np.sort(rng.choice(n, min(n, SAMPLE_PER_CLUSTER * k), replace=False)))), k, rng)
    first = np.concatenate([np.argmax(rows(np.arange(a, min(n, a + BLOCK_ROWS))) @ top.T, axis=1) for a in range(0, n, BLOCK_ROWS)])
    subs = np.zeros((k, k, top.shape[1]), dtype=np.float32)  # each cluster's own centroids
    sizes = np.bincount(first, minlength=k)
    for j in np.flatnonzero(sizes > k):
        members = np.flatnonzero(first == j)
        sample = np.sort(rng.choice(members, min(len(members), SAMPLE_PER_CLUSTER * k), replace=False))
        subs[j] = kmeans(unit_rows(rows(sample)), k, rng)
    second = np.zeros(n, dtype=np.int64)
    for a in range(0, n, BLOCK_ROWS):
        block, cl = rows(np.arange(a, min(n, a + BLOCK_ROWS))), first[a : a + BLOCK_ROWS]
        for j in np.unique(cl):
            if sizes[j] > k:
                at = np.flatnonzero(cl == j)
                second[a + at] = np.argmax(block[at] @ subs[j].T, axis=1)
    return first, second


def mixed_order(n: int, clustered: np.ndarray, share: float = RANDOM_FIRST) -> np.ndarray:
    """The positions 0..n-1 in ``add_order`` "mixed": a seeded random ``share`` of them (in
    position order), then the rest in ``clustered`` order (``cluster_order``'s)."""
    if n < MIN_CLUSTERED:
        return np.arange(n, dtype=np.int64)
    first = np.sort(np.random.default_rng(SEED).choice(n, int(n * share), replace=False))
    taken = np.zeros(n, dtype=bool)
    taken[first] = True
    return np.concatenate([first, clustered[~taken[clustered]]])


def moved(image, count: int) -> Iterator[bytes]:
    """The pieces of the usearch image ``image`` of ``count`` vectors (kb-build's saved graph)
    with its nodes in ``cluster_order`` of their vectors (formats/hnsw.py ``permuted``)."""
    from kb.formats.hnsw import permuted

    vectors = image_vectors(image, count)
    order = cluster_order(count, lambda at: vectors[at].astype(np.float32))
    del vectors
    return permuted(image, count, order)


def image_vectors(image, count: int) -> np.ndarray:
    """The vector matrix at the head of a usearch image of ``count`` vectors, by slot: f16 or
    f32 viewed in place, bf16 widened to f32 (a copy)."""
    from kb.formats.hnsw import MATRIX_START, NUMPY_SCALARS, graph_layout

    img = graph_layout(image, count).image
    raw = np.frombuffer(image, dtype=np.uint8, count=img.rows * img.cols, offset=MATRIX_START).reshape(img.rows, img.cols)
    if img.scalar in NUMPY_SCALARS:
        return raw.view(NUMPY_SCALARS[img.scalar])
    return (raw.view("<u2").astype("<u4") << 16).view("<f4")  # bf16: the high half of an f32
