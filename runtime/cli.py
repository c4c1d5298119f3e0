"""kb: the query runtime's command line. Thin: parse, call the library, print.

Exit codes (kb.common.errors): 0 ok (including no results), 1 failure, 2 usage, 3 artifact
unreadable or corrupt, 4 unsupported format version. Errors are one line on stderr
(runtime/clikit.py); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys

import click

from kb.common.errors import UsageError
from kb.common.options import GET_INPUTS, QUERY_INPUTS, Query
from kb.common.usage import count, debug_option, printable
from kb.formats.version import KB_VERSION

from .clikit import command_group, compute_option, device_option, index_option, input_flags, open_index, search_option_flags
from .output import FORMATS, json_text
from .serve_cli import mcp as mcp_command, serve as serve_command


def pretty() -> bool:
    """JSON output is indented for a person at a terminal, one compact line otherwise."""
    return sys.stdout.isatty()


@command_group(examples=('kb search -i sample.kb "the shared drive is out of space"', "kb get runbooks/disk-full.md:10:20 -i sample.kb", "kb info -i sample.kb", "kb SUBCOMMAND --help   (each command's own examples)"))
@click.version_option(KB_VERSION, "--version", prog_name="kb")
def main():
    """Search a kb artifact built by kb-build."""


@main.command(examples=("kb info -i sample.kb", "kb info -i sample.kb --json --verify", "kb info -i all.kbset"))
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--verify", is_flag=True, help="Also check every section's crc32.")
@debug_option
def info(index_path, as_json, verify):
    """Sections and sizes, counts, models, analyzer, config and a manifest summary (of each
    artifact of a set; --verify also checks a set file's sha256 of each)."""
    from .index import members_of
    from .info import describe, describe_set, render_info

    with open_index(index_path) as ix:
        members = members_of(ix)
        if verify:
            for m in members:
                m.artifact.verify()  # CorruptArtifact (exit 3) names the first section whose crc32 differs
        ds = [describe(m) for m in members]
        if verify:
            for d in ds:
                d["verified"] = {"sections": len(d["sections"]), "crc32": "ok"}
        out = ds[0] if len(members) == 1 and not hasattr(ix, "members") else describe_set(index_path, ds, verify)
    click.echo(json_text(out, pretty()) if as_json else ("\n\n".join(render_info(d) for d in ds) if "artifacts" in out else render_info(out)))


@main.command(examples=("kb status -i sample.kb || kb-build examples/kb-sample -o sample.kb", "kb status -i all.kbset --member ops.kb --json"))
@index_option
@click.option("--member", metavar="NAME", help="Of a set: only this artifact (its name in the set file, or its id).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (of a set: {fresh, artifacts}).")
@debug_option
def status(index_path, member, as_json):
    """Compare the artifact's manifest with the corpus on disk: changed, added, removed files.
    Exit 0 when the artifact (every artifact of a set) is up to date, 1 when one is stale or its
    corpus root is not here, so a pipeline can gate a rebuild on it."""
    from .index import members_of
    from .stale import status_report

    with open_index(index_path) as ix:
        members = members_of(ix)
        if member is not None:
            members = [m for m in members if member in (m.name, m.artifact.id)]
            if not members:
                raise UsageError(f"no artifact {member!r} in {index_path[0] if index_path else 'the set'}; its artifacts: {', '.join(m.name for m in members_of(ix))}")
        several = len(members) > 1
        reps = [status_report(m.manifest()) | ({"artifact": {"id": m.artifact.id, "name": m.name, "path": str(m.path)}} if several else {}) for m in members]
    fresh = all(r["fresh"] for r in reps)
    if as_json:
        click.echo(json_text({"fresh": fresh, "artifacts": reps} if several else reps[0], pretty()))
    for rep in () if as_json else reps:
        n = sum(len(rep[k]) for k in ("changed", "added", "removed"))
        name = f"{printable(rep['artifact']['name'])}: " if several else ""
        if not rep["root_exists"]:
            click.echo(f"{name}corpus root {printable(rep['root'])} is not on this machine; cannot check staleness")
            continue
        click.echo(f"{name}corpus root {printable(rep['root'])}: " + ("up to date" if not n else f"{count(n, 'difference')}; rebuild with kb-build"))
        for k in ("changed", "added", "removed"):
            for p in rep[k]:
                click.echo(f"  {k}: {printable(p)}")
        if "incomplete" in rep:
            click.echo(f"  incomplete: {rep['incomplete']}")
    sys.exit(0 if fresh else 1)


@main.command(examples=('kb search -i sample.kb "the shared drive is out of space"', 'kb search -i sample.kb "restore a backup" --status historical --json', 'kb search -i sample.kb \'"disk full" -windows\' --format files | xargs -d "\\n" grep -n quota', 'kb search -i ops.kb -i adr.kb "who approved the new gateway" -n 3 --full'))
@click.argument("text", metavar="QUERY", required=False, default="")
@index_option
@input_flags(QUERY_INPUTS)
@click.option("--reranker", "reranker_path", metavar="PATH", help="Use this cross-encoder (converted or HF folder) instead of the artifact's.")
@search_option_flags
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output: text (default), json (one versioned object; indented on a terminal, one line otherwise), jsonl (a result per line), csv, md (a report to paste), files (distinct paths, one per line).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="Same as --format jsonl.")
@device_option
@compute_option
@click.option("--no-stale-check", is_flag=True, help="Skip comparing the manifest with the corpus on disk.")
@debug_option
def search(index_path, reranker_path, overrides, fmt, as_json, as_jsonl, device, compute_type, no_stale_check, **inputs):
    """Hybrid search: BM25 + dense (+ tags) fused with RRF, optionally reranked.

    \b
    QUERY is natural language, and may hold:
      "exact phrase"      chunks must contain the phrase (if none does: a notice,
                          and the words in any order)
      -term  -"phrase"    chunks must not contain it (put -- before a query that starts with -)
      title:word          the document's title must hold it (also title:"a phrase")
      section:word        the chunk's headings must hold it
      path:prefix         only documents under prefix
      lex: / vec: / hyde: typed lines (qmd): BM25 only, dense only, a hypothetical answer
    Phrases, exclusions and scopes filter; the words still rank.
    """
    from kb.common.options import resolve, stored_search

    from .output import render_csv, render_files, render_human, render_json, render_jsonl, render_md, render_notices
    from .search import Searcher

    aliases = [f for f, on in (("json", as_json), ("jsonl", as_jsonl)) if on]
    if len(aliases) + (fmt is not None) > 1:
        raise UsageError("give one output format: --format, --json or --jsonl")
    fmt = fmt or (aliases[0] if aliases else "text")
    reranker = None
    if reranker_path and overrides.get("rerank") is not False:
        from .cross_encoder import load_reranker_path

        reranker = load_reranker_path(reranker_path, device, compute_type)  # a bad model refuses loudly, before any search
    with open_index(index_path) as ix:
        options = resolve(stored_search(ix.meta), overrides)
        q = Query(**inputs)
        resp = Searcher(ix, device, compute_type, reranker=reranker, one_shot=True).search(q, options)
        if not no_stale_check:
            from .stale import stale_notices

            resp = resp.with_notices(stale_notices(ix))
        from .index import artifact_record

        artifact = artifact_record(ix)
        notes = [] if fmt in ("text", "json", "md") else render_notices(resp)
        if fmt == "json":
            out = render_json(resp, artifact, pretty())
        elif fmt == "jsonl":
            out = render_jsonl(resp, artifact)
        elif fmt == "csv":
            out = render_csv(resp)
        elif fmt == "files":
            out = render_files(resp, {m.name: _root_here(m) for m in ix.members} if hasattr(ix, "members") else None)
        elif fmt == "md":
            out = render_md(resp)
        else:
            highlight = None
            if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
                from .bm25 import analyzer_of, query_terms
                from .snippets import highlighter

                highlight = highlighter(query_terms(ix, " ".join((q.text,) + q.rewrites)), analyzer_of(ix))
            out = render_human(resp, show_status=ix.has_statuses, highlight=highlight, show_artifact=hasattr(ix, "members"))
            notes = render_notices(resp)
    if out:
        click.echo(out)
    for line in notes:
        click.echo(line, err=True)


