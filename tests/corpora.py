"""The committed corpora and golden artifacts the tests use, and the stand-in build of a corpus.
(A helper module: test modules and conftest.py import it; they never import each other.)"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import fakes
from kb.builder.build import build
from kb.builder.config import load_config

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "kb-sample"
TINY = Path(__file__).resolve().parent / "data" / "tiny"
GOLDEN = Path(__file__).resolve().parent / "golden"
# `kb` in a subprocess, able to load artifacts built with the stand-in embedder
KB_CLI = SERVE_CLI = (sys.executable, str(Path(__file__).resolve().parent / "fakes.py"))

fakes.register()


def build_hash(corpus: Path, out: Path, **kw):
    """Build ``corpus`` with its kb.toml (if any), the hash stand-in embedder and no reranker."""
    cfg_path = corpus / "kb.toml" if (corpus / "kb.toml").is_file() else None
    cfg = replace(load_config(cfg_path), embedding_model=kw.pop("embedder", "hash"), reranker=kw.pop("reranker", "none"))
    return build([corpus], out, cfg, **kw)
