"""The start budget of a generated batch file: how often a failed training starts again in one
allocation, whoever starts it (the batch script's loop, or torchrun restarting its workers).

Every start of the training is noted in the run folder's ``starts.log``: a line with the start's key
(the allocation = job id and requeue count, the loop's launch, torchrun's restart count), the newest
checkpoint it began from, the time and who noted it. The checkpoint is named by the inode, size and
mtime of ``checkpoint.pth.tar``, which the trainer replaces by a rename at every save, so a newer
checkpoint has another name. The batch loop notes each launch before it starts; under torchrun every
worker also notes its start, in bash before Python. Every worker, not only rank 0: when one crashes
at once torchrun kills the others, maybe before they got that far, but the one that crashed had
noted the start, so no start goes uncounted. The lines of one key are one start. Two bounds follow:

- ``MAX_RESTARTS``: restarts in a row without a newer checkpoint. The starts that began from the
  newest checkpoint all failed without writing another; once they are 1 + MAX_RESTARTS, the job
  gives up. A crash at start therefore starts 1 + MAX_RESTARTS times (4 by default), while a run that
  writes a newer checkpoint before it fails has this budget whole again.
- ``MAX_STARTS``: starts in this allocation in all, progress or not.

torchrun gets ``--max-restarts`` = the starts both bounds leave, less one, so its restarts never go
past them, however the two restarters nest; after each launch the loop recounts from the lines.
Every restart prints which bound it counts against and how many starts remain: the loop's restarts,
and for each torchrun restart the worker whose note came first (it counted the budget before any
other note of that start).

Shell, not Python: it runs in the batch script and in torchrun's workers before the interpreter,
so it works when Python itself fails at start. In the batch script it runs while the time-limit
signal's trap is armed, so it substitutes commands with backticks (ARMED_SHELL_NOTE in
hpc_imagenet/slurm/generate/renderer.py says why).
"""
from __future__ import annotations

from typing import List

from hpc_imagenet.imagenet.common.exit_codes import EXIT_USAGE, NO_RESTART

STARTS_LOG = "starts.log"
# hpc_imagenet.imagenet.train.checkpoint.CHECKPOINT (that module imports torch; a unit test holds the two equal)
CHECKPOINT = "checkpoint.pth.tar"
DEFAULT_MAX_STARTS = 10


def functions(agent_restarts: bool) -> List[str]:
    """The budget's settings and shell functions, defined once before the launch loop (and, when the
    launcher's agent restarts its workers itself, as torchrun does (hpc_imagenet.launch.launchers'
    ``restarts_workers``),
    passed on to its workers, which count the agent's restarts with them)."""
    lines = [
        "", "# ---- start budget (hpc_imagenet/slurm/start_budget.py): each start of the training is a line of "
            "STARTS_LOG,",
        "# with the newest checkpoint it began from. A failed training starts again while both bounds allow:",
        "# MAX_RESTARTS restarts in a row without a newer checkpoint, MAX_STARTS starts in this allocation.",
        f"STARTS_LOG=$LOG_DIR/{STARTS_LOG}",
        "ALLOCATION=$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}",
        "LAUNCH=0",
        f'checkpoint_id() {{ stat -c %i.%s.%Y "$LOG_DIR/{CHECKPOINT}" 2>/dev/null || echo none; }}',
        "# note_start KEY WHO: one line per noter; the lines of one KEY are one start",
        'note_start() { echo "$1 `checkpoint_id` `date -Is` $2" >> "$STARTS_LOG"; }',
        "# made: starts in this allocation; stalled: those that began from the newest checkpoint (all failed",
        "# without writing a newer one); left: the starts both bounds still allow",
        "start_budget() {",
        "    local newest",
        '    made=`grep "^$ALLOCATION:" "$STARTS_LOG" | cut -d " " -f 1 | sort -u | wc -l`',
        "    newest=`checkpoint_id`",
        '    stalled=`grep "^$ALLOCATION:[^ ]* $newest " "$STARTS_LOG" | cut -d " " -f 1 | sort -u | wc -l`',
        "    left=$((MAX_RESTARTS + 1 - stalled))",
        '    [ $((MAX_STARTS - made)) -lt "$left" ] && left=$((MAX_STARTS - made))',
        "    return 0",
        "}",
        "# which bound the next start counts against, and what each leaves",
        "budget_note() {",
        '    if [ "$stalled" = 0 ]; then',
        '        printf "the last start wrote a newer checkpoint, so MAX_RESTARTS=%s is whole again" "$MAX_RESTARTS"',
        "    else",
        '        printf "restart %s of MAX_RESTARTS=%s without a newer checkpoint (%s left)" \\',
        '            "$stalled" "$MAX_RESTARTS" $((MAX_RESTARTS - stalled))',
        "    fi",
        '    printf "; start %s of MAX_STARTS=%s in this allocation (%s left)\\n" $((made + 1)) "$MAX_STARTS" \\',
        "        $((MAX_STARTS - made - 1))",
        "}",
        "# the bound that ran out",
        "budget_spent() {",
        '    if [ "$stalled" -gt "$MAX_RESTARTS" ]; then',
        '        echo "$stalled start(s) in a row without a newer checkpoint (MAX_RESTARTS=$MAX_RESTARTS)"',
        "    else",
        '        echo "$made start(s) in this allocation (MAX_STARTS=$MAX_STARTS)"',
        "    fi",
        "}",
        'mkdir -p "$LOG_DIR" && : >> "$STARTS_LOG" || { echo "error: cannot write $STARTS_LOG: submit from a '
        f'checkout you can write, or pass --export=ALL,LOG_DIR=/a/writable/folder" >&2; exit {EXIT_USAGE}; }}']
    if agent_restarts:
        lines += ["# torchrun's workers get the functions as a plain variable: an exported function would not",
                  "# survive a /bin/sh between here and them (a site's python wrapper, say)",
                  "BUDGET_FUNCTIONS=`declare -f checkpoint_id note_start start_budget budget_note`",
                  "export LOG_DIR STARTS_LOG ALLOCATION MAX_RESTARTS MAX_STARTS LAUNCH BUDGET_FUNCTIONS"]
    return lines


