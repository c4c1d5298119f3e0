"""What kb's commands share: opening the artifact, the error boundary, common options, and the
flags derived from the declared inputs (kb.common.options Query and SearchOptions, runtime/requests.py
GetRequest).

runtime/cli.py (the kb group and its commands) and runtime/serve_cli.py (serve, mcp) both import
this module and not each other.
"""

from __future__ import annotations

import os

import click

from kb.common.errors import ArtifactError
from kb.common.options import SETTINGS
from kb.common.usage import Command, Helpful, OneLineUsage, Terminated, TuningOption, debugging, error_line, exit_on_signals, one_line, signal_exit_code, stdout_closed

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


def open_index(paths, several: bool = True, private: bool = False):
    """The Index of one artifact, or (``several``) a set's Collection for several -i or a set
    file (runtime/collection.py, imported only then). ``private``: each artifact read into memory
    (formats/artifact.py ``Artifact``), for the servers."""
    from kb.formats.kbset import is_set_file

    chosen = resolve_index(paths)
    if len(chosen) == 1 and not is_set_file(chosen[0]):
        from .index import Index

        return Index(chosen[0], private)
    if not several:
        from kb.common.errors import UsageError

        raise UsageError(f"this command reads one artifact; give -i one .kb file (a member of the set), not {' '.join(chosen)}")
    from .collection import open_paths

    return open_paths(chosen, private)


class Group(OneLineUsage, Helpful, click.Group):
    """The error boundary: every error below becomes one stderr line and its exit code
    (kb.common.errors); click's usage errors become one line too (kb.common.usage). Its commands
    end their help with examples (kb.common.usage Helpful)."""

    prog = "kb"
    command_class = Command
    group_class = type  # a subgroup (kb set) is one of these too

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


def _click_option(s, dest: str, default, help_: str, cls=click.Option):
    """The flag of one declared input (kb.common.settings Setting): its type and bounds say the
    same as its kb.toml key or request field does."""
    decls = (*s.flag.split(), dest)
    if s.kind is bool:  # "--on/--off" (a search option: default None, not given) or a flag
        return click.option(*decls, is_flag=True, default=default, help=help_, cls=cls)
    if s.kind is tuple:
        return click.option(*decls, multiple=True, metavar=s.metavar, help=help_, cls=cls)
    if s.choices:
        kind = click.Choice(s.choices)
    else:
        kind = {int: click.IntRange, float: click.FloatRange}[s.kind](s.minimum, s.maximum) if s.kind in (int, float) else s.kind
    return click.option(*decls, type=kind, default=default, show_default=default is not None, metavar=s.metavar, help=help_, cls=cls)


def input_flags(inputs, names=None):
    """A flag per input (Query's, GetRequest's; ``names``: only these) that declares one: the
    command receives each as a keyword argument of the input's name."""

    def add(fn):
        for s in reversed([s for s in inputs if s.flag and (names is None or s.name in names)]):
            fn = _click_option(s, s.name, s.default, s.doc)(fn)
        return fn

    return add


EVERYDAY_KNOBS = ("rerank",)  # search options --help lists; the other knobs (fusion, rerank tuning) wait for --help-all


def search_option_flags(fn):
    """Add a flag per search option (all but those declared without one); the command receives
    them as one ``overrides`` dict of the flags given."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        overrides = {name: kwargs.pop(f"opt_{name}") for name in SETTINGS if f"opt_{name}" in kwargs}
        return fn(*args, overrides={k: v for k, v in overrides.items() if v is not None}, **kwargs)

    for s in reversed([s for s in SETTINGS.values() if s.flag]):
        cls = click.Option if s.name in EVERYDAY_KNOBS else TuningOption
        run = _click_option(s, f"opt_{s.name}", None, f"{s.doc} (default: the artifact's [search] {s.name}, else {s.default_text()})", cls)(run)
    return run
