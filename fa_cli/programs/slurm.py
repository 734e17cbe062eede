"""Slurm, the course cluster's launcher: one program run per `srun`, or a whole benchmark as one
`sbatch` job array.

Programs, inputs and outputs must be on a filesystem the compute nodes share with the machine
that runs fa (the usual home or project directory): outputs go to a work directory under the
current directory (.fa-slurm/), never to a node-local /tmp.

Wall times measured through srun include its scheduling and launch (tens of milliseconds); the
programs' own FA_TIMING totals do not.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from .. import locations
from ..cases.format import Shape
from ..cases.suite import Target
from ..errors import ExitStatus, FaError
from ..files import atomic_file
from ..judge import verify
from ..measure import bench
from ..report import records
from .processes import run_tool
from .programs import Launcher, Program


def slurm_error(stderr: str) -> str | None:
    """The one line that says why Slurm refused or ended a job, if stderr has one."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for line in reversed(lines):
        if "DUE TO TIME LIMIT" in line:
            return "slurm: the job was cancelled at its time limit"
        if "CANCELLED" in line:
            return "slurm: the job was cancelled"
    for line in reversed(lines):
        if line.startswith(("srun: error:", "sbatch: error:", "slurmstepd: error:")):
            return "slurm: " + line.split("error:", 1)[1].strip()
    return None


def require(command: str) -> None:
    if not shutil.which(command):
        raise FaError(f"--launcher slurm: `{command}` is not installed on this machine")


def check_partition(partition: str) -> None:
    """Fail early, with the partitions that exist, rather than once per test case."""
    require("sinfo")
    proc = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FaError(f"slurm: cannot reach the cluster: {slurm_error(proc.stderr) or proc.stderr.strip()}")
    names = sorted(set(proc.stdout.split()))
    if partition not in names:
        raise FaError(f"slurm: no partition named {partition!r} (this cluster has: {', '.join(names) or 'none'})")


class SlurmLauncher(Launcher):
    """Runs each program as `srun -p PARTITION -N1 -n1 [--gres=...] [extra] PROGRAM IN OUT`."""

    remote = True

    def __init__(self, partition: str, gres: str | None = None, srun_args: tuple[str, ...] = ()):
        require("srun")
        check_partition(partition)
        self.partition, self.gres, self.srun_args = partition, gres, tuple(srun_args)

    def options(self) -> list[str]:
        """The resource options srun and sbatch share."""
        return ["-p", self.partition, "-N1", "-n1", *([f"--gres={self.gres}"] if self.gres else []), *self.srun_args]

    def wrap(self, argv: list[str]) -> list[str]:
        return ["srun", *self.options(), *argv]

    def explain_failure(self, returncode: int, stderr: str) -> str | None:
        return slurm_error(stderr)


# ----------------------------------------------------------------------------- job arrays
def _program_dict(p: Program) -> dict:
    return {"name": p.name, "path": str(p.path), "make_target": p.make_target, "interpreter": list(p.interpreter)}


def _target_dict(t: Target) -> dict:
    return {"name": t.name, "input_path": str(t.input_path), "shape": asdict(t.shape), "time_limit": t.time_limit,
            "expected_path": str(t.expected_path) if t.expected_path else None}


def program_from(d: dict) -> Program:
    return Program(d["name"], Path(d["path"]), d["make_target"], tuple(d["interpreter"]))


def target_from(d: dict) -> Target:
    return Target(d["name"], Path(d["input_path"]), Shape(**d["shape"]), d["time_limit"],
                  Path(d["expected_path"]) if d["expected_path"] else None)


def bench_array(plan: bench.BenchPlan, launcher: SlurmLauncher, results: Path,
                progress: Callable[[int], None] | None = None) -> list[dict]:
    """Submit one array task per (input, program), wait for the array, collect the records.

    Each task measures on its compute node exactly as `fa bench` does directly (bench.measure)
    and writes its record to the work directory; the records join the results file in order.
    """
    require("sbatch")
    with locations.shared_workdir() as work:  # job files and task logs: what they said is in the records
        return _run_array(plan, launcher, results, work, progress)


def _run_array(plan: bench.BenchPlan, launcher: SlurmLauncher, results: Path, work: Path, progress) -> list[dict]:
    tasks = [(t, p) for t in plan.targets for p in plan.programs]
    plan_file = work / "plan.json"
    plan_file.write_text(json.dumps({
        "tasks": [{"program": _program_dict(p), "target": _target_dict(t)} for t, p in tasks],
        "repeats": plan.repeats, "precision": plan.precision, "check": asdict(plan.check), "label": plan.label,
        "env": plan.env, "kind": plan.kind, "fields": plan.fields, "command": records.command_line(),
    }, indent=1))
    script = work / "task.sh"
    script.write_text(task_script(plan_file))
    script.chmod(0o755)
    argv = ["sbatch", "--parsable", "--wait", f"--array=0-{len(tasks) - 1}", "--job-name=fa-bench",
            "-o", str(work).replace("%", "%%") + "/task-%a.log", *launcher.options(), str(script)]
    job, returncode, stderr = submit_and_wait(argv)
    if returncode != 0 and not any(work.glob("record-*.json")):
        raise FaError(slurm_error(stderr) or f"slurm: sbatch failed: {stderr.strip()}",
                      exit_code=ExitStatus.FAILED)
    new = []
    for i, (target, program) in enumerate(tasks):
        record_file = work / f"record-{i}.json"
        if record_file.exists():
            record = json.loads(record_file.read_text())
        else:
            log = work / f"task-{i}.log"
            why = slurm_error(log.read_text()) if log.exists() else None
            record = records.new_record(program, target, plan.label, why or f"array task {i} wrote no record",
                                        plan.kind, **plan.fields)
        record["slurm"] = {"job": job, "task": i, "partition": launcher.partition}
        new.append(record)
        if progress:
            progress(1)
    records.append(results, new)
    return new


