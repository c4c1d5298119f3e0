"""kb.toml is validated whole at build time: a wrong type, an out-of-range value or an unknown key in
any section is one line naming the file, the section and the key, exit 2, and no artifact."""

import pytest
from click.testing import CliRunner

from kb.builder.cli import main as kb_build
from kb.builder.config import load_config
from kb.common.options import SearchOptions, resolve
from kb.common.errors import UsageError

from corpora import TINY


@pytest.mark.parametrize(
    "toml, message",
    [
        ('[search]\nrrf_k = "twenty"\n', '[search] rrf_k: must be a number, got "twenty"'),
        ('[search]\nreranker = "x"\n', "[search] reranker: unknown key; known: default_limit, semantic_weight, rrf_k, rank1_bonus, rank23_bonus, rewrite_weight, tag_weight, adaptive_fusion, rerank, rerank_top, rerank_passage_tokens, blend, rerank_weight, low_confidence_floor"),
        ("[search]\nsemantic_weight = 1.5\n", "[search] semantic_weight: must be within 0..1, got 1.5"),
        ('[search]\nblend = "max"\n', '[search] blend: must be one of position, sigmoid, got "max"'),
        ('[search]\nrerank = "yes"\n', '[search] rerank: must be true or false, got "yes"'),
        ("[search]\ndefault_limit = 0\n", "[search] default_limit: must be within 1..200, got 0"),
        ("[search]\nrerank_top = 2.5\n", "[search] rerank_top: must be an integer, got 2.5"),
        ("[bm25]\nk3 = 1\n", "[bm25] k3: unknown key; known: k1, b, title_weight, section_weight, document_weight"),
        ("[bm25]\nb = 2\n", "[bm25] b: must be within 0..1, got 2"),
        ('[chunking]\nmax_tokens = "200"\n', '[chunking] max_tokens: must be an integer, got "200"'),
        ('[embedding]\nquantization = "int4"\n', '[embedding] quantization: must be one of int8, float32, got "int4"'),
        ('[embedding]\nmodel = "bert-huge"\n', "[embedding] model: must be one of auto, all-MiniLM-L6-v2, hash, multilingual-e5-small, none, got 'bert-huge'"),
        ('[vectors]\ndtype = "i8"\n', '[vectors] dtype: must be one of f16, bf16, f32, got "i8"'),
        ("[vectors]\nconnectivity = 1\n", "[vectors] connectivity: must be within 2..256, got 1"),
        ('[statuses]\nknown = "live"\n', '[statuses] known: must be an array of strings, got "live"'),
        ("[statuses]\ndefault = 3\n", "[statuses] default: must be a string, got 3"),
        ("[tags]\nops = 3\n", '[tags] ops: must be a one-line description (a string), e.g. ops = "Runbooks"'),
        ("search = 3\n", "[search] must be a table"),
        ("[colours]\nred = 1\n", "[colours]: unknown section; known: tags, contexts, statuses, search, chunking, bm25, analyzer, embedding, vectors"),
        ('[analyzer]\nlanguage = "xx"\n', "[analyzer] language: unknown language 'xx'; known: auto, da, de, en, es, fr, it, ja, ko, nl, no, pt, ru, sv, tr, zh"),
        ('[analyzer]\nlanguage = ["en", "auto"]\n', "[analyzer] language: auto stands alone, not in a list; or list the codes to detect among (da, de, en, es, fr, it, ja, ko, nl, no, pt, ru, sv, tr, zh)"),
        ('[analyzer]\nlanguage = ["en", "en"]\n', "[analyzer] language: 'en' is listed twice"),
        ("[analyzer]\nlanguage = []\n", "[analyzer] language: must not be empty, got []"),
        ("[analyzer]\nlanguage = 3\n", "[analyzer] language: must be a string or an array of strings, got 3"),
        ('[analyzer]\nstemmer = "porter"\n', "[analyzer] stemmer: unknown key; known: language"),
        ('[contexts]\n"runbooks/" = 3\n', '[contexts] \'runbooks/\': must be a one-line description (a string), e.g. "runbooks/" = "Lab runbooks"'),
        ('[contexts]\ndocs.v1 = "x"\n', '[contexts] \'docs\': must be a one-line description (a string), e.g. "runbooks/" = "Lab runbooks" (quote a prefix that holds a dot: "docs/v1.2/" = ...)'),
        ('[contexts]\n"a/" = """two\nlines"""\n', "[contexts] 'a/': must be one line of text, not several lines"),
        ('[contexts]\n"a/" = "  "\n', "[contexts] 'a/': must be one line of text, not empty"),
        ('[contexts]\n"" = "everything"\n', "[contexts] '': the prefix is empty; a context describes the documents under a path prefix, e.g. \"runbooks/\""),
        ('[contexts]\n"a/" = "' + "x" * 301 + '"\n', "[contexts] 'a/': the description is 301 characters long; the most is 300"),
        ('[contexts]\n"' + "p" * 1025 + '" = "x"\n', "[contexts] '" + "p" * 59 + "…': the prefix is 1025 characters long; the most is 1024"),
        ("[contexts]\n" + "".join(f'"d{i}/" = "x"\n' for i in range(1001)), "[contexts] holds 1001 prefixes; the most is 1000"),
        ("contexts = 3\n", '[contexts] must be a table of path prefixes, e.g. "runbooks/" = "Lab runbooks"'),
        ('[tags]\nops = "' + "x" * 301 + '"\n', "[tags] ops: the description is 301 characters long; the most is 300 (every result with the tag carries it)"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "malformed kb.toml: arrays or tables nested too deeply"),
        ("# " + "x" * (1 << 20) + "\n", "larger than 1,048,576 bytes; a kb.toml holds settings, not data"),
    ],
)
def test_a_bad_kb_toml_fails_the_build_with_one_line_naming_the_key(tmp_path, toml, message):
    cfg = tmp_path / "kb.toml"
    cfg.write_text(toml)
    out = tmp_path / "x.kb"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--config", str(cfg), "--embedder", "none", "--no-reranker"])
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {cfg}: {message}\n")
    assert not out.exists()


