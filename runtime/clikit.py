"""What kb's commands share: opening the artifact, the error boundary, common options, and the
``kb search`` flags derived from the search options (kb.common.options).

runtime/cli.py (the kb group and its commands) and runtime/serve_cli.py (serve, mcp) both import
this module and not each other.
"""

from __future__ import annotations

import os

import click

from kb.common.errors import ArtifactError
from kb.common.options import SETTINGS
from kb.common.usage import OneLineUsage, Terminated, debugging, error_line, exit_on_signals, one_line, signal_exit_code, stdout_closed

DEFAULT_INDEX = "kb.kb"


def resolve_index(paths) -> list[str]:
    """-i/--index (repeatable), else $KB_INDEX, else ./kb.kb; each must exist."""
    paths = [paths] if isinstance(paths, str) else list(paths or ())
    chosen = paths or [os.environ.get("KB_INDEX") or DEFAULT_INDEX]
    for p in chosen:
        if not os.path.exists(p):
            how = "-i" if paths else ("$KB_INDEX" if os.environ.get("KB_INDEX") else f"default ./{DEFAULT_INDEX}")
            raise ArtifactError(f"no artifact at {p} (from {how}); build one with kb-build or pass -i PATH")
    return chosen


def open_index(paths, several: bool = True):
    """The Index of one artifact, or (``several``) a set's Collection for several -i or a set
    file (runtime/collection.py, imported only then)."""
    from kb.formats.kbset import is_set_file

    chosen = resolve_index(paths)
    if len(chosen) == 1 and not is_set_file(chosen[0]):
        from .index import Index

        return Index(chosen[0])
    if not several:
        from kb.common.errors import UsageError

        raise UsageError(f"this command reads one artifact; give -i one .kb file (a member of the set), not {' '.join(chosen)}")
    from .collection import open_paths

    return open_paths(chosen)


class Group(OneLineUsage, click.Group):
    """The error boundary: every error below becomes one stderr line and its exit code
    (kb.common.errors); click's usage errors become one line too (kb.common.usage)."""

    prog = "kb"

    def invoke(self, ctx):
        exit_on_signals()
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # an unknown subcommand, or a subcommand's own usage error
            raise one_line(e, ctx) from None
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own exits keep their codes
        except BrokenPipeError:
            stdout_closed(ctx)
        except (KeyboardInterrupt, Terminated) as e:  # Ctrl-C, SIGTERM: quietly, 128 + N
            ctx.exit(signal_exit_code(e))
        except Exception as e:  # noqa: BLE001 - the one boundary where anything becomes an exit code
            if debugging(ctx):
                raise
            line, code = error_line(self.prog, e)
            click.echo(line, err=True)
            ctx.exit(code)


def command_group(**attrs):
    """A kb command group with the shared settings."""
    return click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]}, **attrs)


index_option = click.option("-i", "--index", "index_path", multiple=True, metavar="PATH", help="Artifact, or set file (kb set create); repeat to search several as one (default: $KB_INDEX, else ./kb.kb).")
device_option = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where models run.")
COMPUTE_TYPES = ("auto", "default", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
compute_option = click.option("--compute-type", type=click.Choice(COMPUTE_TYPES), default="auto", show_default=True, help="CTranslate2 compute type (auto: int8 on CPU, float16 on CUDA; with auto, kb search embeds its query in place, without CTranslate2, when the artifact allows).")



def _click_option(s):
    """The kb search flag of one search option: its type, bounds, doc and default say the same
    as kb.toml's [search] key does."""
    help_ = f"{s.spec.doc} (default: the artifact's [search] {s.name}, else {s.default_text()})"
    dest = f"opt_{s.name}"
    if s.kind is bool:
        return click.option(s.flag, dest, default=None, help=help_)
    if s.spec.choices:
        kind = click.Choice(list(s.spec.choices))
    elif s.kind is int:
        kind = click.IntRange(s.spec.minimum, s.spec.maximum)
    elif s.kind is float:
        kind = click.FloatRange(s.spec.minimum, s.spec.maximum)
    else:
        kind = s.kind
    return click.option(s.flag, dest, type=kind, default=None, help=help_)


def search_option_flags(fn):
    """Add a flag per search option (all but those declared without one); the command receives
    them as one ``overrides`` dict of the flags given."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        overrides = {name: kwargs.pop(f"opt_{name}") for name in SETTINGS if f"opt_{name}" in kwargs}
        return fn(*args, overrides={k: v for k, v in overrides.items() if v is not None}, **kwargs)

    for s in reversed([s for s in SETTINGS.values() if s.flag]):
        run = _click_option(s)(run)
    return run
