"""Issue 14: artifacts edited by someone who recomputes the checksums, leftovers of killed builds,
and file names that would talk to the terminal. Each ends in exit 3 with one line, or in a
clean build."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zlib

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from kb.builder.cli import main as kb_build
from kb.formats import artifact as A
from kb.formats import layout as L
from kb.runtime.cli import main as kb

from corpora import REPO, TINY, artifact_parts, build_hash, rewrite


def kb_run(*args):
    return CliRunner().invoke(kb, [str(a) for a in args])


def sections_of(path):
    return artifact_parts(path)[1]


def replace_section(path, name, data):
    rewrite(path, [A.SectionData(s.name, data) if s.name == name else s for s in sections_of(path)])


def copy_of(tmp_path, artifact):
    p = tmp_path / "copy.kb"
    p.write_bytes(artifact.read_bytes())
    return p


def test_nonzero_header_flags_are_refused(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    data = bytearray(p.read_bytes())
    data[12:16] = (1).to_bytes(4, "little")
    data[60:64] = zlib.crc32(bytes(data[:60])).to_bytes(4, "little")
    p.write_bytes(bytes(data))
    r = kb_run("info", "-i", p)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: header flags 0x00000001 are not defined in format version 3\n")


def test_a_renamed_vector_section_with_forged_checksums_is_corrupt(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    rewrite(p, [s._replace(name="vectors.hnsx") if s.name == L.VECTORS else s for s in sections_of(p)])
    r = kb_run("info", "-i", p, "--verify")
    assert r.exit_code == 3
    assert r.stderr == f"kb: error: {p}: corrupt artifact: meta: meta counts 10 vectors but there is no 'vectors.hnsw' section\n"


def test_meta_values_of_the_wrong_type_are_corrupt_not_a_python_error(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    meta = msgpack.unpackb(dict((s.name, s.data) for s in sections_of(p))[L.META])
    meta["tags"]["names"] = 7
    replace_section(p, L.META, msgpack.packb(meta))
    r = kb_run("search", "backup", "-i", p)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: meta: meta.tags.names must be a list of strings\n")


def test_a_text_block_with_forged_records_is_corrupt(tmp_path, tiny_artifact):
    import zstandard

    p = copy_of(tmp_path, tiny_artifact)
    secs = {s.name: s for s in sections_of(p)}
    zdict = bytes(secs[L.TEXT_DICT].data)
    d = zstandard.ZstdCompressionDict(zdict) if zdict else None
    blocks = [bytes(b) for b in L.BlobTable(secs[L.TEXT_BLOCKS].data)]
    dctx = zstandard.ZstdDecompressor(dict_data=d) if d else zstandard.ZstdDecompressor()
    records = msgpack.unpackb(dctx.decompress(blocks[0]))
    records[0][4] = 5  # tags: not a list
    cctx = zstandard.ZstdCompressor(dict_data=d) if d else zstandard.ZstdCompressor()
    blocks[0] = cctx.compress(msgpack.packb(records))
    replace_section(p, L.TEXT_BLOCKS, L.pack_blobs(blocks))
    r = kb_run("list", "-i", p)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: text block 0 is malformed\n")


def test_a_vector_graph_with_a_forged_neighbour_slot_is_corrupt_not_a_crash(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    v = bytearray(dict((s.name, s.data) for s in sections_of(p))[L.VECTORS])
    rows, cols = int.from_bytes(v[0:4], "little"), int.from_bytes(v[4:8], "little")
    graph = 8 + rows * cols + 64
    size, conn, base = (int.from_bytes(v[graph + 8 * i : graph + 8 * i + 8], "little") for i in range(3))
    first_node = graph + 40 + 2 * size
    v[first_node + 10 : first_node + 14] = (1).to_bytes(4, "little")  # one neighbour...
    v[first_node + 14 : first_node + 18] = (0xFFFFFF00).to_bytes(4, "little")  # ...far outside the graph
    replace_section(p, L.VECTORS, bytes(v))
    from corpora import KB_CLI  # kb, able to load the hash stand-in this artifact was built with

    # A small artifact's dense leg scans its vectors and never follows a slot (DenseSpace.scans_vectors):
    # the search answers. Past EXACT_SCAN_MAX chunks the graph goes to usearch, checked first.
    r = subprocess.run([*KB_CLI, "search", "backup", "-i", str(p), "--no-stale-check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    code = (
        "import sys; sys.path.insert(0, 'tests'); import corpora; from kb.runtime import index;"
        f"index.EXACT_SCAN_MAX = 0; ix = index.Index({str(p)!r}); ix.dense.vectors"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 1 and r.stderr.strip().endswith(f"CorruptArtifact: {p}: corrupt artifact: vector index: a neighbour slot points outside the graph"), r.stderr


def test_an_embedder_whose_width_differs_from_the_vector_index_is_corrupt(tmp_path, tiny_artifact):
    import json

    p = copy_of(tmp_path, tiny_artifact)
    items = [bytes(x) for x in L.BlobTable(dict((s.name, s.data) for s in sections_of(p))[L.MODEL_EMBED])]
    names = msgpack.unpackb(items[0])
    i = names.index("kb_model.json") + 1
    items[i] = json.dumps(json.loads(items[i]) | {"dim": 32}).encode()  # found by the fuzzer (input 174132)
    replace_section(p, L.MODEL_EMBED, L.pack_blobs(items))
    r = kb_run("search", "backup", "-i", p, "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: vector index has 64 dimensions, its embedder 32\n")


def test_a_document_path_that_is_not_utf8_is_corrupt(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    paths = [bytes(x) for x in L.BlobTable(dict((s.name, s.data) for s in sections_of(p))[L.DOC_PATHS])]
    paths[0] = b"\xff" + paths[0]
    replace_section(p, L.DOC_PATHS, L.pack_blobs(paths))
    r = kb_run("list", "-i", p)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: document path 0 is not UTF-8\n")


def test_a_killed_builds_temporary_is_removed_by_the_next_build(tmp_path):
    out = tmp_path / "out" / "o.kb"
    out.parent.mkdir()
    # a build killed inside its write: the temporary stays, locked by nobody
    code = (
        "import os, signal; from kb.formats import artifact as A\n"
        "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"A.write_artifact({str(out)!r}, [A.SectionData('meta', b'x' * 100000)])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert r.returncode == -9
    [left] = os.listdir(out.parent)
    assert A._temporary_pattern(out).fullmatch(left)
    others = [".o.kb.tmp", ".o.kb.abcdefgh.tmp.bak", ".p.kb.abcdefgh.tmp", "o.kb.abcdefgh.tmp", ".o.kb.abcdefg.tmp"]
    for name in others:
        (out.parent / name).write_bytes(b"not ours")
    busy = out.parent / ".o.kb.busy0000.tmp"  # a write in progress in another process: locked
    busy.write_bytes(b"")
    held = os.open(busy, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        corpus = tmp_path / "c"
        corpus.mkdir()
        (corpus / "a.md").write_text("# A\n\nalpha\n")
        r = subprocess.run([sys.executable, "-c", "import sys; from kb.builder.cli import main; sys.exit(main())",
                            str(corpus), "-o", str(out), "--embedder", "none", "--no-reranker", "-q"], timeout=120)
        assert r.returncode == 0
    finally:
        os.close(held)
    assert sorted(os.listdir(out.parent)) == sorted(["o.kb", busy.name, *others])


def test_kb_list_escapes_control_characters_in_paths(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / "evil\x1b[2J\rname.md").write_text("# Evil\n\ntext\n")
    out = tmp_path / "o.kb"
    build_hash(c, out, embedder="none")
    r = kb_run("list", "-i", out)
    assert r.exit_code == 0
    assert r.stdout == "evil\\x1b[2J\\x0dname.md\tlive\t\n"
    r = kb_run("list", "-i", out, "--jsonl")
    assert '"path": "evil\\u001b[2J\\rname.md"' in r.stdout
    r = kb_run("list", "-i", out, "--json")
    assert '"path":"evil\\u001b[2J\\rname.md"' in r.stdout


def test_build_json_report_lists_skips_with_their_reasons(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / "ok.md").write_text("# ok\n")
    (c / "deep.json").write_text("[" * 500 + "]" * 500)
    r = CliRunner().invoke(kb_build, [str(c), "-o", str(tmp_path / "o.kb"), "--embedder", "none", "--no-reranker", "--json"])
    assert r.exit_code == 0
    import json

    assert json.loads(r.stdout)["skipped"] == [["deep.json", "malformed JSON: nested more than 100 levels deep"]]


def test_format_2_values_behind_the_checksums_are_checked_too(tmp_path, tiny_artifact):
    """Found by the artifact fuzzer on the merged reader: document_weight, the analyzer's
    languages and stemmers, and chunk tags that are not strings gave raw TypeErrors."""
    for key, value in (("bm25", {"document_weight": [1]}), ("bm25", {"b": 1e300}), ("bm25", {"k1": 11.0}), ("analyzer", {"languages": 5}), ("analyzer", {"stemmers": [1]}),
                       ("analyzer", {"stopwords": ["the"]}), ("bm25", {"languages": [{"code": "en"}]})):  # the last two: fuzz seed 35 (a version 2 analyzer's stopwords as a list), format 4
        p = copy_of(tmp_path, tiny_artifact)
        meta = msgpack.unpackb(dict((s.name, s.data) for s in sections_of(p))[L.META])
        meta[key] = meta[key] | value
        replace_section(p, L.META, msgpack.packb(meta))
        r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
        assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {p}: corrupt artifact: meta: meta.{key}."), r.stderr


def test_an_embedder_backend_this_kb_lacks_is_unsupported_exit_4(tmp_path, tiny_artifact):
    import json

    p = copy_of(tmp_path, tiny_artifact)
    items = [bytes(x) for x in L.BlobTable(dict((s.name, s.data) for s in sections_of(p))[L.MODEL_EMBED])]
    i = msgpack.unpackb(items[0]).index("kb_model.json") + 1
    items[i] = json.dumps(json.loads(items[i]) | {"backend": "has("}).encode()  # found by the fuzzer (seed 9, input 30235)
    replace_section(p, L.MODEL_EMBED, L.pack_blobs(items))
    r = kb_run("search", "backup", "-i", p, "--no-stale-check")
    assert (r.exit_code, r.stderr) == (4, "kb: error: embedder backend 'has(' is not available in this kb; upgrade kb, or rebuild the index with this kb-build\n")


def _postings(path):
    secs = {s.name: s for s in sections_of(path)}
    return {n: np.frombuffer(bytes(secs[n].data), dtype=d).copy() for n, d in ((L.POSTING_OFFSETS, "<u8"), (L.POSTING_IDS, "<u4"), (L.DOC_POSTING_IDS, "<u4"))}


def test_an_impact_posting_past_the_chunk_or_document_table_is_corrupt_not_a_crash(tmp_path, tiny_artifact):
    for name in (L.POSTING_IDS, L.DOC_POSTING_IDS):
        p = copy_of(tmp_path, tiny_artifact)
        ids = _postings(p)[name]
        ids[:] = 2**32 - 1  # every term's first posting, whichever the query uses
        replace_section(p, name, ids.tobytes())
        r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
        assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: a posting names a chunk or document past the tables\n"), name


def test_impact_posting_offsets_out_of_order_or_past_the_ids_are_corrupt(tmp_path, tiny_artifact):
    p = copy_of(tmp_path, tiny_artifact)
    offsets = _postings(p)[L.POSTING_OFFSETS]
    offsets[1:-1] = offsets[1:-1][::-1]  # first and last still cover the ids
    replace_section(p, L.POSTING_OFFSETS, offsets.tobytes())
    r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
    assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {p}: corrupt artifact: posting offsets of term ") and r.stderr.endswith(" are out of order\n")
    offsets[-1] += 1
    replace_section(p, L.POSTING_OFFSETS, offsets.tobytes())
    r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section 'postings.offsets' does not cover 'postings.ids'\n")


def test_a_forged_meta_context_is_corrupt_not_a_crash(tmp_path, sample_artifact):
    for bad, message in (([1], "meta.path_contexts must be a map of at most 1000 prefixes"), ({"a/": "two\nlines"}, "meta.path_contexts descriptions must be one line of at most 300 characters")):
        p = copy_of(tmp_path, sample_artifact)
        meta = msgpack.unpackb(dict((s.name, s.data) for s in sections_of(p))[L.META])
        meta["path_contexts"] = bad
        replace_section(p, L.META, msgpack.packb(meta))
        r = kb_run("search", "backup", "-i", p, "--no-stale-check")
        assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: meta: {message}\n")


def test_a_forged_document_source_is_corrupt_not_a_crash(tmp_path, sample_artifact):
    import zstandard

    def with_sources(items):
        p = copy_of(tmp_path, sample_artifact)
        replace_section(p, L.DOC_SOURCES, L.pack_blobs(items))
        return kb_run("get", "runbooks/disk-full.md:1:1", "-i", p), p

    items = [bytes(x) for x in L.BlobTable(dict((s.name, s.data) for s in sections_of(copy_of(tmp_path, sample_artifact)))[L.DOC_SOURCES])]
    r, p = with_sources(items[:-1])
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section 'docs.source' holds 16 items, expected 17\n")
    from kb.runtime.index import Index

    with Index(sample_artifact) as ix:
        d = ix.doc_by_path("runbooks/disk-full.md")
    for forged, why in ((zstandard.ZstdCompressor().compress(b"\xff\xfe"), "is not UTF-8"), (b"\x28\xb5\x2f\xfd\x00\x00\x00\x00\x00\x10", "does not decode"), (b"junk", "does not decode")):
        r, p = with_sources(items[:d] + [forged] + items[d + 1 :])
        assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: the source of document {d} {why}\n"), forged


def test_chunk_lengths_that_are_not_finite_are_corrupt_in_the_formats_that_score_with_them(tmp_path):
    """Found by the artifact fuzzer (a NaN length in a format 2 artifact reached a float cast)."""
    from corpora import GOLDEN

    p = copy_of(tmp_path, GOLDEN / "tiny-v2.kb")
    version, secs = artifact_parts(p)
    lengths = np.frombuffer(bytes(next(s for s in secs if s.name == L.CHUNK_LENGTHS).data), dtype="<f4").copy()
    lengths[0] = np.nan
    rewrite(p, [A.SectionData(s.name, lengths.tobytes()) if s.name == L.CHUNK_LENGTHS else s for s in secs], version)
    r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: chunk lengths must be finite and not negative\n")


def test_a_vector_index_whose_metric_kind_is_forged_is_corrupt_not_a_segfault(tmp_path, tiny_artifact):
    """Found by the artifact fuzzer (seed 12, input 901270): metric byte 'c' (cos) set to 0
    ("unknown") left usearch a null distance function, and the search killed the process."""
    import struct

    from kb.formats import hnsw as H

    p = copy_of(tmp_path, tiny_artifact)
    secs = sections_of(p)
    vec = bytearray(next(s for s in secs if s.name == L.VECTORS).data)
    rows, cols = struct.unpack("<II", vec[:8])
    metric_at = 8 + rows * cols + 7 + 3 * 2  # after "usearch" and the three version fields
    assert vec[metric_at] == H.METRIC_COS
    vec[metric_at] = 0
    replace_section(p, L.VECTORS, bytes(vec))
    r = kb_run("search", "backup", "-i", p, "--no-stale-check")
    assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {p}: corrupt artifact: ") and "metric kind 0, expected cos" in r.stderr


def test_a_stored_vector_that_is_not_finite_is_corrupt_not_a_nan_in_the_json(tmp_path, tiny_artifact):
    """Seen under the artifact fuzzer: NaN vectors gave NaN cosines and confidences, which JSON
    output printed as NaN (not JSON)."""
    import struct

    p = copy_of(tmp_path, tiny_artifact)
    vec = bytearray(next(s for s in sections_of(p) if s.name == L.VECTORS).data)
    rows, cols = struct.unpack("<II", vec[:8])
    vec[8 : 8 + cols * rows] = np.full(cols * rows // 2, np.nan, dtype="<f2").tobytes()  # every vector (f16)
    replace_section(p, L.VECTORS, bytes(vec))
    r = kb_run("search", "backup", "-i", p, "--json", "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: a stored vector is not finite\n")


def test_a_packed_model_that_does_not_load_makes_the_artifact_corrupt(tmp_path, tiny_artifact, monkeypatch):
    """A model.embed whose model.bin or tokenizer CTranslate2 refuses (found by the fuzzer, seed 31,
    inputs 10841 and 57149: crc-valid, structurally edited) was exit 1; the artifact is unusable,
    so exit 3. Asked for CUDA, a load failure may be this machine's: it stays a model error."""
    from kb.models import encoders
    from kb.common.errors import ModelError

    def refuse(files, device="auto", compute_type="auto", threads=0):
        raise ModelError(f"cannot load model 'tiny' on {device}/int8: variable encoder/layer_0/ffn/linear_1/weight_scale not found")

    monkeypatch.setattr(encoders, "load_embedder", refuse)
    r = kb_run("search", "backup", "-i", tiny_artifact, "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {tiny_artifact}: corrupt artifact: its embedding model does not load: cannot load model 'tiny' on auto/int8: variable encoder/layer_0/ffn/linear_1/weight_scale not found\n")
    r = kb_run("search", "backup", "-i", tiny_artifact, "--no-stale-check", "--device", "cuda")
    assert r.exit_code == 1 and r.stderr.startswith("kb: error: cannot load model 'tiny' on cuda/int8")


