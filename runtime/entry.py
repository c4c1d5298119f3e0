"""Entry point of ``kb``: the console script and the frozen binary (packaging/kb.spec) both run
``run()``; tests and libraries call ``kb.runtime.cli:main`` directly.

What it adds around ``kb.runtime.cli:main``, all for one-process-per-query start-up time
(measurements: packaging/README.md):

1. Environment defaults, set before numpy/ctranslate2 load their native libraries (an explicit
   value in the user's environment always wins):
   - OPENBLAS_NUM_THREADS=1: numpy's bundled OpenBLAS otherwise starts a thread per core at
     import; kb does no large BLAS work (one query vector), so one thread is enough.
   - OMP_WAIT_POLICY=PASSIVE: ctranslate2's libgomp workers otherwise spin-wait between parallel
     regions; on a small, busy machine a spinning worker that loses its core stalls every
     barrier of the model load for a scheduler time slice.
2. Lazy modules (``_LAZY_MODULES``): stand-ins that import the real module on first real use
   instead of at import. Semantics are unchanged: any real use loads the real module.
3. ``os._exit`` after flushing stdout/stderr: skips interpreter teardown (module dicts,
   ctranslate2/usearch destructors, OpenMP pool joins).

Set KB_NO_TWEAKS=1 (or KB_FROZEN_NO_TWEAKS=1) to run without 1-3 (to measure them, or to rule them out), and
KB_PHASES=PATH to run a profiler first (packaging/phases.py prints a per-phase start-up breakdown
to stderr).
"""

import os
import sys

_TWEAKS = all(os.environ.get(v, "") in ("", "0") for v in ("KB_NO_TWEAKS", "KB_FROZEN_NO_TWEAKS"))

_ENV_DEFAULTS = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_WAIT_POLICY": "PASSIVE",
}

_LAZY_MODULES = {
    # usearch/__init__: `import urllib.request` for BinaryManager downloads, never used by kb.
    "urllib.request": (),
    # ctranslate2.extensions: `import asyncio` for async generation helpers, never used by kb.
    "asyncio": (),
    # usearch.index: `from tqdm import tqdm`, only called for progress bars of Index.add/search
    # over batches, which kb never shows; tqdm's import reads its version through
    # importlib.metadata (pulls in email.*).
    "tqdm": ("tqdm",),
    # tokenizers/__init__: `from .implementations import ...`, the library's ready-made
    # tokenizer classes (half of its import); kb's query tokenizer imports tokenizers only for
    # a query that is not printable ASCII, and uses tokenizers.Tokenizer alone.
    "tokenizers.implementations": ("BertWordPieceTokenizer", "ByteLevelBPETokenizer", "CharBPETokenizer",
                                   "SentencePieceBPETokenizer", "SentencePieceUnigramTokenizer"),
}


class _LazyModule(type(sys)):
    """Stands in for a module until an attribute it does not hold is read; then the real module
    is imported (replacing this one in sys.modules) and the read is forwarded to it.

    importlib.util.LazyLoader cannot be used: on CPython the ``import`` statement itself reads
    ``__spec__`` of a module found in sys.modules, which makes a LazyLoader module load at once.
    This one holds ``__spec__`` as a plain attribute, so only real use (``urllib.request.urlopen``,
    ``asyncio.Queue``, ``from asyncio import X``, ``import asyncio.events``) triggers the import.
    """

    def __getattr__(self, attr):
        return getattr(_real(self), attr)


def _real(stand_in):
    real = stand_in.__dict__.get("_kb_real")
    if real is None:
        import importlib

        name = stand_in.__name__
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        real = importlib.import_module(name)
        stand_in.__dict__["_kb_real"] = real
    return real


def _lazy(name: str, callables: tuple = ()) -> None:
    """Register a stand-in for ``name`` that imports the real module on first real use.

    ``callables``: attributes that ``from name import attr`` may bind without using them; the
    stand-in holds a forwarding function for each, which imports the real module when called.
    """
    import importlib.util

    if name in sys.modules:
        return
    try:
        spec = _find_spec(name)
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    module = _LazyModule(name)
    module.__spec__ = spec
    if callables and spec.submodule_search_locations is not None:
        # `from pkg import attr` reads pkg.__path__ first; without it, that read would load the
        # real package. With it, `import pkg.sub` before first use runs pkg/sub.py ahead of
        # pkg/__init__.py, which is harmless for tqdm (its submodules import only siblings,
        # `from .utils import X`), so only stand-ins with callables (tqdm) hold __path__.
        module.__path__ = list(spec.submodule_search_locations)
    # Other stand-ins hold no __path__: `import pkg.sub` reads it and so imports the real package
    # before any of its submodules, as CPython always does (asyncio's submodules need that).
    for attr in callables:
        def forward(*args, _attr=attr, **kwargs):
            return getattr(_real(module), _attr)(*args, **kwargs)

        forward.__name__ = forward.__qualname__ = attr
        setattr(module, attr, forward)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:  # `import urllib.request` then reads urllib.request through the parent package
        setattr(sys.modules[parent], child, module)


def _find_spec(name: str):
    """The module spec of ``name`` without importing anything: for a submodule of a package not
    yet imported (tokenizers.implementations), the package's own spec says where to look
    (importlib.util.find_spec would import the package first)."""
    import importlib.util

    parent, _, _ = name.rpartition(".")
    if not parent or parent in sys.modules:
        return importlib.util.find_spec(name)
    outer = importlib.util.find_spec(parent)
    if outer is None or outer.submodule_search_locations is None or "." in parent:
        return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, list(outer.submodule_search_locations)) if find else None
        if spec is not None:
            return spec
    return None


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)  # sys.exit("message") semantics
    return 1


def run() -> None:
    if _TWEAKS:  # before anything imports numpy and friends
        for k, v in _ENV_DEFAULTS.items():
            os.environ.setdefault(k, v)
        for name, callables in _LAZY_MODULES.items():
            _lazy(name, callables)
    report = None
    phases = os.environ.get("KB_PHASES", "")
    if phases and not os.path.isfile(phases):
        print(f"kb: KB_PHASES={phases} is not a file: it takes the path of packaging/phases.py; running without it", file=sys.stderr)
    elif phases:  # a profiler (packaging/phases.py), run before kb loads
        import runpy

        report = runpy.run_path(phases)["report"]
    if not _TWEAKS:
        from kb.runtime.cli import main

        sys.exit(main())
    from kb.runtime.cli import main

    try:
        main()  # click's standalone mode always ends in SystemExit
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    # Anything else (an unexpected error with --debug, KeyboardInterrupt) propagates: Python
    # prints it and exits normally.
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `kb search ... | head`: the reader left; exit as a shell would
        code = code or 141
    if report is not None:  # os._exit skips the atexit it registered
        report()
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
