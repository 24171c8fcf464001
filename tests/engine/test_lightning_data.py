"""The engine's data path as a LightningDataModule under a real Lightning Trainer (one CPU process): the model is
fed normalised float batches of this rank's share, validation sees every image, a distributed trainer that
would shard the batches a second time is refused in one line, and a run stopped in mid-epoch resumes at the next
batch."""
from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from hpc_imagenet.imagenet.data import demo
from hpc_imagenet.imagenet.data.lightning_data import ImageNetDataModule
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer


class Recorder(pl.LightningModule):
    """A linear classifier that keeps what each step was fed."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, classes))
        self.fed, self.validated = [], 0

    def training_step(self, batch, batch_idx):
        images, target = batch
        self.fed.append(images.detach().clone())
        return nn.functional.cross_entropy(self.net(images), target)

    def validation_step(self, batch, batch_idx):
        self.validated += len(batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_trainer_fits_on_the_engines_batches(tmp_path):
    root = demo.generate(tmp_path / "photos", classes=2, train_per_class=12, val_per_class=5, size=(40, 32))
    data = ImageNetDataModule(root, batch_size=4, image_size=16, workers=0)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, limit_train_batches=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         use_distributed_sampler=False, num_sanity_val_steps=0, default_root_dir=tmp_path)
    data.trainer = trainer  # setup() reads the trainer's place; fit() sets it too
    data.setup("fit")
    model = Recorder(data.num_classes)
    trainer.fit(model, datamodule=data)
    assert len(model.fed) == 2 and all(images.dtype == torch.float32 for images in model.fed)
    first, _ = next(iter(data.loaders.train_batches))  # epoch 0 again: the same first batch, as uint8
    assert torch.equal(model.fed[0], DeviceNormalizer(torch.device("cpu"), False)(first))
    assert model.validated == 10


def test_a_distributed_trainer_keeping_lightnings_sampler_is_refused(tmp_path):
    """The check reads the trainer's place and its sampler setting; a stand-in of a 2-process trainer here."""
    data = ImageNetDataModule(tmp_path, batch_size=4)
    data.trainer = SimpleNamespace(world_size=2, global_rank=0,
                                   _accelerator_connector=SimpleNamespace(use_distributed_sampler=True))
    with pytest.raises(ValueError, match="use_distributed_sampler=False") as err:
        data.setup("fit")
    assert "\n" not in str(err.value)


class StopAfter(pl.Callback):
    """Save a checkpoint at the end of batch STEPS - 1 and stop there, as the requeue callback does at a signal."""

    def __init__(self, steps: int, path) -> None:
        self.steps, self.path = steps, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.steps:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def _trainer(tmp_path, **more) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, limit_val_batches=0, default_root_dir=tmp_path, **more)


def test_a_run_stopped_in_mid_epoch_resumes_at_the_next_batch(tmp_path):
    """Stopped after 3 of an epoch's 6 batches, resumed from its checkpoint: the second run is fed batches 4-6,
    so the two runs together are fed the epoch's batches once each, in order."""
    root = demo.generate(tmp_path / "photos", classes=2, train_per_class=12, val_per_class=1, size=(40, 32))
    ckpt = tmp_path / "stopped.ckpt"
    fed = []
    for callbacks, resume in (([StopAfter(3, ckpt)], None), ([], ckpt)):
        data = ImageNetDataModule(root, batch_size=4, image_size=16, workers=0)
        model = Recorder(2)
        _trainer(tmp_path, callbacks=callbacks).fit(model, datamodule=data, ckpt_path=resume)
        fed.append(model.fed)
    assert [len(run) for run in fed] == [3, 3]
    data.loaders.set_epoch(0)
    normalise = DeviceNormalizer(torch.device("cpu"), False, reuse=False)  # each batch its own tensor
    epoch = [normalise(images) for images, _ in data.loaders.train_batches]
    assert len(epoch) == 6 and all(torch.equal(a, b) for a, b in zip(fed[0] + fed[1], epoch))
