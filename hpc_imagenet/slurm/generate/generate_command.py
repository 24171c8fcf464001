"""``python -m hpc_imagenet.slurm.generate OPTIONS [-- TRAINING FLAGS]``: the batch file on stdout; ``--write-examples``
rewrites the committed slurm/*.sh. A refused option is one line on stderr and exit status 2."""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from hpc_imagenet.imagenet.common.exit_codes import EXIT_USAGE
from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.slurm.generate.examples import EXAMPLES, EXAMPLES_DIR, render_example
from hpc_imagenet.slurm.generate.options import spec_from_args
from hpc_imagenet.slurm.generate.renderer import render
from hpc_imagenet.slurm.generate.spec import GenerateError


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--write-examples" in argv:
            for name in EXAMPLES:
                write_text(EXAMPLES_DIR / f"{name}.sh", render_example(name))
                print(f"wrote slurm/{name}.sh", file=sys.stderr)
            return 0
        sys.stdout.write(render(spec_from_args(argv)))
        return 0
    except GenerateError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE

