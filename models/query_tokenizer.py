"""The query tokenizer: the ids the ``tokenizers`` library gives a query, without loading the
whole vocabulary (250,002 pieces for multilingual-e5-small: the library's load of its
tokenizer.json alone costs a one-shot search more than all the rest; bench/notes/
2026-12-05-query-encoder.md).

What decides a query's ids is split the way the library splits it:

1. special tokens ("[CLS]", "<mask>", ...) are cut out of the raw text first, as the library's
   added vocabulary does (leftmost-longest match; ``lstrip``/``rstrip`` take the whitespace
   beside them);
2. each remaining segment is normalized and pre-tokenized into words, as the pipeline in
   ``params["pipeline"]`` (the library's JSON of both; small: the vocabulary is not in it) says;
3. the model (WordPiece or Unigram) turns each word into pieces. A word's pieces depend only on
   the vocabulary entries that are substrings of it (plus, for Unigram, the unknown piece and
   the lowest score, which sets the unknown penalty). So the query's substrings are looked up
   in the artifact's vocabulary pages (formats/query_model.py ``QueryModel.find``, which also
   says when no longer piece starts with a substring, so the search stops there), and the
   model runs over just those entries;
4. ``[bos] ids [eos]``, the ids first cut to ``max_tokens - 2`` as the library's truncation does.

Step 2 runs the library's own normalizer and pre-tokenizer objects, except on a segment of
printable ASCII under one of the two pipelines kb's shipped models use (``plain_words``), where
their effect is a few lines of Python; step 3 replicates the library's WordPiece and Unigram
(its Viterbi search, ties and unknown pieces included); step 1 replicates its added vocabulary.
tests/models/test_query_encoder.py compares all of it with the library under
hypothesis-generated text. ``tokenizers`` is imported only when a segment needs the library's
pipeline: an English query never pays for the import (bench/notes/2026-12-05-one-shot-ratios.md).
"""

from __future__ import annotations

import json
import re
import sys
from array import array

__all__ = ["Charsmap", "QueryTokenizer", "WHITESPACE", "plain_words", "unigram", "wordpiece"]

# Unicode White_Space, the class `\s` of the regex crate the library matches special tokens'
# stripped whitespace with (Python's `\s` differs: it takes U+001C-U+001F, which are not).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
LOOKUP_CACHE = 1 << 17  # pieces whose lookup a long-lived process keeps

