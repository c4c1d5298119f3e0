import re
import json

import pytest

from kb.builder.ingest import InputError, parse_file, read_corpus, split_front_matter, tags_of

from corpora import TINY


def _by_path(corpus):
    return {d.path: d for d in corpus.documents}


def test_every_supported_format_is_read_from_the_tiny_corpus():
    c = read_corpus([TINY])
    docs = _by_path(c)
    assert sorted(docs) == [
        "alerts.toml",
        "backups.md",
        "gateway.txt",
        "notes/glossary.md",
        "notes/old-backups.md",
        "rotation.yaml",
        "services.json",
    ]
    assert c.skipped == []
    assert {d.kind for d in docs.values()} == {"markdown", "text", "json", "yaml", "toml"}
    assert len(c.sources) == 7  # kb.toml is config, not content


def test_yaml_front_matter_gives_title_tags_status_description():
    b = _by_path(read_corpus([TINY]))["backups.md"]
    assert (b.title, b.tags, b.status, b.description) == ("Backups", ("ops", "storage"), "live-doctrine", "How nightly backups run and how to restore.")
    assert b.first_line == 7 and b.text.startswith("# Backups")


def test_toml_front_matter_is_read():
    meta, body, first = split_front_matter('+++\ntitle = "GPU"\ntags = ["gpu"]\nstatus = "derived"\n+++\n# GPU\n')
    assert meta == {"title": "GPU", "tags": ["gpu"], "status": "derived"} and body == "# GPU\n" and first == 6


def test_without_front_matter_the_first_heading_is_the_title():
    d = parse_file("x/notes.md", ".md", b"intro\n# The Title\nbody\n")
    assert (d.title, d.status, d.tags) == ("The Title", None, ())


def test_minified_json_is_pretty_printed_before_chunking():
    data = json.dumps({"services": [{"name": f"svc{i}", "port": 8000 + i} for i in range(40)]}, separators=(",", ":")).encode()
    d = parse_file("s.json", ".json", data)
    assert d.text.count("\n") > 100 and '    {\n      "name": "svc0"' in d.text


def test_tags_accept_lists_and_comma_strings():
    assert tags_of(["Ops", "storage", "ops"]) == ("ops", "storage")
    assert tags_of("ops, storage gpu") == ("gpu", "ops", "storage")
    assert tags_of(None) == ()


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("bin.md", b"abc\0def", "binary"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "undecodable: not UTF-8 (byte 3)"),
        ("bad.json", b'{"a": 1,,}', "malformed JSON: Expecting property name enclosed in double quotes at line 1 column 9"),
        # libyaml (CSafeLoader) and pure-Python PyYAML word the problem differently; the line is the same
        ("bad.yaml", b"a: [1, 2\nb: 3\n", re.compile(r"malformed YAML: .* at line 2")),
        ("bad.toml", b"[a\nb = 1\n", "malformed TOML: Expected ']' at the end of a table declaration (at line 1, column 3)"),
        ("badfm.md", b"---\ntitle: [unclosed\n---\nbody\n", re.compile(r"malformed YAML front matter: .* at line \d")),
        ("listfm.md", b"---\n- a\n- b\n---\nbody\n", "malformed YAML front matter: not a mapping"),
        ("image.png", b"\x89PNG....", "unsupported type .png"),
        (".secret.md", b"# hidden", "hidden"),
    ],
)
def test_bad_inputs_are_skipped_with_their_reason(tmp_path, name, data, reason):
    (tmp_path / "good.md").write_text("# Good\n\ntext\n")
    (tmp_path / name).write_bytes(data)
    c = read_corpus([tmp_path])
    [skip] = c.skipped
    assert skip.path == name
    assert reason.fullmatch(skip.reason) if isinstance(reason, re.Pattern) else skip.reason == reason
    assert [d.path for d in c.documents] == ["good.md"]


def test_too_large_files_are_skipped(tmp_path):
    (tmp_path / "big.txt").write_text("x" * 2000)
    c = read_corpus([tmp_path], max_file_bytes=1000)
    assert [(s.path, s.reason) for s in c.skipped] == [("big.txt", "too large (2000 bytes > 1000)")]


def test_include_and_exclude_globs_filter_on_relative_paths():
    c = read_corpus([TINY], include=["*.md"], exclude=["notes/old-*"])
    assert sorted(_by_path(c)) == ["backups.md", "notes/glossary.md"]
    assert c.excluded == 5


def test_json_lines_records_keep_their_own_ids(tmp_path):
    p = tmp_path / "corpus.jsonl"
    lines = [
        {"_id": "4983", "title": "Brains", "text": "white matter"},
        {"id": 7, "text": "no title", "tags": ["a"], "status": "derived", "path": "db/rows/7"},
        "not an object",
        {"id": "x"},
        {"_id": "4983", "text": "dup"},
    ]
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken\n\n")
    c = read_corpus([], jsonl=[p])
    assert [(d.doc_id, d.path, d.title, d.tags, d.status) for d in c.documents] == [
        ("4983", "corpus.jsonl#4983", "Brains", (), None),
        ("7", "db/rows/7", "7", ("a",), "derived"),
    ]
    assert [(s.path, s.reason) for s in c.skipped] == [
        ("corpus.jsonl:3", "malformed record: not a JSON object"),
        ("corpus.jsonl:4", "malformed record: needs id (or _id) and text"),
        ("corpus.jsonl:5", "duplicate id '4983'"),
        ("corpus.jsonl:6", "malformed JSON: Expecting property name enclosed in double quotes at column 2"),
    ]


def test_a_missing_corpus_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        read_corpus([tmp_path / "nope"])
