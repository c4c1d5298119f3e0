"""kb: the query runtime's command line. Thin: parse, call the library, print.

Exit codes (one place, here): 0 ok (including no results), 1 failure, 2 usage,
3 artifact unreadable or corrupt, 4 unsupported format version. Errors are one line on stderr;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys

import click

from kb.formats.version import KB_VERSION

from .usage import Command, OneLineUsage, one_line

EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_ARTIFACT = 3
EXIT_VERSION = 4
DEFAULT_INDEX = "kb.kb"


class KbError(Exception):
    """A failure the user can act on; ``code`` is the exit status."""

    def __init__(self, msg: str, code: int = EXIT_FAIL):
        super().__init__(msg)
        self.code = code


def resolve_index(path: str | None) -> str:
    """-i/--index, else $KB_INDEX, else ./kb.kb."""
    chosen = path or os.environ.get("KB_INDEX") or DEFAULT_INDEX
    if not os.path.exists(chosen):
        how = "-i" if path else ("$KB_INDEX" if os.environ.get("KB_INDEX") else f"default ./{DEFAULT_INDEX}")
        raise KbError(f"no artifact at {chosen} (from {how}); build one with kb-build or pass -i PATH", EXIT_ARTIFACT)
    return chosen


def open_index(path: str | None):
    from kb.formats.artifact import ArtifactError

    from .index import Index

    try:
        return Index(resolve_index(path))
    except ArtifactError as e:
        raise KbError(str(e), e.exit_code) from None


class _Group(OneLineUsage, click.Group):
    """Maps domain errors to one stderr line and an exit code; usage errors too (usage.py)."""

    command_class = Command
    prog = "kb"

    def invoke(self, ctx):
        debug = "--debug" in sys.argv
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # an unknown subcommand, or a subcommand's own usage error
            raise one_line(e, ctx) from None
        except KbError as e:
            if debug:
                raise
            click.echo(f"kb: error: {e}", err=True)
            ctx.exit(e.code)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own usage errors and exits keep their codes (2 for usage)
        except Exception as e:  # noqa: BLE001 - the one boundary where anything becomes an exit code
            from kb.formats.artifact import ArtifactError

            if debug:
                raise
            if isinstance(e, ArtifactError):
                click.echo(f"kb: error: {e}", err=True)
                ctx.exit(e.exit_code)
            click.echo(f"kb: error: {e.__class__.__name__}: {e} (rerun with --debug for the traceback)", err=True)
            ctx.exit(EXIT_FAIL)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}


def printable(text: str) -> str:
    """``text`` with control characters escaped as \\xNN: a file name cannot move the cursor,
    recolour the terminal or forge a line of output."""
    return text.translate(_CONTROL)


index_option = click.option("-i", "--index", "index_path", metavar="PATH", help="Artifact (default: $KB_INDEX, else ./kb.kb).")
debug_option = click.option("--debug", is_flag=True, help="Show tracebacks on errors.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(KB_VERSION, "--version", prog_name="kb")
def main():
    """Search a kb artifact built by kb-build."""


@main.command()
@index_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--verify", is_flag=True, help="Also check every section's crc32.")
@debug_option
def info(index_path, as_json, verify, debug):
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
def status(index_path, as_json, debug):
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


def _search_options(ix, **flags):
    from .search import SearchError, SearchOptions

    try:
        return SearchOptions.from_config(ix.meta.get("search", {}), **flags)
    except (SearchError, TypeError) as e:
        raise KbError(f"bad search settings: {e}", EXIT_USAGE) from None


@main.command()
@click.argument("query", required=False, default="")
@index_option
@click.option("--rewrite", multiple=True, metavar="TEXT", help="A rewritten natural-language form of the query: extra BM25 and dense sub-legs, weighted below the original. Repeatable.")
@click.option("-e", "--entity", multiple=True, metavar="NAME", help="An entity or theme matched against chunk tags (the tag leg). Repeatable.")
@click.option("-n", "--top-k", type=int, help="Results to return (default: [search] default_limit, else 10).")
@click.option("--status", multiple=True, metavar="S", help="Only chunks with this status. Repeatable. Default: all but historical and superseded.")
@click.option("--all-statuses", is_flag=True, help="Include every status, historical and superseded too.")
@click.option("--tag", multiple=True, metavar="T", help="Only chunks carrying tag T (repeat to require several).")
@click.option("--path", "path_prefix", metavar="PREFIX", help="Only documents whose path starts with PREFIX.")
@click.option("--mode", type=click.Choice(["hybrid", "bm25", "vector"]), default="hybrid", show_default=True, help="Which legs run.")
@click.option("--rerank/--no-rerank", default=None, help="Rerank the top candidates with the artifact's cross-encoder (default off, or [search] rerank in kb.toml).")
@click.option("--rerank-top", type=int, help="How many fused candidates the reranker rescores (default 40).")
@click.option("--reranker", "reranker_path", metavar="PATH", help="Use this cross-encoder (converted or HF folder) instead of the artifact's.")
@click.option("--budget-ms", type=float, help="Shrink the rerank depth to fit this many milliseconds (--explain shows what was skipped).")
@click.option("--blend", type=click.Choice(["position", "sigmoid"]), help="Rerank blend rule (default position).")
@click.option("--rerank-weight", type=float, help="Sigmoid blend: weight of the reranker, 0..1 (default 1.0).")
@click.option("--semantic-weight", type=float, help="Dense share of the fusion, 0..1 (default 0.7).")
@click.option("--rrf-k", type=float, help="RRF rank offset k (default 20; the seeds' 60 flattens the rank curve).")
@click.option("--rank1-bonus", type=float, help="Added once to a chunk ranked first in any leg (default 0; qmd: 0.05).")
@click.option("--rank23-bonus", type=float, help="Added once to a chunk whose best rank is 2 or 3 (default 0; qmd: 0.02).")
@click.option("--rewrite-weight", type=float, help="Weight of each --rewrite's sub-legs relative to the query's (default 0.5).")
@click.option("--tag-weight", type=float, help="Weight of the tag leg (default 0.3).")
@click.option("--explain", is_flag=True, help="Per result: each leg's rank and raw score, RRF parts, bonus, rerank logit and blend weights.")
@click.option("--json", "as_json", is_flag=True, help="One versioned JSON object on stdout.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON result per line.")
@click.option("--full", is_flag=True, help="Full chunk text instead of a snippet.")
@click.option("--group", type=click.Choice(["chunk", "doc"]), default="chunk", show_default=True, help="doc: best chunk per document.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where models run.")
@click.option("--compute-type", default="auto", show_default=True, help="CTranslate2 compute type (auto: int8 on CPU, float16 on CUDA).")
@click.option("--no-stale-check", is_flag=True, help="Skip comparing the manifest with the corpus on disk.")
@debug_option
def search(query, index_path, rewrite, entity, top_k, status, all_statuses, tag, path_prefix, mode, rerank, rerank_top, reranker_path, budget_ms, blend, rerank_weight, semantic_weight, rrf_k, rank1_bonus, rank23_bonus, rewrite_weight, tag_weight, explain, as_json, as_jsonl, full, group, device, compute_type, no_stale_check, debug):
    """Hybrid search: BM25 + dense (+ tags) fused with RRF, optionally reranked."""
    from .output import render_human, render_json, render_jsonl, response_dict
    from .search import Query, SearchError, Searcher

    if as_json and as_jsonl:
        raise KbError("--json and --jsonl are exclusive", EXIT_USAGE)
    reranker = None
    if reranker_path and rerank is not False:
        from .models import ModelError
        from .rerank import load_reranker_path

        try:  # a configured model that is missing or invalid refuses loudly, before any search
            reranker = load_reranker_path(reranker_path, device, compute_type)
        except ModelError as e:
            raise KbError(str(e), EXIT_FAIL) from None
    with open_index(index_path) as ix:
        opts = _search_options(
            ix, semantic_weight=semantic_weight, rrf_k=rrf_k, rank1_bonus=rank1_bonus, rank23_bonus=rank23_bonus,
            rewrite_weight=rewrite_weight, tag_weight=tag_weight, blend=blend, rerank_weight=rerank_weight,
        )
        q = Query(
            text=query, rewrites=tuple(rewrite), entities=tuple(entity), top_k=top_k, statuses=tuple(status),
            all_statuses=all_statuses, tags=tuple(tag), path=path_prefix, mode=mode, rerank=rerank,
            rerank_top=rerank_top, budget_ms=budget_ms, explain=explain, group=group, full=full,
        )
        try:
            resp = Searcher(ix, opts, device, compute_type, reranker=reranker).search(q)
        except SearchError as e:
            raise KbError(str(e), EXIT_USAGE) from None
        if not no_stale_check:
            from .stale import stale_notice

            notice = stale_notice(ix.manifest())
            if notice:
                resp.notices.append(notice)
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
def list_(index_path, status, all_statuses, tag, path_prefix, by_chunk, as_json, debug):
    """List the documents (or chunks) in a scope, in path order. The explicit way to see a scope."""
    import numpy as np

    from .search import Query, SearchError, Searcher

    with open_index(index_path) as ix:
        q = Query(statuses=tuple(status), all_statuses=all_statuses, tags=tuple(tag), path=path_prefix)
        try:
            mask = Searcher(ix, _search_options(ix)).allowed_mask(q)
        except SearchError as e:
            raise KbError(str(e), EXIT_USAGE) from None
        ids = np.flatnonzero(mask)
        seen = set()
        for c in ids.tolist():
            doc = int(ix.chunks["doc"][c])
            if not by_chunk and doc in seen:
                continue
            seen.add(doc)
            r = ix.chunk_record(c)
            row = {k: r[k] for k in ("path", "doc_id", "title", "status", "tags")}
            if by_chunk:
                row.update(chunk_id=r["chunk_id"], section=r["section"], lines=r["lines"])
            if as_json:
                click.echo(json.dumps(row, ensure_ascii=False))
            else:
                where = f'{row["path"]} § "{row["section"]}"' if by_chunk and row["section"] else row["path"]
                click.echo("\t".join(map(printable, (where, row["status"], ",".join(row["tags"])))))


@main.command()
@click.argument("fixture", required=False, type=click.Path())
@index_option
@click.option("--beir", "beir_dir", type=click.Path(), help="A BEIR folder (queries.jsonl, qrels/SPLIT.tsv) instead of a FIXTURE.")
@click.option("--split", default="test", show_default=True, help="BEIR qrels split.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="k of P@k.")
@click.option("--backend", "backends", multiple=True, type=click.Choice(["bm25", "vector", "hybrid", "hybrid+rerank"]), help="Only these backends (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object for machines.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--compute-type", default="auto", show_default=True)
@debug_option
def bench(fixture, index_path, beir_dir, split, k, backends, as_json, device, compute_type, debug):
    """Quality (P@k, recall, MRR, nDCG, hit) and latency per backend on a FIXTURE or a BEIR split."""
    from .bench import BenchError, load_beir, load_fixture, render_table, run_bench
    from .search import Searcher

    if bool(fixture) == bool(beir_dir):
        raise KbError("give a FIXTURE.json or --beir DIR (one of them)", EXIT_USAGE)
    try:
        bset = load_beir(beir_dir, split) if beir_dir else load_fixture(fixture)
    except BenchError as e:
        raise KbError(str(e), EXIT_USAGE) from None
    with open_index(index_path) as ix:
        res = run_bench(Searcher(ix, _search_options(ix), device, compute_type), bset, k, list(backends) or None)
        res["artifact"] = {"id": ix.artifact.id, "path": str(ix.path)}
    click.echo(json.dumps(res, indent=2) if as_json else render_table(res))


from .serve_cli import mcp as mcp_command, serve as serve_command  # noqa: E402 - imports only click

main.add_command(serve_command, "serve")
main.add_command(mcp_command, "mcp")


if __name__ == "__main__":
    sys.exit(main())