# --- step 2 in Python, for printable ASCII -----------------------------------------------------
# On a segment of printable ASCII (U+0020-U+007E: every character its own grapheme, none a
# control, a mark, a CJK ideograph or a Unicode-only space), the two pipelines of kb's models do
# what these lines do. Any other pipeline, or any other segment, goes to the library.
_ASCII_PUNCT = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")  # BertPreTokenizer: ASCII punctuation is split off alone
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")  # what base64.b64decode(validate=True) accepts
_BERT_PRE = {"type": "BertPreTokenizer"}
_METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
_SPM_REPLACES = [{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                 {"type": "Replace", "pattern": {"Regex": "\\A | \\z"}, "content": ""}]


def _bert_words(lowercase: bool):
    def words(segment: str) -> list[str]:
        # BertNormalizer on printable ASCII: nothing to clean, no CJK to pad, no accents to
        # strip; lowercase. BertPreTokenizer: split at spaces, each punctuation character alone.
        return _ASCII_PUNCT.findall(segment.lower() if lowercase else segment)

    return words


def _metaspace_words(segment: str) -> list[str]:
    # Precompiled (the identity on printable ASCII, checked by ``Charsmap.keeps_ascii``), runs of
    # spaces to one, one space off each end; Metaspace: spaces to U+2581, one prepended, split
    # before each U+2581.
    s = re.sub(" {2,}", " ", segment)
    if s.startswith(" "):
        s = s[1:]
    if s.endswith(" "):
        s = s[:-1]
    if not s:
        return []
    return ["\u2581" + w for w in s.split(" ")]


class Charsmap:
    """A SentencePiece precompiled charsmap, as the library's Precompiled normalizer reads it:
    a u32 size, a darts-clone double array of that many bytes, then NUL-terminated
    replacements. Raises ValueError on a blob it cannot read."""

    def __init__(self, blob: bytes):
        size = int.from_bytes(blob[:4], "little") if len(blob) >= 4 else 0
        if size == 0 or size % 4 or 4 + size > len(blob):
            raise ValueError("not a precompiled charsmap")
        self.units = array("I" if array("I").itemsize == 4 else "L")
        self.units.frombytes(bytes(blob[4 : 4 + size]))
        if sys.byteorder == "big":
            self.units.byteswap()
        self.replacements = blob[4 + size :]

    @staticmethod
    def _offset(unit: int) -> int:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    def transform(self, key: bytes) -> bytes | None:
        """The replacement of the shortest key that prefixes ``key`` (the library's
        ``transform``: the first result of a common-prefix search), or None."""
        units = self.units
        pos = self._offset(units[0])
        for byte in key:
            pos ^= byte
            if pos >= len(units) or units[pos] & ((1 << 31) | 0xFF) != byte:
                return None
            unit = units[pos]
            pos ^= self._offset(unit)
            if (unit >> 8) & 1:
                if pos >= len(units):
                    raise ValueError("not a precompiled charsmap")
                at = units[pos] & ((1 << 31) - 1)
                end = self.replacements.find(b"\0", at)
                if end < 0:
                    raise ValueError("not a precompiled charsmap")
                return self.replacements[at:end]
        return None

    def keeps_ascii(self) -> bool:
        """Whether every printable ASCII character maps to itself or is left alone."""
        return all(self.transform(bytes([b])) in (None, bytes([b])) for b in range(0x20, 0x7F))


def plain_words(pipeline: dict, kind: str):
    """``segment -> words`` for printable ASCII segments, when ``pipeline`` (normalizer and
    pre-tokenizer JSON) is one whose effect on them this module replicates; else None."""
    norm, pre = pipeline.get("normalizer"), pipeline.get("pre_tokenizer")
    if kind == "wordpiece" and pre == _BERT_PRE and isinstance(norm, dict) and norm.get("type") == "BertNormalizer":
        if isinstance(norm.get("lowercase"), bool):
            return _bert_words(norm["lowercase"])
        return None
    if kind == "unigram" and pre == _METASPACE and isinstance(norm, dict) and norm.get("type") == "Sequence":
        steps = norm.get("normalizers")
        if (isinstance(steps, list) and len(steps) == 3 and steps[1:] == _SPM_REPLACES and isinstance(steps[0], dict)
                and steps[0].get("type") == "Precompiled" and isinstance(steps[0].get("precompiled_charsmap"), str)):
            import binascii  # base64.b64decode(validate=True)'s two steps, without importing base64 (0.3 ms)

            text = steps[0]["precompiled_charsmap"]
            if not _BASE64.fullmatch(text):
                return None
            try:
                keeps = Charsmap(binascii.a2b_base64(text)).keeps_ascii()
            except ValueError:  # binascii.Error is one
                return None
            return _metaspace_words if keeps else None
    return None


# --- step 3: the library's models ----------------------------------------------------------------
def wordpiece(word: str, entries: dict, unk_id: int, prefix: str, max_word_chars: int) -> list[int]:
    """The library's WordPiece over ``entries`` (piece -> (id, score)): the longest piece at each
    place, ``prefix`` past the word's start; the whole word is the unknown piece if that fails
    anywhere or the word is too long."""
    if len(word) > max_word_chars:
        return [unk_id]
    out, start = [], 0
    while start < len(word):
        head = prefix if start else ""
        for end in range(len(word), start, -1):
            got = entries.get(head + word[start:end])
            if got is not None:
                out.append(got[0])
                start = end
                break
        else:
            return [unk_id]
    return out


UNK_PENALTY = 10.0  # the library's kUnkPenalty: an unknown character scores the lowest piece's score minus this


def unigram(word: str, entries: dict, unk_id: int, min_score: float, max_piece: int) -> list[int]:
    """The library's Unigram (``encode_optimized``): the best-scoring split of ``word`` into
    ``entries`` (piece -> (id, score)), a character no piece covers scoring ``min_score - 10``
    as the unknown piece; ties keep the first candidate found (starts in order, shorter pieces
    first); neighbouring unknown characters fuse into one unknown piece."""
    n = len(word)
    unk_score = min_score - UNK_PENALTY
    best: list[float] = [0.0] * (n + 1)
    start_at: list[int] = [-1] * (n + 1)
    piece_id: list[int] = [0] * (n + 1)
    for a in range(n):
        here = best[a]
        single = False
        for b in range(a + 1, min(n, a + max_piece) + 1):
            got = entries.get(word[a:b])
            if got is None:
                continue
            score = got[1] + here
            if start_at[b] < 0 or score > best[b]:
                best[b], start_at[b], piece_id[b] = score, a, got[0]
            single = single or b == a + 1
        if not single:
            score = unk_score + here
            if start_at[a + 1] < 0 or score > best[a + 1]:
                best[a + 1], start_at[a + 1], piece_id[a + 1] = score, a, unk_id
    out: list[int] = []
    end, run_end = n, -1  # run_end: where the run of unknown pieces being walked back ends
    while end > 0:
        a = start_at[end]
        if piece_id[end] == unk_id:
            run_end = end if run_end < 0 else run_end
        else:
            if run_end >= 0:
                out.append(entries.get(word[end:run_end], (unk_id,))[0])
                run_end = -1
            out.append(piece_id[end])
        end = a
    if run_end >= 0:
        out.append(entries.get(word[:run_end], (unk_id,))[0])
    out.reverse()
    return out


class QueryTokenizer:
    """``params``: the tokenizer entry of the query-model directory; ``lookup``: a piece ->
    ((id, score) or None, whether a longer piece starts with it); ``max_tokens``: the model's
    window, special tokens included."""

    def __init__(self, params: dict, lookup, max_tokens: int):
        self._pipeline = json.loads(params["pipeline"])
        self.kind = params["model"]
        self._plain = plain_words(self._pipeline, self.kind)
        self._library = None  # (normalizer, pre-tokenizer), built when a segment first needs them
        self._params = params
        self._lookup = lookup
        self._cache: dict[str, tuple[tuple[int, float] | None, bool]] = {}
        self.max_tokens = int(max_tokens)
        self.bos, self.eos = int(params["bos"]), int(params["eos"])
        self._max_piece = int(params["max_piece_chars"])
        self._specials = {s[0]: (s[1], s[2], s[3]) for s in params["specials"]}
        pattern = "|".join(re.escape(s) for s in sorted(self._specials, key=len, reverse=True))
        self._special_re = re.compile(pattern) if pattern else None

    def _library_pipeline(self):
        """The library's normalizer and pre-tokenizer objects, built from their JSON."""
        if self._library is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as e:
                from .errors import ModelError

                raise ModelError(f"the query tokenizer needs the {e.name} package; reinstall kb-search") from None
            pipe = self._pipeline
            shell = {"version": "1.0", "normalizer": pipe.get("normalizer"), "pre_tokenizer": pipe.get("pre_tokenizer"),
                     "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}
            try:
                tok = Tokenizer.from_str(json.dumps(shell))
            except Exception as e:  # the library raises its own exception type
                from .errors import ModelError

                raise ModelError(f"the query tokenizer's pipeline does not load ({type(e).__name__}: {str(e)[:120]})") from None
            self._library = (tok.normalizer, tok.pre_tokenizer)
        return self._library

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
        if self._plain is not None and segment.isascii() and segment.isprintable():
            return self._plain(segment)
        normalizer, pre_tokenizer = self._library_pipeline()
        s = normalizer.normalize_str(segment) if normalizer is not None else segment
        if pre_tokenizer is None:
            return [s] if s else []
        return [w for w, _ in pre_tokenizer.pre_tokenize_str(s)]

    # --- 3. the model over the vocabulary entries the words hold -------------------------------
    def entries(self, words: list[str]) -> dict[str, tuple[int, float]]:
        """Every vocabulary entry the model may use for these words: each substring (with the
        continuing-subword prefix past a WordPiece word's start) that is a piece. A substring
        is extended only while some piece starts with it."""
        p = self._params
        is_wordpiece = self.kind == "wordpiece"
        limit, prefix = self._max_piece, p.get("prefix", "")
        found: dict[str, tuple[int, float]] = {}
        for w in words:
            if is_wordpiece and len(w) > p["max_word_chars"]:
                continue  # the whole word is the unknown token
            for a in range(len(w)):
                head = prefix if is_wordpiece and a else ""
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

    def pieces(self, words: list[str]) -> list[int]:
        """The ids of the words' pieces, by the model (``wordpiece`` or ``unigram``) over the
        vocabulary entries the words hold."""
        p = self._params
        found = self.entries(words)
        unk, unk_id, unk_score = p["unk"]
        found.setdefault(unk, (unk_id, unk_score))  # the library's vocabulary holds it like any piece
        out: list[int] = []
        if self.kind == "wordpiece":
            for w in words:
                out += wordpiece(w, found, unk_id, p["prefix"], p["max_word_chars"])
        else:
            floor_score = float(p["floor"][1])  # the lowest score: it sets the unknown penalty
            for w in words:
                out += unigram(w, found, unk_id, floor_score, self._max_piece)
        return out

    # --- 4. the sequence ------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, special tokens included, at most ``max_tokens``."""
        out: list[int] = []
        for part in self.split_specials(text):
            if isinstance(part, int):
                out.append(part)
            else:
                out += self.pieces(self.words(part))
        return [self.bos] + out[: max(self.max_tokens - 2, 0)] + [self.eos]
