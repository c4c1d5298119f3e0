"""The architecture's boundaries, checked on the source: kb-build and kb share only formats/,
common/ and models/; neither imports the other; common/ imports neither formats/ nor models/,
formats/ none of builder/, runtime/ and models/; no two kb modules import each other, even
lazily."""

import ast
from pathlib import Path

import pytest

from corpora import REPO

PACKAGES = {"common": "kb.common", "formats": "kb.formats", "models": "kb.models", "builder": "kb.builder", "runtime": "kb.runtime"}


def _modules() -> dict[str, Path]:
    return {f"{pkg}.{p.stem}".removesuffix(".__init__"): p for folder, pkg in PACKAGES.items() for p in sorted((REPO / folder).glob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every kb module ``name`` imports, at module level or inside a function."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    mods = _modules()
    return {m for m in out if m in mods and m != name}


GRAPH = {name: _imports(name, path) for name, path in _modules().items()}


@pytest.mark.parametrize("side, other", [
    ("kb.runtime", "kb.builder"), ("kb.builder", "kb.runtime"),
    ("kb.formats", "kb.runtime"), ("kb.formats", "kb.builder"), ("kb.formats", "kb.models"),
    ("kb.common", "kb.runtime"), ("kb.common", "kb.builder"), ("kb.common", "kb.formats"), ("kb.common", "kb.models"),
    ("kb.models", "kb.runtime"), ("kb.models", "kb.builder"),
])
def test_one_side_never_imports_the_other(side, other):
    bad = sorted(f"{m} -> {i}" for m, deps in GRAPH.items() if m.startswith(side + ".") for i in deps if i.startswith(other + "."))
    assert bad == []


def test_there_is_no_import_cycle():
    cycles = []

    def visit(m, path):
        for d in sorted(GRAPH[m]):
            if d in path:
                cycles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in done:
                visit(d, path + [d])
        done.add(m)

    done: set[str] = set()
    for m in sorted(GRAPH):
        if m not in done:
            visit(m, [m])
    assert cycles == []


def test_the_graph_sees_the_imports():
    assert "kb.formats.artifact" in GRAPH["kb.runtime.index"] and "kb.common.errors" in GRAPH["kb.formats.artifact"]