@main.command(examples=("kb get 12 -i sample.kb -C 2", "kb get runbooks/disk-full.md:10:20 -i sample.kb", "kb get --glob 'runbooks/*.md' -i sample.kb --max-bytes 20000 --json", "kb get 3 -i all.kbset --member ops.kb"))
@click.argument("targets", nargs=-1, metavar="TARGET...")
@index_option
@input_flags(GET_INPUTS)
@click.option("--doc", "whole_doc", is_flag=True, help="A chunk id TARGET gives its whole document instead (a path or doc_id always gives the whole document).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the record kb serve's /get and the MCP get tool return; for several targets or --glob, {items, omitted} as /get with targets and MCP multi_get return.")
@debug_option
def get(targets, index_path, whole_doc, as_json, **inputs):
    """Read chunks, documents or line ranges of the artifact.

    \b
    TARGET is one of:
      12                a chunk id (a search result's chunk_id), with -C neighbours each side
      KEY               a chunk key (a search result's chunk_key, 16 hex digits), as a chunk id;
                        it names the same text after rebuilds that leave that chunk unchanged
      PATH or DOC_ID    the document's chunks in order
      PATH:FROM:COUNT   COUNT lines from line FROM, numbered as in the source file (front
                        matter included); a COUNT past the end stops at the last line
      PATH:FROM         from line FROM to the end of the document
    One TARGET prints its record. Several TARGETs or --glob print each record that fits in
    --max-bytes, in order, and name every one left out.
    """
    from .output import render_get
    from .requests import RequestError, parse_get
    from .service import Service, too_large

    if not targets and inputs["glob"] is None:
        raise UsageError("give a TARGET (a chunk id or key, a document's path or doc_id, or PATH:FROM:COUNT) or --glob PATTERN")
    with open_index(index_path) as ix:
        try:
            req = parse_get({"targets": list(targets), **{k: v for k, v in inputs.items() if v is not None}})
            svc = Service(ix, stale_check=False)
            if hasattr(ix, "members"):  # a set: the member that holds the targets (or --member)
                svc, req = svc.member_for(req), req._replace(member=None)
            if whole_doc:
                req = req._replace(targets=tuple(_document_of_chunk(svc.ix, t) if t.isascii() and t.isdigit() else t for t in req.targets))
            out = svc.get(req)
        except RequestError as e:
            raise UsageError(e.message) from None
    single = len(targets) == 1 and inputs["glob"] is None  # one target: its record, as the servers' single get
    if single:
        if out["omitted"]:
            left = out["omitted"][0]
            raise UsageError(too_large(left["target"], left["bytes"], inputs["max_bytes"], "--max-bytes"))
        records = [{k: v for k, v in out["items"][0].items() if k != "target"} | {"artifact": out["artifact"]}]
    else:
        records = out["items"]
    if as_json:
        click.echo(json_text(records[0] if single else out, pretty()))
        return
    click.echo("\n\n".join(render_get(r) for r in records))
    for left in out["omitted"]:
        click.echo(printable(f"kb: note: left out {left['target']} ({left['bytes']:,} bytes): {left['reason']}"), err=True)


