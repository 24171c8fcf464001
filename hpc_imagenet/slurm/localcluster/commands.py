"""Running the host's commands for the local cluster and waiting on its state: the two errors the
package raises, one subprocess call that fails with the command's own message, a poll with a
deadline, and finding SLURM's daemons in /usr/sbin (not on every user's PATH)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Callable, Mapping, Optional, Sequence, TypeVar

SLURM_SBIN = ("/usr/sbin", "/usr/bin")

T = TypeVar("T")


class ClusterUnavailable(RuntimeError):
    """This machine cannot host the local cluster; the message says why."""


class ClusterError(RuntimeError):
    """The cluster was expected to work and did not; the message points at the logs."""


def wait_for(what: str, check: Callable[[], Optional[T]], timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; raise ClusterError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def sh(cmd: Sequence[str], check: bool = True, env: Optional[Mapping[str, str]] = None,
       timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command, capture text output; on failure raise with its stderr in the message."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=None if env is None else dict(env),
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
    return proc


def sbin_path() -> str:
    """PATH with SLURM's sbin folders first: slurmctld, slurmd and munged live there."""
    return os.pathsep.join([*SLURM_SBIN, os.environ.get("PATH", "")])


def which(name: str) -> Optional[str]:
    return shutil.which(name, path=sbin_path())
