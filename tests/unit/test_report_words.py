"""The report's words: each folder read by its own Words, table headers in code with their {fields}, and a
text file name given by two folders to prose() is an error, not a silent choice."""
import pytest

from hpc_imagenet.results.report import common
from hpc_imagenet.results.report.common import ReportError, add_words, md_table, prose
from hpc_imagenet.results.report.words import Words


def test_each_folder_reads_its_own_words(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, said in ((a, "from a"), (b, "from b")):
        folder.mkdir()
        (folder / "cluster.md").write_text(f"<!-- summary -->\n{said}: {{n}}\nwrapped\n\n- a list item\n")
    assert Words(a)("cluster.summary", n=1) == "from a: 1 wrapped\n\n- a list item"
    assert Words(b)("cluster.summary", n=2).startswith("from b: 2")
    assert common.WORDS.folder.name == "text" and "{tag}" in common.WORDS.blocks("cluster")["head"]  # the harness's


def test_a_header_in_code_takes_its_fields():
    table = md_table(("setup", ">= {rate:g} images/s"), [["a", 1.5]], rate=2000.0)
    assert table == "| setup | >= 2000 images/s |\n|---|---|\n| a | 1.5 |\n"


def test_a_clash_of_words_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "_ADDED", [])
    (tmp_path / "cluster.md").write_text("<!-- summary -->\nnot the harness's\n")
    with pytest.raises(ReportError, match="the words cluster in .* clash"):
        add_words(tmp_path)
    assert common._ADDED == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my_study.md").write_text("<!-- head -->\n# mine\n")
    add_words(mine)
    assert prose("my_study.head") == "# mine"
