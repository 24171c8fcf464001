"""What each stage's job runs: ``python -m hpc_imagenet.slurm.jobchain.tasks STAGE OUT [...]``.

Every stage ends by writing its marker (done with its counts, or failed with the one-line reason) and
exits non-zero on failure, so the next stage's ``afterok`` dependency is never satisfied and
``status`` can say why. The stages of the weights call the project's own commands: the training
script's ``--evaluate`` and :mod:`hpc_imagenet.imagenet.export`. The report stage is the harness's own command
(``python -m hpc_imagenet.harness.jobchain_report``), which writes its marker with :func:`run_stage`: slurm/ never
imports the harness.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from hpc_imagenet.imagenet.common import checkout
from hpc_imagenet.imagenet.common.errors import one_line
from hpc_imagenet.imagenet.common.variants import SCRIPTS

from hpc_imagenet.slurm.jobchain import prepare_tasks
from hpc_imagenet.slurm.jobchain.state import Layout, write_marker

REPO = checkout.root() or Path.cwd()  # the checkout whose entry scripts the tasks run
EVALUATED = {"best": "model", "ema": "model_ema"}  # evaluation name -> exported weights' stem


def _job_id() -> str:
    return os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID") or "local"


def evaluate(layout: Layout, eval_args: Sequence[str]) -> dict:
    """Export the weights, then score each (best, EMA) with the training script's --evaluate."""
    from hpc_imagenet.imagenet import export

    export.export(layout.run, layout.export)
    scored = {}
    for name, stem in EVALUATED.items():
        weights = layout.export / f"{stem}.pth"
        if not weights.exists():
            continue
        log_dir = layout.evaluate / name
        cmd = [sys.executable, str(REPO / SCRIPTS["nd"]), *eval_args, "--evaluate", "--resume", str(weights),
               "--log-dir", str(log_dir), str(layout.data)]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        sys.stdout.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"evaluating the {name} weights exited {proc.returncode}: {tail[0]}")
        scored[name] = json.loads((log_dir / "run.json").read_text())["evaluation"]
    return {"detail": ", ".join(f"{n} top-1 {r['val_top1']:.2f} %" for n, r in scored.items()), **scored}


def export_weights(layout: Layout) -> dict:
    from hpc_imagenet.imagenet import export

    evaluations = [f"{name}={layout.evaluate / name / 'run.json'}" for name in EVALUATED
                   if (layout.evaluate / name / "run.json").exists()]
    out = export.export(layout.run, layout.export, evaluations)
    return {"detail": f"weights and model card in {out}"}


def run_stage(layout: Layout, stage: str, task: Optional[int], work) -> int:
    """Run WORK, write the stage's marker either way; the exit status for SLURM."""
    marker = layout.marker(stage, task)
    start = time.monotonic()
    try:
        result = work()
    except BaseException as e:  # the marker must say why, whatever it was
        write_marker(marker, "failed", job=_job_id(), error=f"{type(e).__name__}: {one_line(e)}"[:500])
        print(f"{stage}: failed: {one_line(e)}", file=sys.stderr)
        return 1
    write_marker(marker, "done", job=_job_id(), seconds=time.monotonic() - start, **result)
    print(f"{stage}: done: {json.dumps(result)[:500]}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.slurm.jobchain.tasks", description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=("plan", "convert", "check", "evaluate", "export"))
    p.add_argument("out", type=Path)
    p.add_argument("--archives", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--shard-size", type=float)
    p.add_argument("--tasks", type=int, default=1)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the training flags (evaluate)
    a, eval_args = p.parse_args(argv[:cut]), argv[cut + 1:]
    layout = Layout(a.out)
    task = int(os.environ["SLURM_ARRAY_TASK_ID"]) if a.stage == "convert" else None
    work = {"plan": lambda: prepare_tasks.plan(layout, a.archives, a.workers, a.shard_size),
            "convert": lambda: prepare_tasks.convert(layout, task, a.tasks, a.workers),
            "check": lambda: prepare_tasks.check(layout, a.workers),
            "evaluate": lambda: evaluate(layout, eval_args),
            "export": lambda: export_weights(layout)}[a.stage]
    return run_stage(layout, "prepare" if a.stage == "convert" else a.stage, task, work)


if __name__ == "__main__":
    from hpc_imagenet.slurm.jobchain.tasks import main  # under its one name, not a copy
    sys.exit(main())
