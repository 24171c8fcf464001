"""pytorch/examples' ``imagenet/main.py``, run as its users run it, with only its image sizes changed.

``main.py`` hard-codes ImageNet's 224-pixel training crop and 256 -> 224 validation resize and crop.
:func:`patched_copy` writes a temporary copy of the user's checkout's ``main.py`` in which exactly
those three numbers are replaced (each must occur once, else the checkout is a version this
benchmark does not know and it says so); nothing else changes, and the copy is deleted after the run.
:func:`run` starts it, timestamps every printed line as it arrives, and reads its curve from the
``* Acc@1`` summary line that ``validate()`` prints after each epoch. ``main.py`` prints no times
of its own, so the times are this process's clock (wall time since the start, evaluation included).
"""
from __future__ import annotations

import hashlib
import logging
import re
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from hpc_imagenet.harness.runners.common import BenchError
from studies.fashion_mnist_race.follow import PROGRESS_EVERY_S, Followed, Moment, follow
from studies.fashion_mnist_race.protocol import examples_resize

log = logging.getLogger(__name__)

MAIN_PY = Path("imagenet") / "main.py"
# main.py's defaults that shape this run (read from its argparse defaults; the record repeats them)
DEFAULTS = {"batch_size": 256, "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "workers": 4,
            "lr_schedule": "step: x0.1 every 30 epochs", "train_crop": "RandomResizedCrop (scale 0.08-1)",
            "flip": True}
SUMMARY = re.compile(r"^\s*\*\s+Acc@1\s+([\d.]+)\s+Acc@5\s+([\d.]+)")
TRAIN_LINE = re.compile(r"^Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]")
TEST_LINE = re.compile(r"^Test: \[\s*1/(\d+)\]")


def size_replacements(image_size: int) -> List[tuple]:
    """(ImageNet text, benchmark text) for the three sizes; validation keeps main.py's 256/224 ratio."""
    return [("transforms.RandomResizedCrop(224)", f"transforms.RandomResizedCrop({image_size})"),
            ("transforms.Resize(256)", f"transforms.Resize({examples_resize(image_size)})"),
            ("transforms.CenterCrop(224)", f"transforms.CenterCrop({image_size})")]


def validation_sizes(replaced: List[tuple]) -> Tuple[int, int]:
    """(resize, crop) the patched copy validates at, read back from the REPLACED texts it was given."""
    sizes = {old.split("(")[0]: int(re.search(r"\((\d+)\)", new).group(1)) for old, new in replaced}
    return sizes["transforms.Resize"], sizes["transforms.CenterCrop"]


def digest(examples_dir: Path) -> Optional[str]:
    """SHA-256 (12 hex digits) of the checkout's main.py as it was run: names its version where the checkout
    carries no git history (a copy sent to a GPU machine)."""
    try:
        return hashlib.sha256((Path(examples_dir) / MAIN_PY).read_bytes()).hexdigest()[:12]
    except OSError:
        return None


def patched_copy(examples_dir: Path, image_size: int, dest_dir: Path) -> Path:
    """DEST_DIR/main.py: the checkout's main.py with only the image sizes changed."""
    source = Path(examples_dir) / MAIN_PY
    if not source.is_file():
        raise BenchError(f"{source} does not exist; --examples must name a pytorch/examples checkout "
                         "(git clone https://github.com/pytorch/examples)")
    text = source.read_text(encoding="utf-8")
    for old, new in size_replacements(image_size):
        found = text.count(old)
        if found != 1:
            raise BenchError(f"{source} has {found} occurrence(s) of {old!r}, not 1: a version of main.py this "
                             "benchmark does not know; check out one that has them (e.g. 2025's main branch)")
        text = text.replace(old, new)
    dest = Path(dest_dir) / "main.py"
    dest.write_text(text, encoding="utf-8")
    return dest


class MainLines:
    """The curve and evaluation time read from main.py's lines as they arrive, and when its first
    training step ended (its first ``Epoch: [0][ 1/n]`` line, printed after step 1)."""

    def __init__(self) -> None:
        self.curve: List[dict] = []  # {"epoch", "wall_s", "core_s", "top1", "top5"} after each evaluation
        self.start_s: Optional[float] = None
        self.eval_s = 0.0  # estimated from the printed test steps, see _eval_s
        self._test_started: Optional[float] = None
        self._test_batches = 1
        self._last_progress = 0.0

    def __call__(self, moment: Moment, line: str) -> None:
        now = moment.wall_s
        test = TEST_LINE.match(line)
        if test:
            self._test_started, self._test_batches = now, int(test.group(1))
        summary = SUMMARY.match(line)
        if summary:
            point = {"epoch": len(self.curve) + 1, "wall_s": round(now, 2), "core_s": round(moment.cpu_s(), 2),
                     "top1": float(summary.group(1)), "top5": float(summary.group(2))}
            self.curve.append(point)
            self.eval_s += _eval_s(self._test_started, now, self._test_batches)
            log.info("examples: epoch %d top-1 %.2f %% at %.0f s", point["epoch"], point["top1"], now)
        elif TRAIN_LINE.match(line) and self.start_s is None:
            self.start_s = round(now, 2)
        elif TRAIN_LINE.match(line) and now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            log.info("examples: %s (%.0f s)", " ".join(line.split()[:3]), now)


def flags(epochs: int, seed: Optional[int] = None, workers: Optional[int] = None) -> List[str]:
    """main.py's command line after its data folder: EPOCHS, its --seed where SEED is given, its -j where WORKERS is
    (the record keeps it: the protocol round gives main.py nothing but its epochs and the seed)."""
    return ["--epochs", str(epochs), *(["--seed", str(seed)] if seed is not None else []),
            *(["-j", str(workers)] if workers is not None else [])]


def run(examples_dir: Path, data: Path, image_size: int, epochs: int, log_file: Path,
        timeout_s: Optional[float] = None, seed: Optional[int] = None,
        workers: Optional[int] = None) -> Tuple[MainLines, Followed]:
    """Train with main.py's defaults on DATA for EPOCHS (with its --seed where SEED is given, its -j
    where WORKERS is), in a temporary folder (its checkpoints land in the working directory); every
    line goes to LOG_FILE."""
    with tempfile.TemporaryDirectory(prefix="examples-main-") as work:
        script = patched_copy(examples_dir, image_size, Path(work))
        cmd = [sys.executable, "-u", str(script), str(Path(data).resolve()), *flags(epochs, seed, workers)]
        log.info("examples: %s", " ".join(cmd[1:]))
        lines = MainLines()
        return lines, follow(cmd, Path(work), log_file, lines, timeout_s)


def _eval_s(first_printed: Optional[float], summary: float, batches: int) -> float:
    """One evaluation's wall time: main.py prints its first test line after batch 1 of BATCHES, so
    the time from there to the summary covers BATCHES - 1 batches; scaled up to all of them."""
    if first_printed is None or batches < 2:
        return 0.0
    return (summary - first_printed) * batches / (batches - 1)
