"""Fuzz targets of what an operator hands kb (issue 50): set files, ``--vectors`` arrays, kb.toml,
command lines (bytes, so arguments that are not UTF-8 too), and an artifact changed in place
under a running server's reader. Same shape as targets.py: a generator ``gen(rng) -> bytes`` and a
target ``fn(data) -> outcome`` that raises ``Finding`` when kb misbehaves: an exception that
would reach the user as a traceback, an error that is not one line, or an exit code kb does not
give for bad input.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
from pathlib import Path

from .targets import INTERESTING_INTS, SEED_CORPUS, Finding, _mutate_tree, _seed_config, mutate_artifact, mutate_bytes


def refusal(fn, allowed=(2, 3, 4)) -> str:
    """Run ``fn``: "ok", or ``exit N`` for a KbError with an allowed code whose line on stderr
    (``error_line``) is one line. A warning (another stderr line) is a finding too."""
    import warnings

    from kb.common.errors import KbError
    from kb.common.usage import error_line

    try:
        with warnings.catch_warnings():
            for shown in (UserWarning, RuntimeWarning):  # what Python prints on stderr
                warnings.simplefilter("error", shown)
            fn()
    except KbError as e:
        line = error_line("kb", e)[0]
        if "\n" in line or "\r" in line or not str(e):
            raise Finding(f"the error is not one line: {line!r}") from e
        if e.exit_code not in allowed:
            raise Finding(f"exit {e.exit_code}: {e}") from e
        return f"exit {e.exit_code}"
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        raise Finding(f"{type(e).__name__}: {e}") from e
    return "ok"


# --- set files -----------------------------------------------------------------------------------
def build_set_seeds(folder: Path) -> list[bytes]:
    """Two BM25-only artifacts of halves of the seed corpus in ``folder``, and set files of them
    (both, each alone), as ``kb set create`` writes them."""
    from dataclasses import replace

    from kb.builder.build import build
    from kb.runtime.collection import create_set

    names = sorted(SEED_CORPUS)
    for part, chosen in (("a", names[::2]), ("b", names[1::2])):
        corpus = folder / f"corpus-{part}"
        for name in chosen:
            p = corpus / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(SEED_CORPUS[name])
        build([corpus], folder / f"{part}.kb", replace(_seed_config(), embedding_model="none", reranker="none"), jobs=1)
    out = []
    for members in (["a.kb", "b.kb"], ["a.kb"], ["b.kb"]):
        path = folder / "seed.kbset"
        create_set(str(path), [str(folder / m) for m in members])
        out.append(path.read_bytes())
    return out


SET_TOKENS = [b'"kb_set"', b'"artifacts"', b'"path"', b'"id"', b'"bytes"', b'"sha256"', b'"../a.kb"', b'"/etc/passwd"', b'"a.kb"',
              b'"b.kb"', b'"."', b'""', b'"\\u0000"', b"null", b"-1", b"1e400", b"[]", b"{}", b"0" * 30, b'"' + b"f" * 64 + b'"']


def generate_set_file(rng: random.Random, seeds: list[bytes]) -> bytes:
    seed = rng.choice(seeds)
    if rng.random() < 0.6:
        tree = _mutate_tree(rng, json.loads(seed))
        if rng.random() < 0.3 and isinstance(tree, dict) and isinstance(tree.get("artifacts"), list) and tree["artifacts"]:
            m = rng.choice(tree["artifacts"])
            if isinstance(m, dict):
                m[rng.choice(["path", "id", "bytes", "sha256", "x"])] = rng.choice(["a.kb", "b.kb", "../a.kb", "/dev/zero", "corpus-a", "seed.kbset", "fuzz.kbset", 0, -1, 2**64, None, "x" * 5000])
        text = json.dumps(tree, default=lambda o: o.decode("latin-1")).encode()  # _mutate_tree's values include bytes
        return text if rng.random() < 0.9 else mutate_bytes(rng, text, SET_TOKENS)
    return mutate_bytes(rng, seed, SET_TOKENS)


class SetFiles:
    """A mutated set file opened as ``kb search -i SET`` opens it, then searched (BM25)."""

    def __init__(self, folder: Path):
        self.path = folder / "fuzz.kbset"

    def __call__(self, data: bytes) -> str:
        self.path.write_bytes(data)
        return refusal(self._use)

    def _use(self) -> None:
        from kb.runtime.clikit import open_index
        from kb.runtime.search import Query, Searcher

        ix = open_index([str(self.path)])
        try:
            Searcher(ix, "cpu", "auto").search(Query("backup restic", mode="bm25", top_k=3, all_statuses=True))
        finally:
            ix.close()


# --- .npy arrays (--vectors) ---------------------------------------------------------------------
NPY_SHAPES = ["(4, 64)", "(3, 64)", "(4, 32)", "(4,)", "(4, 64, 1)", "()", "(-20, 384)", "(-1, 64)", "(0, 64)", "(4, 0)",
              "(9223372036854775807, 64)", "(2**63, 64)", "(4, 64,)", "((1,),)", "(1, 'a')", "(1e3, 64)", "(True, 64)", "[4, 64]",
              "(" * 200 + ")" * 200, "(4, 18446744073709551616)"]
NPY_DESCRS = ["'<f4'", "'<f2'", "'>f4'", "'<f8'", "'|u1'", "'<i4'", "'|O'", "[('a', '<f4')]", "'<c8'", "'<V4'", "'<U1'", "'float32'", "1", "'<f4' + 'x'"]
NPY_VALUES = [0.0, 1e-45, -1e-45, 1e-40, 3e38, -3.4e38, 65504.0, float("nan"), float("inf"), -float("inf"), 1.0, -0.0, 6e-8]


def _npy_header(descr: str, fortran: str, shape: str, version: int = 1) -> bytes:
    text = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    size_fmt = "<H" if version == 1 else "<I"
    pre = 6 + 2 + struct.calcsize(size_fmt)
    text += " " * ((64 - (len(text) + 1 + pre) % 64) % 64) + "\n"
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack(size_fmt, len(text)) + text.encode("latin-1")


def generate_npy(rng: random.Random) -> bytes:
    import numpy as np

    rows = 4
    dtype = rng.choice(("<f4", "<f4", "<f2", ">f4"))
    a = np.asarray([[rng.gauss(0, 1) for _ in range(64)] for _ in range(rows)], dtype=np.float64)
    for _ in range(rng.choice((0, 0, 1, 3))):  # hostile values in rows, or whole rows of one
        r = rng.randrange(rows)
        v = rng.choice(NPY_VALUES)
        if rng.random() < 0.5:
            with np.errstate(all="ignore"):
                a[r] = v * np.sign(a[r])
        else:
            a[r, rng.randrange(64)] = v
    with np.errstate(all="ignore"):
        body = a.astype(dtype)  # 3e38 as float16 is inf: a value the checks refuse
    kind = rng.random()
    if kind < 0.4:  # a valid file of (maybe hostile) values
        buf = io.BytesIO()
        np.save(buf, body)
        return buf.getvalue()
    if kind < 0.8:  # a forged header over the values
        descr = rng.choice(NPY_DESCRS) if rng.random() < 0.5 else repr(dtype)
        shape = rng.choice(NPY_SHAPES) if rng.random() < 0.7 else f"({rng.choice(INTERESTING_INTS)}, {rng.choice((64, 32, 1, 0))})"
        fortran = rng.choice(("False", "False", "True", "1", "None", "'x'"))
        data = _npy_header(descr, fortran, shape, rng.choice((1, 1, 2, 3))) + body.tobytes()
        return data if rng.random() < 0.7 else data[: rng.randrange(len(data) + 1)]
    buf = io.BytesIO()
    np.save(buf, body)
    return mutate_bytes(rng, buf.getvalue(), [b"'shape'", b"'descr'", b"(", b")", b",", b"-", b"9" * 30, b"\x93NUMPY", b"\n", b"{", b"}"])


class NpyVectors:
    """A mutated ``--vectors`` array read as kb-build reads it: open, width and row count, values,
    then the unit rows it would index (every one finite and of length 1)."""

    def __init__(self, folder: Path):
        self.path = folder / "fuzz.npy"

    def __call__(self, data: bytes) -> str:
        self.path.write_bytes(data)
        return refusal(self._use, allowed=(2,))

    def _use(self) -> None:
        import numpy as np

        from kb.builder.vectors import check_dim, check_rows, check_values, open_vectors

        given = open_vectors(self.path)
        check_dim(given, "hash", 64)
        check_rows(given, 4, Path("fuzz.jsonl"))
        check_values(given)
        unit = given.take(np.arange(4))
        norms = np.linalg.norm(unit.astype(np.float64), axis=1)
        if not (np.isfinite(unit).all() and np.allclose(norms, 1.0, atol=1e-3)):
            raise Finding(f"rows that pass the checks become vectors of norm {norms.tolist()}")


# --- kb.toml -------------------------------------------------------------------------------------
TOML_SEEDS = [
    b'[tags]\nops = "Lab operations runbooks"\n\n[contexts]\n"runbooks/" = "Procedures"\n\n[search]\nrrf_k = 60\nrerank = true\n',
    b'[statuses]\nknown = ["live", "old"]\nexclude_by_default = ["old"]\ndefault = "live"\n',
    b'[chunking]\nmax_tokens = 200\noverlap_tokens = 20\n[bm25]\nk1 = 1.2\nb = 0.75\n',
    b'[analyzer]\nlanguage = ["en", "de"]\n[embedding]\nmodel = "hash"\n[vectors]\nconnectivity = 16\n',
    b"[search]\nsemantic_weight = 0.5\ndefault_limit = 10\n",
]
TOML_TOKENS = [b"[", b"]", b"[[", b"]]", b"=", b'"', b"'''", b'"""', b"\n", b"{", b"}", b"[" * 3000, b"]" * 3000, b"1" * 5000,
               b"inf", b"nan", b"-0", b"1e999", b"[tags]\n", b"[contexts]\n", b"[search]\n", b"[x]\n", b"a.b.c = 1\n",
               b'ops = "' + b"a" * 400 + b'"\n', b"\x00", b"\xff", b"\xed\xa0\x80", b"\\u0000", b"true", b"1979-05-27"]


