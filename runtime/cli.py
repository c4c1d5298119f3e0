"""kb: the query runtime's command line. Thin: parse, call the library, print.

Exit codes (kb.common.errors): 0 ok (including no results), 1 failure, 2 usage, 3 artifact
unreadable or corrupt, 4 unsupported format version. Errors are one line on stderr
(runtime/clikit.py); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import sys

import click

from kb.common.errors import UsageError
from kb.common.options import GROUPS, MAX_TOP_K, MODES, SETTINGS
from kb.common.usage import debug_option
from kb.formats.version import KB_VERSION

from .clikit import command_group, compute_option, device_option, index_option, open_index, search_option_flags
from .serve_cli import mcp as mcp_command, serve as serve_command


@command_group()
@click.version_option(KB_VERSION, "--version", prog_name="kb")
def main():
    """Search a kb artifact built by kb-build."""


@main.command()
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--verify", is_flag=True, help="Also check every section's crc32.")
@debug_option
def info(index_path, as_json, verify):
    """Sections and sizes, counts, models, analyzer, config and a manifest summary."""
    from .info import describe, render_info

    with open_index(index_path) as ix:
        if verify:
            ix.artifact.verify()
        d = describe(ix)
    click.echo(json.dumps(d, indent=2, ensure_ascii=False) if as_json else render_info(d))


@main.command()
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@debug_option
def status(index_path, as_json):
    """Compare the artifact's manifest with the corpus on disk: changed, added, removed files."""
    from .stale import stale_report

    with open_index(index_path) as ix:
        rep = stale_report(ix.manifest())
    if as_json:
        click.echo(json.dumps(rep, indent=2, ensure_ascii=False))
        return
    if not rep["root_exists"]:
        click.echo(f"corpus root {rep['root']} is not on this machine; cannot check staleness")
        return
    n = sum(len(rep[k]) for k in ("changed", "added", "removed"))
    click.echo(f"corpus root {rep['root']}: " + ("up to date" if not n else f"{n} difference(s); rebuild with kb-build"))
    for k in ("changed", "added", "removed"):
        for p in rep[k]:
            click.echo(f"  {k}: {p}")


@main.command()
@click.argument("query", required=False, default="")
@index_option
@click.option("--rewrite", multiple=True, metavar="TEXT", help="A rewritten natural-language form of the query: extra BM25 and dense sub-legs, weighted below the original. Repeatable.")
@click.option("-e", "--entity", multiple=True, metavar="NAME", help="An entity or theme matched against chunk tags (the tag leg). Repeatable.")
@click.option("-n", "--top-k", type=click.IntRange(1, MAX_TOP_K), help=f"Results to return (default: the artifact's [search] default_limit, else {SETTINGS['default_limit'].default}).")
@click.option("--status", multiple=True, metavar="S", help="Only chunks with this status. Repeatable. Default: all but historical and superseded.")
@click.option("--all-statuses", is_flag=True, help="Include every status, historical and superseded too.")
@click.option("--tag", multiple=True, metavar="T", help="Only chunks carrying tag T (repeat to require several).")
@click.option("--path", "path_prefix", metavar="PREFIX", help="Only documents whose path starts with PREFIX.")
@click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True, help="Which legs run.")
@click.option("--reranker", "reranker_path", metavar="PATH", help="Use this cross-encoder (converted or HF folder) instead of the artifact's.")
@click.option("--budget-ms", type=click.FloatRange(0), help="Shrink the rerank depth to fit this many milliseconds (--explain shows what was skipped).")
@search_option_flags
@click.option("--explain", is_flag=True, help="Per result: each leg's rank and raw score, RRF parts, bonus, rerank logit and blend weights.")
@click.option("--json", "as_json", is_flag=True, help="One versioned JSON object on stdout.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON result per line.")
@click.option("--full", is_flag=True, help="Full chunk text instead of a snippet.")
@click.option("--group", type=click.Choice(GROUPS), default="chunk", show_default=True, help="doc: best chunk per document.")
@device_option
@compute_option
@click.option("--no-stale-check", is_flag=True, help="Skip comparing the manifest with the corpus on disk.")
@debug_option
def search(query, index_path, rewrite, entity, top_k, status, all_statuses, tag, path_prefix, mode, reranker_path, budget_ms, overrides, explain, as_json, as_jsonl, full, group, device, compute_type, no_stale_check):
    """Hybrid search: BM25 + dense (+ tags) fused with RRF, optionally reranked."""
    from kb.common.options import resolve

    from .output import render_human, render_json, render_jsonl
    from .search import Query, Searcher

    if as_json and as_jsonl:
        raise UsageError("--json and --jsonl are exclusive")
    reranker = None
    if reranker_path and overrides.get("rerank") is not False:
        from .cross_encoder import load_reranker_path

        reranker = load_reranker_path(reranker_path, device, compute_type)  # a bad model refuses loudly, before any search
    with open_index(index_path) as ix:
        options = resolve(ix.meta.search, overrides)
        q = Query(
            text=query, rewrites=tuple(rewrite), entities=tuple(entity), top_k=top_k, statuses=tuple(status),
            all_statuses=all_statuses, tags=tuple(tag), path=path_prefix, mode=mode, budget_ms=budget_ms,
            explain=explain, group=group, full=full,
        )
        resp = Searcher(ix, device, compute_type, reranker=reranker).search(q, options)
        if not no_stale_check:
            from .stale import stale_notice

            resp = resp.with_notice(stale_notice(ix.manifest()))
        artifact = {"id": ix.artifact.id, "path": str(ix.path)}
        if as_json:
            out = render_json(resp, artifact)
        elif as_jsonl:
            out = render_jsonl(resp, artifact)
        else:
            out = render_human(resp)
    if out:
        click.echo(out)


