"""What kb-build and kb share besides the artifact format: error bases and exit codes
(errors.py), click's one-line usage errors (usage.py), typed settings (settings.py), a search's and a get's
inputs (options.py), and where kb keeps its caches (``cache_root``, here: a one-shot search's stale
check reads it without importing the model converter, models/convert.py, and its tempfile and shutil)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """kb's cache folder: ``cache_dir`` when given, else $KB_CACHE_DIR, else ~/.cache/kb (read
    at each call, never at import)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("KB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kb"
