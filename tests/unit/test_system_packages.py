"""Installing the system packages when several processes ask at once (two local clusters started by
two test workers, two terminals): one installer at a time, the others wait and find the packages.

apt-get is a stand-in here (a script on PATH): the real one would change this machine's packages. It
takes its own "dpkg lock" without waiting, as a real apt-get without a lock timeout does, and holds
it until the test lets go, so the race is there on every run, not only when the timing is unlucky."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_imagenet.slurm.localcluster import packages

REPO = Path(__file__).resolve().parents[2]

STAND_IN_APT = """#!/bin/bash
# stand-in apt-get: records each call; `install` takes the dpkg lock without waiting (or fails as
# apt-get does), holds it until the file `release` exists, then marks the packages installed
state={state}
echo "$*" >> "$state/calls"
case " $* " in *" install "*) ;; *) exit 0 ;; esac
exec 9>>"$state/dpkg.lock"
if ! flock -n 9; then
  echo "E: Could not get lock $state/dpkg.lock. It is held by process $(cat "$state/holder") (apt-get)" >&2
  exit 100
fi
echo $$ > "$state/holder"
touch "$state/holding"
while [ ! -e "$state/release" ]; do sleep 0.05; done
for arg in "$@"; do
  case $arg in -*|*::*|install) ;; *) touch "$state/installed/$arg" ;; esac
done
"""

INSTALLER = """import sys
from pathlib import Path
from hpc_imagenet.slurm.localcluster import packages
state = Path(sys.argv[1])
packages.INSTALL_LOCK = state / "install.lock"
packages.POLICY_RC = state / "policy-rc.d"
packages.can_install = lambda: True
wanted = ["slurmd", "munge"]
packages.install(wanted, lambda: [name for name in wanted if not (state / "installed" / name).exists()])
print("packages found")
"""


def _until(what: str, check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _blocked_on(lock: Path) -> bool:
    """True once a process waits for LOCK (/proc/locks lists a waiter as '-> ' before its entry)."""
    if not lock.exists():
        return False
    inode = f":{lock.stat().st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


@pytest.fixture
def stand_in(tmp_path):
    state = tmp_path / "state"
    (state / "installed").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    apt = tmp_path / "bin" / "apt-get"
    apt.write_text(STAND_IN_APT.format(state=state))
    apt.chmod(0o755)
    (tmp_path / "installer.py").write_text(INSTALLER)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    return tmp_path, state, env


def test_two_installs_at_once_both_find_the_packages_and_apt_runs_once(stand_in):
    tmp_path, state, env = stand_in

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(tmp_path / "installer.py"), str(state)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start()
    try:
        _until("the first install to hold dpkg's lock", (state / "holding").exists)
        second = start()
        try:
            # it waits for the first, or (without one installer at a time) fails on dpkg's lock
            _until("the second install to wait for the first",
                   lambda: _blocked_on(state / "install.lock") or second.poll() is not None)
        finally:
            (state / "release").touch()
            second_out, second_err = second.communicate(timeout=60)
    finally:
        (state / "release").touch()
        first_out, first_err = first.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 0), first_err + second_err
    assert first_out.strip() == second_out.strip() == "packages found"
    assert "Could not get lock" not in first_err + second_err
    assert "waiting for another package install" in second_err
    installs = [call for call in (state / "calls").read_text().splitlines() if " install " in f" {call} "]
    assert len(installs) == 1, installs
    assert sorted(path.name for path in (state / "installed").iterdir()) == ["munge", "slurmd"]


def test_an_install_that_fails_says_so_in_one_line_with_the_command(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    apt = tmp_path / "bin" / "apt-get"
    apt.write_text("#!/bin/sh\necho 'E: Unable to locate package nosuch-slurm' >&2\nexit 100\n")
    apt.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(packages, "INSTALL_LOCK", tmp_path / "install.lock")
    monkeypatch.setattr(packages, "POLICY_RC", tmp_path / "policy-rc.d")
    monkeypatch.setattr(packages, "can_install", lambda: True)
    with pytest.raises(RuntimeError) as raised:
        packages.install(["nosuch-slurm"], lambda: ["nosuch-slurm"])
    message = str(raised.value)
    assert "\n" not in message
    assert "Unable to locate package nosuch-slurm" in message
    assert message.endswith("apt-get install -y --no-install-recommends nosuch-slurm")
    assert not (tmp_path / "policy-rc.d").exists()


def test_the_command_line_keeps_the_compiler_and_names_unknown_sets():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["/usr/bin/python3", "-m", "hpc_imagenet.slurm.localcluster.system_packages", *args],
                              cwd=REPO,
                              capture_output=True, text=True, timeout=60)

    kept = run("remove", "build")
    assert kept.returncode == 2 and "remove leaves build in place" in kept.stderr
    unknown = run("missing", "slurm", "cuda")
    assert unknown.returncode == 2 and "unknown package set cuda: choose from build, slurm" in unknown.stderr
