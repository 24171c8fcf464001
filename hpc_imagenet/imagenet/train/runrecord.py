"""run.json: the config, environment and results of one run, rewritten atomically as it goes.

The benchmark harness and the report read it. Only rank 0 writes; other ranks hold a record whose
writes do nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_imagenet.imagenet.common import files

RUN_JSON = "run.json"


class RunRecord:
    def __init__(self, run_dir: Path, primary: bool, **fields: Any):
        self.path = Path(run_dir) / RUN_JSON
        self.primary = primary
        self.data = {"schema": 1, "status": "running", **fields}

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        if self.primary:
            files.write_json(self.path, self.data)