# torchrun starts each worker through this (--no-python): every worker notes its start in bash, before
# Python; on a restart the first to note says which bound it counts against. Then the worker is what
# torchrun would run: python -u SCRIPT ARGS.
WORKER_WRAP = ('eval "$BUDGET_FUNCTIONS"; key=$ALLOCATION:$LAUNCH:${TORCHELASTIC_RESTART_COUNT:-0}; start_budget; '
               'note_start "$key" "rank$RANK"; '
               'if [ "${TORCHELASTIC_RESTART_COUNT:-0}" -gt 0 ] && '
               '[ "$(grep -m 1 "^$key " "$STARTS_LOG" | cut -d " " -f 4)" = "rank$RANK" ]; then '
               'echo "$(date -Is) torchrun restarts the workers (its restart $TORCHELASTIC_RESTART_COUNT of '
               '$TORCHELASTIC_MAX_RESTARTS in this launch): $(budget_note)"; fi; exec "$0" -u "$@"')
# what torchrun may restart within one launch: the starts the budget leaves, less the first
TORCHRUN_RESTARTS = '--max-restarts=$((left > 1 ? left - 1 : 0))'


def loop_head() -> List[str]:
    """Inside the launch loop, before the launcher starts: count the budget, then note the launch's
    first start (so a launch that fails before any worker notes still counts)."""
    return ["LAUNCH=$((LAUNCH + 1))", "start_budget", 'note_start "$ALLOCATION:$LAUNCH:0" loop']


def decide() -> List[str]:
    """The loop body after the launch: wait for it, then leave the loop or restart within the budget."""
    no_restart = "|".join(str(code) for code in NO_RESTART)
    return ["launcher_pid=$!",
            "# a trapped signal interrupts `wait` (status 128 + the signal), also when the launcher ends",
            "# during the trap (then bash has already reaped it): wait again, bash keeps its status",
            "wait_interrupted=0",
            'wait "$launcher_pid"; status=$?',
            'while [ "$wait_interrupted" = 1 ] && [ "$status" -gt 128 ]; do',
            '    wait_interrupted=0; wait "$launcher_pid"; status=$?',
            "done",
            "# no restart after success, a user error or a preemption (the signal, or run.json: a",
            "# preempted run ends the step and is requeued, never restarted in place)",
            f'case "$status" in {no_restart}) break ;; esac',
            "{ [ \"$preempted\" = 1 ] || grep -qs '\"status\": \"preempted\"' \"$LOG_DIR/run.json\"; } && break",
            "start_budget",
            'if [ "$left" -le 0 ]; then',
            '    echo "`date -Is` giving up: the training failed with status $status after `budget_spent`; '
            'job restart ${SLURM_RESTART_COUNT:-0}; see the errors above"',
            "    break",
            "fi",
            'echo "`date -Is` training exited with status $status; restarting it in this allocation from the '
            'newest checkpoint: `budget_note`"']
