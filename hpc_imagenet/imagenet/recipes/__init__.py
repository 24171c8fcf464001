"""Named, cited training recipes as data: one TOML file per recipe in this folder, ``--recipe NAME``.

A recipe file holds what a run sets (``[values]``, keyed by setting names of
:mod:`hpc_imagenet.imagenet.config.sections`), values that depend on the global batch (``[[by_global_batch]]``
rows, each from a published run), where every value comes from (``[[source]]``), the published
top-1 and the global batches it was validated at. ``--config FILE`` reads a file of the same
format (only ``[values]`` and ``[[by_global_batch]]`` matter there). This module only reads the
files; :func:`hpc_imagenet.imagenet.config.validate.check_recipe` checks their keys and values against the
settings, and the parser applies them: defaults, then the recipe, then ``--config``, then flags.
The format is in README.md beside the files; adding a recipe is adding a file.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
# The top-level keys a recipe file may have; anything else is a typo that validate names.
FILE_KEYS = ("top1", "published_batch", "validated_batches", "note", "source", "values", "by_global_batch")
ROW_KEYS = ("global_batch", "source")  # a by_global_batch row's own keys; the rest are settings


class RecipeError(ValueError):
    """A recipe or --config file that cannot be read; the message is one line naming the file."""


@dataclass(frozen=True)
class Source:
    """Where values come from: the work, its address, and the place in it (section, file, line)."""
    cites: str
    url: str
    where: str


@dataclass(frozen=True)
class Recipe:
    """One recipe file, as read (checked against the settings by hpc_imagenet.imagenet.config.validate)."""
    name: str
    path: str
    values: Mapping[str, Any]
    by_global_batch: Tuple[Mapping[str, Any], ...] = ()
    sources: Tuple[Source, ...] = ()
    top1: Optional[float] = None  # published ImageNet top-1 (%) of ResNet-50 with this recipe
    published_batch: Optional[int] = None  # the global batch of the run that top-1 comes from
    validated_batches: Tuple[int, ...] = ()  # global batches the sources trained this recipe at
    note: str = ""  # what differs from the sources, and why
    unknown: Tuple[str, ...] = ()  # top-level keys the format does not have

    @property
    def epochs(self) -> Optional[int]:
        """The epochs the recipe trains (its ``epochs`` value), for tools that size a job by it."""
        return self.values.get("epochs")

    @property
    def source(self) -> str:
        """Every source on one line: work, address, place."""
        return "; ".join(f"{s.cites} ({s.url}): {s.where}" for s in self.sources)

    def row_for(self, global_batch: int) -> Optional[Mapping[str, Any]]:
        """The by_global_batch row published nearest GLOBAL_BATCH, on a log scale (2,048 and 8,192
        are equally near 4,096), the smaller batch on a tie; outside the rows, the nearest end row."""
        if not self.by_global_batch:
            return None
        return min(self.by_global_batch,
                   key=lambda row: (abs(math.log(global_batch / row["global_batch"])), row["global_batch"]))

    def values_at(self, global_batch: int) -> Dict[str, Any]:
        """The settings this recipe gives at GLOBAL_BATCH: its values, then its nearest row's."""
        row = self.row_for(global_batch) or {}
        return {**self.values, **{key: value for key, value in row.items() if key not in ROW_KEYS}}


def _table(document: Mapping[str, Any], key: str, path: Path) -> Any:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise RecipeError(f"{path}: [{key}] must be a table of setting = value lines")
    return value


def _rows(document: Mapping[str, Any], path: Path) -> Tuple[Mapping[str, Any], ...]:
    rows = document.get("by_global_batch", [])
    if not isinstance(rows, list) or not all(isinstance(row, dict) and isinstance(row.get("global_batch"), int)
                                             and row["global_batch"] > 0 for row in rows):
        raise RecipeError(f"{path}: each [[by_global_batch]] row needs global_batch = a positive integer")
    return tuple(rows)


def _sources(document: Mapping[str, Any], path: Path) -> Tuple[Source, ...]:
    try:
        return tuple(Source(s["cites"], s["url"], s["where"]) for s in document.get("source", []))
    except (KeyError, TypeError):
        raise RecipeError(f"{path}: each [[source]] needs cites, url and where") from None


def read(path: Path, name: Optional[str] = None) -> Recipe:
    """The recipe in the TOML file PATH (NAME: its name, default the file's stem)."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RecipeError(f"cannot read {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise RecipeError(f"{path} is not valid TOML: {e}") from None
    return Recipe(name or path.stem, str(path), _table(document, "values", path), _rows(document, path),
                  _sources(document, path), top1=document.get("top1"),
                  published_batch=document.get("published_batch"),
                  validated_batches=tuple(document.get("validated_batches", ())), note=document.get("note", ""),
                  unknown=tuple(sorted(set(document) - set(FILE_KEYS))))


def _packaged() -> Dict[str, Recipe]:
    return {recipe.name: recipe for recipe in (read(path) for path in sorted(HERE.glob("*.toml")))}


RECIPES: Dict[str, Recipe] = _packaged()


def names() -> list:
    return sorted(RECIPES)


def named_in(flags: Sequence[str]) -> Optional[str]:
    """The recipe a list of training flags asks for (``--recipe NAME`` or ``--recipe=NAME``; the last
    wins, as argparse's), or None: for tools that pass training flags through (batch files, reports)."""
    found = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == "--recipe"]
    found += [flag.split("=", 1)[1] for flag in flags if flag.startswith("--recipe=")]
    return found[-1] if found else None
