"""Several artifacts searched as one (runtime/collection.py): -i repeated and set files."""

import json
from pathlib import Path
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from kb.formats.kbset import MAX_SET_BYTES
from kb.runtime.bm25 import bm25_scores, query_terms, query_words, top_k
from kb.runtime.cli import main as kb
from kb.runtime.collection import bm25_scores as set_bm25_scores, open_paths
from kb.runtime.index import Index
from kb.runtime.search import Query, Searcher

from corpora import SAMPLE, build_hash

PARTS = (("decisions",), ("incidents",), ("notes", "reference"), ("runbooks",))  # contiguous path ranges


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """The sample corpus built whole, and split into 4 artifacts by folder."""
    root = tmp_path_factory.mktemp("split")
    parts = []
    for i, folders in enumerate(PARTS):
        corpus = root / f"corpus{i}"
        corpus.mkdir()
        shutil.copy(SAMPLE / "kb.toml", corpus / "kb.toml")
        for f in folders:
            shutil.copytree(SAMPLE / f, corpus / f)
        build_hash(corpus, root / f"part{i}.kb")
        parts.append(root / f"part{i}.kb")
    build_hash(SAMPLE, root / "whole.kb")
    return root / "whole.kb", parts


def run(*args):
    return CliRunner().invoke(kb, [str(a) for a in args])


def _queries(ix: Index, seed: int = 0) -> list[str]:
    """Every term of the whole corpus alone, then 600 random 2-5 term queries."""
    terms = [bytes(ix.term_strings[i]).decode() for i in range(ix.n_terms)]
    rng = np.random.default_rng(seed)
    return terms + [" ".join(rng.choice(terms, size=k)) for k in (2, 3, 5) for _ in range(200)]


def test_bm25_over_a_corpus_split_into_4_artifacts_ranks_and_scores_as_one_artifact(split):
    whole_path, parts = split
    with Index(whole_path) as whole, open_paths([str(p) for p in parts]) as coll:
        assert (coll.n_chunks, coll.n_docs) == (whole.n_chunks, whole.n_docs)
        assert {round(m.meta.bm25["avg_length"], 3) for m in coll.members} != {round(whole.meta.bm25["avg_length"], 3)}  # the split moves the averages
        for q in _queries(whole):
            want_ids, want = bm25_scores(whole, query_terms(whole, q))
            got_ids, got = set_bm25_scores(coll, q)
            assert np.array_equal(got_ids, want_ids), q
            assert np.array_equal(got, want), q  # the same floats, not merely close ones
            assert np.array_equal(top_k(got_ids, got, 10)[0], top_k(want_ids, want, 10)[0]), q


def test_a_set_searches_bm25_mode_in_the_single_artifacts_order(split):
    whole_path, parts = split
    with Index(whole_path) as whole, open_paths([str(p) for p in parts]) as coll:
        for q in ("zfs replication", "restore a snapshot from the backup host", "gpu xid error", "who is on call"):
            one = Searcher(whole).search(Query(q, top_k=10, mode="bm25", all_statuses=True))
            many = Searcher(coll).search(Query(q, top_k=10, mode="bm25", all_statuses=True))
            assert [(r.path, r.section, r.score) for r in many.results] == [(r.path, r.section, r.score) for r in one.results]


def test_hybrid_search_over_a_set_finds_the_single_artifacts_top_10(split):
    whole_path, parts = split
    with Index(whole_path) as whole, open_paths([str(p) for p in parts]) as coll:
        for q in ("zfs replication", "restore a snapshot from the backup host", "gpu xid error"):
            one = Searcher(whole).search(Query(q, top_k=10, all_statuses=True))
            many = Searcher(coll).search(Query(q, top_k=10, all_statuses=True))
            assert {(r.path, r.section, r.lines) for r in many.results} == {(r.path, r.section, r.lines) for r in one.results}


