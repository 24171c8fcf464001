"""The launcher is detected once per process: the settings' batch and the process layout both come
from that one detection, so the two can never disagree."""
from __future__ import annotations

from hpc_imagenet.launch import environment

from hpc_imagenet.imagenet.run import processes, train_command

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
            "MASTER_PORT": "1234", "TORCHELASTIC_RUN_ID": "x", "GROUP_RANK": "0"}


def test_main_detects_the_launcher_once_and_hands_it_on(monkeypatch):
    detected, started = [], []
    real_detect = environment.detect

    def detect(environ=None):
        detected.append(real_detect(TORCHRUN))
        return detected[-1]

    monkeypatch.setattr(environment, "detect", detect)
    monkeypatch.setattr(processes, "start", lambda cfg, launcher: started.append((cfg, launcher)) or 0)
    assert train_command.main("ddp", ["--dummy", "-b", "8"]) == 0
    (cfg, launcher), = started
    assert len(detected) == 1 and launcher is detected[0]
    assert (cfg.batch.launcher, cfg.batch.processes, cfg.batch.global_batch) == (launcher.name, 4, 32)
