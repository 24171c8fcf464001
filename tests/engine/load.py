"""CPU load beside a test: busy-looping processes, one per core, so that worker processes are
descheduled at awkward moments (a pool hang on an error showed up only under load)."""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def cpu_burners(count: int = 0) -> Iterator[None]:
    """COUNT (default: the core count) processes spinning at full CPU while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(count or os.cpu_count() or 2)]
    try:
        yield
    finally:
        for proc in procs:  # only the processes started here, by their own handles
            proc.kill()
            proc.wait()
