"""kb-build: a thin click layer over builder.build. Errors become one line on stderr and an exit code.

Exit codes: 0 built, 1 build failed (nothing replaced), 2 usage or unreadable input/config.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from kb.formats.version import KB_VERSION
from kb.runtime.usage import Command

EXIT_FAIL = 1
EXIT_USAGE = 2


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


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}


def printable(s: str) -> str:
    """A path or message as one terminal line: control characters escaped as \\xNN."""
    return str(s).translate(_CONTROL)


def summary_lines(rep, out: Path) -> list[str]:
    lines = [
        f"built {out} ({_human(rep.artifact_bytes)}): {rep.files_read} files read, {rep.documents} documents, "
        f"{rep.chunks} chunks, {rep.terms} terms, {rep.vectors} vectors",
    ]
    if rep.truncated_chunks:
        lines.append(f"note: {rep.truncated_chunks} chunks exceed the embedding model's window; their tails are searchable by BM25 only")
    if rep.excluded:
        lines.append(f"excluded by --include/--exclude: {rep.excluded} files")
    if rep.skipped:
        lines.append(f"skipped {len(rep.skipped)}:")
        lines.extend(f"  {printable(p)}: {printable(r)}" for p, r in rep.skipped)
    lines.extend(f"warning: {w}" for w in rep.warnings)
    lines.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in rep.seconds.items()))
    lines.append("bytes: " + ", ".join(f"{k} {_human(v)}" for k, v in rep.section_bytes.items()))
    return lines


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("corpus", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="Artifact to write (atomically).")
@click.option("--config", type=click.Path(path_type=Path), help="kb.toml (default: kb.toml in the corpus folder, if any).")
@click.option("--jsonl", multiple=True, type=click.Path(path_type=Path), help="JSON Lines file: one {id, title, text, tags?, status?, path?} per line. Repeatable.")
@click.option("--include", multiple=True, metavar="GLOB", help="Index only paths matching GLOB (relative to the corpus root). Repeatable.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Leave out paths matching GLOB. Repeatable.")
@click.option("--strict", is_flag=True, help="Fail the build if any input is skipped.")
@click.option("--follow-symlinks", is_flag=True, help="Read files that symlinks point to outside the corpus root, and enter symlinked folders (default: neither; each is reported as skipped).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary (errors still go to stderr).")
@click.option("--embedder", metavar="NAME", help="Embedding model: all-MiniLM-L6-v2 (default) or none (BM25 only).")
@click.option("--reranker", "reranker", metavar="PATH", help="Pack this cross-encoder (an HF BertForSequenceClassification folder, converted to int8, or a converted folder) instead of the shipped default.")
@click.option("--no-reranker", is_flag=True, help="Pack no reranker (kb search then cannot rerank).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N", help="Processes for chunking and analysis (default: one per core, at most 8). The artifact is the same for any N.")
@click.option("--json", "as_json", is_flag=True, help="Print the build report as JSON on stdout.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(KB_VERSION, "--version", prog_name="kb-build")
def main(corpus, out, config, jsonl, include, exclude, strict, follow_symlinks, quiet, embedder, reranker, no_reranker, jobs, as_json, debug):
    """Compile CORPUS folders/files (markdown, text, JSON, YAML, TOML) and JSON Lines into one artifact."""
    from .build import BuildError, build
    from .config import ConfigError, load_config
    from .ingest import InputError
    from kb.runtime.models import ModelError  # the base of builder.models.ModelError too

    if not corpus and not jsonl:
        _fail("give at least one CORPUS folder or --jsonl FILE", EXIT_USAGE)
    if reranker and no_reranker:
        _fail("--reranker and --no-reranker are exclusive", EXIT_USAGE)
    if config is None:
        guess = [Path(c) / "kb.toml" for c in corpus if Path(c).is_dir()]
        config = next((g for g in guess if g.is_file()), None)
    bar = _Bar(sys.stderr.isatty() and not quiet)
    try:
        cfg = load_config(config)
        from dataclasses import replace

        if embedder:
            cfg = replace(cfg, embedding_model=embedder)
        if reranker or no_reranker:
            cfg = replace(cfg, reranker="none" if no_reranker else reranker)
        rep = build(list(corpus), out, cfg, jsonl=list(jsonl), include=list(include), exclude=list(exclude), strict=strict, progress=bar, jobs=jobs, follow_symlinks=follow_symlinks)
    except (ConfigError, InputError) as e:
        bar.close()
        _fail(str(e), EXIT_USAGE, debug)
    except (BuildError, ModelError) as e:
        bar.close()
        _fail(f"build failed, {out} left as it was: {e}", EXIT_FAIL, debug)
    except OSError as e:
        bar.close()
        _fail(f"build failed, {out} left as it was: {e}", EXIT_FAIL, debug)
    bar.close()
    if as_json:
        click.echo(json.dumps(asdict(rep), indent=2))
    if not quiet:
        for line in summary_lines(rep, out):
            click.echo(line, err=True)


main.prog = "kb-build"


def _fail(msg: str, code: int, debug: bool = False):
    if debug and sys.exc_info()[0] is not None:
        raise
    click.echo(f"kb-build: error: {printable(msg)}", err=True)
    sys.exit(code)
