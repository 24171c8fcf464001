"""What every runner shares: the error for bad input, the environment of a record and its sweep,
how a record was made (runner, command, note), flags with plain defaults, progress lines, the JPEG set a point reads, a
process's I/O counters, and the cause line of a failed run's log."""
from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from hpc_imagenet.harness.core import records
from hpc_imagenet.imagenet.common.files import write_json
from hpc_imagenet.harness.core.records import RESULTS_DIR, SCRATCH_DIR
from hpc_imagenet.harness.runners import jpegs

log = logging.getLogger(__name__)


class BenchError(RuntimeError):
    """Bad input; the message names the problem and the fix."""


def environment(nodes: Optional[int] = None) -> dict:
    from hpc_imagenet.imagenet.run import sysinfo
    return sysinfo.collect(nodes=nodes)


def new_sweep(kind: str, args) -> records.Sweep:
    """The sweep a bench command records into: its --tag and --records, this machine's environment."""
    return records.Sweep(kind, args.tag, args.records, environment())


def record_context(args, runner: str, **more: Any) -> dict:
    """What a record keeps about how it was made: the runner, the bench command line, the --note (MORE:
    a kind's own context). records.append makes the command portable."""
    return {"runner": runner, "bench_command": " ".join(sys.argv), **more, **({"note": args.note} if args.note else {})}


def add_flags(parser, **defaults: Any) -> None:
    """A ``--NAME`` flag (underscores as dashes) per keyword, of its default's type; a list default
    takes one or more values."""
    for name, default in defaults.items():
        many = isinstance(default, list)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default[0] if many else default), default=default,
                            **({"nargs": "+"} if many else {}))


def progress(done: int, total: int, what: str) -> None:
    log.info("[%d/%d] %s", done, total, what)


def jpeg_root(data: Optional[str], classes: int, per_class: int) -> Path:
    """--data as given (it must hold train/), else the generated ImageNet-like JPEGs, written if missing."""
    if data:
        if not (Path(data) / "train").is_dir():
            raise BenchError(f"{Path(data)}/train does not exist; pass an ImageFolder dataset root or omit --data")
        return Path(data)
    jpegs.ensure_dataset(SCRATCH_DIR / "jpegs", classes=classes, train_per_class=per_class)
    return SCRATCH_DIR / "jpegs"


def repo_relative(path: Path) -> str:
    """Relative to the checkout when inside it, so a clone finds the committed events."""
    try:
        return str(path.resolve().relative_to(RESULTS_DIR.parent))
    except ValueError:
        return str(path)


def proc_io(pid: str = "self") -> Dict[str, int]:
    """A process's I/O counters (plus its reaped children's); empty where /proc lacks them."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f if ":" in line)}
    except OSError:
        return {}


def write_loop_run(log_dir: Path, run: dict, name: str) -> None:
    """What a yardstick loop (the bare loop, the Lightning loop) leaves for the train bench: LOG_DIR/run.json,
    and its speed in one line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    write_json(log_dir / "run.json", run)
    print(f"{name}: {run['throughput']['images_per_s']:.1f} images/s, "
          f"{run['throughput']['step_time_ms']:.1f} ms a step", flush=True)


def last_line(text: str) -> str:
    """The line of a failed run's log that says why: the engine's one-line ``error:``, else the last
    exception line of the worker's traceback. torchrun's own footer (ChildFailedError, a link to
    errors.html) comes after both and names no cause, so it is passed over."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    footer = next((i for i, ln in enumerate(lines) if "ChildFailedError" in ln or ln.startswith("=====")), len(lines))
    cause = lines[:footer]
    engine = [ln for ln in cause if re.match(r"^(\[\w+\]:\s*)?error:", ln)]
    exceptions = [ln for ln in cause if re.match(r"^(\[\w+\]:\s*)?[\w.]*(Error|Exception|Interrupt)\b", ln)]
    errs = [ln for ln in cause if "Error" in ln or "error" in ln]
    return (engine or exceptions or errs or lines or ["(no output)"])[-1][:300]
