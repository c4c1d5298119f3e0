"""What creating kb's records costs a one-shot process: runs a ``kb`` command in this process
with Python's dataclass and NamedTuple creation timed, and prints each record class the command's
imports created (ms, module.Class, kind) and the total; other libraries' records are left out. Python 3.11 builds a frozen dataclass's
methods from source text, one exec each (~0.7 ms a class); a NamedTuple execs one small
``__new__`` (~0.15 ms); a plain class costs next to nothing and is not listed. kb's records are
created at import, so every one-shot command pays for the records its modules define.

    python bench/startup_records.py search "how to configure taxonomies" -i bench/out/hugo.kb --mode bm25 --no-stale-check --json

The command's own output is discarded; the report goes to stdout when the command exits.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import sys
import time


def main(argv: list[str]) -> None:
    made: list[tuple[str, float]] = []
    process, namedtuple = dataclasses._process_class, collections.namedtuple  # what every @dataclass and NamedTuple runs once per class

    def timed(make, name_of, kind):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return make(*a, **k)
            finally:
                made.append((f"{name_of(*a, **k)}  {kind}", (time.perf_counter() - t) * 1000))

        return run

    dataclasses._process_class = timed(process, lambda cls, *a, **k: f"{cls.__module__}.{cls.__qualname__}", "dataclass")
    collections.namedtuple = timed(namedtuple, lambda name, *a, module=None, **k: f"{module}.{name}", "NamedTuple")
    sys.argv = ["kb", *argv]
    try:
        from kb.runtime.cli import main as kb

        with contextlib.redirect_stdout(io.StringIO()):
            try:
                kb()
            except SystemExit:
                pass
    finally:
        dataclasses._process_class, collections.namedtuple = process, namedtuple
    made = [(name, ms) for name, ms in made if name.startswith("kb.")]
    for name, ms in made:
        print(f"{ms:6.2f}  {name}")
    print(f"{sum(ms for _, ms in made):6.2f}  total, {len(made)} classes, {sum(name.endswith('dataclass') for name, _ in made)} of them dataclasses")


if __name__ == "__main__":
    main(sys.argv[1:])