def test_a_context_prefix_that_matches_no_document_is_a_warning_not_a_failure(tmp_path):
    cfg = tmp_path / "kb.toml"
    cfg.write_text('[contexts]\n"notes/" = "Old notes"\n"nowhere/" = "Nothing here"\n')
    out = tmp_path / "x.kb"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--config", str(cfg), "--embedder", "none", "--no-reranker"])
    assert r.exit_code == 0 and out.is_file()
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == ["warning: [contexts] 'nowhere/' matches no document path; no result will carry its description"]
    assert load_config(cfg).contexts == {"notes/": "Old notes", "nowhere/": "Nothing here"}  # kept, as kb info shows


def test_a_malformed_kb_toml_is_one_line_too(tmp_path):
    cfg = tmp_path / "kb.toml"
    cfg.write_text("[search\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "x.kb"), "--config", str(cfg), "--embedder", "none"])
    assert r.exit_code == 2 and r.stderr.startswith(f"kb-build: error: {cfg}: malformed kb.toml: ") and r.stderr.count("\n") == 1


def test_a_valid_kb_toml_is_read_into_the_build_config(tmp_path):
    cfg = tmp_path / "kb.toml"
    cfg.write_text('[search]\nrrf_k = 60\nrerank = true\n[bm25]\nk1 = 0.9\n[vectors]\ndtype = "f32"\n[tags]\nOps = " Runbooks "\n')
    c = load_config(cfg)
    assert c.search == {"rrf_k": 60, "rerank": True}  # stored in the artifact as given
    assert (c.bm25.k1, c.bm25.b, c.vectors.dtype, c.tags) == (0.9, 0.75, "f32", {"ops": "Runbooks"})
    assert c.languages == ("auto",)


@pytest.mark.parametrize("value, languages", [('"auto"', ("auto",)), ('"de"', ("de",)), ('["en", "ja"]', ("en", "ja"))])
def test_the_analyzer_language_is_auto_a_code_or_a_list(tmp_path, value, languages):
    cfg = tmp_path / "kb.toml"
    cfg.write_text(f"[analyzer]\nlanguage = {value}\n")
    assert load_config(cfg).languages == languages


def test_search_options_resolve_defaults_then_the_artifact_then_overrides():
    o = resolve({"rrf_k": 60, "blend": "sigmoid", "from_a_newer_kb": 1}, {"rrf_k": 5, "rerank": None})
    assert (o.rrf_k, o.blend, o.rerank, o.semantic_weight) == (5.0, "sigmoid", False, SearchOptions().semantic_weight)
    with pytest.raises(UsageError) as e:
        resolve({"rrf_k": "twenty"})
    assert str(e.value) == "the artifact's [search] rrf_k must be a number, got \"twenty\"; rebuild it with a valid kb.toml"
    with pytest.raises(UsageError) as e:
        resolve({}, {"semantic_weight": 2})
    assert str(e.value) == "semantic_weight must be within 0..1, got 2"


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, tuple):
        return "[" + ", ".join(f'"{x}"' for x in v) + "]"
    return f"{v:g}" if isinstance(v, float) else str(v)


