"""Query-time reranking with a BERT cross-encoder in CTranslate2 (no torch, no transformers).

Imports only numpy and the stdlib at module level (kb.models.encoders is
numpy-only too); ctranslate2 and tokenizers are imported when a model is
built, and the converter only by load_reranker_path() when it has to convert an
HF folder.

A cross-encoder is a converted model (kb.models.convert.convert_bert, from an
HF BertForSequenceClassification folder); its files, card and head.npz are
specified in formats/SPEC.md (model.rerank, the model card).

CTranslate2 has no classification head. The converter builds the encoder
with its pooling layer, so ``forward_batch`` returns ``pooler_output`` =
tanh(W_p h_[CLS] + b_p); only the classifier linear layer is applied here, in
numpy, float32. If a model comes without CTranslate2's pooler, the pooler is
applied in numpy from head.npz on last_hidden_state[:, 0].

Score: num_labels == 1 -> the logit (ms-marco cross-encoders);
num_labels == 2 -> logit[1] - logit[0], the log-odds of label 1 ("relevant"),
which ranks exactly as softmax(logits)[1]; more labels are refused.
"""

from __future__ import annotations

import io

import numpy as np

from kb.common.errors import error_line
from kb.models.encoders import CT2Model, ModelError

__all__ = ["CT2CrossEncoder", "load_reranker", "load_reranker_path", "ModelError"]

# Longest (query, passage) pair fed to the model: BERT's position table.
MAX_PAIR_TOKENS = 512


