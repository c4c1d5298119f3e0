"""A process forked after CTranslate2 ran can still embed and rerank (models/encoders.py
``ForkSafeEncoder``). CTranslate2's CPU threads are a GNU OpenMP pool, which does not survive
fork(): before the fix, a child's first forward on two threads waited forever (a pre-fork server
or a multiprocessing pool warmed up in its parent hung on its first search)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_embedder import _minilm  # noqa: E402

RERANKER = Path(__file__).resolve().parents[2] / "models" / "reranker"


def _in_child(fn) -> int:
    """Run ``fn`` in a forked child with a 30 s alarm; its exit status (or -1 if it was killed)."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            signal.alarm(30)
            code = 0 if fn() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1


def test_an_embedder_that_ran_on_two_threads_embeds_in_a_forked_child():
    from kb.models.encoders import CT2Embedder

    emb = CT2Embedder(_minilm("int8"), device="cpu", compute_type="int8", threads=2)
    want = emb.embed_query("rotate the database credentials")  # the parent's OpenMP pool runs here

    def child() -> bool:
        got = emb.embed_query("rotate the database credentials")
        return float(got @ want) > 0.999 and emb.threads == 1

    assert _in_child(child) == 0, "the forked child's embedding hung (-1) or differed (1)"
    assert emb.threads == 2  # the parent keeps its own model


@pytest.mark.skipif(not (RERANKER / "kb_model.json").is_file(), reason="this checkout ships no reranker")
def test_a_cross_encoder_that_ran_on_two_threads_scores_in_a_forked_child():
    from kb.models.convert import read_model_folder
    from kb.runtime.cross_encoder import CT2CrossEncoder

    ce = CT2CrossEncoder(read_model_folder(RERANKER, "cross-encoder"), device="cpu", threads=2)
    passages = ["Rotate credentials with the vault CLI.", "The cafeteria opens at noon."]
    want = ce.score("how do I rotate credentials", passages)

    def child() -> bool:
        return bool(np.allclose(ce.score("how do I rotate credentials", passages), want, atol=0.05))

    assert _in_child(child) == 0, "the forked child's rerank hung (-1) or differed (1)"


def test_a_model_loaded_on_cuda_refuses_in_a_forked_child_with_a_clear_error():
    from kb.models.encoders import ForkSafeEncoder, ModelError

    enc = ForkSafeEncoder.__new__(ForkSafeEncoder)  # as if loaded on a GPU in the parent
    enc._files, enc._label, enc._what, enc.device, enc.compute_type, enc.threads = {}, "x", "model 'x'", "cuda", "float16", 1
    enc._encoder, enc._pid = None, os.getpid() + 1

    with pytest.raises(ModelError, match="^model 'x' was loaded on cuda before this process was forked, and CUDA does not survive a fork; start worker processes with the spawn method$"):
        enc.forward_batch([[1, 2]])
