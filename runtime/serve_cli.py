"""``kb serve`` and ``kb mcp``: click commands, registered in runtime/cli.py with add_command.

Thin like the rest of the CLI: open the artifact (exit 3/4 when it cannot be used), load the
models once, then hand over to runtime/serve.py or runtime/mcp_server.py. Heavy imports happen
inside the commands, so importing this module costs only click.

``python -m kb.runtime.serve_cli serve|mcp ...`` runs them without the main ``kb`` group.
"""

from __future__ import annotations

import sys

import click

from kb.common.errors import KbError, ModelError
from kb.common.usage import Command, debug_option

from .clikit import compute_option, device_option, index_option, open_index

def _stale(fn):
    """The stale check's flags: off by default in a server, which never walks a folder because an
    artifact names it (runtime/stale.py says why)."""
    fn = click.option("--corpus-root", type=click.Path(file_okay=False), metavar="DIR", help="Compare with the corpus in DIR instead of the root the artifact names (implies --stale-check); notices and the status then name the files under DIR that differ. One artifact only.")(fn)
    fn = click.option("--stale-check/--no-stale-check", default=False, help="Compare the artifact with its corpus (rechecked at most every 30 s; at most 200,000 files and 2 s a check). Off by default: without --corpus-root, notices and the status give counts, not paths.")(fn)
    return fn


_mmap = click.option("--mmap", "use_mmap", is_flag=True, help="Map the artifact files instead of reading them into memory, for artifacts larger than memory (a set of big shards). Then replace a file only by rename: one changed in place can crash the server (SIGBUS).")


def _open_service(index_path, device, compute_type, stale_check, corpus_root, prog, private=True):
    """The warmed Service, reloaded when its artifact files change (runtime/service.py
    ``Reloading``); a model that does not load fails as it would for ``kb search``."""
    from .clikit import resolve_index
    from .index import members_of
    from .service import Reloading, file_state

    before = {p: file_state(p) for p in resolve_index(index_path)}
    load = lambda: _load_service(index_path, device, compute_type, stale_check, corpus_root, private)  # noqa: E731
    svc = load()
    return Reloading(svc, load, [*before, *(str(m.path) for m in members_of(svc.ix))], log=lambda line: click.echo(f"kb {prog}: {line}", err=True), before=before)


