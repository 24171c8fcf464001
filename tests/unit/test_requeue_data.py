"""The data a batch file gives your own script: $HPC_IMAGENET_DATA, made this node's staged copy by the runner."""
from __future__ import annotations

import pytest

from hpc_imagenet import requeue
from hpc_imagenet.imagenet.data import staging
from hpc_imagenet.requeue.runner import StagedDataError, staged_data


def _source(tmp_path):
    source = tmp_path / "shared" / "imagenet"
    (source / "train" / "a").mkdir(parents=True)
    (source / "train" / "a" / "1.jpg").write_bytes(b"not decoded here")
    return source


def test_the_runner_gives_the_script_its_nodes_copy(tmp_path, monkeypatch) -> None:
    source, node_tmp = _source(tmp_path), tmp_path / "node1-tmp"
    copy = staging.destination(str(source), node_tmp)
    staging.stage(str(source), copy)  # what the batch file's staging step did on this node
    monkeypatch.setenv("NODE_TMP", str(node_tmp))
    environ = {requeue.DATA_ENV: str(source), requeue.STAGE_DIR_ENV: "$NODE_TMP"}  # expanded here, on the node
    staged_data(environ)
    assert environ == {requeue.DATA_ENV: str(copy)}  # the stage folder is resolved once, for good
    monkeypatch.setenv(requeue.DATA_ENV, environ[requeue.DATA_ENV])
    assert requeue.data_dir("/elsewhere") == copy and (copy / "train" / "a" / "1.jpg").is_file()


def test_an_incomplete_copy_is_one_line(tmp_path) -> None:
    source = _source(tmp_path)
    environ = {requeue.DATA_ENV: str(source), requeue.STAGE_DIR_ENV: str(tmp_path / "never-staged")}
    with pytest.raises(StagedDataError, match="is not a complete copy of .* on this node") as err:
        staged_data(environ)
    assert "\n" not in str(err.value)


def test_without_staging_the_script_reads_data_where_it_is(monkeypatch) -> None:
    environ = {requeue.DATA_ENV: "/shared/imagenet"}
    staged_data(environ)
    assert environ == {requeue.DATA_ENV: "/shared/imagenet"}
    monkeypatch.delenv(requeue.DATA_ENV, raising=False)
    assert str(requeue.data_dir("/my/default")) == "/my/default"
    assert requeue.data_dir() is None
