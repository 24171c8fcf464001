"""The command line of ``python -m hpc_imagenet.slurm.jobchain``:

    python -m hpc_imagenet.slurm.jobchain submit ARCHIVES OUT [chain options] [hpc_imagenet.slurm.generate options]
    [-- training flags]
    python -m hpc_imagenet.slurm.jobchain status OUT
    python -m hpc_imagenet.slurm.jobchain cancel OUT

``submit`` checks the input (archives, room in OUT, the generator's options) before anything is
submitted, then submits the chain from where it stands: the first time from the start, after a
failure from the stage that failed (finished stages are skipped). ``--dry-run`` prints the sbatch
lines and submits nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from hpc_imagenet.imagenet.data import DEFAULT_SHARD_MB
from hpc_imagenet.slurm.client import SlurmError
from hpc_imagenet.slurm.generate import GenerateError, spec_from_args, validate

from hpc_imagenet.slurm.jobchain import chain as ch
from hpc_imagenet.slurm.jobchain import preflight
from hpc_imagenet.slurm.jobchain import state as st
from hpc_imagenet.slurm.jobchain.state import ChainError, Layout

USAGE = "usage:\n" + "\n".join(line for line in __doc__.splitlines() if line.startswith("    python"))


def _submit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.slurm.jobchain submit", allow_abbrev=False,
                                description="ImageNet's download -> shards -> training -> evaluated, exported "
                                            "weights and a report, as one chain of SLURM jobs. Options not listed "
                                            "here are hpc_imagenet.slurm.generate's (for the training job; the "
                                            "other stages "
                                            "take its site options); training flags go after --.")
    p.add_argument("archives", type=Path, help="folder of ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, devkit")
    p.add_argument("out", type=Path, help="output folder: shards, run, weights, report, the chain's state")
    p.add_argument("--prepare-tasks", type=int, default=8, help="array tasks the conversion is split over")
    p.add_argument("--prepare-workers", type=int, default=8, help="CPUs (worker processes) per prepare task")
    p.add_argument("--prepare-time", default="4:00:00", help="time limit of each prepare task")
    p.add_argument("--shard-size", type=float, default=DEFAULT_SHARD_MB, help="MB of source images per shard")
    p.add_argument("--any-archives", action="store_true", help="archives other than the published ones (a "
                   "subset, your own): their sizes are not checked against ILSVRC 2012's")
    p.add_argument("--tag", default="jobchain", help="the report's tag (report/reports/TAG/README.md)")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch lines; submit nothing")
    return p


def submit(argv: Sequence[str]) -> int:
    parser = _submit_parser()
    a, rest = parser.parse_known_args(list(argv))
    if a.prepare_tasks < 1 or a.prepare_workers < 1 or a.shard_size <= 0:
        parser.error("--prepare-tasks and --prepare-workers must be >= 1 and --shard-size > 0")
    archives, layout = a.archives.resolve(), Layout(a.out.resolve())
    spec = ch.with_mounts(spec_from_args(rest), archives, layout.out)
    validate(spec)
    found = preflight.check_archives(archives, official=not a.any_archives)
    preflight.check_space(layout.out, preflight.needed_bytes(found, official=not a.any_archives), layout.data)
    chain = ch.Chain(archives, layout, spec, a.prepare_tasks, a.prepare_workers, a.prepare_time, a.shard_size, a.tag)
    ch.submit(chain, ["submit", *argv], dry_run=a.dry_run)
    return 0


def status(out: Path) -> int:
    layout = Layout(out.resolve())
    state = st.load(layout)
    if state is None:
        raise ChainError(f"no chain in {out} (no {st.STATE}); submit one with python -m "
                         f"hpc_imagenet.slurm.jobchain submit")
    stages = st.stages(layout, state)
    width = max(len(s.state) for s in stages)
    for s in stages:
        print(f"{s.name:9s} {s.state:{width}s}  {s.detail}" + (f"  [log {s.log}]" if s.log else ""))
    failed = next((s for s in stages if s.failed), None)
    if failed:
        print(f"the chain stopped at {failed.name}: {failed.detail}; fix that, then run the same submit command "
              f"again: it resumes at {failed.name}")
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    try:
        if command == "submit":
            return submit(argv[1:])
        if command in ("status", "cancel") and len(argv) == 2:
            return status(Path(argv[1])) if command == "status" else ch.cancel(Layout(Path(argv[1]).resolve()))
    except (ChainError, GenerateError, SlurmError) as e:
        print(f"python -m hpc_imagenet.slurm.jobchain: {e}", file=sys.stderr)
        return 2
    if command in ("-h", "--help"):  # asked for: the usage on stdout, success
        print(USAGE)
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    from hpc_imagenet.slurm.jobchain.chain_commands import main  # under its one name, not a copy
    sys.exit(main())
