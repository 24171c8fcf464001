"""The report's words: blocks of markdown in a folder of text files, one file per section module.

A folder's :class:`Words` reads ``FILE.md`` there, each block under a line ``<!-- name -->``, and fills a
block's ``{fields}`` (``str.format``): ``words("cluster.summary", tag=...)``. The harness's sections read
``hpc_imagenet/harness/report/text`` (:data:`hpc_imagenet.harness.report.common.WORDS`); a study keeps its own folder
and its own
:class:`Words`, so no two folders compete for a file name. Table headers and short labels are not here:
they are written in code, beside the section that shows them.

Why not a template engine (Jinja): the sections build their tables and lists in Python and need only
named paragraphs with a few values in them; ``str.format`` does that and keeps the report torch-free and
dependency-light.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

WHOLE_LINE = ("#", "![", "|", "{", "<")  # a text line starting so is a line of its own in the report
NEW_LINE = ("- ", *WHOLE_LINE)  # ... and one starting so is not the rest of the paragraph above it


class Words:
    """The words of the text files in FOLDER."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._read: Dict[str, Dict[str, str]] = {}  # each file parsed once

    def has(self, file: str) -> bool:
        return (self.folder / f"{file}.md").exists()

    def __call__(self, name: str, /, **values: object) -> str:
        """The block NAME ("file.block": block of FILE.md) with VALUES in its {fields}."""
        file, block = name.split(".")
        if file not in self._read:
            self._read[file] = self.blocks(file)
        return self._read[file][block].format(**values)

    def blocks(self, file: str) -> Dict[str, str]:
        """The blocks of FILE.md, each under a line `<!-- name -->`. The lines of a paragraph join with a space
        (so the file wraps, the report has one line per paragraph) unless NEW_LINE or WHOLE_LINE says
        otherwise; a block's trailing blank lines are dropped."""
        blocks: Dict[str, List[str]] = {}
        lines: List[str] = []
        for line in (self.folder / f"{file}.md").read_text().splitlines():
            if line.startswith("<!-- ") and line.endswith(" -->"):
                if line[5:-4] in blocks:  # else the second would silently run on from the first
                    raise ValueError(f"{self.folder / file}.md: the block {line} is written twice; rename one")
                lines = blocks[line[5:-4]] = []
            elif lines and lines[-1] and line and not (lines[-1].startswith(WHOLE_LINE) or line.startswith(NEW_LINE)):
                lines[-1] += " " + line
            else:
                lines.append(line)
        return {name: "\n".join(b).rstrip("\n") for name, b in blocks.items()}