@main.command(name="list")
@index_option
@click.option("--status", multiple=True, metavar="S", help="Only this status (repeatable; default: all but historical and superseded).")
@click.option("--all-statuses", is_flag=True, help="Every status.")
@click.option("--tag", multiple=True, metavar="T", help="Only chunks carrying tag T (repeatable: all required).")
@click.option("--path", "path_prefix", metavar="PREFIX", help="Only documents under PREFIX.")
@click.option("--chunks", "by_chunk", is_flag=True, help="One line per chunk instead of per document.")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines, one object per document (or chunk).")
@debug_option
def list_(index_path, status, all_statuses, tag, path_prefix, by_chunk, as_json):
    """List the documents (or chunks) in a scope, in path order. The explicit way to see a scope."""
    import numpy as np

    from .filters import allowed_mask

    with open_index(index_path) as ix:
        ids = np.flatnonzero(allowed_mask(ix, tuple(status), all_statuses, tuple(tag), path_prefix))
        seen = set()
        for c in ids.tolist():
            doc = ix.doc_of(c)
            if not by_chunk and doc in seen:
                continue
            seen.add(doc)
            r = ix.chunk(c)
            row = {"path": r.path, "doc_id": r.doc_id, "title": r.title, "status": r.status, "tags": list(r.tags)}
            if by_chunk:
                row.update(chunk_id=r.chunk_id, section=r.section, lines=list(r.lines))
            if as_json:
                click.echo(json.dumps(row, ensure_ascii=False))
            else:
                where = f'{row["path"]} § "{row["section"]}"' if by_chunk and row["section"] else row["path"]
                click.echo(f"{where}\t{row['status']}\t{','.join(row['tags'])}")


@main.command()
@click.argument("fixture", required=False, type=click.Path())
@index_option
@click.option("--beir", "beir_dir", type=click.Path(), help="A BEIR folder (queries.jsonl, qrels/SPLIT.tsv) instead of a FIXTURE.")
@click.option("--split", default="test", show_default=True, help="BEIR qrels split.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="k of P@k.")
@click.option("--backend", "backends", multiple=True, type=click.Choice(["bm25", "vector", "hybrid", "hybrid+rerank"]), help="Only these backends (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object for machines.")
@device_option
@compute_option
@debug_option
def bench(fixture, index_path, beir_dir, split, k, backends, as_json, device, compute_type):
    """Quality (P@k, recall, MRR, nDCG, hit) and latency per backend on a FIXTURE or a BEIR split."""
    from .bench import load_beir, load_fixture, render_table, run_bench
    from .search import Searcher

    if bool(fixture) == bool(beir_dir):
        raise UsageError("give a FIXTURE.json or --beir DIR (one of them)")
    bset = load_beir(beir_dir, split) if beir_dir else load_fixture(fixture)
    with open_index(index_path) as ix:
        res = run_bench(Searcher(ix, device, compute_type), bset, k, list(backends) or None)
        res["artifact"] = {"id": ix.artifact.id, "path": str(ix.path)}
    click.echo(json.dumps(res, indent=2) if as_json else render_table(res))


main.add_command(serve_command, "serve")
main.add_command(mcp_command, "mcp")


if __name__ == "__main__":
    sys.exit(main())
