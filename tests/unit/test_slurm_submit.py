"""One job description for hpc_imagenet.slurm.generate and hpc_imagenet.slurm.submit (hpc_imagenet/slurm/job.py): each
of its fields is an
option of both command lines, reaches both descriptions and both batch files, and is checked once,
with the same one-line refusal in both tools. No job is submitted here (tests/cluster/test_slurm_submit.py
submits real ones)."""
from __future__ import annotations

import pytest

from hpc_imagenet.slurm import generate, job
from hpc_imagenet.slurm import submit as sm

# Per field of the shared description: a value both tools take, and one both refuse with the same line.
# A field added to hpc_imagenet/slurm/job.py fails test_the_table_names_every_shared_field until it has a line here.
FIELDS = {
    "name": ("mine", "a'b", "must be non-empty and contain no quotes"),
    "nodes": ("2", "0", "--nodes must be at least 1 (got 0)"),
    "gpus_per_node": ("2", "-1", "--gpus-per-node must be 0 (CPU) or more"),
    "procs_per_node": ("2", "3", "--procs-per-node 3 does not match --gpus-per-node 2: DDP runs one process per GPU"),
    "cpus_per_task": ("3", "0", "--cpus-per-task must be at least 1 (got 0)"),
    "mem": ("64G", "lots", "--mem 'lots' must be a number with an optional K/M/G/T suffix"),
    "time": ("2:00:00", "soon", "time limit 'soon' does not parse"),
    "partition": ("gpu", 'g"pu', "--partition 'g\"pu' must be non-empty and contain no quotes"),
    "account": ("proj", "a\\b", "must be non-empty and contain no quotes or backslashes"),
    "qos": ("high", "'", "must be non-empty and contain no quotes"),
    "constraint": ("a100", "a'100", "must be non-empty and contain no quotes"),
    "variant": ("amp", "fsdp", "unknown variant 'fsdp'; choose one of nd, dp, ddp, amp"),
}
BASE = ["--gpus-per-node", "2"]  # so that --procs-per-node 2 fits in both tools


def _generate(argv):
    return generate.spec_from_args(argv)


def _submit(argv):
    sub, _, _ = sm.submission_from_args(argv)
    return sub


def test_the_table_names_every_shared_field() -> None:
    assert sorted(FIELDS) == sorted(job.option_names())


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_a_shared_field_is_an_option_of_both_tools(name: str) -> None:
    good, _, _ = FIELDS[name]
    flag = f"--{name.replace('_', '-')}"
    argv = [*BASE, flag, good] if name != "gpus_per_node" else [flag, good]
    spec, sub = _generate(argv), _submit(argv)
    typed = int(good) if isinstance(getattr(spec, name), int) else good
    assert getattr(spec, name) == typed and getattr(sub, name) == typed
    generate.validate(spec)
    sm.validate(sub)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_a_shared_field_is_checked_once_with_the_same_line(name: str) -> None:
    _, bad, message = FIELDS[name]
    argv = [*BASE, f"--{name.replace('_', '-')}", bad]
    errors = []
    for make, validate in ((_generate, generate.validate), (_submit, sm.validate)):
        with pytest.raises(job.JobError) as err:
            validate(make(argv))
        assert message in str(err.value) and "\n" not in str(err.value)
        errors.append(str(err.value))
    assert errors[0] == errors[1]


def test_the_site_options_reach_both_batch_files() -> None:
    """The shared description writes the site's #SBATCH lines of a generated file and of a submitit job."""
    argv = ["--partition", "gpu", "--account", "proj", "--qos", "high", "--constraint", "a100", "--mem", "64G"]
    text = generate.render(_generate([*argv, "--gpus-per-node", "2"]))
    executor = sm.make_executor(_submit([*argv, "--cluster", "slurm"]))
    submitit_text = executor._executor._make_submission_file_text("true", "uid")  # submitit's own sbatch text
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --qos=high",
                 "#SBATCH --constraint=a100", "#SBATCH --mem=64G"):
        assert line in text and line in submitit_text


def test_single_process_variants_run_on_one_node_in_both() -> None:
    for variant in ("nd", "dp"):
        messages = set()
        for validate, description in ((generate.validate, generate.JobSpec(variant=variant, nodes=2)),
                                      (sm.validate, sm.Submission(variant=variant, nodes=2))):
            with pytest.raises(job.JobError) as err:
                validate(description)
            messages.add(str(err.value))
        assert messages == {f"the {variant} variant runs on one node; use --nodes 1 (or --variant ddp)"}


def test_older_spellings_set_the_shared_fields() -> None:
    sub = sm.Submission(time_min=90, mem_gb=1.5)
    assert (sub.time, sub.time_seconds, sub.timeout_min, sub.mem) == ("90", 5400, 90, "1536M")
    assert sm.Submission(mem_gb=64).mem == "64G"
    assert _submit(["--time-min", "10"]).timeout_min == 10
    with pytest.raises(sm.SubmitError, match="time limit '0' is zero"):
        sm.validate(sm.Submission(time_min=0))


def test_the_submissions_own_checks() -> None:
    with pytest.raises(sm.SubmitError, match=r"--signal-delay-s 7200 must be between 1 and the time limit \(3600s\)"):
        sm.validate(sm.Submission(signal_delay_s=7200))
    with pytest.raises(sm.SubmitError, match="training flag --log-dir is set by the submission: use log_dir="):
        sm.validate(sm.Submission(train_args=("--log-dir", "x", "/data")))
    with pytest.raises(sm.SubmitError, match="training flag --resume is set by the submission"):
        sm.validate(sm.Submission(train_args=("--resume=auto", "/data")))


def test_a_bad_command_line_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert sm.main(["--nodes", "0", "--cluster", "debug", "--", "/data"]) == 2
    assert capsys.readouterr().err == "error: --nodes must be at least 1 (got 0)\n"
