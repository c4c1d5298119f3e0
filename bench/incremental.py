"""Incremental kb-build: a full build, then rebuilds that reuse the previous artifact after one
edited file, ten added files and one deleted file, each compared byte for byte with a full
build of the same corpus state.

    nice -n 10 python bench/incremental.py --hugo ../shared/data/hugo-docs/content/en \
        [--scifact ../shared/data/scifact/corpus.jsonl] [--limit N] --json

Works on a copy of each corpus in a temporary folder (the originals are never touched), and runs
kb-build as a pipeline would, one process per build (``-o NEW --reuse PREVIOUS``; the full builds
``--no-reuse``), so each wall time includes starting Python and loading the model. The changes
are deterministic: the file (or JSON Lines record) in the middle of the sorted corpus gets a
paragraph appended; ten new ones are made from ten others with their paragraphs in reverse order
(new text, so their chunks are embedded); then the first file (record) is removed. Prints a JSON
object (``--json``) or a markdown table; the machine and load averages are recorded with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine  # noqa: E402

KB_BUILD = [str(Path(sys.executable).with_name("kb-build"))]
EDIT = "\n\n## Benchmark note\n\nThis page was edited to time an incremental build of the knowledge base.\n"


def kb_build(args: list[str]) -> tuple[float, dict]:
    t = time.perf_counter()
    done = subprocess.run([*KB_BUILD, *args, "--json", "-q", "--no-reranker"], capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"kb-build {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return seconds, json.loads(done.stdout)


def reversed_paragraphs(text: str) -> str:
    return "\n\n".join(reversed(text.split("\n\n")))


class Folder:
    """A corpus folder of markdown files, copied."""

    def __init__(self, src: Path, work: Path):
        self.root = work / "corpus"
        shutil.copytree(src, self.root)
        for p in (self.root, *self.root.rglob("*")):  # the copy is ours to change, whatever the source's modes
            p.chmod(p.stat().st_mode | 0o200)
        self.files = sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix in (".md", ".markdown"))

    def args(self) -> list[str]:
        return [str(self.root)]

    def edit(self) -> None:
        f = self.files[len(self.files) // 2]
        f.write_text(f.read_text(encoding="utf-8") + EDIT, encoding="utf-8")

    def add(self, n: int = 10) -> None:
        step = max(1, len(self.files) // n)
        for i, f in enumerate(self.files[::step][:n]):
            text = f.read_text(encoding="utf-8").split("---", 2)[-1]  # without front matter
            (self.root / f"bench-added-{i}.md").write_text(f"# Added page {i}\n\n{reversed_paragraphs(text)}\n", encoding="utf-8")

    def delete(self) -> None:
        self.files[0].unlink()


class JsonLines:
    """A JSON Lines corpus, copied (its first ``limit`` records)."""

    def __init__(self, src: Path, work: Path, limit: int | None):
        self.path = work / "corpus.jsonl"
        lines = [x for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
        self.records = [json.loads(x) for x in lines[:limit]]
        self._write()

    def _write(self) -> None:
        self.path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.records), encoding="utf-8")

    def args(self) -> list[str]:
        return ["--jsonl", str(self.path)]

    def edit(self) -> None:
        r = self.records[len(self.records) // 2]
        r["text"] = r["text"] + EDIT
        self._write()

    def add(self, n: int = 10) -> None:
        step = max(1, len(self.records) // n)
        for i, r in enumerate(self.records[::step][:n]):
            sentences = r["text"].split(". ")
            self.records.append({"_id": f"bench-added-{i}", "title": f"Added record {i}", "text": ". ".join(reversed(sentences))})
        self._write()

    def delete(self) -> None:
        del self.records[0]
        self._write()


def run(name: str, corpus, work: Path) -> dict:
    prev = work / "state0.kb"
    seconds, rep = kb_build([*corpus.args(), "-o", str(prev), "--no-reuse"])
    out = {"corpus": name, "documents": rep["documents"], "chunks": rep["chunks"], "full_seconds": round(seconds, 2), "full_stage_seconds": {k: round(v, 2) for k, v in rep["seconds"].items()}, "rebuilds": []}
    print(f"{name}: full build {seconds:.1f} s, {rep['chunks']} chunks", file=sys.stderr)
    for i, change in enumerate(("edit one file", "add ten files", "delete one file"), 1):
        getattr(corpus, change.split()[0])()
        new, full = work / f"state{i}.kb", work / f"state{i}-full.kb"
        seconds, rep = kb_build([*corpus.args(), "-o", str(new), "--reuse", str(prev)])
        full_seconds, full_rep = kb_build([*corpus.args(), "-o", str(full), "--no-reuse"])
        same = new.read_bytes() == full.read_bytes()
        out["rebuilds"].append({
            "change": change, "seconds": round(seconds, 2), "full_seconds": round(full_seconds, 2), "share_of_full": round(seconds / full_seconds, 3),
            "reused_chunks": rep["reused_chunks"], "embedded_chunks": rep["embedded_chunks"], "chunks": rep["chunks"],
            "reuse_source": rep["reuse_source"] and Path(rep["reuse_source"]).name, "identical_to_full_build": same,
            "stage_seconds": {k: round(v, 2) for k, v in rep["seconds"].items()},
        })  # fmt: skip
        print(f"{name}: {change}: {seconds:.1f} s ({rep['reused_chunks']} reused, {rep['embedded_chunks']} embedded), full {full_seconds:.1f} s, identical {same}", file=sys.stderr)
        full.unlink()
        prev.unlink()
        prev = new
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hugo", type=Path, help="a folder of markdown (the Hugo docs' content/en)")
    ap.add_argument("--scifact", type=Path, help="a JSON Lines corpus (SciFact's corpus.jsonl)")
    ap.add_argument("--limit", type=int, help="only the first N records of --scifact")
    ap.add_argument("--json", action="store_true", help="print JSON (default: a markdown table)")
    a = ap.parse_args()
    if not a.hugo and not a.scifact:
        ap.error("give --hugo and/or --scifact")
    report = {"machine": machine(), "load_average_start": [round(x, 2) for x in os.getloadavg()], "corpora": []}
    for name, make in (("hugo", a.hugo and (lambda w: Folder(a.hugo, w))), ("scifact", a.scifact and (lambda w: JsonLines(a.scifact, w, a.limit)))):
        if make:
            with tempfile.TemporaryDirectory(prefix=f"kb-incr-{name}-") as work:
                report["corpora"].append(run(name if name != "scifact" or not a.limit else f"scifact (first {a.limit})", make(Path(work)), Path(work)))
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(report, indent=2))
        return
    print(f"Machine: {report['machine']}; load average {report['load_average_start']} at the start, {report['load_average_end']} at the end\n")
    print("| corpus | change | rebuild s | full build s | share | reused | embedded | identical |\n|---|---|---|---|---|---|---|---|")
    for c in report["corpora"]:
        for r in c["rebuilds"]:
            print(f"| {c['corpus']} ({c['chunks']} chunks, first build {c['full_seconds']} s) | {r['change']} | {r['seconds']} | {r['full_seconds']} | {r['share_of_full']:.1%} | {r['reused_chunks']} | {r['embedded_chunks']} | {r['identical_to_full_build']} |")


if __name__ == "__main__":
    main()
