"""bench/RESULTS.md (the current figures) and the notes under bench/notes/ (studies) are shared by
several bench scripts: each owns one region of one file, delimited by ``<!-- BEGIN name -->`` /
``<!-- END name -->``, and rewrites only that region. A region that is missing (or a file that is) is
appended, never an error, so a script keeps working when its region is moved or removed."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = ", load average %.2f %.2f %.2f at the start" % os.getloadavg()
    except OSError:
        load = ""
    return f"{cpu}, {os.cpu_count()} logical cores, no GPU, Python {platform.python_version()}, {platform.system()} {platform.release()}{load}"


def update_region(path: Path, name: str, body: str) -> None:
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else f"# {path.stem}\n"
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    rx = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = rx.sub(lambda _: block, text) if rx.search(text) else text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")
