"""MkDocs hook: serve the committed pictures of the premature-decrement race
(counterexamples/pictures/*.svg, outside docs/) as pictures/*.svg in the
site, so pages show them without a second copy in the repository.
tests/test_views_graph.py checks that the committed pictures are current."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

PICTURES = Path(__file__).resolve().parents[2] / "counterexamples" / "pictures"


def on_files(files, config):
    for svg in sorted(PICTURES.glob("*.svg")):
        files.append(File.generated(config, f"pictures/{svg.name}", abs_src_path=str(svg)))
    return files