def test_each_result_names_its_artifact_and_the_top_level_lists_them(split):
    _, parts = split
    r = run("search", "zfs replication backups", *[a for p in parts for a in ("-i", p)], "--json", "--no-stale-check", "-n", "10")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema_version"] == 3
    ids = [Index(p).artifact.id for p in parts]
    assert [a["id"] for a in d["artifact"]] == ids and [a["path"] for a in d["artifact"]] == [a["name"] for a in d["artifact"]] == [str(p) for p in parts]
    by_folder = dict(zip(("decisions", "incidents", "notes", "reference", "runbooks"), (0, 1, 2, 2, 3)))
    assert d["results"] and all(x["artifact_id"] == ids[by_folder[x["path"].split("/")[0]]] for x in d["results"])
    assert all(x["artifact"] == str(parts[by_folder[x["path"].split("/")[0]]]) for x in d["results"])
    assert len({x["artifact"] for x in d["results"]}) > 1


def test_path_contexts_tags_and_status_filters_work_per_artifact(split):
    _, parts = split
    r = run("search", "backup", *[a for p in parts for a in ("-i", p)], "--json", "--no-stale-check", "-n", "20", "--status", "historical")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["results"] and {x["status"] for x in d["results"]} == {"historical"}
    for x in d["results"]:
        top = x["path"].split("/")[0] + "/"
        assert top in [c["prefix"] for c in x["path_contexts"]]
    assert set(d["tag_contexts"]) == {t for x in d["results"] for t in x["tags"]} and all(d["tag_contexts"].values())
    r = run("search", "backup", *[a for p in parts for a in ("-i", p)], "--json", "--no-stale-check", "--path", "runbooks/")
    assert r.exit_code == 0 and {x["path"].split("/")[0] for x in json.loads(r.stdout)["results"]} == {"runbooks"}


def test_a_filter_no_artifact_knows_is_one_usage_line(split):
    _, parts = split
    r = run("search", "backup", "-i", parts[0], "-i", parts[1], "--status", "nonsense")
    assert r.exit_code == 2
    assert r.stderr.startswith("kb: error: unknown status 'nonsense'; these artifacts have: ") and r.stderr.count("\n") == 1


def test_set_file_round_trip_with_relative_paths(split, tmp_path):
    _, parts = split
    folder = tmp_path / "shards"
    folder.mkdir()
    for p in parts:
        shutil.copy(p, folder / p.name)
    r = run("set", "create", folder / "all.kbset", *[folder / p.name for p in parts])
    assert r.exit_code == 0, r.output
    assert r.stderr == f"kb set: wrote {folder / 'all.kbset'}: 4 artifacts\n"
    doc = json.loads((folder / "all.kbset").read_text())
    assert doc["kb_set"] == 1 and [a["path"] for a in doc["artifacts"]] == [p.name for p in parts]
    assert all(len(a["sha256"]) == 64 and len(a["id"]) == 16 for a in doc["artifacts"])
    moved = tmp_path / "moved"
    shutil.move(folder, moved)  # paths are relative to the set file: the folder moves whole
    a = run("search", "zfs replication", "-i", moved / "all.kbset", "--json", "--no-stale-check")
    b = run("search", "zfs replication", *[x for p in parts for x in ("-i", p)], "--json", "--no-stale-check")
    assert a.exit_code == b.exit_code == 0
    strip = lambda d: [(x["path"], x["chunk_id"], x["artifact_id"], x["score"]) for x in d["results"]]  # noqa: E731
    assert strip(json.loads(a.stdout)) == strip(json.loads(b.stdout))
    assert {x["artifact"] for x in json.loads(a.stdout)["results"]} <= {p.name for p in parts}  # named as the set file names them


def test_a_missing_member_is_one_line_and_exit_3(split, tmp_path):
    _, parts = split
    for p in parts[:2]:
        shutil.copy(p, tmp_path / p.name)
    assert run("set", "create", tmp_path / "s.kbset", tmp_path / parts[0].name, tmp_path / parts[1].name).exit_code == 0
    (tmp_path / parts[1].name).unlink()
    r = run("search", "backup", "-i", tmp_path / "s.kbset")
    assert r.exit_code == 3
    doc = json.loads((tmp_path / "s.kbset").read_text())
    assert r.stderr == f"kb: error: {tmp_path / 's.kbset'}: member part1.kb (id {doc['artifacts'][1]['id']}) is missing; put it back or recreate the set with kb set create\n"


