"""sbatch files for N nodes x G GPUs, any variant and launcher, as a pure function of a JobSpec.

    python -m hpc_imagenet.slurm.generate --nodes 4 --gpus-per-node 4 --variant amp --name ddp_4node > job.sh
    python -m hpc_imagenet.slurm.generate --write-examples          # regenerate the committed slurm/*.sh

The parts, in the order a job goes through them: ``spec`` (the JobSpec: hpc_imagenet/slurm/job.py's shared job
description plus what only a batch file has, and its derived views),
``options`` (the command line -> a JobSpec), ``checks`` (``validate``: one line saying what to
change), ``renderer`` (the script, section by section; what the script does is told there),
``examples`` (the committed files) and ``generate_command`` (``main``).
"""
from hpc_imagenet.slurm.generate.checks import managed_flags, parse_time, validate
from hpc_imagenet.slurm.generate.generate_command import main
from hpc_imagenet.slurm.generate.examples import EXAMPLES, render_example
from hpc_imagenet.slurm.generate.options import build_parser, spec_from_args
from hpc_imagenet.slurm.generate.renderer import render, render_step
from hpc_imagenet.slurm.generate.spec import CPUS_PER_PROCESS, GenerateError, JobSpec

__all__ = ["CPUS_PER_PROCESS", "EXAMPLES", "GenerateError", "JobSpec", "build_parser", "main", "managed_flags",
           "parse_time", "render", "render_example", "render_step", "spec_from_args", "validate"]
