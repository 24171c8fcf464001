"""The training loop: train_epoch, validate and fit, the same for all four variants.

What differs between variants (the parallel wrapper, the precision backend) is built elsewhere and
handed in as :class:`Parts`; the loop only calls their common methods. One optimizer step is
:mod:`hpc_imagenet.imagenet.train.step`'s, the validation pass and an epoch's lines
:mod:`hpc_imagenet.imagenet.train.evaluation`'s,
the progress a requeue keeps :mod:`hpc_imagenet.imagenet.train.progress`'s; this module decides when each happens and
what is saved. The host waits for the device only at print boundaries and epoch ends. Those are also
the safe points where every rank agrees whether a preemption signal asked it to stop: at a print
boundary inside an epoch (a checkpoint is saved there) and right after each end-of-epoch checkpoint,
so a signal that comes in an epoch's last print interval or during validation is acted on before the
next epoch starts.

A print boundary has one small all-gather (:meth:`Trainer._boundary`) that carries, from every
rank: its stop flag, whether --checkpoint-every-minutes has elapsed on its clock (so every rank
agrees on the step to checkpoint at), and its step and data-wait times (to name stragglers).
Periodic checkpoints (--checkpoint-every-steps, --checkpoint-every-minutes) and the epoch-end ones
are copied to host memory and written in the background (hpc_imagenet.imagenet.train.checkpoint_writer); a stop
signal's checkpoint is written before the process goes on to exit.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import torch

from hpc_imagenet.imagenet.common import cputime, startup, terminal
from hpc_imagenet.imagenet.common.exit_codes import EXIT_PREEMPTED
from hpc_imagenet.imagenet.config import WARMUP_STEPS
from hpc_imagenet.imagenet.data.loader import Batches, set_epoch
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer
from hpc_imagenet.imagenet.data.resolution import ResolutionRamp
from hpc_imagenet.imagenet.model.ema import WeightAverage
from hpc_imagenet.imagenet.model.precision import Precision
from hpc_imagenet.imagenet.process import group, preemption
from hpc_imagenet.imagenet.process.preemption import StopSignal
from hpc_imagenet.imagenet.train import checkpoint, checkpoint_writer, evaluation, profiling, time_to_accuracy
from hpc_imagenet.imagenet.train.metrics import EpochMeter, StepBreakdown, StepClock, StepTimes, synchronize
from hpc_imagenet.imagenet.train.mixing import Mix, hard_labels
from hpc_imagenet.imagenet.train.progress import Throughput, TrainState
from hpc_imagenet.imagenet.train.runrecord import RunRecord
from hpc_imagenet.imagenet.train.step import Stepper
from hpc_imagenet.imagenet.train.stragglers import StragglerWatch
from hpc_imagenet.imagenet.train.tblog import NullLogger

__all__ = ["EXIT_PREEMPTED", "Parts", "Trainer", "TrainState", "Throughput", "steps_per_epoch"]

log = logging.getLogger(__name__)


@dataclass
class Parts:
    """Everything the loop uses, built by hpc_imagenet.imagenet.run.build."""
    model: torch.nn.Module          # what the step calls (DDP/DP-wrapped, maybe compiled)
    raw_model: torch.nn.Module      # the bare module: checkpoints and validation
    eval_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    precision: Precision
    criterion: torch.nn.Module
    train_loader: Batches
    val_loader: Batches
    normalizer: DeviceNormalizer
    tb: NullLogger                  # TensorBoard on rank 0, a logger that does nothing elsewhere
    record: RunRecord
    run_dir: Path
    ema: Optional[WeightAverage] = None  # validated beside the model
    mix: Optional[Mix] = None       # the batch transform (Mixup/CutMix)
    resolution: Optional[ResolutionRamp] = None  # the train size per epoch (progressive resizing)


def steps_per_epoch(train_batches: int, cfg) -> int:
    """Optimizer steps per epoch from the loader's TRAIN_BATCHES (micro-batches when accumulating),
    cut to --steps-per-epoch (CFG: the settings)."""
    steps = train_batches // cfg.batch.accum_steps
    return min(steps, cfg.data.steps_per_epoch or steps)


class Trainer:
    """The loop over one run's PARTS: train_epoch, validate, fit and evaluate, with its checkpoints."""

    def __init__(self, cfg, info: group.DistInfo, parts: Parts, stop: StopSignal):
        self.cfg, self.info, self.p, self.stop = cfg, info, parts, stop
        self.state = TrainState(epoch=cfg.optim.start_epoch)
        self.throughput = Throughput()
        self.steps_per_epoch = steps_per_epoch(len(parts.train_loader), cfg)
        self.global_batch = cfg.batch.global_batch
        self.console = terminal.console(info.is_primary, log)  # rank 0 shows; the others stay quiet
        self.stop_dir = parts.run_dir if info.is_primary else None  # rank 0 alone reads the stop file
        self.skipped_seen = 0  # overflowed fp16 steps already reported
        self.profiler = profiling.start(cfg.logging.profile_steps, WARMUP_STEPS, info.is_primary, parts.run_dir,
                                        info.device, lambda summary: parts.record.update(profile=summary))
        self.step_times = StepTimes(info.device, cfg.logging.step_times)
        self.breakdown = StepBreakdown(info.device)
        self.stepper = Stepper(cfg, info, parts, self.console)
        self.writer = checkpoint_writer.for_rank(info.is_primary, parts.run_dir, cfg.checkpoint.keep_checkpoints)
        self.last_checkpoint = time.monotonic()
        self.periodic_saves = 0
        self.stragglers = StragglerWatch.for_run(cfg.logging.straggler_threshold)
        self.core_s_before = 0.0  # CPU seconds of the attempts before a resume
        # the run's first step is announced, so a log shows when training began (the time-to-accuracy
        # benchmark reads the start-up time from it, as it reads main.py's line after its first step)
        self.first_step_pending = True
        self.eval_weights = cfg.model.eval_weights or ("ema" if parts.ema is not None else "model")

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self, elapsed_s: Optional[float] = None) -> dict:
        s = self.state
        return {"version": 1, "arch": self.cfg.model.arch, "epoch": s.epoch, "step_in_epoch": s.step_in_epoch,
                "global_batch": self.global_batch,  # a restart with other node counts keeps the sample position
                "best_top1": s.best_top1, "elapsed_s": s.elapsed_s if elapsed_s is None else elapsed_s,
                "history": s.history,
                "model": self.p.raw_model.state_dict(), "optimizer": self.p.optimizer.state_dict(),
                "scheduler": self.p.scheduler.state_dict(), "precision": self.p.precision.state_dict(),
                "rng": checkpoint.rng_state(), "config": self.cfg.to_dict(),
                **({"ema": self.p.ema.state_dict()} if self.p.ema is not None else {})}

    def load_state_dict(self, ckpt: dict) -> None:
        s = self.state
        s.epoch, s.step_in_epoch = int(ckpt["epoch"]), int(ckpt["step_in_epoch"])
        s.best_top1, s.elapsed_s = float(ckpt["best_top1"]), float(ckpt["elapsed_s"])
        s.history = list(ckpt.get("history", []))
        self.core_s_before = float(s.history[-1].get("core_s", 0.0)) if s.history else 0.0
        peak = list(self.p.scheduler.base_lrs)  # this world size's, before the checkpoint's replace them
        self.p.optimizer.load_state_dict(ckpt["optimizer"])
        self.p.scheduler.load_state_dict(ckpt["scheduler"])
        self.p.precision.load_state_dict(ckpt["precision"])
        if self.p.ema is not None and "ema" in ckpt:  # else the average starts from the resumed weights
            self.p.ema.load_state_dict(ckpt["ema"])
        self.skipped_seen = self.p.precision.skipped_steps
        checkpoint.set_rng_state(ckpt["rng"])
        saved_batch = int(ckpt.get("global_batch", self.global_batch))
        if saved_batch != self.global_batch:
            self._carry_over(checkpoint.sample_position(ckpt), saved_batch, peak)

    def _carry_over(self, samples: int, saved_batch: int, peak: List[float]) -> None:
        """Resume at sample SAMPLES of the epoch with another global batch (a requeue on fewer or more nodes).

        The epoch's samples were consumed in the order of one permutation (the sampler's, the same
        for any world size), so the position is a global sample count: the new step is that count
        over the new global batch. The LR schedule is the one this world size would have had from
        the start (peak lr scaled to the new global batch, warm-up and decay per epoch), at the
        same point of training; momentum and the other optimizer state carry over.
        """
        s, sched = self.state, self.p.scheduler
        s.step_in_epoch, rest = divmod(samples, self.global_batch)
        if rest:
            self.console.warn("global batch %d -> %d: sample %d of epoch %d is not a step boundary; %d sample(s) "
                              "are trained again", saved_batch, self.global_batch, samples, s.epoch, rest)
        sched.base_lrs = peak
        sched.last_epoch = s.epoch * self.steps_per_epoch + s.step_in_epoch
        lrs = [base * f(sched.last_epoch) for base, f in zip(peak, sched.lr_lambdas)]
        for param_group, base, lr in zip(self.p.optimizer.param_groups, peak, lrs):
            param_group["initial_lr"], param_group["lr"] = base, lr
        sched._last_lr = lrs
        self.console.say(f"=> global batch {saved_batch} -> {self.global_batch}: resuming at sample {samples} of "
                         f"epoch {s.epoch} (step {s.step_in_epoch}/{self.steps_per_epoch}); peak lr {peak[0]:.4g} for "
                         f"the new global batch, lr now {lrs[0]:.4g}")

    def save(self, is_best: bool = False) -> None:
        """The epoch-end checkpoint, written in the background."""
        self.writer.save(self.state_dict, is_best)
        self.last_checkpoint = time.monotonic()

    def _steps_due(self, epoch: int, done: int) -> bool:
        every = self.cfg.checkpoint.checkpoint_every_steps
        return every > 0 and (epoch * self.steps_per_epoch + done) % every == 0

    def _save_periodic(self, epoch: int, done: int, clock: StepClock) -> None:
        """A checkpoint at the exact mid-epoch position, as a stop signal's; written in the background."""
        s = self.state
        s.epoch, s.step_in_epoch = epoch, done
        elapsed = s.elapsed_s + clock.elapsed()
        self.writer.save(lambda: self.state_dict(elapsed_s=elapsed))
        self.last_checkpoint = time.monotonic()
        self.periodic_saves += 1

    # ---------------------------------------------------------------- one training epoch
    def train_epoch(self, epoch: int) -> Optional[dict]:
        """Train one epoch; None when a stop signal interrupted it (after saving a checkpoint)."""
        p, cfg = self.p, self.cfg
        p.model.train()
        first = self.state.step_in_epoch
        resolution = p.resolution.at(epoch) if p.resolution is not None else None
        set_epoch(p.train_loader, epoch, first * cfg.batch.per_process_step, resolution)
        meter, clock = EpochMeter(self.info.device), StepClock()
        warm = min(WARMUP_STEPS, (self.steps_per_epoch - first) // 4)
        interval = (first, time.perf_counter(), 0.0)
        steady_start = clock.start if warm == 0 else None
        steady_data0 = 0.0
        loader = iter(p.train_loader)
        self.step_times.restart()
        self.step_times.mark(counted=False)
        for step in range(first, self.steps_per_epoch):
            self.breakdown.asking(counted=step - 1 - first >= warm)  # ends the step before: steady or warm-up
            batches = [next(loader) for _ in range(cfg.batch.accum_steps)]
            if self.first_step_pending:
                startup.mark("loader workers started, first batch")
            self.breakdown.ready(counted=step - first >= warm)
            clock.data_ready()
            results = self.stepper.step(batches)
            self.profiler.step()
            for loss, output, target in results:
                meter.update(loss, output, hard_labels(target))
            done = step + 1
            self.step_times.mark(counted=done - first > warm)
            if done - first == warm and steady_start is None:
                synchronize(self.info.device)
                steady_start, steady_data0 = time.perf_counter(), clock.data_s
            stop = due = False
            if self.first_step_pending:
                self._first_step_done()
            if done % cfg.logging.print_freq == 0 or done == self.steps_per_epoch:
                interval, times = self._report(epoch, done, loss, meter, interval, clock)
                stop, due = self._boundary(times)
            # the last step is left to fit(): it checks for a stop right after the epoch's checkpoint
            if done < self.steps_per_epoch:
                if stop:
                    self._preempt(epoch, done, clock)
                    return None
                if due or self._steps_due(epoch, done):
                    self._save_periodic(epoch, done, clock)
            clock.step_done()  # after the print-boundary syncs: waiting on the GPU is not waiting for data
        self.breakdown.asking(counted=self.steps_per_epoch - 1 - first >= warm)  # the last step's host time ends here
        synchronize(self.info.device)
        self.profiler.close()  # the capture covers the first epoch at most
        self.step_times.flush()
        self.breakdown.flush()
        self.breakdown.epoch_end()
        wall = clock.elapsed()
        self._count_steady(steady_start, clock.data_s - steady_data0, self.steps_per_epoch - first - warm, warm)
        self.state.elapsed_s += wall
        stats = meter.global_()
        return {"train_loss": stats["loss"], "train_top1": stats["top1"], "train_top5": stats["top5"],
                "train_samples": stats["samples"],
                "train_images_per_s": stats["samples"] / wall, "train_time_s": wall,
                "data_time_s": clock.data_s, "lr": p.optimizer.param_groups[0]["lr"]}

    def _count_steady(self, start: Optional[float], data_s: float, steps: int, warm: int) -> None:
        if start is not None and steps > 0:
            self.throughput.count(time.perf_counter() - start, data_s, steps,
                                  steps * self.cfg.batch.per_process_step, warm)

    def _report(self, epoch: int, done: int, loss: torch.Tensor, meter: EpochMeter, interval,
                clock: StepClock) -> tuple:
        """Print and log one interval (the only per-interval host sync). Returns the next interval's
        start and this interval's (step ms, data-wait ms)."""
        synchronize(self.info.device)
        self.step_times.flush()
        self.breakdown.flush()
        now = time.perf_counter()
        steps, seconds = done - interval[0], now - interval[1]
        times = (1000 * seconds / max(steps, 1), 1000 * (clock.data_s - interval[2]) / max(steps, 1))
        rate = steps * self.global_batch / seconds if seconds > 0 else 0.0
        local = meter.local()
        global_step = epoch * self.steps_per_epoch + done
        lr = self.p.optimizer.param_groups[0]["lr"]
        scale = self.p.precision.loss_scale
        self._warn_skipped_steps(scale)
        self.p.tb.scalars({"Step/loss": float(loss.item()), "Step/images_per_s": rate, "Step/lr": lr,
                           "Step/loss_scale": scale}, global_step)
        self.console.progress(f"Epoch: [{epoch}][{done:>{len(str(self.steps_per_epoch))}}/{self.steps_per_epoch}]  "
                              f"loss {local['loss']:.4f}  top1 {local['top1']:6.2f}  top5 {local['top5']:6.2f}  "
                              f"lr {lr:.4g}  {rate:8.1f} img/s" + (f"  scale {scale:g}" if scale else ""),
                              final=done >= self.steps_per_epoch)
        return (done, time.perf_counter(), clock.data_s), times

    def _first_step_done(self) -> None:
        """Say, once a run, that its first training step has finished (on the device too)."""
        self.first_step_pending = False
        synchronize(self.info.device)
        startup.mark("first training step (cuDNN's autotuning included)")
        self.p.record.update(startup=startup.breakdown())
        self.console.say(time_to_accuracy.FIRST_STEP_LINE)

    def _boundary(self, times: tuple) -> tuple:
        """The print boundary's one collective: (stop, checkpoint due) agreed by every rank, and the
        slowest rank named when it lags (hpc_imagenet.imagenet.train.stragglers)."""
        self.writer.check()  # a background write that failed ends the run here, as a failed save always did
        mine = self.stop.pending(self.stop_dir)
        minutes = self.cfg.checkpoint.checkpoint_every_minutes
        due = minutes > 0 and time.monotonic() - self.last_checkpoint >= 60 * minutes
        rows = group.all_gather_floats([float(mine), float(due), *times], self.info.device)
        line = self.stragglers.observe([row[2:] for row in rows])
        if line:
            self.console.warn(line)
        return any(row[0] for row in rows), any(row[1] for row in rows)

    def _warn_skipped_steps(self, scale: Optional[float]) -> None:
        """fp16 steps whose gradients overflowed were skipped on the device; say so at the print boundary."""
        skipped = self.p.precision.skipped_steps
        if skipped > self.skipped_seen:
            self.console.warn("%d step(s) skipped since the last report: gradient overflow; loss scale now %g",
                              skipped - self.skipped_seen, scale or 0.0)
        self.skipped_seen = skipped

    def _stop_requested(self) -> bool:
        """True on every rank when any rank got a stop signal (rank 0 also looks for the stop file)."""
        mine = self.stop.pending(self.stop_dir)
        return group.any_rank(mine, self.info.device)

    def _preempt(self, epoch: int, done: int, clock: StepClock) -> None:
        self.console.end_progress()  # the stop's messages start on a line of their own
        self.state.elapsed_s += clock.elapsed()
        self.state.epoch, self.state.step_in_epoch = epoch, done
        self.writer.save_now(self.state_dict)  # after the write in flight, if any
        self._stopped(epoch, done)

    def _stopped(self, epoch: int, step: int) -> None:
        """The checkpoint for (EPOCH, STEP) is saved: mark the run preempted, then let every rank go."""
        self.p.record.update(status="preempted", preempted_at={"epoch": epoch, "step": step})
        self.writer.wait()  # an epoch-end checkpoint may still be in flight
        preemption.clear_stop_file(self.stop_dir)
        # No rank may exit before rank 0's checkpoint is on disk: launchers kill the rest of the job
        # as soon as one process ends, which would cut the save short.
        group.barrier(self.info.device)
        self.console.say(f"\nstop signal ({self.stop.name}): checkpoint saved at epoch {epoch} step {step}; "
                         "restart with --resume auto to continue")

    # ---------------------------------------------------------------- validation
    def validate(self, model: Optional[torch.nn.Module] = None) -> dict:
        """Validate MODEL (default: the trained model)."""
        return evaluation.validate(self.p.eval_model if model is None else model, self.p, self.info.device,
                                   self.cfg.data.val_steps)

    # ---------------------------------------------------------------- the run
    def _log_epoch(self, epoch: int, row: dict) -> None:
        self.p.tb.scalars(evaluation.epoch_scalars(row), epoch)
        self.p.tb.flush()
        self.console.say(evaluation.epoch_line(epoch, row, self.cfg.optim.eval_every))

    def _validate_declared(self) -> dict:
        """One evaluation, of the weights the run is scored on (--eval-weights): the same at every
        evaluation, so a curve never switches between the model and its average."""
        row = self.validate(self.p.ema.module if self.eval_weights == "ema" else None)
        self.state.elapsed_s += row["val_time_s"]
        return {**row, "val_weights": self.eval_weights}

    def _reached(self, top1: float) -> bool:
        return self.cfg.optim.desired_acc is not None and top1 >= 100.0 * self.cfg.optim.desired_acc

    def fit(self) -> int:
        """Train to --epochs, --desired-acc or --time-budget-minutes; returns the process exit code."""
        status = "finished"
        epoch = self.state.epoch
        while epoch < self.cfg.optim.epochs:
            train_row = self.train_epoch(epoch)
            if train_row is None:
                return EXIT_PREEMPTED
            over_budget = self._over_budget()
            row = {"epoch": epoch, **train_row}
            validated = self._validation_due(epoch) or over_budget
            if validated:
                row.update(self._validate_declared())
            row.update(elapsed_s=self.state.elapsed_s, core_s=self._core_s())
            self.state.history.append(row)
            top1 = row.get("val_top1")
            is_best = validated and top1 > self.state.best_top1
            if validated:
                self.state.best_top1 = max(self.state.best_top1, top1)
            self.state.epoch, self.state.step_in_epoch = epoch + 1, 0
            self._log_epoch(epoch, row)
            self.save(is_best)
            self._write_record("running")
            epoch += 1
            if validated and self._reached(top1) and status != "reached_desired_acc":
                status = "reached_desired_acc"
                whose = " (EMA)" if row["val_weights"] == "ema" else ""
                self.console.say(f"Reached desired accuracy: val top1 {top1:.2f}%{whose} >= "
                                 f"{100 * self.cfg.optim.desired_acc:.2f}% after {epoch} epochs, "
                                 f"{self.state.elapsed_s:.1f} s of training and validation")
                if self.cfg.optim.time_budget_minutes is None:
                    break  # with a time budget, the run goes on to it (time to the target is recorded)
            if over_budget and epoch < self.cfg.optim.epochs:
                status = "time_budget" if status == "finished" else status
                self.console.say(f"Time budget of {self.cfg.optim.time_budget_minutes:g} min used after {epoch} "
                                 f"epochs ({self.state.elapsed_s:.1f} s of training and validation)")
                break
            # a safe point: the epoch's checkpoint is saved. After the last epoch there is nothing
            # left to requeue for, so the run finishes (exit 0) even when a signal came.
            if epoch < self.cfg.optim.epochs and self._stop_requested():
                self._stopped(epoch, 0)
                return EXIT_PREEMPTED
        self.writer.wait()
        self._write_record(status, weight_checksums=self._weight_checksums())
        preemption.clear_stop_file(self.stop_dir)  # a request that came too late to matter
        d = self.p.run_dir
        self.console.say(f"=> done ({status}): best val top1 {self.state.best_top1:.2f}%; checkpoints "
                         f"{d / checkpoint.CHECKPOINT} and {d / checkpoint.BEST}; results {d / 'run.json'}; "
                         f"TensorBoard: tensorboard --logdir {d}")
        return 0

    def _validation_due(self, epoch: int) -> bool:
        return self.cfg.optim.validation_due(epoch + 1)

    def _over_budget(self) -> bool:
        """True on every rank once any rank's training and validation time reaches --time-budget-minutes
        (each rank's clock differs a little; all must stop at the same epoch)."""
        budget = self.cfg.optim.time_budget_minutes
        if budget is None:
            return False
        return group.any_rank(self.state.elapsed_s >= 60.0 * budget, self.info.device)

    def _core_s(self) -> float:
        """CPU seconds of every rank's process tree so far, summed (one small collective), plus
        those of earlier attempts of a resumed run."""
        now = sum(group.all_gather_float(cputime.process_tree_cpu_s(), self.info.device))
        return self.core_s_before + now

    def _weight_checksums(self) -> List[float]:
        """One number per rank summarising its weights: equal when DDP kept the replicas in sync."""
        with torch.no_grad():
            local = sum(float(p.double().sum() + p.double().pow(2).sum()) for p in self.p.raw_model.parameters())
        return group.all_gather_float(local, self.info.device)

    def _write_record(self, status: str, **final_extra: Any) -> None:
        s = self.state
        throughput = self.throughput.as_dict(self.info.world_size, self.info.device)
        if self.cfg.logging.step_times:
            throughput["step_times_ms"] = self.step_times.ms
        throughput["breakdown"] = self.breakdown.medians()
        saves = {**self.writer.stats.as_dict(), "periodic": self.periodic_saves,
                 "every_steps": self.cfg.checkpoint.checkpoint_every_steps,
                 "every_minutes": self.cfg.checkpoint.checkpoint_every_minutes}
        self.p.record.update(
            status=status, epochs=s.history, throughput=throughput, checkpoints=saves,
            ranks=self.stragglers.summary(),
            time_to_accuracy=time_to_accuracy.summary(s.history, self.cfg.optim.desired_acc, self.cfg.optim.eval_every,
                                                      self.info.world_size, self.info.device.type),
            final={"best_top1": s.best_top1, "epochs_run": s.epoch, "elapsed_s": s.elapsed_s,
                   "reached_desired_acc": status == "reached_desired_acc",
                   "last_val_top1": next((r["val_top1"] for r in reversed(s.history) if "val_top1" in r), None),
                   "skipped_steps": self.p.precision.skipped_steps, **final_extra})

    def evaluate(self) -> int:
        row = self.validate()
        self.console.say(evaluation.evaluation_line(row))
        self.p.record.update(status="evaluated", evaluation=row)
        return 0