def markdown_table(cls, flags: bool = False) -> str:
    """The settings of ``cls`` as a markdown table, as README.md holds them."""
    from kb.common.settings import settings_of

    head = ["key"] + (["flag"] if flags else []) + ["type", "range", "default", "what it does"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in settings_of(cls):
        cells = [f"`{s.name}`"] + ([f"`{s.flag}`" if s.flag else ""] if flags else [])
        default = "none" if s.default is None else _toml(s.default)
        cells += [s.type_word(), s.range_text(), f"`{default}`", s.doc]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def test_the_readme_tables_are_the_settings_declared_in_the_code():
    from kb.builder.chunk import ChunkOptions
    from kb.builder.config import AnalyzerOptions, EmbeddingOptions, StatusOptions, VectorOptions
    from kb.formats.bm25 import BM25Params

    from corpora import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name, cls in (("search", SearchOptions), ("statuses", StatusOptions), ("chunking", ChunkOptions), ("bm25", BM25Params), ("analyzer", AnalyzerOptions), ("embedding", EmbeddingOptions), ("vectors", VectorOptions)):
        assert f"`[{name}]`" in readme and markdown_table(cls, flags=name == "search") in readme, name


def test_the_readme_kb_toml_example_is_valid(tmp_path):
    from corpora import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    example = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "kb.toml").write_text(example)
    assert load_config(tmp_path / "kb.toml").search == {"rrf_k": 60, "rerank": True}


def test_every_search_option_with_a_flag_is_a_kb_search_flag_with_its_default():
    from kb.common.options import SETTINGS
    from kb.runtime.cli import main as kb

    params = {p.name: p for p in kb.commands["search"].params}
    for s in SETTINGS.values():
        if not s.flag:
            continue
        p = params[f"opt_{s.name}"]
        assert s.flag.split("/")[0] in p.opts and p.default is None  # None: the artifact's [search], else the default
        assert p.help.endswith(f"(default: the artifact's [search] {s.name}, else {s.default_text()})")
    assert params["opt_rrf_k"].help.endswith("(default: the artifact's [search] rrf_k, else 10)")
    assert params["opt_rerank"].help.endswith("(default: the artifact's [search] rerank, else off)")


def test_the_http_and_mcp_fields_of_the_search_options_say_the_real_defaults():
    from kb.runtime.mcp_server import tool_list
    from kb.runtime.requests import SEARCH_FIELDS

    assert SEARCH_FIELDS["rrf_k"].doc.endswith("Default: the artifact's [search] rrf_k, else 10.")
    assert (SEARCH_FIELDS["rrf_k"].minimum, SEARCH_FIELDS["rrf_k"].maximum) == (0.0, 10000.0)
    search_tool = next(t for t in tool_list() if t["name"] == "search")
    assert search_tool["inputSchema"]["properties"]["rerank"]["description"].endswith("Default: the artifact's [search] rerank, else off.")
    assert "off unless the artifact's kb.toml turned it on" in search_tool["description"]


def test_each_query_and_get_input_is_one_definition_of_its_flag_its_request_field_and_their_help():
    from kb.common.options import GET_INPUTS, QUERY_INPUTS
    from kb.runtime.cli import main as kb
    from kb.runtime.requests import GET_FIELDS, SEARCH_FIELDS

    for command, inputs, fields in (("search", QUERY_INPUTS, SEARCH_FIELDS), ("get", GET_INPUTS, GET_FIELDS)):
        params = {p.name: p for p in kb.commands[command].params}
        for s in inputs:
            assert fields[s.key] is s
            if s.flag:
                assert params[s.name].help == s.doc and set(s.flag.split()) == set(params[s.name].opts), s.name
    assert [s.name for s in QUERY_INPUTS if not s.flag] == ["text"] and kb.commands["search"].params[0].name == "text"


