"""``python -m hpc_imagenet.harness.jobchain_report OUT [--tag TAG]``: the report stage of ``python -m
hpc_imagenet.slurm.jobchain``.

The chain's report job runs this command (hpc_imagenet.slurm.jobchain renders the line, and never imports the
harness): the run in OUT/run becomes one harness ``train`` record, as the harness makes it for a point
that ran as a SLURM job, in OUT/report/records/TAG.jsonl, and that tag's report is written under
OUT/report. Like every stage it ends by writing its marker (done, or failed and why) and exits non-zero
on failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.report import main as report_main
from hpc_imagenet.harness.runners import train_bench
from hpc_imagenet.slurm.jobchain.state import FINISHED_RUN, Layout
from hpc_imagenet.slurm.jobchain.tasks import run_stage


def report(layout: Layout, tag: str) -> dict:
    """The run as a harness ``train`` record in REPORT/records/TAG.jsonl, and that tag's report."""
    run_json = layout.run / "run.json"
    if not run_json.exists():
        return {"detail": "no training run to report (the training never started)"}
    run = json.loads(run_json.read_text())
    log = max(layout.logs.glob("train-*.out"), key=lambda p: p.stat().st_mtime, default=None)  # the last submission's
    outcome = train_bench.Outcome(0 if run.get("status") in FINISHED_RUN else 1,
                                  log.read_text(errors="replace")[-4000:] if log else "",
                                  run.get("environment", {}).get("command", ""),
                                  float((run.get("final") or {}).get("elapsed_s") or 0.0))
    # "slurm": the harness's runner name for a point that ran as a SLURM job
    record = train_bench.train_record(point_of(run), outcome, records.new_sweep_id("train", tag), None,
                                      {"runner": "slurm"}, layout.run, layout.report / "run", keep_checkpoints=True)
    path = layout.report / "records" / f"{tag}.jsonl"
    path.unlink(missing_ok=True)  # one run, one record: a rerun of the stage replaces it
    records.append(path, record)
    code = report_main(["--tag", tag, "--records", str(path), "--out", str(layout.report)])
    if code != 0:
        raise RuntimeError(f"hpc_imagenet.harness.report exited {code}")
    return {"detail": f"{layout.report / 'reports' / tag / 'README.md'} (training {run.get('status')})"}


def point_of(run: dict) -> train_bench.TrainPoint:
    """The harness's description of the run, from its run.json."""
    cfg, dist = run.get("config", {}), run.get("dist", {})
    return train_bench.TrainPoint(
        variant=cfg.get("run", {}).get("variant", "ddp"), procs_per_node=int(dist.get("local_world_size") or 1),
        nodes=int(dist.get("nodes") or 1), batch_size=int(cfg.get("batch", {}).get("per_process") or 0),
        precision=run.get("precision", {}).get("label", "fp32"), data="imagenet shards",
        arch=cfg.get("model", {}).get("arch", "resnet50"), image_size=int(cfg.get("data", {}).get("image_size") or 224),
        epochs=int(cfg.get("optim", {}).get("epochs") or 0), steps_per_epoch=0, val_steps=0,
        workers=int(cfg.get("batch", {}).get("workers") or 0))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.harness.jobchain_report",
                                description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the chain's output folder")
    p.add_argument("--tag", default="jobchain", help="the report's tag (OUT/report/reports/TAG/README.md)")
    a = p.parse_args(argv)
    layout = Layout(a.out)
    return run_stage(layout, "report", None, lambda: report(layout, a.tag))


if __name__ == "__main__":
    from hpc_imagenet.harness.jobchain_report import main  # under its one name, not a copy
    sys.exit(main())