def test_a_changed_member_is_one_line_and_exit_3(split, tmp_path):
    _, parts = split
    for p in parts[:2]:
        shutil.copy(p, tmp_path / p.name)
    assert run("set", "create", tmp_path / "s.kbset", tmp_path / parts[0].name, tmp_path / parts[1].name).exit_code == 0
    shutil.copy(parts[2], tmp_path / parts[1].name)  # another artifact under the member's name
    r = run("search", "backup", "-i", tmp_path / "s.kbset")
    assert r.exit_code == 3 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"kb: error: {tmp_path / 's.kbset'}: member part1.kb changed: ") and r.stderr.endswith("; recreate the set with kb set create\n")


def test_info_verify_checks_each_members_sha256(split, tmp_path):
    _, parts = split
    for p in parts[:2]:
        shutil.copy(p, tmp_path / p.name)
    assert run("set", "create", tmp_path / "s.kbset", tmp_path / parts[0].name, tmp_path / parts[1].name).exit_code == 0
    r = run("info", "-i", tmp_path / "s.kbset", "--verify", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(d["artifacts"]) == 2 and [m["sha256"] for m in d["verified_sets"][str(tmp_path / "s.kbset")]] == ["ok", "ok"]
    doc = json.loads((tmp_path / "s.kbset").read_text())
    doc["artifacts"][0]["sha256"] = "0" * 64
    (tmp_path / "s.kbset").write_text(json.dumps(doc))
    r = run("info", "-i", tmp_path / "s.kbset", "--verify")
    assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {tmp_path / 's.kbset'}: member part0.kb changed: its sha256 is ")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "not a kb set file (not UTF-8 JSON: "),
        (b'{"artifacts": []}', 'not a kb set file (no "kb_set" key); create one with kb set create'),
        (b'{"kb_set": 9, "artifacts": []}', "set file version 9 is not supported (this kb reads version 1)"),
        (b'{"kb_set": 1, "artifacts": []}', "set file lists no artifacts"),
        (b'{"kb_set": 1, "artifacts": [{"path": "/abs.kb", "id": "0123456789abcdef", "bytes": 1, "sha256": "' + b"0" * 64 + b'"}]}', "artifact 1 of the set file needs path (relative), id (16 hex digits), bytes and sha256 (64 hex digits)"),
        (b"{" + b" " * MAX_SET_BYTES + b"}", f"set file is larger than the {MAX_SET_BYTES:,} bytes a set file may be"),
    ],
)
def test_a_bad_set_file_is_one_line_and_exit_3(tmp_path, content, message):
    (tmp_path / "bad.kbset").write_bytes(content)
    r = run("search", "x", "-i", tmp_path / "bad.kbset")
    assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {tmp_path / 'bad.kbset'}: {message}") and r.stderr.count("\n") == 1


def test_artifacts_with_different_embedding_models_are_refused(split, tmp_path):
    _, parts = split
    other = tmp_path / "none.kb"
    build_hash(SAMPLE / "runbooks", other, embedder="none")
    r = run("search", "backup", "-i", parts[0], "-i", other)
    assert r.exit_code == 2
    assert r.stderr == f"kb: error: {other} has no vectors but {parts[0]} has; artifacts searched together must all have vectors from one embedding model, or none\n"


def test_the_same_artifact_twice_is_refused(split):
    _, parts = split
    r = run("search", "backup", "-i", parts[0], "-i", parts[0])
    assert r.exit_code == 2 and r.stderr == f"kb: error: {parts[0]} and {parts[0]} are the same artifact (id {Index(parts[0]).artifact.id}); give each artifact once\n"


