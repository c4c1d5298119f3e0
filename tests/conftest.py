"""Shared fixtures. Builds here use the deterministic hash embedder (runtime/embed.py): tests
check plumbing and math, never model quality."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from kb.builder.build import build
from kb.builder.config import load_config

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "kb-sample"
TINY = Path(__file__).resolve().parent / "data" / "tiny"
GOLDEN = Path(__file__).resolve().parent / "golden"

# Property tests are seeded (derandomized) so a run is repeatable; no deadline on a 2-core CI.
settings.register_profile("kb", derandomize=True, deadline=None, max_examples=100, database=None)  # nothing written into the checkout
settings.load_profile("kb")


def build_hash(corpus: Path, out: Path, **kw):
    """Build ``corpus`` with its kb.toml (if any), the hash stand-in embedder and no reranker."""
    from dataclasses import replace

    cfg_path = corpus / "kb.toml" if (corpus / "kb.toml").is_file() else None
    cfg = replace(load_config(cfg_path), embedding_model=kw.pop("embedder", "hash"), reranker=kw.pop("reranker", "none"))
    return build([corpus], out, cfg, **kw)


@pytest.fixture(scope="session")
def sample_artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "sample.kb"
    build_hash(SAMPLE, out)
    return out


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny.kb"
    build_hash(TINY, out)
    return out