def test_the_fuzzers_findings_of_seed_33_exit_3():
    """Seed 33 of the artifact fuzzer: input 82869, a model.bin whose config and weights disagree
    (CTranslate2's warm-up forward raised ValueError: exit 1), and input 100715, a model card whose
    window of 1 token cannot hold a query (the in-place encoder's ModelError at query time: exit 1).
    Both are corrupt artifacts now; the fuzzer's own replay checks every use of the input."""
    for index in (82869, 100715):
        r = subprocess.run([sys.executable, "-m", "tests.fuzz.run", "--target", "artifact", "--seed", "33", "--replay", str(index)],
                           capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
        assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "exit 3", (index, r.stdout[-500:], r.stderr[-2000:])


@pytest.mark.parametrize("item, why", [(b"\xffrun", "is not UTF-8 words"), (b"run  runs", "is not UTF-8 words")])
def test_a_forged_terms_surfaces_item_is_corrupt(tmp_path, tiny_artifact, item, why):
    """terms.surfaces (the words each term stands for, read by multi-line snippets): a count
    other than the terms' is refused at first use, an item that is not words when it is read."""
    from kb.runtime.index import Index

    p = copy_of(tmp_path, tiny_artifact)
    with Index(p) as ix:
        n, tid = ix.n_terms, ix.term_id("backup")
    replace_section(p, L.TERM_SURFACES, L.pack_blobs([item if i == tid else b"" for i in range(n)]))
    r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: terms.surfaces item {tid} {why}\n")
    replace_section(p, L.TERM_SURFACES, L.pack_blobs([b""] * (n - 1)))
    r = kb_run("search", "backup", "-i", p, "--mode", "bm25", "--no-stale-check")
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section 'terms.surfaces' holds {n - 1} items, expected {n}\n")
