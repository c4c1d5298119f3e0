"""Would a graph built over int8 copies of the vectors (faster distances while it is built), then
stored and searched as float16 as kb stores it, be as good? Builds usearch graphs of the first N
vectors of a scale corpus (bench/scale.py) per ``KIND:M:EF_ADD``, and reports each one's add time
and recall@10 (top 10 of a 50-neighbour search, as kb's dense leg takes them) against exact search
over the float16 vectors, at several search ef.

    python bench/hnsw_build_kinds.py --vectors bench/out/scale-1m/vectors.npy \
        --queries bench/out/scale-1m/queries.npz --chunks 200000 f16:16:128 i8:16:128 i8:24:128

A graph built as int8 is stored with float16 rows instead (the matrix rewritten row by row, the
header's scalar kind set to f16; formats/hnsw.py gives the layout): the same graph, searched the
way kb would search it. Adds run on 2 threads, as bench/scale.py --hnsw-threads 2 builds.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EFS = (256, 1024, 2048)
SCALAR_F16 = 12
SCALAR_AT = 14  # in the 64-byte head: magic(7), version u16 x3, metric(u8), then the scalar kind


def as_f16_image(path: Path, vecs16: np.ndarray) -> Path:
    """The usearch image at ``path`` with its matrix replaced by ``vecs16`` (float16, in slot order)."""
    from kb.formats.hnsw import HEAD_SIZE, MATRIX_START, check_hnsw

    buf = path.read_bytes()
    rows, cols = struct.unpack("<II", buf[:MATRIX_START])
    img = check_hnsw(memoryview(buf), len(vecs16), neighbours=False)
    key_of_row = np.arange(len(vecs16)) if img.row_of_key is None else np.argsort(img.row_of_key)
    graph = MATRIX_START + rows * cols
    head = bytearray(buf[graph : graph + HEAD_SIZE])
    head[SCALAR_AT] = SCALAR_F16
    out = path.with_suffix(".f16")
    with open(out, "wb") as f:
        f.write(struct.pack("<II", len(vecs16), vecs16.shape[1] * 2))
        f.write(vecs16[key_of_row].tobytes())
        f.write(bytes(head))
        f.write(buf[graph + HEAD_SIZE :])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--chunks", type=int, default=200_000)
    ap.add_argument("kinds", nargs="+", metavar="KIND:M:EF_ADD", help="usearch scalar kind (f16, i8, bf16), connectivity, expansion_add")
    a = ap.parse_args(argv)
    from usearch.index import Index

    x = np.asarray(np.load(a.vectors, mmap_mode="r")[: a.chunks], dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x16 = x.astype(np.float16)
    stored = x16.astype(np.float32)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    q = np.load(a.queries)["vectors"]
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    exact = np.argsort(-(q @ stored.T), axis=1, kind="stable")[:, :10]
    print(f"{len(x):,} vectors, {len(q)} queries; recall@10 at ef {', '.join(map(str, EFS))}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.kinds:
            kind, m, ef_add = spec.split(":")
            idx = Index(ndim=x.shape[1], metric="cos", dtype=kind, connectivity=int(m), expansion_add=int(ef_add))
            t = time.perf_counter()
            idx.add(np.arange(len(x), dtype=np.uint64), x, threads=2)
            took = time.perf_counter() - t
            path = Path(tmp) / f"{kind}-{m}-{ef_add}.usearch"
            idx.save(str(path))
            del idx
            if kind != "f16":
                path = as_f16_image(path, x16)
            g = Index.restore(str(path), view=True)
            recalls = []
            for ef in EFS:
                g.expansion_search = ef
                hits = sum(len(set(np.asarray(g.search(qv, 50).keys)[:10].tolist()) & set(e.tolist())) for qv, e in zip(q, exact))
                recalls.append(hits / (10 * len(q)))
            print(f"| {spec} | {took:.1f} s | " + " | ".join(f"{r:.4f}" for r in recalls) + " |", flush=True)
            del g


if __name__ == "__main__":
    sys.exit(main())