def _load_service(index_path, device, compute_type, stale_check, corpus_root, private=True):
    from kb.common.errors import UsageError

    from .index import members_of
    from .search import Searcher
    from .service import Service

    ix = open_index(index_path, private=private)
    try:
        if corpus_root is not None and hasattr(ix, "members"):
            raise UsageError("--corpus-root names the corpus of one artifact; a set's members each have their own (use --stale-check for counts)")
        for m in members_of(ix) if private else ():  # read whole anyway: check it whole
            m.artifact.verify()
        svc = Service(ix, Searcher(ix, device, compute_type), stale_check=stale_check, corpus_root=corpus_root)
        try:
            return svc.warm()
        except ModelError as e:
            raise ModelError(f"cannot load the artifact's models: {e}") from None
    except BaseException:
        ix.close()
        raise


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]}, examples=("kb serve -i sample.kb", "curl -s 'localhost:8181/search?q=disk+full&n=3'", """curl -s localhost:8181/get --json '{"targets": ["runbooks/disk-full.md:1:20"]}'"""))
@index_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on. Loopback by default; anything else exposes the artifact to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True, help="Port; 0 picks a free one (printed on the first stderr line).")
@click.option("--allow-host", multiple=True, metavar="NAME", help="Another Host name clients use for this server (e.g. a LAN name when --host is 0.0.0.0). Repeatable.")
@click.option("--max-concurrent", type=click.IntRange(1, 256), default=4, show_default=True, help="Searches running at once; more wait in the queue.")
@click.option("--max-queue", type=click.IntRange(0, 4096), default=64, show_default=True, help="Searches waiting for a slot; more get 503 at once.")
@click.option("--queue-wait", type=click.FloatRange(0, 60), default=2.0, show_default=True, help="Seconds a queued search waits for a free slot before 503.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True, help="Seconds one search may take before 504.")
@click.option("--request-deadline", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True, help="Seconds from a request's first byte for its head and body to arrive (a trickling client is cut off).")
@click.option("--max-connections", type=click.IntRange(1, 4096), default=256, show_default=True, help="Open connections at once (one thread each). Past it the slowest still sending its request is closed; else 503.")
@click.option("--max-body", type=click.IntRange(1024, 16 * 1024 * 1024), default=64 * 1024, show_default=True, help="Largest request body in bytes; more gets 413.")
@click.option("--access-log", is_flag=True, help="Log one line per request to stderr.")
@_stale
@_mmap
@device_option
@compute_option
@debug_option
def serve(index_path, host, port, allow_host, max_concurrent, max_queue, queue_wait, timeout_s, request_deadline, max_connections, max_body, access_log, stale_check, corpus_root, use_mmap, device, compute_type):
    """Serve search over HTTP: GET|POST /search, /get; GET /info, /health (JSON)."""
    from .serve import LOOPBACK, host_port, make_server
    from .serve import serve as serve_forever

    svc = _open_service(index_path, device, compute_type, stale_check, corpus_root, "serve", private=not use_mmap)
    try:
        try:
            server = make_server(svc, host, port, max_body=max_body, max_concurrent=max_concurrent, timeout=timeout_s, queue_wait=queue_wait, max_queue=max_queue, deadline=request_deadline, max_connections=max_connections, extra_hosts=allow_host, access_log=access_log)
        except OSError as e:
            raise KbError(f"cannot listen on {host_port(host, port)}: {e.strerror or e}") from None
        click.echo(f"kb serve: listening on {server.url}", err=True)
        if host.strip("[]") not in LOOPBACK:
            click.echo(f"kb serve: warning: {host} is not a loopback address; anyone who can reach it can search {_named(svc)}", err=True)
        click.echo(f"kb serve: artifact {_named(svc)}, {svc.ix.n_chunks} chunks; Ctrl-C stops", err=True)
        serve_forever(server)
    finally:
        svc.close()


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]}, examples=("kb mcp -i sample.kb", "kb mcp -i team.kb --corpus-root ~/docs   (report the files that changed since the build)", """{"mcpServers": {"kb": {"command": "kb", "args": ["mcp", "-i", "/path/to/sample.kb"]}}}   (a client's config)"""))
@index_option
@_stale
@_mmap
@device_option
@compute_option
@debug_option
def mcp(index_path, stale_check, corpus_root, use_mmap, device, compute_type):
    """Serve search to an MCP client over stdio (tools: search, get, multi_get, info, status)."""
    from .mcp_server import protect_stdout, run_stdio

    out = protect_stdout()  # before anything loads: only protocol messages may reach stdout
    svc = _open_service(index_path, device, compute_type, stale_check, corpus_root, "mcp", private=not use_mmap)
    click.echo(f"kb mcp: serving {_named(svc)} on stdio", err=True)
    try:
        run_stdio(svc, out_stream=out)  # stdin's end: exit 0; Ctrl-C, SIGTERM: 128 + N (the kb group's boundary)
    except BrokenPipeError:
        pass
    finally:
        svc.close()


def _named(svc) -> str:
    """``PATH (ID)`` of the served artifact, or of each artifact of a set."""
    arts = svc.artifact if isinstance(svc.artifact, list) else [svc.artifact]
    return " + ".join(f"{a['path']} ({a['id']})" for a in arts)


def _standalone():
    """``python -m kb.runtime.serve_cli``: the two commands under the kb group's error handling."""
    from .clikit import Group

    group = Group(name="kb", commands={"serve": serve, "mcp": mcp}, context_settings={"help_option_names": ["-h", "--help"]})
    group(prog_name="kb")


if __name__ == "__main__":
    sys.exit(_standalone())
