"""Compare two kb outputs (JSON, JSON Lines or text) for the smoke test; exit 1 on a difference.

    python packaging/jsoncmp.py REFERENCE FROZEN

Ignored, because they legitimately differ between two runs of the same program: ``timings_ms``
(``--explain``), ``latency_ms`` and ``quality_call_ms`` (``kb bench``) wherever they occur. Floats must agree to 1e-9
(both programs run the same libraries on the same machine, so they are normally bit-identical).
Non-JSON outputs (human text) must be byte-identical.
"""

from __future__ import annotations

import json
import math
import sys

IGNORED_KEYS = {"timings_ms", "latency_ms", "quality_call_ms"}
TOL = 1e-9


def load(path: str):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return "json", json.loads(text)
    except ValueError:
        pass
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        return "jsonl", [json.loads(ln) for ln in lines] if lines else None
    except ValueError:
        return "text", text


def diff(a, b, where="$"):
    if isinstance(a, dict) and isinstance(b, dict):
        ka, kb = set(a) - IGNORED_KEYS, set(b) - IGNORED_KEYS
        if ka != kb:
            return f"{where}: keys differ: only in reference {sorted(ka - kb)}, only in frozen {sorted(kb - ka)}"
        for k in sorted(ka):
            d = diff(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items in reference, {len(b)} in frozen"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=TOL, abs_tol=TOL):
            return None
        return f"{where}: {a!r} != {b!r}"
    return None if a == b else f"{where}: {a!r} != {b!r}"


def main(argv: list[str]) -> int:
    (ka, a), (kb_, b) = load(argv[1]), load(argv[2])
    if ka != kb_:
        print(f"output kinds differ: reference {ka}, frozen {kb_}")
        return 1
    d = diff(a, b) if ka != "text" else (None if a == b else "text output differs")
    if d:
        print(d)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
