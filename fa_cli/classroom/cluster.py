"""fa class over Slurm: the programs to judge as job arrays, one array task per submission and
platform, each platform on its partition (the GTX 1080's, the MI210's), at most `throttle` tasks
at once, each on a node of its own (--exclusive: a task's times are its own). A task judges its
program on its node exactly as fa class does here (judging.judge: fa run --sandbox with the
class's cache) and writes its record into the class folder, whole or not at all; the class
folder must be where the nodes see it (a home or project directory). The builds are done before,
here; the inputs too, so that no two tasks generate the same one. A task that wrote no record
(cancelled, a node that failed) is said with how Slurm says it ended (sacct; scontrol where
accounting is off), and judged again by the next fa class, as anything missing is.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import settings
from ..errors import ExitStatus, FaError
from ..files import atomic_file
from ..judge import expected, verdict
from ..programs import slurm
from ..report import tables
from .judging import Task, judge, kept_record
from .submissions import Submission

PLAN = "plan.json"


PLATFORMS = ("cuda", "hip", "cpu")


def partitions_of(given: tuple[str, ...]) -> dict[str, str]:
    """--partition NAME (every platform) or PLATFORM=NAME (cuda=nvidia, hip=amd, cpu=...): the
    partition of each platform, checked against the cluster."""
    general = [text for text in given if "=" not in text]
    if len(general) > 1:
        raise FaError("--partition NAME once (every platform's), or PLATFORM=NAME for each platform")
    found = {p: general[0] for p in PLATFORMS} if general else {}
    for text in given:
        if "=" in text:
            platform, name = text.split("=", 1)
            if platform not in PLATFORMS:
                raise FaError(f"--partition {text}: the platform is one of {', '.join(PLATFORMS)}")
            found[platform] = name
    for name in set(found.values()):
        slurm.check_partition(name)
    return found


def cases_first(cases: list[str]) -> None:
    """Every case's input and expected output in the class's cache before any program runs (here:
    on every core, and on the GPU where PyTorch has one): each made once, and never beside another
    program's timed run. Made while the programs build, so with no bar of its own."""
    targets = [verdict.target_for(name) for name in cases]
    expected.ensure(expected.missing(targets), None, lambda what, total: tables.progress(what, total, enabled=False))


def judge_all(class_folder: Path, tasks: list[Task], cases: list[str], limits_s: float, sandboxed: bool,
              builds: dict[str, str | None], partitions: dict[str, str], sbatch_args: tuple[str, ...],
              throttle: int) -> dict[str, str]:
    """The tasks judged as one array per partition, once every array has ended; returns why each
    task that wrote no record did not (label -> its line: how Slurm says it ended)."""
    slurm.require("sbatch")
    missing = sorted({t.platform for t in tasks} - set(partitions))
    if missing:
        raise FaError(f"--launcher slurm: no partition for {', '.join(missing)} (--partition {missing[0]}=NAME)")
    script = _task_script(class_folder, tasks, cases, limits_s, sandboxed, builds)
    unjudged = {}
    for partition in sorted(set(partitions.values())):
        indices = [i for i, t in enumerate(tasks) if partitions[t.platform] == partition]
        if not indices:
            continue
        argv = ["sbatch", "--parsable", "--wait", f"--array={','.join(map(str, indices))}%{throttle}", "--exclusive",
                "--job-name=fa-class", "-p", partition, "-N1", "-n1", *sbatch_args,
                "-o", str(script.parent).replace("%", "%%") + "/task-%a.log", str(script)]
        job, _, stderr = slurm.submit_and_wait(argv)
        if not job:
            raise FaError(slurm.slurm_error(stderr) or f"slurm: sbatch failed: {stderr.strip()}",
                          exit_code=ExitStatus.FAILED)
        lost = [i for i in indices if not kept_record(class_folder, tasks[i], cases, sandboxed, whole=False)]
        states = slurm.task_states(job) if lost else {}
        for i in lost:
            ended = f"ended {states[i]}" if i in states else "ended, and neither sacct nor scontrol says how"
            unjudged[tasks[i].label] = (f"its Slurm task {job}_{i} {ended}, with no record (its log: "
                                        f"{script.parent / f'task-{i}.log'}); fa class judges it again")
    return unjudged


def _task_script(class_folder: Path, tasks: list[Task], cases: list[str], limits_s: float, sandboxed: bool,
                 builds: dict[str, str | None]) -> Path:
    """CLASS/slurm/task.sh, and the plan it reads (plan.json: each task's submission and build)."""
    work = class_folder / "slurm"
    work.mkdir(exist_ok=True)
    plan = work / PLAN
    with atomic_file(plan) as f:
        f.write(json.dumps({"class": str(class_folder), "cases": cases, "limits_s": limits_s, "sandboxed": sandboxed,
                            "tasks": [{"folder": str(t.submission.folder), "source": t.source.name,
                                       "build_error": builds.get(t.label)} for t in tasks]}, indent=1).encode())
    script = work / "task.sh"
    script.write_text(slurm.task_script(plan, "class-task"))
    script.chmod(0o755)
    return script


def run_task(plan: Path, index: int) -> None:
    """One array task, on its node: its program judged, its record written."""
    data = json.loads(plan.read_text())
    settings.use_cache_dir(str(Path(data["class"]) / "cache"))
    entry = data["tasks"][index]
    folder = Path(entry["folder"])
    facts = json.loads((folder / "submission.json").read_text())
    submission = Submission(facts["student"], folder, facts["files"], facts["sha256"])
    judge(Path(data["class"]), Task(submission, folder / entry["source"]), data["cases"], data["limits_s"],
          data["sandboxed"], entry["build_error"])
