"""A start-up profiler for kb, run by runtime/entry.py before the command when KB_PHASES names
this file (``KB_PHASES=$PWD/packaging/phases.py kb search ...``; the frozen binary too, given the
file's path): prints the wall and CPU time (user + system, every thread of the process) of each
start-up phase to stderr at exit. ``python packaging/oneshot.py phases`` sets it and takes the
medians. It runs after the entry's environment defaults and lazy modules, and defines
``report``, which the entry calls before its ``os._exit`` (atexit covers KB_NO_TWEAKS=1)."""

import atexit
import functools
import sys
import time

clock, cpu = time.perf_counter, time.process_time
t0 = clock()
spans = []


def timed(owner, name, label):
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*a, **k):
        t, c = clock(), cpu()
        try:
            return fn(*a, **k)
        finally:
            spans.append((label, t - t0, clock() - t, cpu() - c))

    setattr(owner, name, wrapper)


def timed_property(owner, name, label):
    prop = owner.__dict__[name]
    timed(prop, "func", label)
    replacement = functools.cached_property(prop.func)
    replacement.__set_name__(owner, name)
    setattr(owner, name, replacement)


t, c = clock(), cpu()
import kb.runtime.cli  # noqa: E402, F401

spans.append(("import kb.runtime.cli (click)", t - t0, clock() - t, cpu() - c))
t, c = clock(), cpu()
from kb.runtime import index, legs, output, search  # noqa: E402

spans.append(("import search/index/output (numpy)", t - t0, clock() - t, cpu() - c))
from kb.models import encoders, query_encoder  # noqa: E402  (to time them: light, numpy is in; not in the spans)
from kb.runtime import graph_walk  # noqa: E402

timed(index.Index, "__init__", "open artifact")
timed(index.DenseSpace, "model_files", "model section -> bytes")
timed(index.DenseSpace, "_checked_image", "vectors: crc32, layout check (and every slot for the graph)")
timed(index.DenseSpace, "_open_vectors", "vector index for HNSW: the above, import usearch, restore")
timed(index.DenseSpace, "_open_walk", "vectors: headers and levels for kb's walk of the graph")
timed(graph_walk.GraphWalk, "search", "kb's walk of the graph (one search)")
timed(index.DenseSpace, "cosines", "vectors: exact cosines (scan)")
timed_property(index.DenseSpace, "query_model", "query model: validate directory")
timed(encoders, "load_embedder", "load embedder (tokenizer, ct2, warm-up)")
timed(query_encoder.QueryEncoder, "__init__", "query encoder: set-up")
timed(query_encoder.QueryEncoder, "prepare", "query encoder: check layers (crc32), a thread beside the BM25 leg")
timed(query_encoder.QueryEncoder, "embed_query", "query encoder: tokenizer set-up (tokenizers only for non-ASCII text), tokenize, forward")
timed(search.Searcher, "search", "Searcher.search (all legs)")
timed(legs, "top_vector", "vector leg")
timed(output, "render_json", "render JSON")


def report():
    print(f"kb phases (ms since entry start / wall / CPU), entry total {1e3 * (clock() - t0):.1f} ms, CPU {1e3 * cpu():.1f} ms:", file=sys.stderr)
    for label, start, dur, used in spans:
        print(f"  {1e3 * start:8.1f} {1e3 * dur:8.1f} {1e3 * used:8.1f}  {label}", file=sys.stderr)


atexit.register(report)