class CT2CrossEncoder(CT2Model):
    """(query, passage) relevance scorer: BERT in CTranslate2 + classification head in numpy.

    files: {filename: bytes} of a converted cross-encoder (see module docstring).
    device: "auto" (cuda if a GPU is visible, else cpu), "cpu" or "cuda".
    compute_type: "auto" = int8 on CPU, float16 on CUDA, or any CTranslate2 compute type.
    threads: intra-op threads; 0 = number of physical cores.
    max_tokens: pair window ([CLS] query [SEP] passage [SEP]); default and upper
      bound: kb_model.json's max_tokens, itself capped at 512.
    """

    def __init__(
        self,
        files: dict[str, bytes],
        device: str = "auto",
        compute_type: str = "auto",
        threads: int = 0,
        max_tokens: int | None = None,
    ):
        remedy = "convert the model with kb-build --reranker"
        meta = self._card(files, "cross-encoder", "cls", ("max_tokens",), remedy, user="reranker", what="reranker", subject="cross-encoder")
        limit = min(int(meta["max_tokens"]), MAX_PAIR_TOKENS)
        self.max_tokens: int = limit if max_tokens is None else min(int(max_tokens), limit)

        # ---- classification head
        if "head.npz" not in files:
            raise ModelError(f"cross-encoder {self.name!r} lacks head.npz; {remedy}")
        try:
            with np.load(io.BytesIO(bytes(files["head.npz"])), allow_pickle=False) as z:
                head = {k: np.asarray(z[k], dtype=np.float32) for k in z.files}
            cw, cb = head["classifier_weight"], head["classifier_bias"]
        except KeyError as e:
            raise ModelError(f"head.npz of {self.name!r} lacks {e.args[0]!r}; {remedy}") from None
        except Exception as e:
            raise ModelError(f"head.npz of {self.name!r} is invalid ({type(e).__name__}: {error_line(e)})") from None
        if cw.ndim != 2 or cb.shape != (cw.shape[0],):
            raise ModelError(f"head.npz of {self.name!r} has classifier shapes {cw.shape} and {cb.shape}, expected (labels, hidden) and (labels,)")
        self.num_labels: int = int(cw.shape[0])
        if int(meta.get("num_labels", self.num_labels)) != self.num_labels:
            raise ModelError(f"kb_model.json says {meta.get('num_labels')} labels but head.npz has {self.num_labels}")
        if self.num_labels not in (1, 2):
            raise ModelError(f"cross-encoder {self.name!r} has {self.num_labels} labels; a reranker needs 1 (relevance logit) or 2 (not relevant, relevant)")
        self.dim: int = int(cw.shape[1])
        if int(meta.get("dim", self.dim)) != self.dim:
            raise ModelError(f"head.npz of {self.name!r} expects hidden size {self.dim}, kb_model.json says {meta.get('dim')}")
        # Fold the two labels into one row: w1 - w0 gives logit[1] - logit[0] directly.
        if self.num_labels == 2:
            cw, cb = cw[1:] - cw[:1], cb[1:] - cb[:1]
        self._cls_w = np.ascontiguousarray(cw[0])  # (hidden,)
        self._cls_b = float(cb[0])
        pw, pb = head.get("pooler_dense_weight"), head.get("pooler_dense_bias")
        self._pool_w = self._pool_b = None
        if pw is not None and pb is not None:
            if pw.shape != (self.dim, self.dim) or pb.shape != (self.dim,):
                raise ModelError(f"head.npz of {self.name!r} has pooler shapes {pw.shape} and {pb.shape}, expected ({self.dim}, {self.dim})")
            self._pool_w, self._pool_b = np.ascontiguousarray(pw.T), pb

        # ---- tokenizer: no padding, no truncation (we cut the passage ourselves)
        self._tok = self._tokenizer(files, f"cross-encoder {self.name!r} lacks tokenizer.json; {remedy}")
        self._n_special = int(self._tok.num_special_tokens_to_add(True))
        if self.max_tokens < self._n_special + 2:
            raise ModelError(f"max_tokens {self.max_tokens} is too small for a (query, passage) pair")
        # A query longer than half the window is cut to half: the passage keeps room.
        self._query_cap = (self.max_tokens - self._n_special) // 2

        self._open("kb-reranker", device, compute_type, threads)
        # The first forward after loading is several times slower: pay it here.
        # It also tells whether CTranslate2 applies the pooler.
        ids, types = self._encode_pairs("warm up", ["warm up"], None)
        out = self._encoder.forward_batch(ids, token_type_ids=types)
        self._ct2_pooler = out.pooler_output is not None
        if not self._ct2_pooler and self._pool_w is None:
            raise ModelError(f"cross-encoder {self.name!r} has no pooler (neither in model.bin nor head.npz); {remedy}")

    # ------------------------------------------------------------------

    def _encode_pairs(self, query: str, passages: list[str], passage_tokens: int | None) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids and token type ids of [CLS] query [SEP] passage [SEP] for each passage.

        Only the passage is truncated (to the window left by the query, and to
        passage_tokens); a query longer than half the window is cut to half.
        """
        tok = self._tok
        q = tok.encode(query, add_special_tokens=False)
        if len(q.ids) > self._query_cap:
            q.truncate(self._query_cap)
        room = self.max_tokens - self._n_special - len(q.ids)
        if passage_tokens is not None:
            room = min(room, int(passage_tokens))
        ids, types = [], []
        for p in tok.encode_batch(list(passages), add_special_tokens=False):
            if len(p.ids) > room:
                p.truncate(room)
            e = tok.post_process(q, p, add_special_tokens=True)
            ids.append(e.ids)
            types.append(e.type_ids)
        return ids, types

    def _forward(self, ids: list[list[int]], types: list[list[int]]) -> np.ndarray:
        """Scores of one batch -> (b,) float32."""
        out = self._encoder.forward_batch(ids, token_type_ids=types)
        if self._ct2_pooler:
            x = out.pooler_output
            if self.device != "cpu":
                x = x.to_device(self._cpu)
            pooled = np.asarray(x, dtype=np.float32)
        else:
            h = out.last_hidden_state
            if self.device != "cpu":
                h = h.to_device(self._cpu)
            cls = np.asarray(h, dtype=np.float32)[:, 0]
            pooled = np.tanh(cls @ self._pool_w + self._pool_b)
        return (pooled @ self._cls_w + self._cls_b).astype(np.float32, copy=False)

    def score(self, query: str, passages: list[str], batch_size: int = 8, passage_tokens: int | None = None) -> np.ndarray:
        """Relevance of each passage to query -> float32 (n,), higher is more relevant.

        One logit per passage (logit[1] - logit[0] for a 2-label model). Pairs
        longer than max_tokens lose the end of the passage; passage_tokens caps
        every passage at that many tokens first (cost budget: attention and
        FFN time grow with pair length). Pairs are sorted by length so each
        batch pads little; the result is in the order of passages.
        """
        if isinstance(passages, str):
            raise TypeError("score() takes a list of passages")
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if passage_tokens is not None and int(passage_tokens) < 1:
            raise ValueError(f"passage_tokens must be >= 1 or None, got {passage_tokens!r}")
        n = len(passages)
        result = np.zeros(n, dtype=np.float32)
        if n == 0:
            return result
        batch_size = max(1, int(batch_size))
        ids, types = self._encode_pairs(query, passages, passage_tokens)
        order = sorted(range(n), key=lambda i: len(ids[i]), reverse=True)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            result[idx] = self._forward([ids[i] for i in idx], [types[i] for i in idx])
        return result

    def __repr__(self) -> str:
        return (
            f"CT2CrossEncoder({self.name!r}, labels={self.num_labels}, max_tokens={self.max_tokens}, "
            f"device={self.device!r}, compute_type={self.compute_type!r}, threads={self.threads})"
        )


def load_reranker(files: dict[str, bytes], device: str = "auto", compute_type: str = "auto") -> CT2CrossEncoder:
    """A CT2CrossEncoder from converted files (e.g. the ones an artifact packs)."""
    return CT2CrossEncoder(files, device=device, compute_type=compute_type)


def load_reranker_path(path, device: str = "auto", compute_type: str = "auto") -> CT2CrossEncoder:
    """A CT2CrossEncoder from a folder: a converted one (kb_model.json + model.bin, as written by
    kb-build --reranker) or an HF BertForSequenceClassification folder, converted on the fly to
    int8 (cached in $KB_CACHE_DIR or ~/.cache/kb; the frozen kb cannot convert and says so)."""
    from kb.models.convert import read_model_folder

    return load_reranker(read_model_folder(path, "cross-encoder"), device, compute_type)
