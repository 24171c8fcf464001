"""--cuda-graph for real: on a CPU the run trains eagerly and says why in one line; on a GPU the captured
step trains as the eager one does (marked gpu: run where CUDA is)."""
import pytest
import torch

from tests.helpers import TINY, explain, read_run, script
from tests.warm_start import warm_python

STEPS = ["--dummy", "--dummy-size", "96", "--num-classes", "10", "--epochs", "2", "-p", "4", "--val-steps", "1",
         "--seed", "0"]


def _run(tmp_path, name, *flags):
    proc = warm_python(script("imagenet_nd.py"), *TINY, *STEPS, *flags, "--log-dir", tmp_path / name)
    assert proc.returncode == 0, explain(proc)
    return proc, read_run(tmp_path / name)


def test_without_a_gpu_the_step_stays_eager_and_says_why(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the graph is captured (test_the_graph_trains_as_eager_does)")
    proc, run = _run(tmp_path, "cpu", "--cuda-graph")
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "--cuda-graph:" in line]
    assert said == [said[0]] and said[0].endswith("--cuda-graph: it needs a CUDA GPU; running the step eagerly")
    assert run["status"] == "finished" and len(run["epochs"]) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("precision", [[], ["--opt-level", "O1", "--amp-dtype", "bfloat16"]], ids=["fp32", "bf16"])
def test_the_graph_trains_as_eager_does(tmp_path, precision):
    deterministic = ["--deterministic", "--gpu", "0", *precision]
    proc, graph = _run(tmp_path, "graph", *deterministic, "--cuda-graph")
    _, eager = _run(tmp_path, "eager", *deterministic)
    assert "the training step is captured after 3 eager steps" in proc.stdout + proc.stderr, explain(proc)
    for mine, theirs in zip(graph["epochs"], eager["epochs"]):  # the same seed, data and steps: the same training
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=0.02, abs=0.02)
    assert graph["throughput"]["breakdown"]["device_ms"] > 0
