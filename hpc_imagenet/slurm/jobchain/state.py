"""The chain's state: ``OUT/jobchain.json`` (what was submitted), the stages' markers (what finished),
and each stage's state as ``status`` shows it.

Jobs are watched with ``squeue`` alone (no accounting database needed): a job still in the queue
says pending or running; once it has left, what it wrote says how it went. Every stage but training
ends by writing a marker (``OUT/jobs/markers/STAGE[.TASK].json``: done, or failed and why); training's
own run.json says whether it finished. A job that left the queue with neither was killed, cancelled
or ran out of time.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.client import QUEUED, RUNNING

STATE = "jobchain.json"
EARLIER_STATE = "pipeline.json"  # the same file, as versions before the job chain's rename named it
STAGES = ("plan", "prepare", "check", "train", "evaluate", "export", "report")
FINISHED_RUN = ("finished", "reached_desired_acc", "time_budget")  # run.json statuses of a finished training


class ChainError(RuntimeError):
    """Bad input or a chain that cannot go on; the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class Layout:
    """Where everything of one chain lives under its output folder."""
    out: Path

    @property
    def state(self) -> Path:
        return self.out / STATE

    @property
    def jobs(self) -> Path:
        return self.out / "jobs"

    @property
    def logs(self) -> Path:
        return self.jobs / "logs"

    @property
    def markers(self) -> Path:
        return self.jobs / "markers"

    @property
    def plan(self) -> Path:
        return self.jobs / "plan.json"

    @property
    def data(self) -> Path:
        return self.out / "data"

    @property
    def run(self) -> Path:
        return self.out / "run"

    @property
    def export(self) -> Path:
        return self.out / "export"

    @property
    def evaluate(self) -> Path:
        return self.out / "evaluate"

    @property
    def report(self) -> Path:
        return self.out / "report"

    def marker(self, stage: str, task: Optional[int] = None) -> Path:
        return self.markers / (f"{stage}.{task}.json" if task is not None else f"{stage}.json")


def load(layout: Layout) -> Optional[dict]:
    if not layout.state.exists():
        if (layout.out / EARLIER_STATE).exists():
            raise ChainError(f"{layout.out} holds a chain submitted by an earlier version ({EARLIER_STATE}), whose "
                             "jobs run commands this version no longer has; submit again to a new folder")
        return None
    try:
        return json.loads(layout.state.read_text())
    except ValueError as e:
        raise ChainError(f"{layout.state} is damaged ({e}); delete it to start the chain afresh") from None


def save(layout: Layout, state: dict) -> None:
    files.write_json(layout.state, state)


