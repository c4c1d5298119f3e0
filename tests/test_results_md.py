"""bench/RESULTS.md stays one page of current figures, and the bench scripts' region writer never fails
because a region moved (bench/results_md.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from results_md import update_region  # noqa: E402


def test_results_is_one_page_with_balanced_regions_and_fusion_reserved():
    text = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    begins, ends = re.findall(r"<!-- BEGIN (\S+) -->", text), re.findall(r"<!-- END (\S+) -->", text)
    assert begins == ends and len(set(begins)) == len(begins) and "fusion" in begins


def test_every_note_the_page_links_exists():
    text = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((notes/[^)]+\.md)\)", text))
    assert linked == {f"notes/{p.name}" for p in (BENCH / "notes").glob("*.md")}


def test_a_missing_region_or_file_is_appended_and_a_present_one_rewritten(tmp_path):
    note = tmp_path / "note.md"
    update_region(note, "a", "one")
    update_region(note, "b", "two")
    update_region(note, "a", "three")
    assert note.read_text() == "# note\n\n<!-- BEGIN a -->\nthree\n<!-- END a -->\n\n<!-- BEGIN b -->\ntwo\n<!-- END b -->\n"
