"""Step timing for your own script, which the scaling harness measures: after each training step rank 0 calls
``hpc_imagenet.requeue.step_done(images)`` (the images the step trained on all ranks together), and the step's end
time and images go into the run folder's ``steps.tsv`` (in the runs the harness starts, which carry
``$HPC_IMAGENET_MEASURED``). The Lightning callback does it by itself.

One line a step, ``TIME<TAB>IMAGES`` (wall-clock seconds, so that the runs of a requeued job line up), and a
``# start TIME`` line each time a process opens the file: the harness takes each run's steady steps apart from its
start-up (:func:`segments`). Written here rather than read from a script's own progress lines: those are the
script's to word as it likes.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import IO, List, Optional, Tuple

STEPS_FILE = "steps.tsv"
START = "# start"

Segment = List[Tuple[float, int]]  # (end time, images) of each step of one run


class StepLog:
    """Appends one line a step to PATH, opened at the first step (line-buffered: a killed run keeps its steps)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: Optional[IO[str]] = None

    def done(self, images: int) -> None:
        now = time.time()
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", buffering=1, encoding="utf-8")
            self._file.write(f"{START} {now:.6f}\n")
        self._file.write(f"{now:.6f}\t{int(images)}\n")


def segments(path: Path) -> List[Segment]:
    """Each run's steps, in order (a torn last line, from a killed run, is left out)."""
    runs: List[Segment] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith(START):
            runs.append([])
            continue
        fields = line.split("\t")
        if len(fields) == 2 and runs:
            try:
                runs[-1].append((float(fields[0]), int(fields[1])))
            except ValueError:
                continue
    return [run for run in runs if run]
