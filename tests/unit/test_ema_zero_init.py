"""The weights' EMA in closed form over a few steps and restored on resume; zero-init residual
blocks start as the identity."""
import pytest
import torch
import torchvision

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.model import network
from hpc_imagenet.imagenet.model.ema import WeightAverage, adjusted_decay


def _sgd_steps(model, steps, start=0, average=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for it in range(start, start + steps):
        torch.manual_seed(it)
        opt.zero_grad()
        model(torch.randn(3, 4)).square().mean().backward()
        opt.step()
        seen.append(model.weight.detach().clone())
        if average is not None:
            average.after_step(model, it)
    return seen


def test_ema_closed_form_every_step_and_every_second():
    decay = 0.8
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    every_one, every_two = WeightAverage(model, decay), WeightAverage(model, decay, every_steps=2)
    weights = []
    for it in range(5):
        weights += _sgd_steps(model, 1, start=it)
        every_one.after_step(model, it)
        every_two.after_step(model, it)
    want = weights[0]
    for w in weights[1:]:
        want = decay * want + (1 - decay) * w
    torch.testing.assert_close(every_one.module.weight, want)
    # every second step: iterations 1 and 3 (the first update copies)
    torch.testing.assert_close(every_two.module.weight, decay * weights[1] + (1 - decay) * weights[3])


def test_ema_restarts_during_warmup():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    average = WeightAverage(model, 0.5, warmup_steps=3)
    weights = _sgd_steps(model, 5, average=average)
    # warm-up iterations 0-2 each restart; iteration 3 copies, iteration 4 averages
    torch.testing.assert_close(average.module.weight, 0.5 * weights[3] + 0.5 * weights[4])


def test_ema_resumed_from_its_state_dict_matches_an_uninterrupted_run():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    whole = WeightAverage(model, 0.7)
    _sgd_steps(model, 6, average=whole)

    model.load_state_dict(start)
    first = WeightAverage(model, 0.7)
    _sgd_steps(model, 3, average=first)
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_ema = first.state_dict()
    resumed_model = torch.nn.Linear(4, 2)
    resumed_model.load_state_dict(saved_model)
    resumed = WeightAverage(resumed_model, 0.7)
    resumed.load_state_dict(saved_ema)
    _sgd_steps(resumed_model, 3, start=3, average=resumed)
    torch.testing.assert_close(resumed.module.weight, whole.module.weight)
    assert int(resumed.averaged.n_averaged) == 6


def test_adjusted_decay_as_torchvision():
    # torchvision's ResNet-50 recipe: decay 0.99998, 8 GPUs x 128, every 32 steps, 600 epochs
    assert adjusted_decay(0.99998, 1024, 32, 600) == pytest.approx(1 - 2e-5 * 1024 * 32 / 600)
    assert adjusted_decay(0.9, 4096, 32, 1) == 0.0


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_zero_init_residual_blocks_start_as_identity(arch):
    model = network.build(arch, num_classes=10, zero_init_residual=True)
    blocks = [m for m in model.modules() if isinstance(m, (torchvision.models.resnet.BasicBlock,
                                                            torchvision.models.resnet.Bottleneck))]
    assert blocks
    for block in blocks:
        channels = block.conv1.in_channels
        x = torch.rand(2, channels, 4, 4)  # non-negative, as after the ReLU that feeds a block
        shortcut = x if block.downsample is None else block.downsample(x)
        torch.testing.assert_close(block(x), torch.relu(shortcut))
        if block.downsample is None:
            torch.testing.assert_close(block(x), x)


def test_zero_init_residual_is_refused_by_the_settings_on_other_models_and_with_pretrained():
    with pytest.raises(config.ConfigError, match="residual network"):
        config.parse(["--dummy", "--zero-init-residual", "-a", "mobilenet_v3_small"], environ={})
    with pytest.raises(config.ConfigError, match="--pretrained"):
        config.parse(["--dummy", "--zero-init-residual", "--pretrained"], environ={})
