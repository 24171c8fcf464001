"""A record kind is declared in one place (hpc_imagenet.harness.core.registry): a toy kind declared here is validated,
carries its units, is listed among the kinds and drawn by its own section in a tag's report; a second,
different declaration of a name or a unit is an error."""
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

import pytest

from hpc_imagenet.harness.core import records, registry
from hpc_imagenet.harness.core.kinds import Req, Text
from hpc_imagenet.harness.core.registry import DeclarationError, Kind, declare
from hpc_imagenet.harness.report import cluster


@dataclass(frozen=True)
class ToyPoint:
    knob: Text = None


@dataclass(frozen=True)
class ToyMetrics:
    widgets_per_s: Req = None
    images_per_s: Optional[float] = None


def toy_section(recs, page) -> str:
    toys = records.by_kind(recs, "toy")
    return f"## Toys\n\n{len(toys)} toy point(s), widgets/s {toys[0].metrics.widgets_per_s}\n" if toys else ""


@pytest.fixture
def toy():
    """The toy kind, declared for one test and forgotten after it (the registry is the process's)."""
    kind = declare(Kind("toy", ToyPoint, ToyMetrics, units={"widgets_per_s": "widgets/s"},
                        section=f"{__name__}:toy_section"))
    yield kind
    registry.KINDS.pop("toy")
    registry.UNITS.pop("widgets_per_s")


def test_one_declaration_puts_a_kind_in_every_list_the_units_and_the_report(toy, tmp_path):
    assert "toy" in registry.names() and "toy" in registry.drawn() and toy.section in registry.sections()
    rec = records.make_record("toy", "s1", {"knob": "a"}, {"widgets_per_s": 7, "images_per_s": 3.0},
                              {"hostname": "node1"})
    assert rec["units"] == {"widgets_per_s": "widgets/s", "images_per_s": "images/s"}
    assert records.validate(rec) is None
    assert "lacks numeric metric(s) widgets_per_s" in records.validate(dict(rec, metrics={}))
    path = tmp_path / "toyland.jsonl"
    records.append(path, rec)
    readme, top = cluster.build_tag("toyland", path, tmp_path / "report")
    text = readme.read_text()
    assert "## Toys\n\n1 toy point(s), widgets/s 7\n" in text and top["kinds"] == ["toy"]
    assert "knob=a" not in text  # drawn by its section, so not listed among the kinds no section draws


def test_a_kind_without_a_section_is_listed_as_recorded(tmp_path):
    declare(Kind("plain_toy", ToyPoint, ToyMetrics))
    try:
        assert "plain_toy" in registry.names() and "plain_toy" not in registry.drawn()
        path = tmp_path / "t.jsonl"
        records.append(path, records.make_record("plain_toy", "s1", {"knob": "b"}, {"widgets_per_s": 2}, {}))
        text = cluster.build_tag("t", path, tmp_path / "report")[0].read_text()
        assert "| plain_toy | knob=b | widgets_per_s=2 | t.jsonl:1 |" in text
    finally:
        registry.KINDS.pop("plain_toy")


def test_a_name_or_a_unit_declared_twice_differently_is_an_error(toy):
    assert declare(toy) is toy  # the same declaration again (a module imported twice) changes nothing
    with pytest.raises(DeclarationError, match="'toy' is declared twice"):
        declare(Kind("toy", ToyPoint, ToyPoint))
    with pytest.raises(DeclarationError, match="step_time_ms: 'ms' vs 's'"):
        declare(Kind("toy2", ToyPoint, ToyMetrics, units={"step_time_ms": "s"}))
    with pytest.raises(DeclarationError, match="is not 'module:function'"):
        declare(Kind("toy2", ToyPoint, ToyMetrics, section="toy_section"))
    assert "toy2" not in registry.names()


def test_a_study_declares_its_units_with_its_kinds():
    """The race's metric names get their units from its own declaration, not from the harness's table."""
    from studies.fashion_mnist_race import kinds as race
    assert registry.KINDS["time_to_accuracy"].units == registry.KINDS["tta_tuning"].units == race.UNITS
    rec = records.make_record("time_to_accuracy", "s1", {"program": "ours"},
                              {"time_to_target_s": 60.0, "core_s": 90.0, "wall_s": 70.0}, {})
    assert rec["units"]["time_to_target_s"] == "s (wall, evaluation included)" and rec["units"]["wall_s"] == "s"
    harness = subprocess.run([sys.executable, "-c", "from hpc_imagenet.harness.core import kinds, registry; "
                              "print(sorted(set(registry.UNITS) & {" + ", ".join(map(repr, race.UNITS)) + "}))"],
                             capture_output=True, text=True, check=True).stdout
    assert harness == "[]\n"  # the harness alone knows none of them
