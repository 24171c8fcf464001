"""What every report section shares: number formats, markdown tables, environment ids,
record selection and the reference data."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from hpc_imagenet.imagenet.recipes import named_in
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record, TrainPoint
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES
from hpc_imagenet.harness.report.words import Words

RESULTS = records.RESULTS_DIR
REPO = RESULTS.parent
TEXT = Path(__file__).with_name("text")  # the sections' words, one markdown file per section module
WORDS = Words(TEXT)


@dataclass
class Page:
    """What every section of one tag's report shares: the environment ids its rows name, its figure folder."""

    env: Environments
    out_dir: Path


class ReportError(RuntimeError):
    """Bad input; one line naming the problem and the fix."""


def prose(name: str, /, **values: object) -> str:
    """The harness's words NAME ("file.block": block of text/file.md) with VALUES in its {fields} (str.format);
    a study reads its own folder through its own :class:`Words`."""
    return WORDS(name, **values)


def fmt(value: object) -> str:
    """One number format for every table, so tests can compare cells with records."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def pct(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{100 * value + 0.0:.1f}%".replace("-0.0%", "0.0%")  # no negative zero from rounding


def columns(headers: Sequence[str], /, **values: object) -> List[str]:
    """The column names HEADERS (written beside the section), VALUES in their {fields}."""
    if isinstance(headers, str):  # one column per letter otherwise
        raise TypeError(f"table headers {headers!r}: give the column names as a tuple written beside the section")
    return [h.format(**values) for h in headers] if values else list(headers)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]], **values: object) -> str:
    """Markdown of ROWS under HEADERS (:func:`columns`: VALUES fill their {fields})."""
    headers = columns(headers, **values)
    if not rows:
        return "_(no rows)_\n"
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


ENV_COLUMNS = ("hostname", "cpu_model", "cpu_count", "torch_threads", "gpu_name", "gpu_count", "nodes", "torch",
               "torchvision", "cuda", "cudnn", "nccl", "python", "git_commit", "slurm_job_id")


class Environments:
    """Short ids (E1, E2, ...) for distinct environments; the command line is per record."""

    def __init__(self) -> None:
        self.ids: Dict[str, str] = {}
        self.envs: Dict[str, dict] = {}

    def id(self, rec: Record) -> str:
        env = {k: getattr(rec.environment, k) for k in ENV_COLUMNS}
        key = hashlib.sha1(json.dumps(env, sort_keys=True, default=str).encode()).hexdigest()
        if key not in self.ids:
            self.ids[key] = f"E{len(self.ids) + 1}"
            self.envs[self.ids[key]] = env
        return self.ids[key]

    def table(self) -> str:
        rows = [[i] + [fmt(e.get(k)) for k in ENV_COLUMNS] for i, e in self.envs.items()]
        return md_table(["env", *ENV_COLUMNS], rows)


def data_label(data: object) -> str:
    return "synthetic" if data == "dummy" else Path(str(data)).name


def recipe_label(point: TrainPoint) -> str:
    """', recipe NAME' for a point trained with --recipe NAME among its extra flags; '' otherwise."""
    name = named_in(list(point.extra_args or ()))
    return f", recipe {name}" if name else ""


def plain_local(record: Record) -> bool:
    """A local sweep point that is not a --setups comparison (learning curves, the scaling model)."""
    return not record.point.setup and record.local


def sorted_groups(items: Sequence, key: Callable, order: Callable) -> Dict:
    """ITEMS grouped by KEY, the groups in key order, each sorted by ORDER."""
    return {k: sorted(v, key=order) for k, v in sorted(records.group_by(items, key).items())}


def train_hours(images_per_s: float, epochs: int = 1) -> float:
    """Hours to train EPOCHS epochs of ImageNet's training images at IMAGES_PER_S."""
    return epochs * IMAGENET_TRAIN_IMAGES / images_per_s / 3600


def gpu_axis(hardware: str) -> str:
    """The axis that counts GPUs, or processes where the hardware is a CPU."""
    return "processes" if hardware.startswith("CPU") else "GPUs (processes)"


def mib(value: Optional[float]) -> Optional[float]:
    """Bytes in MiB (None stays None)."""
    return None if value is None else value / (1 << 20)
