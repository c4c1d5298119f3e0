"""Deterministic stand-ins for the real models, for tests of plumbing and math only (never
where quality or speed is claimed). tests/corpora.py registers them with kb-build and kb."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np

_WORDS = re.compile(r"\w+|[^\w\s]")


class HashEmbedder:
    """Feature hashing of casefolded words into ``dim`` signed buckets, L2-normalised."""

    backend = "hash"

    def __init__(self, dim: int = 64, name: str = "hash-64", max_tokens: int = 256):
        self.dim, self.name, self.max_tokens = dim, name, max_tokens

    def model_card(self) -> dict:
        return {"kind": "embedder", "backend": "hash", "name": self.name, "dim": self.dim, "max_tokens": self.max_tokens}

    def files(self) -> dict[str, bytes]:
        return {"kb_model.json": json.dumps(self.model_card(), sort_keys=True).encode()}

    def count_tokens(self, texts) -> list[int]:
        return [len(_WORDS.findall(t)) for t in texts]

    def embed(self, texts, batch_size: int = 8) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.casefold())[: self.max_tokens]:
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n else out[i]
            if not n:
                out[i, 0] = 1.0
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def register() -> None:
    """Let kb-build take ``--embedder hash`` and kb load artifacts built with it."""
    from kb.builder.embedders import register_embedder
    from kb.models.encoders import register_backend

    register_embedder("hash", lambda quantization: HashEmbedder())
    register_backend("hash", lambda files, card, device, compute_type: HashEmbedder(card["dim"], card["name"], card.get("max_tokens", 256)))


if __name__ == "__main__":  # `python tests/fakes.py search|serve|mcp ...`: kb, with the stand-ins registered
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    register()
    from kb.runtime.entry import run

    run()
