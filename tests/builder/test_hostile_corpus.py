"""Issue 14: corpora built by an attacker or a careless pipeline. Every case ends in a finished
build that reports the bad input with its reason (fatal under --strict), never in a traceback,
a hang, runaway memory or content from outside the corpus root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from kb.builder import ingest
from kb.builder.cli import main as kb_build
from kb.runtime.index import Index

BILLION_LAUGHS = (
    "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
    "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
    "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n"
)
BOMB = "aliases expand to more than 10000 extra nodes (an alias bomb?)"
DEEP = "nested more than 100 levels deep"
HUGE_INT = "an integer with more than 4300 digits"
OUTSIDE = "symlink to a file outside the corpus root, not read (kb-build --follow-symlinks reads it)"


def corpus(tmp_path, **files):
    c = tmp_path / "c"
    c.mkdir(exist_ok=True)
    (c / "ok.md").write_text("# OK\n\nordinary text\n")
    for name, data in files.items():
        p = c / name.replace("__", "/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return c


def run_build(c, out, *extra):
    return CliRunner().invoke(kb_build, [str(c), "-o", str(out), "--embedder", "none", "--no-reranker", "--json", *extra])


def skips(result) -> dict[str, str]:
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout)["skipped"])


def subprocess_build(args, timeout=60):
    code = "import sys; from kb.builder.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


def test_a_first_file_holding_most_of_the_text_builds_with_two_jobs(tmp_path):
    c = corpus(tmp_path, **{"a.txt": "alpha beta gamma delta\n" * 100000, "b.md": "# b\nsmall\n"})
    (c / "ok.md").unlink()
    r = run_build(c, tmp_path / "o.kb", "-j", "2")
    assert r.exit_code == 0, r.output
    assert "2 files read, 2 documents" in r.stderr


def test_symlinks_out_of_the_root_are_reported_and_not_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nhunter2 password\n")
    c = corpus(tmp_path)
    os.symlink(outside / "secret.md", c / "abs.md")
    os.symlink("../outside/secret.md", c / "rel.md")
    os.symlink("../outside", c / "dir")
    os.symlink("ok.md", c / "inside.md")  # a link that stays inside the root is read
    out = tmp_path / "o.kb"
    r = run_build(c, out)
    assert skips(r) == {
        "abs.md": OUTSIDE,
        "rel.md": OUTSIDE,
        "dir/": "symlinked folder, not followed (kb-build --follow-symlinks enters it)",
    }
    assert f"  abs.md: {OUTSIDE}\n" in r.stderr
    with Index(out) as ix:
        assert [bytes(ix.doc_paths[i]).decode() for i in range(ix.n_docs)] == ["inside.md", "ok.md"]
        assert "hunter2" not in json.dumps(ix.manifest()._asdict())
    r = run_build(c, out, "--follow-symlinks")
    assert skips(r) == {}
    with Index(out) as ix:
        paths = [bytes(ix.doc_paths[i]).decode() for i in range(ix.n_docs)]
    assert paths == ["abs.md", "dir/secret.md", "inside.md", "ok.md", "rel.md"]


def test_strict_makes_a_symlink_out_of_the_root_fatal(tmp_path):
    c = corpus(tmp_path)
    os.symlink("/etc/passwd", c / "passwd.txt")
    r = run_build(c, tmp_path / "o.kb", "--strict")
    assert r.exit_code == 1
    assert r.stderr == f"kb-build: error: build failed, {tmp_path / 'o.kb'} left as it was: --strict: 1 input(s) skipped, first passwd.txt: {OUTSIDE}\n"
    assert not (tmp_path / "o.kb").exists()


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("title.md", "---\n" + BILLION_LAUGHS + "title: *i\n---\n# T\n", f"malformed YAML front matter: {BOMB}"),
        ("tags.md", "---\n" + BILLION_LAUGHS + "tags: *i\n---\n# T\n", f"malformed YAML front matter: {BOMB}"),
        ("bomb.yaml", BILLION_LAUGHS, f"malformed YAML: {BOMB}"),
        ("loop.yaml", "a: &a [*a]\n", "malformed YAML: an alias refers to a node that contains it (a recursive structure)"),
        ("deep.yaml", "a: " + "[" * 150 + "]" * 150 + "\n", f"malformed YAML: {DEEP}"),
        ("bigint.yaml", "a: " + "1" * 5000 + "\n", f"malformed YAML: {HUGE_INT}"),
        # found by the fuzzer (parsers input 278228): PyYAML raised IndexError on an empty !!int
        ("tag.yaml", 'a: !!int ""\n', "malformed YAML: a tagged scalar cannot be built (e.g. !!int or !!timestamp on a value that is not one)"),
        ("tagfm.md", '---\nwhen: !!timestamp ""\n---\n# T\n', "malformed YAML front matter: a tagged scalar cannot be built (e.g. !!int or !!timestamp on a value that is not one)"),
        ("badint.yaml", 'a: !!int "0x"\n', "malformed YAML: invalid literal for int() with base 16: ''"),
    ],
)
def test_yaml_alias_bombs_and_deep_yaml_are_skipped_quickly(tmp_path, name, text, reason):
    c = corpus(tmp_path, **{name: text})
    t = time.perf_counter()
    r = run_build(c, tmp_path / "o.kb")
    assert skips(r) == {name: reason}
    assert time.perf_counter() - t < 10


def test_yaml_anchors_used_as_intended_are_fine():
    meta, _, _ = ingest.split_front_matter("---\nbase: &b {owner: ops}\nx: *b\ny: {<<: *b, extra: 1}\ntitle: T\n---\nbody\n")
    assert meta["x"] == {"owner": "ops"} and meta["y"] == {"owner": "ops", "extra": 1}


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("deep.json", "[" * 10000 + "]" * 10000, f"malformed JSON: {DEEP}"),
        ("deep101.json", "[" * 101 + "]" * 101, f"malformed JSON: {DEEP}"),
        ("deep.toml", "a = " + "[" * 10000 + "]" * 10000 + "\n", f"malformed TOML: {DEEP}"),
        ("deepfm.md", "+++\na = " + "[" * 10000 + "]" * 10000 + "\n+++\n# x\n", f"malformed TOML front matter: {DEEP}"),
        ("int.json", "1" * 5000, f"malformed JSON: {HUGE_INT}"),
        ("int.toml", "a = " + "1" * 5000 + "\n", f"malformed TOML: {HUGE_INT}"),
        ("intfm.md", "+++\na = " + "1" * 5000 + "\n+++\n# x\n", f"malformed TOML front matter: {HUGE_INT}"),
        ("surrogate.md", '---\ntitle: "\\ud800"\n---\n# x\n', None),
    ],
)
def test_deep_nesting_and_huge_integers_skip_the_file_with_a_reason(tmp_path, name, text, reason):
    c = corpus(tmp_path, **{name: text})
    got = skips(run_build(c, tmp_path / "o.kb"))
    if reason is None:  # libyaml may refuse the escape itself; either way the file is skipped
        assert list(got) == [name] and got[name].startswith("malformed YAML front matter: ")
    else:
        assert got == {name: reason}


def test_json_lines_records_that_nest_deeply_or_hold_huge_integers_are_skipped(tmp_path):
    p = tmp_path / "c.jsonl"
    lines = [
        '{"id": "ok", "text": "fine"}',
        '{"id": "deep", "text": "x", "tags": ' + "[" * 10000 + "]" * 10000 + "}",
        '{"id": ' + "1" * 5000 + ', "text": "x"}',
        '{"id": "s", "text": "\\ud800"}',
    ]
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.kb"
    r = CliRunner().invoke(kb_build, ["--jsonl", str(p), "-o", str(out), "--embedder", "none", "--no-reranker", "--json"])
    assert skips(r) == {
        "c.jsonl:2": f"malformed JSON: {DEEP}",
        "c.jsonl:3": f"malformed JSON: {HUGE_INT}",
        "c.jsonl:4": "malformed record: a string holds a lone surrogate escape (not valid Unicode)",
    }


def test_dev_zero_and_fifos_are_not_read(tmp_path):
    c = corpus(tmp_path)
    os.symlink("/dev/zero", c / "z.txt")
    os.mkfifo(c / "x.md")
    out = tmp_path / "o.kb"
    r = subprocess_build([str(c), "-o", str(out), "--embedder", "none", "--no-reranker", "--json"])
    assert r.returncode == 0, r.stderr
    assert dict(json.loads(r.stdout)["skipped"]) == {"x.md": "not a regular file (a FIFO)", "z.txt": OUTSIDE}
    r = subprocess_build([str(c), "-o", str(out), "--embedder", "none", "--no-reranker", "--json", "--follow-symlinks"])
    assert r.returncode == 0, r.stderr
    assert dict(json.loads(r.stdout)["skipped"]) == {
        "x.md": "not a regular file (a FIFO)",
        "z.txt": "not a regular file (a character device)",
    }


def test_a_read_stops_at_the_size_it_checked(tmp_path, monkeypatch):
    p = tmp_path / "grows.txt"
    p.write_bytes(b"x" * 100)
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:])))
    with pytest.raises(ingest.SkipFile, match=r"^changed while it was read \(its size moved\); rebuild once it is written$"):
        ingest.read_regular_file(p, 1000)


def test_symlink_loops_are_reported(tmp_path):
    c = corpus(tmp_path)
    os.symlink("loop.md", c / "loop.md")
    os.symlink("b.md", c / "a.md")
    os.symlink("a.md", c / "b.md")
    os.symlink(".", c / "self")  # a folder loop, entered once with --follow-symlinks
    got = skips(run_build(c, tmp_path / "o.kb"))
    assert got == {"a.md": "symlink loop", "b.md": "symlink loop", "loop.md": "symlink loop",
                   "self/": "symlinked folder, not followed (kb-build --follow-symlinks enters it)"}
    got = skips(run_build(c, tmp_path / "o.kb", "--follow-symlinks"))
    assert got == {"a.md": "symlink loop", "b.md": "symlink loop", "loop.md": "symlink loop"}


def test_a_symlink_loop_named_on_the_command_line_is_reported(tmp_path):
    c = corpus(tmp_path)
    os.symlink("loop.md", c / "loop.md")
    r = CliRunner().invoke(kb_build, [str(c / "ok.md"), str(c / "loop.md"), "-o", str(tmp_path / "o.kb"),
                                      "--embedder", "none", "--no-reranker", "--json"])
    assert skips(r) == {"loop.md": "symlink loop"}


def test_a_file_name_that_is_not_utf8_is_skipped_and_printed_escaped(tmp_path):
    c = corpus(tmp_path)
    with open(os.fsencode(c) + b"/caf\xff.md", "wb") as f:
        f.write(b"# cafe\n")
    r = run_build(c, tmp_path / "o.kb")
    assert skips(r) == {"caf\\xff.md": "file name is not UTF-8 (rename the file to index it)"}
    assert "  caf\\xff.md: file name is not UTF-8 (rename the file to index it)\n" in r.stderr


def test_an_unreadable_folder_is_reported(tmp_path, monkeypatch):
    c = corpus(tmp_path, **{"locked__a.md": "# a\n"})
    real = os.scandir

    def scandir(path):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(ingest.os, "scandir", scandir)
    assert skips(run_build(c, tmp_path / "o.kb")) == {"locked/": "unreadable folder: Permission denied"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 folder")
def test_a_mode_000_folder_is_reported(tmp_path):
    c = corpus(tmp_path, **{"locked__a.md": "# a\n"})
    (c / "locked").chmod(0)
    try:
        assert skips(run_build(c, tmp_path / "o.kb")) == {"locked/": "unreadable folder: Permission denied"}
    finally:
        (c / "locked").chmod(0o755)


def test_control_characters_in_skipped_paths_are_escaped_in_the_summary(tmp_path):
    c = corpus(tmp_path, **{"bad\x1b[31m.json": "{nope"})
    r = run_build(c, tmp_path / "o.kb")
    assert "  bad\\x1b[31m.json: malformed JSON: " in r.stderr and "\x1b" not in r.stderr
