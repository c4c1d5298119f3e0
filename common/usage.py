"""The CLIs' shared edges: click's usage errors as one line on stderr, like every other kb error,
``--debug``, and the line an error becomes (kb.common.errors gives its exit code).

click prints a usage block, a "Try --help" line and then the error. kb and kb-build refuse an
argument that is not UTF-8 the same way, and print
``PROG: error: MESSAGE (see 'COMMAND --help')`` and exit 2: the commands' ``parse_args`` (and
the kb group's ``invoke``, where subcommands are resolved and parsed) turn any
``click.UsageError`` into a ``UsageLine``, whose ``show`` is that one line.
"""

from __future__ import annotations

import click


class UsageLine(click.UsageError):
    def __init__(self, message: str, prog: str, command: str):
        super().__init__(message)
        self.prog, self.command = prog, command

    def show(self, file=None) -> None:
        click.echo(f"{self.prog}: error: {printable(self.message)} (see '{self.command} --help')", err=True)  # it may quote an argument


def one_line(e: click.UsageError, ctx: click.Context) -> UsageLine:
    """``e`` as a UsageLine. The program is the root command's ``prog`` (kb, kb-build), not the
    name it was started by (a frozen binary, ``python -m``, a test runner)."""
    if isinstance(e, UsageLine):
        return e
    names, c = [], e.ctx or ctx
    while c.parent is not None:
        names.append(c.info_name)
        c = c.parent
    prog = getattr(c.command, "prog", None) or c.info_name or "kb"
    return UsageLine(e.format_message(), prog, " ".join([prog, *reversed(names)]))


class OneLineUsage:
    """Mixin for click commands and groups: usage errors while parsing are one line; ``prog``
    names the program when the command is the root."""

    prog: str | None = None

    def parse_args(self, ctx, args):
        try:
            for a in args:  # bytes that are not UTF-8 reach argv as surrogate escapes, which no text, path or JSON can carry
                if isinstance(a, str) and not a.isascii() and any(0xDC80 <= ord(c) <= 0xDCFF for c in a):
                    raise click.UsageError(f"argument {not_utf8(a)} is not valid UTF-8; give arguments in UTF-8", ctx)
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise one_line(e, ctx) from None


class TuningOption(click.Option):
    """A ranking knob's flag (fusion, rerank): listed under its own heading by ``--help-all``, and
    only counted by ``--help``, so a first reader sees the options a search needs."""


def _help_all(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        ctx.meta["kb.help_all"] = True
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


class Helpful:
    """Mixin for kb's click commands and groups: help ends with ``examples`` (command lines, two
    to four), and a command with tuning flags (TuningOption) lists them only with --help-all."""

    def __init__(self, *args, examples=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.examples = tuple(examples)
        if any(isinstance(p, TuningOption) for p in self.params):
            self.params.append(click.Option(["--help-all"], is_flag=True, expose_value=False, is_eager=True, callback=_help_all, help="Show this help with the tuning options too, and exit."))

    def format_options(self, ctx, formatter):
        rows, tuning = [], []
        for p in self.get_params(ctx):
            record = None if isinstance(p, click.Argument) else p.get_help_record(ctx)
            if record is not None:
                (tuning if isinstance(p, TuningOption) else rows).append(record)
        if rows:
            with formatter.section("Options"):
                formatter.write_dl(rows)
        if tuning and ctx.meta.get("kb.help_all"):
            with formatter.section("Tuning options (fusion and rerank; each defaults to the artifact's kb.toml [search])"):
                formatter.write_dl(tuning)
        elif tuning:
            formatter.write_paragraph()
            formatter.write_text(f"{len(tuning)} tuning options (fusion and rerank) are listed by --help-all.")
        if isinstance(self, click.Group):
            self.format_commands(ctx, formatter)

    def format_epilog(self, ctx, formatter):
        super().format_epilog(ctx, formatter)
        if self.examples:
            with formatter.section("Examples"):
                for line in self.examples:
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class Command(OneLineUsage, Helpful, click.Command):
    pass


def _remember_debug(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta["kb.debug"] = True  # ctx.meta is shared by a context and all its parents and children


debug_option = click.option(
    "--debug", is_flag=True, expose_value=False, is_eager=True, callback=_remember_debug, help="Show the traceback of an error instead of one line."
)


def debugging(ctx: click.Context | None = None) -> bool:
    """Whether ``--debug`` was given to the running command."""
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get("kb.debug"))


def error_line(prog: str, e: BaseException, context: str = "") -> tuple[str, int]:
    """The one stderr line and the exit status for an error that reached a CLI's boundary: a
    KbError's own message and code; anything else is unexpected (exit 1) and says how to see more.
    ``context`` goes before the message ("build failed, OUT left as it was: ")."""
    from .errors import EXIT_USAGE, KbError, exit_code

    if isinstance(e, KbError):  # one line whatever it quotes (a path given with a line break)
        return f"{prog}: error: {context}{printable(e)}", exit_code(e)
    if isinstance(e, UnicodeEncodeError) and isinstance(e.object, str) and "surrogates" in e.reason:  # bytes that were not UTF-8 (in argv)
        return f"{prog}: error: {context}{not_utf8(e.object[max(0, e.start - 20) : e.end + 20])} is not valid UTF-8; give text, names and paths in UTF-8", EXIT_USAGE
    return f"{prog}: error: {context}{e.__class__.__name__}: {printable(e)} (rerun with --debug for the traceback)", exit_code(e)


EXIT_PIPE = 128 + 13  # 141: what a shell reports for a process ended by SIGPIPE


def stdout_closed(ctx: click.Context | None = None):
    """The reader of stdout went away (``kb list | head -1``): end quietly with 141, as a process
    killed by SIGPIPE would, and point stdout at /dev/null so the final flush cannot fail again."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (a test runner's buffer)
        pass
    if ctx is not None:
        ctx.exit(EXIT_PIPE)
    sys.exit(EXIT_PIPE)


class Terminated(BaseException):
    """A termination signal (SIGTERM, SIGHUP) turned into an exception, so that what is running
    unwinds (a build removes its temporary file) before the process exits with 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP raise Terminated in the main thread (Ctrl-C already raises
    KeyboardInterrupt); the CLI boundary turns either into exit 128 + N."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def raise_terminated(signum, _frame):
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, raise_terminated)
        except (OSError, ValueError):
            pass


def signal_exit_code(e: BaseException) -> int:
    """128 + N for a KeyboardInterrupt (SIGINT) or a Terminated."""
    import signal

    return 128 + (e.signum if isinstance(e, Terminated) else signal.SIGINT)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 file', '2 files', '0 files' (``plural`` for irregular nouns)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}


def not_utf8(s: str) -> str:
    """``s`` quoted, with each byte that was not UTF-8 (a surrogate escape: Python's way of
    passing them in argv and file names) written as \\xNN."""
    return "'" + printable("".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in s)) + "'"


def printable(s: str) -> str:
    """A path or message as one terminal line: control characters (C0, DEL, C1) escaped as \\xNN;
    a file name can hold any byte but / and NUL."""
    return str(s).translate(_CONTROL)
