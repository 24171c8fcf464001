"""``python -m hpc_imagenet.launch``: show what this process's launcher looks like to the engine.

Run it the way training would run (``srun python -m hpc_imagenet.launch``, ``torchrun ... -m hpc_imagenet.launch``,
``mpirun ... python -m hpc_imagenet.launch``) to see every rank's layout and whether it passes validation,
before spending a GPU-hour on a job that cannot rendezvous. Exit status 2 when it does not.
``python -m hpc_imagenet.launch --list`` prints the launcher table (:mod:`hpc_imagenet.launch.launchers`) instead.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Optional, Sequence

from hpc_imagenet.launch import environment, launchers


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


def table() -> str:
    """One line per launcher, in detection order: name, variables that recognise it, how ranks meet, where usable."""
    lines = []
    for entry in launchers.REGISTRY.values():
        env = entry.environment
        names = dict.fromkeys(env.VARS[role][0] for role in env.REQUIRED) if env is not None else {}
        recognised = " + ".join(names) or "-"
        where = [w for w, yes in (("hpc_imagenet.launch.manual", entry.name in launchers.by_hand()),
                                  ("hpc_imagenet.slurm.generate", entry.name in launchers.in_batch_files())) if yes]
        lines.append(f"{entry.name}: {entry.summary}\n    recognised by: {recognised}; ranks meet {entry.meets}; "
                     f"commands from: {', '.join(where) or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc_imagenet.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, help="GPUs per node to validate against (default: what torch sees)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a line of text")
    parser.add_argument("--list", action="store_true", help="print the launchers this package knows, then exit")
    args = parser.parse_args(argv)
    if args.list:
        sys.stdout.write(table())
        return 0
    host = socket.gethostname()
    env: Optional[environment.ClusterEnvironment] = None
    error: Optional[str] = None
    try:
        env = environment.detect()
        env.validate(gpu_count() if args.gpus is None else args.gpus)
    except environment.LaunchError as e:
        error = str(e)
    if args.json:
        view = {"host": host, "error": error}
        if env is not None:
            view.update({k: getattr(env, k) for k in ("name", "rank", "local_rank", "world_size",
                                                      "local_world_size", "node_rank", "master_addr",
                                                      "master_port", "device_index")})
        print(json.dumps(view), flush=True)
    elif error:
        print(f"{host}: error: {error}", file=sys.stderr, flush=True)
    else:
        print(f"{host}: {env.describe()} device {env.device_index}: ok", flush=True)
    return 2 if error else 0


if __name__ == "__main__":
    from hpc_imagenet.launch.__main__ import main  # under its one name, not a copy
    sys.exit(main())
