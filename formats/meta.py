"""Shape checks for the msgpack values inside an artifact: ``meta``, ``manifest`` and the chunk
records of ``text.blocks`` (SPEC.md names every field).

The container's crc32s prove that bytes are the ones the section table names, not that a writer
we trust wrote them: a forged checksum is four bytes of arithmetic. So the runtime checks the
type and range of every value it uses, once, where the value is decoded, and the code that
uses them can index and iterate without guarding each access. A failed check raises
``ShapeError``; the reader turns it into CorruptArtifact (exit 3).
"""

from __future__ import annotations

import functools

import math

U32 = 1 << 32
# Bounds on kb.toml [contexts] (meta.path_contexts): kb-build refuses more, a reader finds more corrupt.
MAX_PATH_CONTEXTS = 1000  # prefixes
MAX_CONTEXT_PREFIX_CHARS = 1024  # characters of one prefix
MAX_CONTEXT_CHARS = 300  # characters of one description (one line)
MAX_TAG_CHARS = 300  # characters of one [tags] description, printed with every result that has the tag (kb-build's limit)


class ShapeError(ValueError):
    """A value has the wrong type or range; the message names it."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ShapeError(what)


def _is_int(v, lo: int = 0, hi: int = 1 << 63) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_strs(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _optional_dict(meta: dict, key: str) -> None:
    _need(meta.get(key) is None or isinstance(meta[key], dict), f"meta.{key} must be a map or nil")


def _check_plain(value, what: str) -> None:
    """Only what JSON can say (kb info --json and /info print meta's maps as they are): maps with
    string keys, lists, strings, numbers, booleans, nil; no byte strings."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            _need(all(isinstance(k, str) for k in v), f"{what} has a key that is not a string")
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        else:
            _need(v is None or isinstance(v, (str, int, float, bool)), f"{what} holds a {type(v).__name__} value")


def check_meta(meta) -> None:
    """Every ``meta`` field the runtime reads, by type and range."""
    _need(isinstance(meta, dict), "meta is not a map")
    _check_plain(meta, "meta")
    for key in ("kb_version", "source"):
        _need(isinstance(meta.get(key), str), f"meta.{key} must be a string")
    _need(_is_int(meta.get("format_version")), "meta.format_version must be an integer")
    counts = meta.get("counts")
    _need(isinstance(counts, dict), "meta.counts must be a map")
    for key in ("documents", "chunks", "terms", "vectors"):
        _need(_is_int(counts.get(key), 0, U32), f"meta.counts.{key} must be an integer in 0..2^32-1")
    bm25 = meta.get("bm25")
    _need(isinstance(bm25, dict), "meta.bm25 must be a map")
    _need(_is_num(bm25.get("avg_length")) and bm25["avg_length"] >= 0, "meta.bm25.avg_length must be a finite number >= 0")
    for s in _bm25_settings():  # the ranges kb-build accepts (formats/bm25.py BM25Params)
        lo, hi = s.minimum, s.maximum
        optional = s.name in ("title_weight", "section_weight", "document_weight")  # document_weight: format 2
        _need((optional and s.name not in bm25) or (_is_num(bm25.get(s.name)) and lo <= bm25[s.name] <= hi), f"meta.bm25.{s.name} must be a number in {lo:g}..{hi:g}")
    langs = bm25.get("languages", [])  # format 4: per language, in number order: code, documents, mean lengths
    _need(isinstance(langs, list) and len(langs) <= 255 and all(
        isinstance(v, dict) and isinstance(v.get("code"), str) and _is_int(v.get("documents"))
        and all(_is_num(v.get(f)) and v[f] >= 0 for f in ("avg_length", "doc_avg_length")) for v in langs),
          "meta.bm25.languages must list each language's code, documents and mean lengths")
    _check_analyzer(meta.get("analyzer"))
    for key in ("embedder", "reranker", "vectors", "embedder_en"):
        _optional_dict(meta, key)
    ef = (meta.get("vectors") or {}).get("expansion_search")
    _need(ef is None or _is_int(ef, 1, 4096), "meta.vectors.expansion_search must be an integer in 1..4096")
    for key in ("embedder", "embedder_en"):
        _need(meta.get(key) is None or isinstance(meta[key].get("name", ""), str), f"meta.{key}.name must be a string")
    tags = meta.get("tags")
    _need(isinstance(tags, dict) and _is_strs(tags.get("names")), "meta.tags.names must be a list of strings")
    descr = tags.get("descriptions")
    _need(isinstance(descr, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in descr.items()),
          "meta.tags.descriptions must map strings to strings")
    for key in ("statuses", "excluded_statuses"):
        _need(_is_strs(meta.get(key)), f"meta.{key} must be a list of strings")
    _check_path_contexts(meta.get("path_contexts", {}))
    _need(isinstance(meta.get("search"), dict), "meta.search must be a map")
    _need(_is_int(meta.get("text_block"), 1, 1 << 16), "meta.text_block must be an integer in 1..65535")


def _check_path_contexts(contexts) -> None:
    """meta.path_contexts (optional): at most MAX_PATH_CONTEXTS prefixes, each mapped to one line."""
    _need(isinstance(contexts, dict) and len(contexts) <= MAX_PATH_CONTEXTS, f"meta.path_contexts must be a map of at most {MAX_PATH_CONTEXTS} prefixes")
    for k, v in contexts.items():
        _need(isinstance(k, str) and len(k) <= MAX_CONTEXT_PREFIX_CHARS, f"meta.path_contexts prefixes must be strings of at most {MAX_CONTEXT_PREFIX_CHARS} characters")
        _need(isinstance(v, str) and len(v) <= MAX_CONTEXT_CHARS and not ({"\n", "\r"} & set(v)), f"meta.path_contexts descriptions must be one line of at most {MAX_CONTEXT_CHARS} characters")


def _check_analyzer(params) -> None:
    _need(isinstance(params, dict), "meta.analyzer must be a map")
    stop = params.get("stopwords", [])  # version 1: a list; version 2: language -> list
    _need(_is_strs(stop) or (isinstance(stop, dict) and all(isinstance(k, str) and _is_strs(v) for k, v in stop.items())),
          "meta.analyzer.stopwords must be a list of strings, or map languages to them")
    _need(params.get("version") not in (2, 3) or isinstance(stop, dict), "meta.analyzer.stopwords must map languages to lists of strings (analyzer versions 2 and 3)")  # fuzz seed 35, input 93985
    _need(isinstance(params.get("cjk_bigrams"), bool), "meta.analyzer.cjk_bigrams must be a boolean")
    _need(_is_int(params.get("max_term_chars"), 1, 1 << 16), "meta.analyzer.max_term_chars must be an integer in 1..65535")
    _need(_is_strs(params.get("languages", [])), "meta.analyzer.languages must be a list of strings")  # format 2
    stemmers = params.get("stemmers", {})
    _need(isinstance(stemmers, dict) and all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in stemmers.items()),
          "meta.analyzer.stemmers must map languages to stemmer names")
    _need(params.get("stemmer_library") is None or isinstance(params["stemmer_library"], str), "meta.analyzer.stemmer_library must be a string or nil")  # nil: no language stems
    # Whether this kb has the analyzer (its name, version, stemmers) is the analyzer's to say,
    # when a search first needs it: an unknown stemmer is "upgrade kb" (exit 4), not corruption.


