"""The query tokenizer: the ids the ``tokenizers`` library gives a query, without loading the
whole vocabulary (250,002 pieces for multilingual-e5-small; parsing its tokenizer.json alone
takes about 90 ms).

What decides a query's ids is split the way the library splits it:

1. special tokens ("[CLS]", "<mask>", ...) are cut out of the raw text first, as the library's
   added vocabulary does (leftmost-longest match; ``lstrip``/``rstrip`` take the whitespace
   beside them);
2. each remaining segment is normalized and pre-tokenized by the library's own normalizer and
   pre-tokenizer objects, built from their JSON (``params["pipeline"]``, small: the
   vocabulary is not in it);
3. the model (WordPiece or Unigram) turns each word into pieces. A word's pieces depend only on
   the vocabulary entries that are substrings of it (plus, for Unigram, the unknown piece and
   the lowest score, which sets the unknown penalty). So the query's substrings are looked up
   in the artifact's vocabulary pages (formats/query_model.py ``QueryModel.find``, which also
   says when no longer piece starts with a substring, so the search stops there), and the
   library's own model class runs over just those entries;
4. ``[bos] ids [eos]``, the ids first cut to ``max_tokens - 2`` as the library's truncation does.

Steps 2 and 3 are the library's code, so the ids are the library's by construction; step 1
is replicated here (tests/models/test_query_encoder.py compares all of it with the library
under hypothesis-generated text). ``tokenizers`` is imported when a tokenizer is built.
"""

from __future__ import annotations

import json
import re

__all__ = ["QueryTokenizer", "WHITESPACE"]

# Unicode White_Space, the class `\s` of the regex crate the library matches special tokens'
# stripped whitespace with (Python's `\s` differs: it takes U+001C-U+001F, which are not).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
LOOKUP_CACHE = 1 << 17  # pieces whose lookup a long-lived process keeps


class QueryTokenizer:
    """``params``: the tokenizer entry of the query-model directory; ``lookup``: a piece ->
    ((id, score) or None, whether a longer piece starts with it); ``max_tokens``: the model's
    window, special tokens included."""

    def __init__(self, params: dict, lookup, max_tokens: int):
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            from .errors import ModelError

            raise ModelError(f"the query tokenizer needs the {e.name} package; reinstall kb-search") from None
        pipe = json.loads(params["pipeline"])
        shell = {"version": "1.0", "normalizer": pipe.get("normalizer"), "pre_tokenizer": pipe.get("pre_tokenizer"),
                 "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}
        try:
            tok = Tokenizer.from_str(json.dumps(shell))
        except Exception as e:  # the library raises its own exception type
            from .errors import ModelError

            raise ModelError(f"the query tokenizer's pipeline does not load ({type(e).__name__}: {str(e)[:120]})") from None
        self._normalizer, self._pre_tokenizer = tok.normalizer, tok.pre_tokenizer
        self.kind = params["model"]
        self._params = params
        self._lookup = lookup
        self._cache: dict[str, tuple[tuple[int, float] | None, bool]] = {}
        self.max_tokens = int(max_tokens)
        self.bos, self.eos = int(params["bos"]), int(params["eos"])
        self._max_piece = int(params["max_piece_chars"])
        self._specials = {s[0]: (s[1], s[2], s[3]) for s in params["specials"]}
        pattern = "|".join(re.escape(s) for s in sorted(self._specials, key=len, reverse=True))
        self._special_re = re.compile(pattern) if pattern else None

    # --- 1. special tokens --------------------------------------------------------------------
    def split_specials(self, text: str) -> list[str | int]:
        """The text as segments (str) and special-token ids (int), in order."""
        if not text or self._special_re is None:
            return [text]
        out: list[str | int] = []
        start_offset = 0
        for m in self._special_re.finditer(text):
            start, stop = m.span()
            tid, lstrip, rstrip = self._specials[m.group()]
            if lstrip:
                start = max(len(text[:start].rstrip(WHITESPACE)), start_offset)
            if rstrip:
                stop += len(text[stop:]) - len(text[stop:].lstrip(WHITESPACE))
            if start_offset < start:
                out.append(text[start_offset:start])
            out.append(tid)
            start_offset = stop
        if start_offset != len(text):
            out.append(text[start_offset:])
        return out

    # --- 2. normalize and pre-tokenize --------------------------------------------------------
    def words(self, segment: str) -> list[str]:
        s = self._normalizer.normalize_str(segment) if self._normalizer is not None else segment
        if self._pre_tokenizer is None:
            return [s] if s else []
        return [w for w, _ in self._pre_tokenizer.pre_tokenize_str(s)]

    # --- 3. the model over the vocabulary entries the words hold -------------------------------
    def entries(self, words: list[str]) -> dict[str, tuple[int, float]]:
        """Every vocabulary entry the model may use for these words: each substring (with the
        continuing-subword prefix past a WordPiece word's start) that is a piece. A substring
        is extended only while some piece starts with it."""
        p = self._params
        wordpiece = self.kind == "wordpiece"
        limit, prefix = self._max_piece, p.get("prefix", "")
        found: dict[str, tuple[int, float]] = {}
        for w in words:
            if wordpiece and len(w) > p["max_word_chars"]:
                continue  # the whole word is the unknown token
            for a in range(len(w)):
                head = prefix if wordpiece and a else ""
                for b in range(a + 1, min(len(w), a + limit) + 1):
                    s = head + w[a:b]
                    entry, longer = self._find(s)
                    if entry is not None:
                        found[s] = entry
                    if not longer:
                        break
        return found

    def _find(self, s: str) -> tuple[tuple[int, float] | None, bool]:
        got = self._cache.get(s)
        if got is None:
            if len(self._cache) >= LOOKUP_CACHE:
                self._cache.clear()  # a crude bound, as runtime/index.py's term cache
            got = self._cache[s] = self._lookup(s)
        return got

    def _model(self, words: list[str]):
        """The library's model over the vocabulary entries these words can use, and the map from
        its ids to the full vocabulary's."""
        from tokenizers import models

        p = self._params
        found = self.entries(words)
        unk, unk_id, unk_score = p["unk"]
        if self.kind == "wordpiece":
            entries = dict(found)
            entries.setdefault(unk, (unk_id, unk_score))
            strings = list(entries)
            model = models.WordPiece({s: i for i, s in enumerate(strings)}, unk_token=unk,
                                     max_input_chars_per_word=p["max_word_chars"], continuing_subword_prefix=p["prefix"])
        else:
            floor, floor_score = p["floor"]
            entries = {unk: (unk_id, unk_score)} | dict(found)
            entries.setdefault(floor, (-1, floor_score))  # only its score matters: it sets the unknown penalty
            strings = list(entries)
            model = models.Unigram([(s, float(entries[s][1])) for s in strings], unk_id=0, byte_fallback=False)
        return model, [entries[s][0] for s in strings]

    # --- 4. the sequence ------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, special tokens included, at most ``max_tokens``."""
        parts: list[int | list[str]] = [s if isinstance(s, int) else self.words(s) for s in self.split_specials(text)]
        model, ids = self._model([w for part in parts if not isinstance(part, int) for w in part])
        out: list[int] = []
        for part in parts:
            if isinstance(part, int):
                out.append(part)
            else:
                for w in part:
                    out.extend(ids[t.id] for t in model.tokenize(w))
        return [self.bos] + out[: max(self.max_tokens - 2, 0)] + [self.eos]