def generate_toml(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        depth = rng.choice((10, 100, 999, 1001, 3000, 5000))
        return ("a = " + "[" * depth + "1" + "]" * depth + "\n").encode()
    return mutate_bytes(rng, rng.choice(TOML_SEEDS), TOML_TOKENS, others=TOML_SEEDS)


class KbToml:
    """A mutated kb.toml read by kb-build's ``load_config`` (ConfigError, exit 2, is a refusal)."""

    def __init__(self, folder: Path):
        self.path = folder / "kb.toml"

    def __call__(self, data: bytes) -> str:
        from kb.builder.config import load_config

        self.path.write_bytes(data)
        return refusal(lambda: load_config(self.path), allowed=(2,))


# --- command lines -------------------------------------------------------------------------------
ARGV_COMMANDS = [["search"], ["get"], ["list"], ["info"], ["status"], ["search", "--json"], ["get", "--json"], ["info", "--verify"]]
ARGV_WORDS = [b"backup", b"restic restore", b"nightly", b"0", b"1", b"-1", b"99999999999999999999", b"backups.md", b"backups.md:1:2",
              b"notes/*", b"--json", b"--jsonl", b"-k", b"3", b"--top-k", b"0", b"201", b"--mode", b"bm25", b"vector", b"hybrid",
              b"--tag", b"ops", b"--status", b"live", b"--all-statuses", b"--path", b"notes/", b"--group", b"doc", b"--full",
              b"--explain", b"-C", b"2", b"--context", b"--glob", b"[", b"--max-bytes", b"10", b"--rrf-k", b"nan", b"inf",
              b"--semantic-weight", b"2", b"--rerank", b"--no-rerank", b"--min-score", b"-1e999", b"--format", b"--", b"-", b"",
              b"\xff", b"\xff disk", b"\xc0\x80", b"\xed\xa0\x80", b"\x00", b"\x1b[31m", b"\r\n", b"\xe2\x80\xae", b'"', b"title:x",
              b'"restic', b"-x", b"--nope", b"-i", b"\xf0\x9f\x98\x80", b"a" * 3000]


def generate_argv(rng: random.Random) -> bytes:
    """A command line as NUL-separated bytes: a read-only kb command and mutated words."""
    words = [w.encode() for w in rng.choice(ARGV_COMMANDS)]
    for _ in range(rng.randrange(0, 6)):
        w = rng.choice(ARGV_WORDS)
        if rng.random() < 0.2:
            w = mutate_bytes(rng, w, [b"\xff", b"\x80", b"\xed\xa0\x80", b"--", b"="], rounds=1)
        words.append(w.replace(b"\x00", b"") if rng.random() < 0.9 else w)
    return b"\x00".join(words)


class CommandLine:
    """``kb ARGV -i SEED --no-stale-check`` (CliRunner), the arguments decoded as Python decodes
    argv (UTF-8, with surrogate escapes for other bytes). Allowed: exit 0, 1 (``kb status``: stale),
    2, 3 or 4 with at most one stderr line, never "rerun with --debug" (an unexpected error)."""

    def __init__(self, artifact: Path):
        self.artifact = artifact

    def __call__(self, data: bytes) -> str:
        from click.testing import CliRunner

        from kb.runtime.cli import main as kb

        words = data.split(b"\x00")
        if b"--debug" in words:  # asks for the traceback
            return "skipped"
        argv = [os.fsdecode(w) for w in words]
        r = CliRunner().invoke(kb, [*argv, "-i", str(self.artifact)], catch_exceptions=True)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise Finding(f"{type(r.exception).__name__} out of kb {argv!r}: {r.exception}")
        err = r.stderr
        if "rerun with --debug" in err or r.exit_code not in (0, 1, 2, 3, 4):
            raise Finding(f"kb {argv!r}: exit {r.exit_code}: {err[:300]!r}")
        if r.exit_code and err.count("\n") != 1:
            raise Finding(f"kb {argv!r}: exit {r.exit_code} with {err.count(chr(10))} stderr lines: {err[:300]!r}")
        return f"exit {r.exit_code}"


# --- an artifact changed in place under a running server -------------------------------------------
def generate_in_place(rng: random.Random, seeds: list[bytes]) -> bytes:
    """What lands in the served file: a truncation, another seed, a partial copy, or a mutation."""
    seed = rng.choice(seeds)
    kind = rng.randrange(4)
    if kind == 0:
        return seed[: rng.choice((0, 1, 64, 4096, 8192, rng.randrange(len(seed) + 1)))]
    if kind == 1:
        other = rng.choice(seeds)
        return other[: rng.randrange(len(other) + 1)] + seed[rng.randrange(len(seed) + 1) :]  # cp part-way over the old bytes
    if kind == 2:
        return seed
    return mutate_artifact(rng, seeds)


class InPlace:
    """kb serve's Service (runtime/service.py ``Reloading``, the artifact read into memory) over
    a file that each input overwrites in place (same inode: open r+b, write, truncate), as
    ``cp`` or ``truncate`` would; requests run before the reload, the reload is tried, requests
    run again. A signal (SIGBUS) kills the worker: the runner counts it as a crash. Allowed: the
    old artifact keeps answering until a whole new one verifies; a request on a new one that
    verified but holds forged values may be refused as corrupt (exit 3 or 4), as for any artifact."""

    def __init__(self, folder: Path, seeds: list[bytes]):
        from kb.runtime.search import Searcher
        from kb.runtime.service import Reloading, Service, file_state

        self.path = folder / "served.kb"
        self.path.write_bytes(seeds[0])
        self.seeds, self.trusted = set(seeds), True  # trusted: the service holds a seed, which must answer
        self.logged: list[str] = []

        def open_service():
            from kb.runtime.clikit import open_index

            ix = open_index([str(self.path)], private=True)
            try:
                ix.artifact.verify()
                return Service(ix, Searcher(ix, "cpu", "auto"), stale_check=False)
            except BaseException:
                ix.close()
                raise

        before = {str(self.path): file_state(self.path)}
        self.svc = Reloading(open_service(), open_service, [self.path], self.logged.append, before=before, poll_s=3600)

    def __call__(self, data: bytes) -> str:
        from kb.runtime.requests import parse_get, parse_search
        from kb.runtime.service import file_state

        with open(self.path, "r+b") as f:  # in place: the inode the service read stays
            f.write(data)
            f.truncate(len(data))
        requests = lambda: (self.svc.search(parse_search({"query": "backup restic", "top_k": 3, "mode": "bm25"})), self.svc.get(parse_get({"chunk_id": 0})))  # noqa: E731
        old = self.svc._svc
        refusal(requests, allowed=() if self.trusted else (3, 4))  # the bytes read before the change answer
        self.svc.reload([file_state(self.path)])
        if self.svc._svc is old:
            return "kept"
        self.trusted = data in self.seeds
        return "reloaded, " + refusal(requests, allowed=() if self.trusted else (3, 4))


__all__ = ["SetFiles", "NpyVectors", "KbToml", "CommandLine", "InPlace", "build_set_seeds", "generate_set_file", "generate_npy",
           "generate_toml", "generate_argv", "generate_in_place"]
