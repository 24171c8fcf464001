"""Where rank 0 listens: torch's default port, a port derived from a job id (the same formula in Python and
in the generated batch files), a free port picked by the kernel, and the loopback address."""
from __future__ import annotations

import socket
import zlib

from hpc_imagenet.launch.errors import LaunchError

DEFAULT_PORT = 29500  # torch's own default, used when nothing better is known
# Ports derived from a job id land in [PORT_BASE, PORT_BASE + PORT_SPAN): below Linux's ephemeral
# range (32768+), so a derived port is not already taken by some outgoing connection.
PORT_BASE = 12000
PORT_SPAN = 20000
LOOPBACK = "127.0.0.1"


def free_port(host: str = "") -> int:
    """A TCP port nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def derive_port(job_id: str) -> int:
    """A port that is the same on every rank of one job and differs between jobs.

    Numeric ids (SLURM) map to consecutive ports, so two jobs sharing a node collide only when
    their ids differ by a multiple of PORT_SPAN; other ids (an MPI namespace) are hashed.
    """
    key = str(job_id).strip()
    if not key:
        raise LaunchError("cannot derive a port from an empty job id: set MASTER_PORT")
    number = int(key) if key.isdigit() else zlib.crc32(key.encode())
    return PORT_BASE + number % PORT_SPAN