def _root_here(ix) -> str | None:
    """The corpus root an artifact was built from, when that folder is on this machine."""
    root = os.fspath(ix.manifest().root)
    return root if os.path.isdir(root) else None


def _document_of_chunk(ix, target: str) -> str:
    """--doc: the path of the document that holds chunk ``target``."""
    cid = int(target)
    if not 0 <= cid < ix.n_chunks:
        raise UsageError(f"no chunk {cid}; this artifact has chunk ids 0..{ix.n_chunks - 1}")
    return ix.doc_path(ix.doc_of(cid))


@main.command(name="list", examples=("kb list -i sample.kb", "kb list -i sample.kb --path runbooks/ --chunks", "kb list -i sample.kb --all-statuses --json"))
@index_option
@input_flags(QUERY_INPUTS, ("statuses", "all_statuses", "tags", "path"))
@click.option("--chunks", "by_chunk", is_flag=True, help="One line per chunk instead of per document.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {items: [a document (or chunk) each], artifact}.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="JSON Lines: one object per document (or chunk), printed as found.")
@debug_option
def list_(index_path, statuses, all_statuses, tags, path, by_chunk, as_json, as_jsonl):
    """List the documents (or chunks) in a scope, in path order. The explicit way to see a scope."""
    import numpy as np

    from .index import artifact_record

    if as_json and as_jsonl:
        raise UsageError("give one output format: --json or --jsonl")
    items = []

    with open_index(index_path) as ix:
        several = hasattr(ix, "members")
        if several:
            from .collection import allowed_mask
        else:
            from .filters import allowed_mask
        ids = np.flatnonzero(allowed_mask(ix, statuses, all_statuses, tags, path))
        seen = set()
        for c in ids.tolist():
            doc = ix.doc_of(c)
            if not by_chunk and doc in seen:
                continue
            seen.add(doc)
            member, local = ix.locate(c)
            r = member.chunk(local)
            row = {"path": r.path, "doc_id": r.doc_id, "title": r.title, "status": r.status, "tags": list(r.tags)}
            if several:
                row["artifact"], row["artifact_id"] = member.name, member.artifact.id
            if by_chunk:
                row.update(chunk_id=r.chunk_id, chunk_key=r.chunk_key, section=r.section, lines=list(r.lines))
            if as_json:
                items.append(row)
                continue
            if as_jsonl:
                click.echo(json.dumps(row, ensure_ascii=False))
                continue
            where = f'{row["path"]} § "{row["section"]}"' if by_chunk and row["section"] else row["path"]
            fields = [where, row["status"], ",".join(row["tags"])]
            if by_chunk:
                fields[1:1] = [f"lines {r.lines[0]}-{r.lines[1]}"]
                fields.insert(0, str(r.chunk_id))
            if several:
                fields.append(member.name)
            click.echo("\t".join(map(printable, fields)))
        if as_json:
            click.echo(json_text({"items": items, "artifact": artifact_record(ix)}, pretty()))


@main.command(examples=("kb bench fixture.json -i sample.kb", "kb bench --beir data/scifact --split test -i scifact.kb --json", "kb bench fixture.json -i sample.kb --sweep semantic_weight=0.3:0.8:0.1"))
@click.argument("fixture", required=False, type=click.Path(), metavar="[FIXTURE.json]")
@index_option
@click.option("--beir", "beir_dir", type=click.Path(), help="A BEIR folder (queries.jsonl, qrels/SPLIT.tsv) instead of a FIXTURE.")
@click.option("--split", default="test", show_default=True, help="BEIR qrels split.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="k of P@k.")
@click.option("--backend", "backends", multiple=True, type=click.Choice(["bm25", "vector", "hybrid", "hybrid+rerank"]), help="Only these backends (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object for machines.")
@search_option_flags
@click.option("--sweep", metavar="KNOB=START:STOP:STEP", help="Also run hybrid quality for each value of one numeric search option (e.g. semantic_weight=0.3:0.8:0.1, or a list 0.3,0.5) and print the best fixed value in hindsight beside the default.")
@device_option
@compute_option
@debug_option
def bench(fixture, index_path, beir_dir, split, k, backends, as_json, overrides, sweep, device, compute_type):
    """Quality (P@k, recall, MRR, nDCG, hit) and latency per backend on a FIXTURE or a BEIR split,
    with the artifact's search options and the flags given over them.

    \b
    FIXTURE is a JSON file of queries and the documents that answer them:
      {"queries": [
        {"id": "q1", "query": "restore the newest snapshot",
         "relevant": ["runbooks/restore.md"], "kind": "keyword"},
        {"id": "q2", "query": "quantum chromodynamics", "relevant": []}]}
    relevant: document paths as the artifact records them (kb list shows them), each
    counting 1; an empty list makes a negative query (scored only by whether the
    low-confidence notice fires). kind (optional) groups the queries in a by-kind table.
    Other keys are ignored. --beir DIR reads queries.jsonl and qrels/SPLIT.tsv instead
    (graded gains, matched on doc_id).
    """
    from kb.common.options import resolve, stored_search

    from .bench import load_beir, load_fixture, parse_sweep, render_sweep, render_table, run_bench, run_sweep
    from .search import Searcher

    if bool(fixture) == bool(beir_dir):
        raise UsageError("give a FIXTURE.json or --beir DIR (one of them)")
    swept = parse_sweep(sweep) if sweep else None
    bset = load_beir(beir_dir, split) if beir_dir else load_fixture(fixture)
    with open_index(index_path) as ix:
        searcher = Searcher(ix, device, compute_type)
        stored = stored_search(ix.meta)
        res = run_bench(searcher, bset, k, list(backends) or None, options=resolve(stored, overrides))
        if swept:
            name, values = swept
            res["sweep"] = run_sweep(searcher, bset, name, values, lambda v: resolve(stored, overrides if v is None else {**overrides, name: v}))
        from .index import artifact_record

        res["artifact"] = artifact_record(ix)
    if as_json:
        click.echo(json_text(res, pretty()))
    else:
        click.echo(render_table(res) + ("\n\n" + render_sweep(res["sweep"]) if swept else ""))


@main.group(name="set", examples=("kb set create all.kbset ops.kb adr.kb", 'kb search -i all.kbset "gateway firewall"'))
def set_():
    """Set files: several artifacts searched as one (kb search -i SET.kbset)."""


@set_.command(name="create", examples=("kb set create all.kbset shards/*.kb", "kb info -i all.kbset --verify"))
@click.argument("out", metavar="OUT.kbset", type=click.Path(dir_okay=False))
@click.argument("artifacts", nargs=-1, required=True, metavar="ARTIFACT...")
@click.option("--force", is_flag=True, help="Replace OUT even if it is not a set file (by default only a set file is replaced; never one of the ARTIFACTs).")
@debug_option
def set_create(out, artifacts, force):
    """Write OUT.kbset listing the ARTIFACTs (paths relative to it) with their ids, sizes and
    sha256. They are opened and checked as a set first: they must share their embedding model."""
    from .clikit import resolve_index
    from .collection import create_set

    members = create_set(out, resolve_index(artifacts), force)
    click.echo(f"kb set: wrote {out}: {len(members)} artifact{'' if len(members) == 1 else 's'}", err=True)


main.add_command(serve_command, "serve")
main.add_command(mcp_command, "mcp")


if __name__ == "__main__":
    sys.exit(main())
