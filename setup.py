"""kb's compiled parts, each beside its owner: models/_encoder.c (the in-place query encoder's
int8 products, models/query_encoder.py), runtime/_kernels.c (cosines over float16 vectors, kb's
walk of an HNSW graph and BM25 sums: runtime/cosines.py, runtime/graph_walk.py,
runtime/bm25.py) and formats/_crc32.c (crc32, formats/checksum.py), sharing formats/kernels.h
and formats/crc32.h. Everything else is declared in pyproject.toml. The extensions are optional:
where they cannot be compiled, each job runs its reference instead, slower: the encoder in
numpy (query vectors within cosine 0.999 of the compiled ones on average:
tests/models/test_query_encoder.py), cosines in numpy, graph searches by usearch, crc32 by zlib."""

import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-math-errno"]
headers = ["formats/kernels.h", "formats/crc32.h"]
setup(
    ext_modules=[
        Extension(f"kb.{owner}.{name}", [f"{owner}/{name}.c"], depends=headers, extra_compile_args=args, optional=True)
        for owner, name in (("models", "_encoder"), ("runtime", "_kernels"), ("formats", "_crc32"))
    ]
)
