"""Shared fixtures. Builds here use the deterministic hash embedder (tests/fakes.py, registered
with kb-build and kb by tests/corpora.py): tests check plumbing and math, never model quality."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from corpora import SAMPLE, TINY, build_hash

# Property tests are seeded (derandomized) so a run is repeatable; no deadline on a 2-core CI.
settings.register_profile("kb", derandomize=True, deadline=None, max_examples=100, database=None)  # nothing written into the checkout
settings.load_profile("kb")


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
