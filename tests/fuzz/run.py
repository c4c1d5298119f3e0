"""Run the fuzz targets at length: ``python -m tests.fuzz.run --inputs 1000000``.

    python -m tests.fuzz.run --inputs 1000000 --target artifact   # the artifact reader
    python -m tests.fuzz.run --inputs 1000000 --target parsers    # every corpus parser, in turn
    python -m tests.fuzz.run --inputs 100000 --target http        # kb serve's request handling
    python -m tests.fuzz.run --inputs 1000000 --target sets|npy|toml|argv|inplace   # tests/fuzz/operator_targets.py
    python -m tests.fuzz.run --minutes 20 --target artifact       # as many as fit
    python -m tests.fuzz.run --engine atheris --inputs 200000 --target parsers   # coverage-guided

Input ``i`` of a target is generated from ``(target, --seed, i)`` alone, so any finding can be
replayed with ``--replay I``. Inputs run in forked worker processes, a batch at a time: a worker
that dies (a crash in native code) is recorded with the input it was on and the run goes on
with the next one; an input that runs longer than ``--hang-seconds`` is a hang. One process
works at a time (one core). The summary goes to stdout as JSON, and with ``--out`` to a file;
the inputs of findings are written beside it.
"""

from __future__ import annotations

import argparse
import collections
import json
import mmap
import os
import pickle
import random
import resource
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path

from . import targets as T

BATCH = 5000  # inputs per worker process


class Hang(BaseException):
    """Raised by the per-input alarm; a BaseException so no ``except Exception`` in kb hides it."""


def make_target(name: str, folder: Path):
    """(generate(i) -> (label, bytes), run(label, bytes) -> outcome) for a target."""
    if name == "artifact":
        seeds = T.build_seed_artifacts(folder)
        reader = T.ArtifactReader(folder)
        reader(seeds[0])  # here, before any fork: every lazy import is done once
        return (lambda rng: ("artifact", T.mutate_artifact(rng, seeds))), (lambda label, data: reader(data))
    if name == "parsers":
        kinds = T.PARSER_KINDS

        def gen(rng):
            kind = kinds[rng.randrange(len(kinds))]
            return kind, T.generate_parser_input(rng, kind)

        for kind in kinds:
            T.parse_corpus_input(kind, T.generate_parser_input(random.Random(0), kind))
        return gen, T.parse_corpus_input
    if name == "http":
        seeds = T.build_seed_artifacts(folder)
        (folder / "http.kb").write_bytes(seeds[0])
        http = T.HttpRequests(folder / "http.kb")
        for request in T.HTTP_SEEDS:
            http(request)

        def gen(rng):
            if rng.random() < 0.3:
                return "json_body", T.mutate_bytes(rng, rng.choice([b'{"query": "x", "top_k": 3}', b'{"chunk_id": 0, "context": 2}', b'{"path": "a"}']), T.HTTP_TOKENS)
            return "raw", T.generate_http(rng)

        return gen, (lambda label, data: T.json_body_input(data) if label == "json_body" else http(data))
    if name in OPERATOR_TARGETS:
        return operator_target(name, folder)
    raise SystemExit(f"unknown target {name!r}; targets: {', '.join(TARGETS)}")


OPERATOR_TARGETS = ("sets", "npy", "toml", "argv", "inplace")  # tests/fuzz/operator_targets.py (issue 50)
TARGETS = ("artifact", "parsers", "http", *OPERATOR_TARGETS)


def operator_target(name: str, folder: Path):
    from . import operator_targets as O

    if name == "sets":
        seeds = O.build_set_seeds(folder)
        gen, run = (lambda rng: ("set", O.generate_set_file(rng, seeds))), O.SetFiles(folder)
    elif name == "npy":
        gen, run = (lambda rng: ("npy", O.generate_npy(rng))), O.NpyVectors(folder)
    elif name == "toml":
        gen, run = (lambda rng: ("toml", O.generate_toml(rng))), O.KbToml(folder)
    elif name == "argv":
        seed = T.build_seed_artifacts(folder)[0]
        (folder / "argv.kb").write_bytes(seed)
        gen, run = (lambda rng: ("argv", O.generate_argv(rng))), O.CommandLine(folder / "argv.kb")
    else:
        seeds = T.build_seed_artifacts(folder)
        gen, run = (lambda rng: ("inplace", O.generate_in_place(rng, seeds))), O.InPlace(folder, seeds)
    for i in range(3):  # here, before any fork: every lazy import is done once
        run(*gen(random.Random(i))[1:])
    return gen, (lambda label, data: run(data))


