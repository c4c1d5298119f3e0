"""The plumbing of the fusion study (bench/notes/2026-12-06-fusion-by-query-length.md):
bench/fusion_legs.py stores each query's legs as plain tuples, and bench/fusion_study.py reads them
back as kb's legs and fuses them, with and without --minmax."""

from pathlib import Path

from kb.runtime import fusion as F

from corpora import TINY, build_hash, load_script

BENCH = Path(__file__).resolve().parents[2] / "bench"
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "tiny-fixture.json"


def test_stored_legs_are_plain_and_read_back_as_kb_legs(tmp_path, capsys):
    legs_mod, study = (load_script(n, BENCH / f"{n}.py") for n in ("fusion_legs", "fusion_study"))
    art = tmp_path / "tiny.kb"
    build_hash(TINY, art)
    path = legs_mod.dump(f"tiny=fixture:{FIXTURE}:{art}", tmp_path)
    raw = __import__("pickle").loads(path.read_bytes())
    assert all(type(leg) is tuple for row in raw["rows"] for leg in row["legs"])
    name, rows = study.read_rows(path)
    assert name == "tiny" and rows
    for row in rows:
        assert {leg.kind for leg in row["legs"]} == {"bm25", "cosine"}
        assert all(isinstance(h, F.LegHit) for leg in row["legs"] for h in leg.hits)
        assert study.fuse_minmax(row, 0.5) and study.fuse(row, 0.5, 10.0, True)
    assert study.main([str(path), "--minmax"]) == 0
    out = capsys.readouterr().out
    assert out.count("| tiny | ") == 2  # the sweep's row and the min-max study's


def test_derived_queries_keep_corpus_and_judgments_and_change_only_the_text(tmp_path):
    derive = load_script("derive_queries", BENCH / "derive_queries.py")
    src = tmp_path / "src"
    (src / "qrels").mkdir(parents=True)
    (src / "corpus.jsonl").write_text('{"_id": "d1", "title": "Indexing", "text": "use of thesauri"}\n{"_id": "d2", "title": "", "text": "indexing"}\n')
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (src / "queries.jsonl").write_text('{"_id": "q1", "text": "What is the use of indexing? Indexing, thesauri."}\n')
    out = {}
    for mode in (["--sentence", "first"], ["--sentence", "last"], ["--keywords"], ["--first-words", "2"], ["--rarest-words", "1"]):
        dst = tmp_path / mode[-1]
        assert derive.main([str(src), str(dst), *mode]) == 0
        assert (dst / "corpus.jsonl").resolve() == (src / "corpus.jsonl").resolve()
        assert (dst / "qrels").resolve() == (src / "qrels").resolve()
        q = __import__("json").loads((dst / "queries.jsonl").read_text())
        assert q["_id"] == "q1"
        out[mode[-1]] = q["text"]
    assert out == {"first": "What is the use of indexing?", "last": "Indexing, thesauri.", "--keywords": "use indexing Indexing thesauri",
                   "2": "use indexing", "1": "use"}  # distinct and lower-cased; the rarest: 'use' and 'thesauri' are in one document each, 'use' first