def task_script(plan_file: Path, command: str = "slurm-task") -> str:
    """The job script of an array task: `fa COMMAND PLAN INDEX` (fa bench's slurm-task, fa class's
    class-task). Every path in it is quoted (shlex.quote): a work directory named `$(...)`, with
    spaces or quotes is text to the shell, never a command."""
    package, python, plan = (shlex.quote(str(p)) for p in (locations.PACKAGE.parent, sys.executable, plan_file))
    return ("#!/bin/sh\n"
            f"export PYTHONPATH={package}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            f"exec {python} -m fa_cli {command} {plan} \"$SLURM_ARRAY_TASK_ID\"\n")


def submit_and_wait(argv: list[str]) -> tuple[str, int, str]:
    """Run `sbatch --parsable --wait ...`: (job id, exit code, stderr). sbatch prints the id as
    soon as the job is queued; if fa is interrupted while it waits, the job is cancelled, so
    that no task runs on into a work directory that is about to be removed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = ""
    try:
        job = proc.stdout.readline().strip().split(";")[0]
        _, stderr = proc.communicate()
    except BaseException:
        if job:
            cancel(job)
        proc.kill()
        proc.communicate()
        raise
    return job, proc.returncode, stderr


CANCEL_WAIT_S = 10.0  # how long a cancelled job is given to leave the queue (its tasks killed, COMPLETING over)


def cancel(job: str) -> None:
    """scancel, then wait (up to CANCEL_WAIT_S) until squeue no longer lists the job: a task that
    was starting as fa was stopped would otherwise still write into the work directory (its own
    task-N folder) while fa removes it, and leave it behind."""
    subprocess.run(["scancel", job], capture_output=True)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline and _answer(["squeue", "-h", "-j", job]):
        time.sleep(0.2)


def task_states(job: str) -> dict[int, str]:
    """How each task of an ended job array ended, by its index, with who said so ("CANCELLED
    (sacct)"): sacct (the cluster's accounting), and for a task it does not list (accounting off,
    say) scontrol (slurmctld keeps an ended job for MinJobAge, 300 s by default). A task neither
    knows is left out."""
    states: dict[int, str] = {}
    for line in _answer(["sacct", "-X", "-n", "-P", "-j", job, "--format=JobID,State"]):
        task, _, state = line.strip().partition("|")
        if task.startswith(f"{job}_") and state:
            states.update(dict.fromkeys(_indices(task[len(job) + 1:].strip("[]")), f"{state.split()[0]} (sacct)"))
    for line in _answer(["scontrol", "-o", "show", "job", job]):
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("ArrayTaskId") and fields.get("JobState"):
            for index in _indices(fields["ArrayTaskId"]):
                states.setdefault(index, f"{fields['JobState']} (scontrol)")
    return states


def _answer(argv: list[str]) -> list[str]:
    """A Slurm command's lines; none where it is missing or fails."""
    try:
        proc = run_tool(argv, timeout=60)
    except OSError:
        return []
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def _indices(text: str) -> list[int]:
    """Slurm's task indices: 3, 1-5, 0,2,7-9, with a throttle (%4) or not."""
    found = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found += range(int(first), int(last or first) + 1)
    return found

def run_task(plan_file: Path, index: int) -> None:
    """One array task, on a compute node: measure one (program, input), write its record."""
    data = json.loads(plan_file.read_text())
    task = data["tasks"][index]
    program, target = program_from(task["program"]), target_from(task["target"])
    plan = bench.BenchPlan([program], [target], data["repeats"], data.get("precision", bench.DEFAULT_PRECISION),
                           verify.RowCheck(**data["check"]), env=data["env"],
                           label=data["label"], kind=data.get("kind", "bench"), fields=data.get("fields", {}))
    out_dir = plan_file.parent / f"task-{index}"
    out_dir.mkdir(exist_ok=True)
    record = bench.measure(plan, program, target, out_dir)
    record["command"] = data["command"]
    record["host"] = os.uname().nodename
    with atomic_file(plan_file.parent / f"record-{index}.json") as f:
        f.write(json.dumps(record).encode())
    shutil.rmtree(out_dir)  # outputs are verified by now; they can be hundreds of megabytes