def test_list_and_info_take_several_artifacts(split):
    _, parts = split
    r = run("list", *[a for p in parts for a in ("-i", p)], "--jsonl", "--all-statuses")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    d = json.loads(run("list", *[a for p in parts for a in ("-i", p)], "--json", "--all-statuses").stdout)
    assert d["items"] == rows and [a["name"] for a in d["artifact"]] == [str(p) for p in parts]
    assert len(rows) == 17 and {x["artifact_id"] for x in rows} == {Index(p).artifact.id for p in parts} and {x["artifact"] for x in rows} == {str(p) for p in parts}
    r = run("info", "-i", parts[0], "-i", parts[1], "--json")
    assert r.exit_code == 0 and [a["artifact"] for a in json.loads(r.stdout)["artifacts"]] == [str(parts[0]), str(parts[1])]


def test_get_reads_a_set_from_the_member_that_holds_the_target_or_the_one_named(split):
    _, parts = split
    several = [a for p in parts for a in ("-i", p)]
    r = run("get", "runbooks/disk-full.md:1:2", *several, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["lines"] == [1, 2] and d["artifact"] == {"id": Index(parts[3]).artifact.id, "name": str(parts[3]), "path": str(parts[3])}
    r = run("get", "0", *several)  # a chunk id is in every member
    assert r.exit_code == 2
    assert r.stderr == f"kb: error: chunk ids count within each artifact of the set: name one with member (kb get --member NAME): {', '.join(map(str, parts))} (a search result's artifact)\n"
    r = run("get", "0", *several, "--member", str(parts[1]), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["document"]["path"].startswith("incidents/")
    r = run("get", "0", *several, "--member", "nope.kb")
    assert r.exit_code == 2 and r.stderr == f"kb: error: no artifact 'nope.kb' in this set; its artifacts: {', '.join(map(str, parts))}\n"
    r = run("get", "runbooks/disk-full.md", "decisions/nope.md", *several)
    assert r.exit_code == 2 and r.stderr.startswith("kb: error: no artifact of the set (")


def test_status_takes_a_set_and_a_member(split):
    _, parts = split
    r = run("status", *[a for p in parts for a in ("-i", p)], "--json")
    d = json.loads(r.stdout)
    assert [a["artifact"]["name"] for a in d["artifacts"]] == [str(p) for p in parts] and d["fresh"] is True
    assert r.exit_code == 0
    r = run("status", *[a for p in parts for a in ("-i", p)])
    assert r.stdout.splitlines()[0] == f"{parts[0]}: corpus root {parts[0].parent / 'corpus0'}: up to date"
    r = run("status", *[a for p in parts for a in ("-i", p)], "--member", Index(parts[2]).artifact.id, "--json")
    assert "artifacts" not in json.loads(r.stdout) and "root" in json.loads(r.stdout)
    r = run("status", *[a for p in parts for a in ("-i", p)], "--member", "nope")
    assert r.exit_code == 2 and r.stderr.startswith("kb: error: no artifact 'nope' in ")


def test_files_output_of_a_set_gives_paths_that_open_or_name_the_member(split):
    from kb.runtime.output import render_files
    from kb.runtime.results import Response

    _, parts = split
    r = run("search", "zfs replication backups", *[a for p in parts for a in ("-i", p)], "--format", "files", "--no-stale-check")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) > 1 and all(Path(line).is_file() for line in lines)  # each under its member's corpus root
    d = json.loads(run("search", "zfs replication backups", *[a for p in parts for a in ("-i", p)], "--json", "--no-stale-check").stdout)
    fake = Response(None, tuple(type("R", (), {"artifact": x["artifact"], "path": x["path"]}) for x in d["results"]), (), {}, False, {})
    assert render_files(fake, {str(p): None for p in parts}).splitlines()[0] == f"{d['results'][0]['artifact']}:{d['results'][0]['path']}"


def test_the_servers_service_searches_a_set_and_gets_from_its_members(split):
    from kb.runtime.requests import RequestError, parse_get, parse_search
    from kb.runtime.service import Service

    _, parts = split
    with open_paths([str(p) for p in parts]) as coll:
        svc = Service(coll, stale_check=False).warm()
        d = svc.search(parse_search({"query": "zfs replication", "top_k": 5}))
        assert d["schema_version"] == 3 and [a["id"] for a in d["artifact"]] == [m.artifact.id for m in coll.members]
        assert d["results"] and all(r["artifact_id"] in {m.artifact.id for m in coll.members} for r in d["results"])
        assert len(svc.info()["artifacts"]) == 4 and len(svc.status()["artifacts"]) == 4
        with pytest.raises(RequestError, match="chunk ids count within each artifact of the set"):
            svc.get(parse_get({"chunk_id": 0}))
        first = d["results"][0]
        got = svc.get(parse_get({"chunk_id": first["chunk_id"], "member": first["artifact"]}))
        assert got["chunk"]["path"] == first["path"] and got["artifact"]["id"] == first["artifact_id"]


def test_a_set_weighs_its_legs_by_the_querys_length_as_one_artifact_does(split):
    from kb.common.options import resolve, stored_search
    from kb.runtime.bm25 import query_stopwords
    from kb.runtime.fusion import KEYWORD_QUERY_WEIGHT, length_weight

    whole_path, parts = split
    with Index(whole_path) as whole, open_paths([str(p) for p in parts]) as coll:
        shares = []
        for q in ("zfs replication", "how do I restore zfs replication", "restore a snapshot from the backup host after the disk of the primary storage server failed during the nightly replication window"):
            share = length_weight(len(set(query_words(whole, q))), query_stopwords(whole, q))
            shares.append(share)
            for ix in (whole, coll):
                stored = {k: v for k, v in stored_search(ix.meta).items() if k != "semantic_weight"}  # the sample's kb.toml fixes one
                fixed = resolve(stored, {"adaptive_fusion": False})  # the legs' own weights, unscaled
                legs = Searcher(ix).search(Query(q, top_k=1, all_statuses=True, explain=True), fixed).results[0].explain.legs
                for name, part in legs.items():
                    assert abs(part["rrf"] - (share if name == "vector" else 1 - share) / (10 + part["rank"])) < 1e-6, (q, name)
        assert shares[0] == KEYWORD_QUERY_WEIGHT < shares[1]  # a keyword query, the same words asked as a question


# --- kb set create writes safely (issue 50 B) ----------------------------------------------------
def test_set_create_never_follows_a_link_planted_beside_out(split, tmp_path):
    _, parts = split
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for name in ("s.kbset.tmp", ".s.kbset.tmp"):
        (tmp_path / name).symlink_to(victim)
    r = run("set", "create", tmp_path / "s.kbset", parts[0], parts[1])
    assert r.exit_code == 0, r.output
    assert victim.read_text() == "keep me" and json.loads((tmp_path / "s.kbset").read_text())["kb_set"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.kbset.tmp", "s.kbset", "s.kbset.tmp", "victim.txt"]  # no temporary left


def test_set_create_replaces_a_set_file_but_not_another_file_unless_forced(split, tmp_path):
    _, parts = split
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    r = run("set", "create", notes, parts[0], parts[1])
    assert (r.exit_code, r.stderr) == (2, f"kb: error: {notes} exists and is not a kb set file; kb set create will not replace it (pass --force to)\n")
    assert notes.read_text() == "# my notes\n"
    assert run("set", "create", notes, parts[0], parts[1], "--force").exit_code == 0
    assert json.loads(notes.read_text())["kb_set"] == 1
    assert run("set", "create", notes, parts[0]).exit_code == 0  # now a set file: replaced without --force
    assert len(json.loads(notes.read_text())["artifacts"]) == 1


def test_set_create_refuses_to_overwrite_one_of_its_own_members(split, tmp_path):
    _, parts = split
    a = tmp_path / "a.kb"
    shutil.copy(parts[0], a)
    before = a.read_bytes()
    for extra in ((), ("--force",)):
        r = run("set", "create", a, a, parts[1], *extra)
        assert (r.exit_code, r.stderr) == (2, f"kb: error: {a} is one of the set's own artifacts; kb set create will not replace it: give another OUT\n")
    assert a.read_bytes() == before
