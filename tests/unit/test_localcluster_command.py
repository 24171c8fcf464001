"""The local cluster's command line without a cluster: impossible shapes get one line and exit 2,
before anything starts (the cluster tier runs the command for real)."""
from __future__ import annotations

import pytest

from hpc_imagenet.slurm.localcluster.__main__ import build_parser, main


@pytest.mark.parametrize("argv", [["--nodes", "0"], ["--gpus-per-node", "-1"]])
def test_an_impossible_shape_is_one_line_and_exit_2(argv, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nodes must be at least 1"), err


def test_the_command_after_the_separator_is_kept_whole() -> None:
    args = build_parser().parse_args(["--nodes", "3", "--", "srun", "-N2", "hostname"])
    assert (args.nodes, args.cmd, args.accounting) == (3, ["--", "srun", "-N2", "hostname"], True)