def rng_for(target: str, seed: int, i: int) -> random.Random:
    return random.Random(f"{target}:{seed}:{i}")


def _warm_imports():
    """Import everything the targets import lazily, so forked workers do not each pay for it."""
    import kb.builder.chunk  # noqa: F401
    import kb.builder.ingest  # noqa: F401
    import kb.formats.hnsw  # noqa: F401
    import kb.runtime.output  # noqa: F401
    import kb.runtime.requests  # noqa: F401
    import kb.runtime.serve  # noqa: F401
    import msgpack  # noqa: F401
    import pyroaring  # noqa: F401
    import usearch.index  # noqa: F401
    import yaml  # noqa: F401
    import zstandard  # noqa: F401


def _worker(gen, run, target, seed, lo, hi, hang_s, progress, out_fd):
    """Run inputs [lo, hi) and write a pickled report to ``out_fd``; exit without cleanup."""
    def on_alarm(signum, frame):
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    outcomes: collections.Counter = collections.Counter()
    labels: collections.Counter = collections.Counter()
    findings, hangs, slowest = [], [], 0.0
    for i in range(lo, hi):
        struct.pack_into("<q", progress, 0, i)
        label, data = gen(rng_for(target, seed, i))
        labels[label] += 1
        t = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, hang_s)
        try:
            outcomes[run(label, data)] += 1
        except Hang:
            hangs.append((i, label))
        except T.Finding as e:
            findings.append((i, label, str(e)[:500]))
        except BaseException as e:  # noqa: BLE001 - anything else out of a target is a finding too
            findings.append((i, label, f"{type(e).__name__} out of the target: {str(e)[:300]}"))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - t)
    report = {"outcomes": outcomes, "labels": labels, "findings": findings, "hangs": hangs, "slowest_s": slowest}
    os.write(out_fd, pickle.dumps(report))
    os._exit(0)


