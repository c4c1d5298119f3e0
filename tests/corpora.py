"""The committed corpora and golden artifacts the tests use, and the stand-in build of a corpus.
(A helper module: test modules and conftest.py import it; they never import each other.)"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import fakes
from kb.builder.build import build
from kb.builder.config import load_config

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "kb-sample"
TINY = Path(__file__).resolve().parent / "data" / "tiny"
GOLDEN = Path(__file__).resolve().parent / "golden"
# `kb` in a subprocess, able to load artifacts built with the stand-in embedder
KB_CLI = SERVE_CLI = (sys.executable, str(Path(__file__).resolve().parent / "fakes.py"))

fakes.register()


def load_script(name: str, path: Path):
    """The script at ``path`` (bench/, packaging/: not in the package) imported as module ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def artifact_parts(path: Path) -> tuple[int, list]:
    """(format version, sections) of an artifact file: SectionData a test changes and writes back
    with ``rewrite`` to forge a variant."""
    from kb.formats import artifact as A

    buf = Path(path).read_bytes()
    version, secs = A.validate(memoryview(buf), str(path))
    return version, [A.SectionData(s.name, buf[s.offset : s.offset + s.length], s.codec, s.raw_length) for s in secs.values()]


def rewrite(path: Path, sections: list, version: int | None = None) -> None:
    """Write ``sections`` to ``path`` with every checksum recomputed, as an attacker would
    (``version``: the header's; the current format's by default)."""
    from kb.formats import artifact as A

    Path(path).write_bytes(b"".join(A.serialize(sections, A.FORMAT_VERSION if version is None else version)))


def build_hash(corpus: Path, out: Path, **kw):
    """Build ``corpus`` with its kb.toml (if any), the hash stand-in embedder and no reranker."""
    cfg_path = corpus / "kb.toml" if (corpus / "kb.toml").is_file() else None
    cfg = replace(load_config(cfg_path), embedding_model=kw.pop("embedder", "hash"), reranker=kw.pop("reranker", "none"))
    return build([corpus], out, cfg, **kw)


def build_files(folder: Path, files: dict[str, str], out: Path) -> Path:
    """Write ``files`` (relative path: text) into a new ``folder``, build it with build_hash into
    ``out``; return ``out``."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    build_hash(folder, out)
    return out


def crafted_root_artifact(src: Path, out: Path) -> Path:
    """``src`` with a manifest (checksums recomputed, as an attacker would) whose corpus root is /
    and whose sources name host files: one of /etc/hostname's size (/etc/passwd's where there is
    none), an absolute path and one that climbs out with .. (issue 50 C)."""
    import os

    from kb.formats import layout as L
    from kb.formats import records as R
    from kb.runtime.index import Index

    version, secs = artifact_parts(src)
    with Index(src) as ix:
        m = ix.manifest()
    host = "etc/hostname" if os.path.isfile("/etc/hostname") else "etc/passwd"
    sources = (R.Source(host, os.stat("/" + host).st_size, 1, "0" * 64), R.Source("/etc/shadow", 1, 1, "0" * 64), R.Source("../../etc/group", 1, 1, "0" * 64))
    rewrite(out, [R.manifest_section(m._replace(root="/", sources=sources)) if s.name == L.MANIFEST else s for s in secs], version)
    return out

