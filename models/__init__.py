"""Model files shipped with kb (package data): the default reranker, see reranker/MODEL_CARD.md."""

from pathlib import Path

SHIPPED_RERANKER = Path(__file__).resolve().parent / "reranker"