def fuzz(target: str, inputs: int | None, minutes: float | None, seed: int, hang_s: float, out: Path | None, start: int = 0) -> dict:
    folder = T.scratch_folder()
    gen, run = make_target(target, folder)
    _warm_imports()
    progress = mmap.mmap(-1, 8)
    totals: dict = {"outcomes": collections.Counter(), "labels": collections.Counter(), "findings": [], "hangs": [], "crashes": []}
    slowest, peak_rss_kb = 0.0, 0
    t0 = time.monotonic()
    i = start
    end = start + inputs if inputs else None
    while (end is None or i < end) and (minutes is None or time.monotonic() - t0 < minutes * 60):
        hi = i + BATCH if end is None else min(i + BATCH, end)
        struct.pack_into("<q", progress, 0, i)
        with tempfile.TemporaryFile() as result:
            pid = os.fork()
            if pid == 0:
                try:
                    _worker(gen, run, target, seed, i, hi, hang_s, progress, result.fileno())
                finally:
                    os._exit(70)
            _, status, usage = os.wait4(pid, 0)
            peak_rss_kb = max(peak_rss_kb, usage.ru_maxrss)
            result.seek(0)
            data = result.read()
        if os.WIFEXITED(status) and os.waitstatus_to_exitcode(status) == 0 and data:
            rep = pickle.loads(data)
            totals["outcomes"].update(rep["outcomes"])
            totals["labels"].update(rep["labels"])
            totals["findings"] += rep["findings"]
            for idx, label, what in rep["findings"]:  # as they come: a long run is worth reading before it ends
                print(f"finding at input {idx} ({label}): {what}", file=sys.stderr, flush=True)
            totals["hangs"] += rep["hangs"]
            slowest = max(slowest, rep["slowest_s"])
            i = hi
        else:  # the worker died on input `at`: a crash; carry on after it
            at = struct.unpack_from("<q", progress, 0)[0]
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.waitstatus_to_exitcode(status)}"
            totals["crashes"].append((at, how))
            totals["outcomes"]["crash"] += 1
            i = at + 1
            print(f"crash at input {at}: {how}", file=sys.stderr, flush=True)
        done = i - start
        rate = done / max(time.monotonic() - t0, 1e-9)
        print(f"{target}: {done} inputs, {rate:.0f}/s, {len(totals['findings'])} findings, {len(totals['hangs'])} hangs, {len(totals['crashes'])} crashes",
              file=sys.stderr, flush=True)
    seconds = time.monotonic() - t0
    summary = {
        "target": target,
        "seed": seed,
        "first_input": start,
        "inputs": i - start,
        "seconds": round(seconds, 1),
        "inputs_per_second": round((i - start) / max(seconds, 1e-9), 1),
        "by_kind": dict(sorted(totals["labels"].items())),
        "outcomes": dict(totals["outcomes"].most_common()),
        "findings": len(totals["findings"]),
        "hangs": len(totals["hangs"]),
        "crashes": len(totals["crashes"]),
        "slowest_input_s": round(slowest, 3),
        "peak_worker_rss_mib": round(peak_rss_kb / 1024, 1),
        "first_findings": totals["findings"][:20],
        "hang_inputs": totals["hangs"][:20],
        "crash_inputs": totals["crashes"][:20],
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        for n, (idx, *_rest) in enumerate(totals["findings"][:20] + totals["hangs"][:20] + totals["crashes"][:20]):
            label, data = gen(rng_for(target, seed, idx))
            (out.parent / f"{out.stem}-input-{idx}.{label}.bin").write_bytes(data)
    return summary


class _ProviderRandom(random.Random):
    """A random.Random whose every draw comes from libFuzzer's input (atheris), so the same
    structure-aware generators become coverage-guided: libFuzzer mutates the choices."""

    def __init__(self, data: bytes):
        import atheris

        self._fdp = atheris.FuzzedDataProvider(data)
        super().__init__(0)

    def random(self) -> float:
        return self._fdp.ConsumeProbability()

    def getrandbits(self, k: int) -> int:
        return self._fdp.ConsumeIntInRange(0, (1 << min(k, 64)) - 1)


def fuzz_atheris(target: str, runs: int, hang_s: float, extra: list[str]) -> None:
    """Coverage-guided: libFuzzer (atheris) drives the generators' choices. A finding stops the
    run with libFuzzer's crash report (its input is saved as crash-*); ``runs`` inputs at most."""
    import atheris

    folder = T.scratch_folder()
    gen, run = make_target(target, folder)
    _warm_imports()
    atheris.instrument_all()

    def one(data: bytes) -> None:
        label, item = gen(_ProviderRandom(data))
        run(label, item)  # Finding propagates: libFuzzer reports it and saves the input

    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-timeout={int(hang_s)}", "-rss_limit_mb=4096", "-print_final_stats=1", *extra], one)
    atheris.Fuzz()


def replay(target: str, seed: int, index: int) -> int:
    """Run one input in this process and show what happens (a traceback, if any)."""
    folder = T.scratch_folder()
    gen, run = make_target(target, folder)
    label, data = gen(rng_for(target, seed, index))
    print(f"input {index} ({label}, {len(data)} bytes): {data[:300]!r}", file=sys.stderr)
    try:
        print(run(label, data))
    except T.Finding as e:
        import traceback

        traceback.print_exception(e.__cause__ or e)
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="artifact")
    ap.add_argument("--inputs", type=int, help="inputs to run (default: 100000 unless --minutes)")
    ap.add_argument("--minutes", type=float, help="stop after this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first input index (to continue a run)")
    ap.add_argument("--hang-seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, help="write the JSON summary here (and the inputs of findings beside it)")
    ap.add_argument("--replay", type=int, metavar="I", help="run input I alone, with its traceback")
    ap.add_argument("--engine", choices=("seeded", "atheris"), default="seeded",
                    help="seeded: generated inputs in forked workers (default); atheris: coverage-guided by libFuzzer (pip install atheris)")
    a, extra = ap.parse_known_args(argv)
    if a.replay is not None:
        return replay(a.target, a.seed, a.replay)
    if a.engine == "atheris":
        fuzz_atheris(a.target, a.inputs or 100_000, a.hang_seconds, extra)
        return 0
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    inputs = a.inputs if a.inputs or a.minutes else 100_000
    # a runaway allocation is a finding (MemoryError), not a machine out of memory
    resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, resource.RLIM_INFINITY))
    summary = fuzz(a.target, inputs, a.minutes, a.seed, a.hang_seconds, a.out, a.start)
    print(json.dumps({k: v for k, v in summary.items() if not k.endswith("_inputs") and k != "first_findings"}, indent=2, default=str))
    bad = summary["findings"] + summary["hangs"] + summary["crashes"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
