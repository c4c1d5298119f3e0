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


class _Group(click.Group):
    """Maps domain errors to one stderr line and an exit code."""

    def invoke(self, ctx):
        debug = "--debug" in sys.argv
        try:
            return super().invoke(ctx)
        except KbError as e:
            if debug:
                raise
            click.echo(f"kb: error: {e}", err=True)
            ctx.exit(e.code)
        except Exception as e:  # noqa: BLE001 - the one boundary where anything becomes an exit code
            from kb.formats.artifact import ArtifactError

            if debug:
                raise
            if isinstance(e, ArtifactError):
                click.echo(f"kb: error: {e}", err=True)
                ctx.exit(e.exit_code)
            click.echo(f"kb: error: {e.__class__.__name__}: {e} (rerun with --debug for the traceback)", err=True)
            ctx.exit(EXIT_FAIL)


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
