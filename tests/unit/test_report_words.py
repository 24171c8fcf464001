"""The report's words: each folder read by its own Words (the harness's, each study's), a block written twice in
one file an error, and table headers in code with their {fields}, never a block of a text file."""
import re
from pathlib import Path

import pytest

from hpc_imagenet.harness.report import common
from hpc_imagenet.harness.report.common import md_table
from hpc_imagenet.harness.report.words import Words
from studies import benches, fashion_mnist_race, published_model

REPO = Path(__file__).resolve().parents[2]


def test_each_folder_reads_its_own_words(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, said in ((a, "from a"), (b, "from b")):
        folder.mkdir()
        (folder / "cluster.md").write_text(f"<!-- summary -->\n{said}: {{n}}\nwrapped\n\n- a list item\n")
    assert Words(a)("cluster.summary", n=1) == "from a: 1 wrapped\n\n- a list item"
    assert Words(b)("cluster.summary", n=2).startswith("from b: 2")
    assert common.WORDS.folder.name == "text" and "{tag}" in common.WORDS.blocks("cluster")["head"]  # the harness's


def test_every_study_reads_its_own_folder():
    for study in (benches, fashion_mnist_race, published_model):
        assert study.words.folder == Path(study.__file__).parent / "text"
    assert fashion_mnist_race.words("time_to_accuracy.head").startswith("# The race: time to accuracy")


def test_a_block_written_twice_is_an_error(tmp_path):
    (tmp_path / "mine.md").write_text("<!-- head -->\n# one\n\n<!-- head -->\n# two\n")
    with pytest.raises(ValueError, match="mine.md: the block <!-- head --> is written twice"):
        Words(tmp_path)("mine.head")


def test_a_header_in_code_takes_its_fields():
    table = md_table(("setup", ">= {rate:g} images/s"), [["a", 1.5]], rate=2000.0)
    assert table == "| setup | >= 2000 images/s |\n|---|---|\n| a | 1.5 |\n"
    with pytest.raises(TypeError, match="as a tuple written beside the section"):
        md_table("time_to_accuracy.runs_columns", [["a"]])


def test_no_text_file_holds_a_table_header():
    header_only = re.compile(r"<!-- (\S+) -->\n\|[^\n]*\|\n*(?=<!--|\Z)")
    folders = [common.TEXT, *sorted(REPO.glob("studies/*/text"))]
    found = [f"{path.relative_to(REPO)}: {m[1]}" for folder in folders for path in sorted(folder.glob("*.md"))
             for m in header_only.finditer(path.read_text())]
    assert len(folders) >= 4 and found == []
