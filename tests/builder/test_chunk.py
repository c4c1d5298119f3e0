import pytest
from hypothesis import given, strategies as st

from kb.builder.chunk import ChunkOptions, chunk_document
from kb.builder.ingest import Document, parse_file
from fakes import HashEmbedder

count = HashEmbedder().count_tokens


def md(text: str, path="doc.md") -> Document:
    return parse_file(path, ".md", text.encode())


def test_headings_give_section_paths_and_source_lines():
    doc = md("---\ntitle: Ops\n---\n# Storage\nintro\n## Backups\nnightly\n### Restore\nsteps\n## Quotas\nlimits\n")
    got = [(c.section, c.text, c.start_line, c.end_line) for c in chunk_document(doc, count)]
    assert got == [
        ("Storage", "# Storage\nintro", 4, 5),
        ("Storage > Backups", "## Backups\nnightly", 6, 7),
        ("Storage > Backups > Restore", "### Restore\nsteps", 8, 9),
        ("Storage > Quotas", "## Quotas\nlimits", 10, 11),
    ]


def test_hash_lines_inside_code_fences_are_not_headings_and_fences_are_never_split():
    fence = "```bash\n" + "\n".join(f"# step {i}\necho {i} " + "word " * 10 for i in range(40)) + "\n```"
    doc = md(f"# Run\n\nBefore.\n\n{fence}\n\nAfter.\n")
    chunks = chunk_document(doc, count, ChunkOptions(max_tokens=60, overlap_tokens=10))
    assert {c.section for c in chunks} == {"Run"}
    holding = [c for c in chunks if "```bash" in c.text]
    assert len(holding) == 1 and fence in holding[0].text


def test_long_sections_split_within_budget_with_overlap():
    paras = "\n\n".join(f"Paragraph {i} " + " ".join(f"w{i}x{j}" for j in range(20)) + "." for i in range(12))
    doc = md(f"# Long\n\n{paras}\n")
    chunks = chunk_document(doc, count, ChunkOptions(max_tokens=70, overlap_tokens=30))
    assert len(chunks) > 3
    assert all(sum(count([c.text])) <= 70 for c in chunks)
    for a, b in zip(chunks, chunks[1:]):
        assert b.start_line <= a.end_line  # consecutive chunks share their boundary paragraph
    assert all(f"Paragraph {i} " in "".join(c.text for c in chunks) for i in range(12))


def test_one_giant_paragraph_splits_into_sentences():
    text = " ".join(f"Sentence number {i} talks about disks." for i in range(60))
    chunks = chunk_document(md(f"# P\n\n{text}\n"), count, ChunkOptions(max_tokens=50, overlap_tokens=0))
    assert len(chunks) > 5 and all(sum(count([c.text])) <= 50 for c in chunks)


def test_front_matter_only_documents_still_get_one_chunk():
    doc = md("---\ntitle: Section index\ndescription: Everything about images\n---\n")
    (c,) = chunk_document(doc, count)
    assert c.text == "Section index\nEverything about images" and c.section == ""


def test_yaml_and_toml_chunk_by_top_level_keys():
    y = parse_file("r.yaml", ".yaml", b"rotation:\n  - alice\nescalation:\n  after: 15\n")
    assert [c.section for c in chunk_document(y, count)] == ["rotation", "escalation"]
    t = parse_file("a.toml", ".toml", b'title = "x"\n[disk]\nwarn = 80\n[backup.age]\nmax = 26\n')
    assert [c.section for c in chunk_document(t, count)] == ["", "disk", "backup.age"]


def test_json_objects_chunk_by_top_level_keys():
    j = parse_file("s.json", ".json", b'{\n  "services": [1, 2],\n  "owners": {"a": 1}\n}\n')
    assert [c.section for c in chunk_document(j, count)] == ["", "services", "owners"]


def test_the_estimate_adds_up_over_whitespace():
    from kb.builder.chunk import estimate_tokens

    parts = ["Cells (n=12) grew;", "北京 大学 — β-cells", "e.g. 3.5 % of x_y", "plain words here"]
    assert sum(estimate_tokens(parts)) == estimate_tokens([" \n".join(parts)])[0]


@given(st.lists(st.sampled_from(["Disks fail.", "Backups run nightly!", "Is the NAS full?", "北京大学。", "x" * 30, "e.g. 3.5 % of x_y"]), min_size=1, max_size=80))
def test_counting_long_lines_by_sentences_changes_no_chunk(sentences):
    import kb.builder.chunk as C

    doc = md("# P\n\n" + " ".join(sentences) + "\n\nA second paragraph.\n")
    opts = ChunkOptions(max_tokens=40, overlap_tokens=8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(C, "PRESPLIT_CHARS_PER_TOKEN", 0)  # every one-line unit counted by sentences
        presplit = chunk_document(doc, C.estimate_tokens, opts)
        mp.setattr(C, "PRESPLIT_CHARS_PER_TOKEN", 10**9)  # every unit counted whole first
        whole = chunk_document(doc, C.estimate_tokens, opts)
    assert presplit == whole
