"""What creating kb's dataclasses costs a one-shot process: runs a ``kb`` command in this process
with Python's dataclass processing timed, and prints each class the command's imports created
(module.Class, ms) and the total. Python 3.11 builds a frozen dataclass's methods from source
text, one exec each; kb's records are created at import, so every one-shot command pays for the
records its modules define.

    python bench/startup_records.py search "how to configure taxonomies" -i bench/out/hugo.kb --mode bm25 --no-stale-check --json

The command's own output is discarded; the report goes to stdout when the command exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import time


def main(argv: list[str]) -> None:
    made: list[tuple[str, float]] = []
    process = dataclasses._process_class  # the step every @dataclass runs once per class

    def timed(cls, *a, **k):
        t = time.perf_counter()
        try:
            return process(cls, *a, **k)
        finally:
            made.append((f"{cls.__module__}.{cls.__qualname__}", (time.perf_counter() - t) * 1000))

    dataclasses._process_class = timed
    sys.argv = ["kb", *argv]
    try:
        from kb.runtime.cli import main as kb

        with contextlib.redirect_stdout(io.StringIO()):
            try:
                kb()
            except SystemExit:
                pass
    finally:
        dataclasses._process_class = process
    for name, ms in made:
        print(f"{ms:6.2f}  {name}")
    print(f"{sum(ms for _, ms in made):6.2f}  total, {len(made)} classes")


if __name__ == "__main__":
    main(sys.argv[1:])