def check_manifest(man) -> None:
    """The manifest fields ``kb info`` and ``kb status`` read."""
    _need(isinstance(man, dict), "the manifest is not a map")
    _need(isinstance(man.get("root"), str), "manifest.root must be a string")
    _need(man.get("config_file") is None or isinstance(man["config_file"], str), "manifest.config_file must be a string or nil")
    sources = man.get("sources")
    _need(isinstance(sources, list), "manifest.sources must be a list")
    for s in sources:
        _need(isinstance(s, list) and len(s) == 4 and isinstance(s[0], str) and _is_int(s[1]) and _is_int(s[2], -(1 << 63))
              and isinstance(s[3], str), "manifest.sources entries must be [path, size, mtime_ns, sha256]")
    skipped = man.get("skipped")
    _need(isinstance(skipped, list) and all(isinstance(s, list) and len(s) == 2 and _is_strs(s) for s in skipped),
          "manifest.skipped entries must be [path, reason]")
    _need(_is_int(man.get("excluded", 0)), "manifest.excluded must be an integer")
    for key in ("jsonl", "include", "exclude"):
        _need(_is_strs(man.get(key, [])), f"manifest.{key} must be a list of strings")


def check_model_card(card, names=()) -> None:
    """The fields of kb_model.json the runtime reads before a model loads, and the weights file a
    converted model needs beside it (``names``: the files of the model section)."""
    _need(isinstance(card, dict) and isinstance(card.get("name"), str), "kb_model.json must be an object with a string name")
    _need(card.get("backend", "ctranslate2") != "ctranslate2" or "model.bin" in names, "a converted model section without model.bin")
    _need(card.get("kind", "embedder") != "embedder" or "dim" in card, "an embedder's kb_model.json needs dim")
    for key in ("dim", "max_tokens"):
        _need(key not in card or _is_int(card[key], 1, 1 << 16), f"kb_model.json {key} must be an integer in 1..65535")



@functools.lru_cache(maxsize=1)
def _bm25_settings():
    from kb.common.settings import settings_of

    from .bm25 import BM25Params

    return settings_of(BM25Params)
