"""Reusing a previous artifact's vectors: kb-build -o's old file, or ``--reuse OLD.kb``.

A chunk's vector is a function of the text its model reads (builder/build.py ``embed_text``) and
of the model: the embedder pads nothing (models/encoders.py ``embed``), so a text's vector does
not depend on the texts embedded beside it. An artifact records, per chunk, the BLAKE2b-128 of
that text (``vectors.inputs``, SPEC.md); a build looks each of its chunks' digests up there and
takes the stored vector instead of embedding the text again. The stored vector is the one a
fresh embedding gives after the same conversion (``[vectors] dtype``: float16 by default), so
the graph, and every byte of the artifact, is what a full build writes.

A source is used only when it is sound and comparable: a readable artifact (container, meta,
and the crc32 of every section read here), built with the same analyzer and, per dense leg, the
very same model files, its vectors stored at the precision this build stores (or at f32), with
``vectors.inputs`` (a ``--vectors`` build has none: its vectors came from elsewhere). Otherwise
``open_reuse`` says why in one line and the build embeds everything: reuse never fails a build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kb.formats import layout as L
from kb.formats import records as R

from .stream import widened

# Where each dense leg lives: its graph and its model (the inputs are shared: both legs read the same text).
LEGS = {"main": (L.VECTORS, L.MODEL_EMBED), "en": (L.VECTORS_EN, L.MODEL_EMBED_EN)}
_DIGEST = np.dtype([("head", "<u8"), ("tail", "<u8")])  # an INPUT_BYTES digest as two numbers: sorted by head


class ReuseSource:
    """A checked reuse source: per leg, the stored vectors by old chunk id; the old chunks'
    input digests, sorted for lookup."""

    def __init__(self, path: Path, artifact, legs: dict, digests: np.ndarray):
        self.path, self._artifact, self._legs = path, artifact, legs
        self._order = np.argsort(digests["head"], kind="stable")
        self._sorted = digests[self._order]

    def find(self, digests: bytes) -> np.ndarray:
        """The old chunk id of each digest in ``digests`` (INPUT_BYTES each), -1 where none."""
        want = np.frombuffer(digests, dtype=_DIGEST)
        if not len(self._sorted):
            return np.full(len(want), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted["head"], want["head"]), len(self._sorted) - 1)
        hit = self._sorted[at] == want
        return np.where(hit, self._order[at], -1)

    def has(self, leg: str) -> bool:
        return leg in self._legs

    def vectors(self, leg: str, old: np.ndarray) -> np.ndarray:
        """The stored vectors of old chunks ``old`` in leg ``leg``, as float32 (exact: f16 and
        f32 widen without rounding, bf16 is the high half of a float32)."""
        rows, row_of_key, kind = self._legs[leg]
        at = old if row_of_key is None else row_of_key[old]
        got = rows[at]
        return widened(got, kind)

    def close(self) -> None:
        self._legs = {}
        self._artifact.close()


def open_reuse(path: Path, analyzer: dict, legs: dict[str, bytes | None], dtype: str) -> tuple[ReuseSource | None, str]:
    """The reuse source at ``path`` for a build with ``analyzer`` (its params) whose dense legs
    pack ``legs`` (leg -> its packed model section, None: no such leg) and store vectors at
    ``dtype``; or None and one line saying why it is not used. Never raises."""
    from kb.formats.artifact import Artifact

    try:
        artifact = Artifact(path)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with it, the build goes on without it
        return None, _why(path, str(e).removeprefix(f"{path}: "))
    try:
        return _checked(path, artifact, analyzer, legs, dtype), ""
    except Exception as e:  # noqa: BLE001
        artifact.close()
        return None, _why(path, str(e).removeprefix(f"{path}: ") if str(e) else type(e).__name__)


class Refused(Exception):
    """Why a source cannot be reused (one line)."""


def _why(path: Path, reason: str) -> str:
    return f"not reusing {path}: {reason}; embedding every chunk"


def _checked(path: Path, artifact, analyzer: dict, legs: dict, dtype: str) -> ReuseSource:
    from kb.formats.hnsw import NUMPY_SCALARS, SCALAR_KINDS, check_hnsw

    meta = R.unpack_meta(artifact.section(L.META))
    if _analysis(meta.analyzer) != _analysis(analyzer):
        raise Refused(f"it was built with another analyzer ({_analyzer_name(meta.analyzer)}; this build: {_analyzer_name(analyzer)})")
    if L.VECTOR_INPUTS not in artifact:
        raise Refused("it records no vectors.inputs (built with --vectors, with no vectors, or by a kb-build before reuse)")
    n = meta.counts.chunks
    inputs = artifact.section(L.VECTOR_INPUTS)
    if len(inputs) != n * L.INPUT_BYTES:
        raise Refused(f"corrupt artifact: vectors.inputs is {len(inputs)} bytes for {n} chunks")
    stored = (meta.vectors or {}).get("dtype")
    if stored not in (dtype, "f32"):
        raise Refused(f"its vectors are stored as {stored}, this build stores {dtype}")
    kind = "f32" if stored == "f32" else dtype
    found, models = {}, []
    for leg, packed in legs.items():
        vectors_name, model_name = LEGS[leg]
        if packed is None or vectors_name not in artifact or model_name not in artifact:
            continue
        old_model = artifact.section(model_name)
        models.append(_model_name(old_model))
        if bytes(old_model) != packed:
            continue
        buf = artifact.section(vectors_name)
        image = check_hnsw(buf, n, neighbours=False)
        if image.scalar != SCALAR_KINDS[kind] or image.rows != n:
            raise Refused(f"corrupt artifact: {vectors_name} does not hold {n} {kind} vectors")
        numpy_kind = NUMPY_SCALARS.get(image.scalar, "<u2")  # bf16: its bits
        rows = np.frombuffer(buf, dtype=numpy_kind, count=n * image.dims, offset=8).reshape(n, image.dims)
        found[leg] = (rows, None if image.keys_in_order else image.row_of_key, kind)
    if not found:
        wanted = [_model_name(p) for p in legs.values() if p is not None]
        raise Refused(f"it was built with another model ({', '.join(models) or 'none'}; this build: {', '.join(wanted) or 'none'})")
    return ReuseSource(path, artifact, found, np.frombuffer(inputs, dtype=_DIGEST))


def _analyzer_name(params: dict) -> str:
    """An analyzer as `kb info` names it: its name and version, and its languages."""
    return f"{params.get('name')}-{params.get('version')}, languages {', '.join(params.get('languages') or ['none'])}"


def _analysis(params: dict) -> dict:
    """An analyzer's parameters without what is only informative (documents per language)."""
    return {k: v for k, v in params.items() if k != "documents"}


def _model_name(packed) -> str:
    try:
        return R.ModelCard.from_json(R.unpack_model_files(packed, "model")[R.CARD_FILE]).name
    except Exception:  # noqa: BLE001 - only for the message
        return "an unreadable model"