def write_marker(path: Path, status: str, **fields) -> None:
    files.write_json(path, {"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields})


def read_marker(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- the queue

def active(entry: Optional[tuple]) -> Optional[str]:
    """'pending (reason)' or 'running' for a job still queued or running, else None."""
    if entry is None:
        return None
    state, reason = entry
    if reason == "DependencyNeverSatisfied":  # waits on a failed stage: never runs (status says which)
        return None
    if state in QUEUED:
        return f"pending ({reason})" if reason and reason != "None" else "pending"
    return "running" if state in RUNNING else None


# ---------------------------------------------------------------- one stage's state

@dataclass
class StageState:
    name: str
    state: str  # not submitted | pending (...) | running | done | failed | cancelled (the chain's own cancel,
    #             or a stage after a failed one: those never run)
    detail: str = ""  # progress, or the reason of a failure
    log: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "failed"


def _ended_without_result(job: dict, entry: Optional[tuple]) -> str:
    how = f"{entry[0]}, " if entry else ""
    return f"the job ended without a result ({how}killed, cancelled or out of time); see {job['log']}"


def marker_stage(layout: Layout, name: str, job: dict, queued: Dict[str, tuple]) -> StageState:
    """A one-job stage (plan, check, evaluate, export, report): its queue entry, else its marker."""
    entry = queued.get(job["id"])
    now = active(entry)
    if now:
        return StageState(name, now, log=job["log"])
    mark = read_marker(layout.marker(name))
    if mark and mark.get("job") == job["id"]:
        return StageState(name, mark["status"], mark.get("detail") or mark.get("error", ""), job["log"])
    return StageState(name, "failed", _ended_without_result(job, entry), job["log"])


def array_stage(layout: Layout, job: dict, queued: Dict[str, tuple], shards_total: Optional[int]) -> StageState:
    """The prepare array: done when every task's marker is; else its running/pending/failed tasks."""
    tasks = job["tasks"]
    states: Dict[int, str] = {}
    for task in tasks:
        mark = read_marker(layout.marker("prepare", task))
        entry = queued.get(f"{job['id']}_{task}")
        now = active(entry)
        states[task] = now or (mark["status"] if mark and mark.get("job") == job["id"] else "failed")
    written = len(list(layout.data.glob("*.tar"))) if layout.data.is_dir() else 0
    progress = f"{written}/{shards_total} shards written" if shards_total else f"{written} shards written"
    failed = sorted(t for t, s in states.items() if s == "failed")
    if failed:
        reasons = [read_marker(layout.marker("prepare", t)) for t in failed]
        why = next((m.get("error") for m in reasons if m and m.get("job") == job["id"] and m.get("error")), None)
        return StageState("prepare", "failed", f"task(s) {','.join(map(str, failed))} failed: "
                          f"{why or _ended_without_result(job, None)}; {progress}", job["log"])
    for kind in ("running", "pending"):
        if any(s.startswith(kind) for s in states.values()):
            return StageState("prepare", kind, progress, job["log"])
    return StageState("prepare", "done", progress, job["log"])


_STEP = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]")


def train_stage(layout: Layout, job: dict, queued: Dict[str, tuple], epochs: int) -> StageState:
    """Training: the queue, else run.json's status; progress from run.json and the log's last step line."""
    run = read_marker(layout.run / "run.json") or {}
    now = active(queued.get(job["id"]))
    started = run or Path(job["log"]).exists()
    detail = train_progress(run, Path(job["log"]), epochs) if started else ""
    if now:
        return StageState("train", now, detail, job["log"])
    if run.get("status") in FINISHED_RUN:
        return StageState("train", "done", detail, job["log"])
    entry = queued.get(job["id"])
    why = run.get("error") or _error_line(Path(job["log"])) or (
        f"run.json says {run['status']!r}" if run.get("status") else None)
    return StageState("train", "failed", why or _ended_without_result(job, entry), job["log"])


def _error_line(log: Path) -> Optional[str]:
    """The training's own one-line error, the last 'error: ...' line of its log."""
    try:
        lines = log.read_text(errors="replace")[-20000:].splitlines()
    except OSError:
        return None
    return next((line.strip() for line in reversed(lines) if line.strip().startswith("error:")), None)


def train_progress(run: dict, log: Path, epochs: int) -> str:
    """'epoch E/N step S/M, best top-1 X %, ETA H:MM' from run.json's epochs and the log's last step."""
    rows = run.get("epochs") or []
    best = (run.get("final") or {}).get("best_top1")
    epoch, step, steps = len(rows), 0, None
    try:
        found = _STEP.findall(log.read_text(errors="replace")[-20000:])
    except OSError:
        found = []
    if found:
        epoch, step, steps = int(found[-1][0]), int(found[-1][1]), int(found[-1][2])
    parts = [f"epoch {epoch + 1}/{epochs}" + (f" step {step}/{steps}" if steps else "")]
    if best is not None:
        parts.append(f"best top-1 {best:.2f} %")
    elapsed = rows[-1].get("elapsed_s") if rows else None
    if elapsed and rows and epochs > len(rows):
        parts.append(f"ETA {_hours(elapsed / len(rows) * (epochs - len(rows)))}")
    return ", ".join(parts)


def _hours(seconds: float) -> str:
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}"


def stages(layout: Layout, state: dict, queued: Optional[Dict[str, tuple]] = None) -> List[StageState]:
    """Every stage's state, in chain order; a stage after a failed one that never ran is 'cancelled'."""
    queued = client.queue() if queued is None else queued
    total = (read_marker(layout.marker("plan")) or {}).get("shards")
    out, broken = [], None
    for name in STAGES:
        job = state["jobs"].get(name)
        if job is None:
            st = StageState(name, "not submitted")
        elif name == "prepare":
            st = array_stage(layout, job, queued, total)
        elif name == "train":
            st = train_stage(layout, job, queued, state["epochs"])
        else:
            st = marker_stage(layout, name, job, queued)
        if state.get("cancelled") and st.state in ("failed", "cancelled"):
            st = StageState(name, "cancelled", "by `python -m hpc_imagenet.slurm.jobchain cancel`", st.log)
        elif broken and st.state in ("failed", "cancelled") and name != "report":
            st = StageState(name, "cancelled", f"{broken} failed", st.log)
        broken = broken or (name if st.failed else None)
        out.append(st)
    return out