def test_auto_picks_minilm_for_english_and_e5_when_a_tenth_is_not():
    from kb.builder.embedders import choose_embedder

    assert choose_embedder({"en": 95, "de": 5}) == "all-MiniLM-L6-v2"
    assert choose_embedder({"en": 90, "de": 10}) == "multilingual-e5-small"
    assert choose_embedder({"en": 3, None: 1}) == "multilingual-e5-small"  # CJK documents have no Snowball language
    assert choose_embedder({}) == "all-MiniLM-L6-v2"
    assert load_config(None).embedding_model == "auto"


def test_model_search_defaults_sit_under_the_artifacts_own_search_table_and_the_readme_names_them():
    from types import SimpleNamespace

    from kb.common.options import MODEL_DEFAULTS, resolve, stored_search

    from corpora import REPO

    e5 = SimpleNamespace(embedder={"name": "multilingual-e5-small"}, search={})
    assert resolve(stored_search(e5)).semantic_weight == 0.5
    assert resolve(stored_search(SimpleNamespace(embedder={"name": "multilingual-e5-small"}, search={"semantic_weight": 0.9}))).semantic_weight == 0.9
    assert resolve(stored_search(SimpleNamespace(embedder={"name": "all-MiniLM-L6-v2"}, search={}))).semantic_weight is None  # by query length
    assert resolve(stored_search(SimpleNamespace(embedder=None, search={}))).semantic_weight is None
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    for model, values in MODEL_DEFAULTS.items():
        for key, value in values.items():
            assert f"built with `{model}` searches with `{key}` {value:g}" in readme


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_kb_toml_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, kind):
    """Issue 50 G: ``--config FIFO`` blocked forever and ``--config /dev/zero`` read until memory ran out."""
    import os

    cfg = tmp_path / "kb.toml"
    if kind == "fifo":
        os.mkfifo(cfg)
    else:
        cfg = "/dev/zero"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "x.kb"), "--config", str(cfg), "--embedder", "none"])
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {cfg}: cannot read: not a regular file (a FIFO, socket or device)\n")


def test_a_tag_description_of_300_characters_that_compresses_1000_times_builds_an_artifact_its_reader_opens(tmp_path):
    """Issue 50 H: a description that compressed more than MAX_ZSTD_RATIO times made kb-build write
    a manifest its own reader called corrupt; the writer now pads such a frame (and so for text)."""
    from kb.formats.artifact import MAX_ZSTD_RATIO
    from kb.runtime.index import Index

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "kb.toml").write_text('[tags]\nops = "' + "a" * 300 + '"\n')
    (corpus / "run.md").write_text("---\ntags: [ops]\n---\n# Run\n\n" + "z" * 3_000_000 + "\n")  # one document that compresses ~10,000 times
    out = tmp_path / "x.kb"
    r = CliRunner().invoke(kb_build, [str(corpus), "-o", str(out), "--embedder", "none"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(__import__("kb.runtime.cli", fromlist=["main"]).main, ["info", "-i", str(out), "--verify"])
    assert r.exit_code == 0, r.output
    with Index(out) as ix:
        assert ix.meta.tag_descriptions["ops"] == "a" * 300
        assert len(ix.source_lines(0)) == 6 and ix.source_lines(0)[-1] == "z" * 3_000_000
        s = ix.artifact.sections["manifest"]
        assert s.raw_length <= MAX_ZSTD_RATIO * max(s.length, 1024)


def test_an_integer_past_a_floats_range_is_not_a_finite_number(tmp_path):
    """Found by the toml fuzz target: float() raised OverflowError on a 400-digit integer."""
    cfg = tmp_path / "kb.toml"
    cfg.write_text("[search]\nsemantic_weight = 1" + "0" * 400 + "\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "x.kb"), "--config", str(cfg), "--embedder", "none"])
    assert r.exit_code == 2 and r.stderr.startswith(f"kb-build: error: {cfg}: [search] semantic_weight: must be a finite number, got 1000") and r.stderr.count("\n") == 1
