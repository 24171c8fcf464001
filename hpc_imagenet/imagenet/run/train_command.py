"""Command-line entry shared by the four scripts: parse and validate, then place and run the processes.

Everything before training is torch-free and cheap: a bad command line ends with one line on
stderr (``error: ...``) and exit status 2 in a fraction of a second, before torch is imported,
before the rendezvous, the staging copy or the dataset scan; ``--print-config`` prints the
resolved settings as JSON and exits 0. Only then is :mod:`hpc_imagenet.imagenet.run.processes` (torch) imported.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

from hpc_imagenet.launch import environment

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.common import startup
from hpc_imagenet.imagenet.common.errors import one_line
from hpc_imagenet.imagenet.common.exit_codes import EXIT_USAGE


def main(variant: str = "any", argv: Optional[Sequence[str]] = None) -> int:
    """Run one training job; returns the process exit status."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    startup.mark("interpreter and the launcher's imports")
    try:
        launcher = environment.detect()  # once: the settings' batch and the process layout both follow it
        command = config.parse_command(argv, variant, launcher=launcher)
    except (config.ConfigError, environment.LaunchError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if command.print_config:
        print(json.dumps(command.settings.to_dict(), indent=2), flush=True)
        return 0
    startup.mark("settings parsed and checked")
    from hpc_imagenet.imagenet.run import processes  # torch, only for a command line known to be good

    startup.mark("torch and the engine imported")

    return processes.start(command.settings, launcher)
