"""fa through a real Slurm: a single-node cluster started on this machine (scripts/slurm_local.sh),
partitions `nvidia` and `amd`, the CPU program as the workload. Skipped where the cluster cannot
start (no slurm-wlm/munge, or not root), except in CI, which installs both: there it fails."""
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

from helpers import DATA, ROOT, fa, verdicts
from test_sandbox import bwrap_works
from fa_cli.programs.slurm import slurm_error

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "FA_SLURM_DIR": str(state)}
    script = ROOT / "scripts" / "slurm_local.sh"
    proc = subprocess.run([str(script), "start"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        why = f"no local Slurm cluster here: {proc.stderr.strip().splitlines()[-1] if proc.stderr else ''}"
        if os.environ.get("CI"):  # .ci/run installs slurm-wlm and munge: there it must start
            pytest.fail(why)
        pytest.skip(why)
    yield {**env, "SLURM_CONF": str(state / "slurm.conf")}
    subprocess.run([str(script), "stop"], env=env)


def fa_on(cluster, cwd, *args):
    return fa(*args, env=cluster, cwd=cwd)


def test_run_through_srun(cluster, cpu_program, tmp_path):
    proc = fa_on(cluster, tmp_path, "run", "t01", "t06", "--program", "cpu", "--launcher", "slurm", "--partition", "amd",
                 "-o", "run.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == ["PASS"] * 2
    assert not (tmp_path / ".fa-slurm").exists()  # outputs and the work directory removed
    records = json.loads((tmp_path / "run.json").read_text())["records"]
    assert [(r["kind"], r["input"], r["verdict"]) for r in records] == [("run", "t01", "PASS"), ("run", "t06", "PASS")]
    node = records[0]["system"]  # asked of the node through srun: it answered (no fallback note)
    assert "note" not in node and node["cores"] >= 1 and node["cpu"]


def test_profile_through_srun(cluster, cpu_program, stand_in_ncu, tmp_path):
    """fa profile wraps the profiler and the program in srun, its files in the shared work dir."""
    env = {**cluster, "PATH": stand_in_ncu["PATH"]}
    proc = fa("profile", "t01", "--program", "cpu", "--profiler", "ncu", "--launcher", "slurm", "--partition",
              "nvidia", "--markdown", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Every row: input t01; program cpu." in proc.stdout
    assert "| kernel | attention_tensorcore<64, 0> |" in proc.stdout
    assert not (tmp_path / ".fa-slurm").exists()


def test_unknown_partition(cluster, cpu_program, tmp_path):
    proc = fa_on(cluster, tmp_path, "run", "t01", "--program", "cpu", "--launcher", "slurm", "--partition", "gpus")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fa: error: slurm: no partition named 'gpus' (this cluster has: amd, nvidia)"


def test_slurm_refusal_comes_back_as_one_line(cluster, cpu_program, tmp_path):
    """srun's own refusal (here: a GPU asked of a cluster that has none) is reported, not a traceback."""
    proc = fa_on(cluster, tmp_path, "run", "t01", "--program", "cpu", "--launcher", "slurm", "--partition", "amd",
              "--gres", "gpu:1")
    assert proc.returncode == 1 and "ERROR" in proc.stdout
    assert "t01 ERROR: " in proc.stdout and "slurm: Invalid generic resource (gres) specification" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_bench_array_and_compare(cluster, cpu_program, tmp_path):
    results = {}
    for partition in ("nvidia", "amd"):
        results[partition] = tmp_path / f"{partition}.json"
        proc = fa_on(cluster, tmp_path, "bench", "--program", "cpu", "--suite", "t01,t04,t07", "--repeat", 2,
                  "--launcher", "slurm", "--partition", partition, "--slurm-array", "--label", partition,
                  "-o", results[partition])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        records = json.loads(results[partition].read_text())["records"]
        assert [r["input"] for r in records] == ["t01", "t04", "t07"]
        for r in records:
            assert r["passed"] and r["max_err"] < 1e-4 and r["repeats"] == 2
            assert r["slurm"]["partition"] == partition and r["label"] == partition
            assert set(r["timing"]) >= {"read", "kernel", "write", "total"}
    proc = fa_on(cluster, tmp_path, "compare", results["nvidia"], results["amd"], "--markdown", "--plot",
              tmp_path / "cmp.png")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()  # a row per input and partition, the two runs under each input
    assert lines[0] == "Whole-process medians on host CPU; the speed-up is over nvidia:"
    table = [line.split(" | ") for line in lines if line.startswith("|")]
    assert table[0] == ["| input", "run", "time s", "kernel TFLOP/s", "max err", "speed-up |"]
    assert [(row[0][2:].split()[0], row[1]) for row in table[2:]] == [(t, p) for t in ("t01", "t04", "t07")
                                                                     for p in ("nvidia", "amd")]
    assert (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_class_judged_as_job_arrays_gives_the_rows_of_a_class_judged_here(cluster, cpu_program, tmp_path):
    """fa class --launcher slurm: one array task per program, each record written on its node;
    the rows (their times aside) are those fa class gives judging here, and a re-run judges none."""
    subs = tmp_path / "subs"
    right = (DATA / "student_hw4.cpp").read_text()
    for student, text in (("alice", right), ("bob", "#define MISTAKE NO_SCALE\n" + right),
                          ("carol", "int main( { return 0; }\n")):
        (subs / student).mkdir(parents=True)
        (subs / student / "hw4.cpp").write_text(text)
    sandbox = () if bwrap_works() else ("--unsandboxed",)
    here = fa_on(cluster, tmp_path, "class", subs, "-o", tmp_path / "here", "t01", "t04", *sandbox)
    there = fa_on(cluster, tmp_path, "class", subs, "-o", tmp_path / "there", "t01", "t04", *sandbox,
                  "--launcher", "slurm", "--partition", "cpu=amd", "--throttle", "2")
    assert here.returncode == there.returncode == 0, there.stdout + there.stderr
    assert sorted(p.name for p in (tmp_path / "there" / "slurm").glob("task-*.log")) == ["task-0.log", "task-1.log",
                                                                                        "task-2.log"]

    def verdicts_of(folder):
        table = json.loads((folder / "class.json").read_text())["rows"]
        return {r["student"]: (r["build"], r["passed"], (r.get("t01") or "").split()[:1], r["sandboxed"]) for r in table}
    assert verdicts_of(tmp_path / "there") == verdicts_of(tmp_path / "here")
    assert verdicts_of(tmp_path / "there")["alice"][1] == "2/2"
    again = fa_on(cluster, tmp_path, "class", subs, "-o", tmp_path / "there", "t01", "t04", *sandbox,
                  "--launcher", "slurm", "--partition", "cpu=amd")
    assert "3 judged before and unchanged, 0 to judge" in again.stdout



def test_a_class_array_cancelled_says_how_each_task_ended_and_the_next_run_judges_only_those(cluster, cpu_program,
                                                                                            tmp_path):
    """scancel of fa class's array while bob's task runs (his program sleeps 1 s before it starts,
    inside t01's limit of 2 s): fa class ends, bob's row says how Slurm ended his task (sacct, or
    scontrol where accounting is off, as on this cluster) and no record of his is kept; fa class
    again judges bob alone, and its table is the table of a class judged uninterrupted."""
    subs = tmp_path / "subs"
    right = (DATA / "student_hw4.cpp").read_text()
    for student, text in (("alice", right), ("bob", "#include <unistd.h>\nstatic int slow = sleep(1);\n" + right)):
        (subs / student).mkdir(parents=True)
        (subs / student / "hw4.cpp").write_text(text)
    sandbox = () if bwrap_works() else ("--unsandboxed",)
    args = ("class", subs, "-o", tmp_path / "there", "t01", "t04", *sandbox, "--launcher", "slurm", "--partition",
            "cpu=amd", "--throttle", "1")
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", *map(str, args)], env=cluster, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = subprocess.run(["squeue", "-h", "-n", "fa-class", "-t", "RUNNING", "-o", "%i"], capture_output=True,
                                 text=True, env=cluster).stdout.split()
        if any(task.endswith("_1") for task in running):
            break
        time.sleep(0.2)
    else:
        pytest.fail("bob's task never ran")
    time.sleep(0.5)  # inside his first run (fa starting, then 1 s asleep)
    subprocess.run(["scancel", "-n", "fa-class"], env=cluster, check=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert re.search(r"fa class: bob\.cpu: its Slurm task \d+_1 ended CANCELLED \((sacct|scontrol)\), with no "
                     r"record \(its log: \S+/task-1\.log\)", out), out + err
    rows = {r["student"]: r for r in json.loads((tmp_path / "there" / "class.json").read_text())["rows"]}
    assert rows["alice"]["passed"] == "2/2" and rows["bob"]["cause"].startswith("not run: its Slurm task")
    assert not (tmp_path / "there" / "records" / "bob.cpu.json").exists()
    again = fa_on(cluster, tmp_path, *args)
    assert again.returncode == 0 and "1 judged before and unchanged, 1 to judge" in again.stdout, again.stdout
    whole = fa_on(cluster, tmp_path, "class", subs, "-o", tmp_path / "whole", "t01", "t04", *sandbox)
    assert whole.returncode in (0, 1) and (tmp_path / "whole" / "class.json").exists(), whole.stdout

    def verdicts_of(folder):
        table = json.loads((folder / "class.json").read_text())["rows"]
        return {r["student"]: (r["build"], r["passed"], r["t01"].split()[0], r["t04"].split()[0],
                               re.sub(r"\d+\.\d+", "#", r["cause"])) for r in table}  # its words, times aside
    assert verdicts_of(tmp_path / "there") == verdicts_of(tmp_path / "whole")

def test_bench_array_task_failure_is_recorded(cluster, tmp_path):
    broken = tmp_path / "broken"
    broken.write_text(f"#!{sys.executable}\nimport sys\nprint('broken: error: no luck', file=sys.stderr)\nsys.exit(3)\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "r.json"
    proc = fa_on(cluster, tmp_path, "bench", "--program", broken, "--suite", "t01", "--repeat", 1, "--launcher", "slurm",
              "--partition", "amd", "--slurm-array", "-o", out)
    assert proc.returncode == 1
    record = json.loads(out.read_text())["records"][0]
    assert record["error"] == "broken: error: no luck"


def test_time_limit_message():
    line = "slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-11-22T10:00:00 DUE TO TIME LIMIT ***"
    assert slurm_error("output\n" + line) == "slurm: the job was cancelled at its time limit"
    assert slurm_error("srun: error: Unable to allocate resources: Invalid partition name specified") == \
        "slurm: Unable to allocate resources: Invalid partition name specified"



def test_how_array_tasks_ended_comes_from_sacct_and_where_accounting_is_off_from_scontrol(tmp_path):
    """Stand-ins print what sacct -X -n -P --format=JobID,State prints for an array cancelled with
    tasks pending (a range in brackets, "CANCELLED by UID"), and scontrol -o what slurmctld keeps:
    sacct's word stands where it has one, scontrol's fills in where accounting is off."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, text in (("sacct", "12_0|COMPLETED\n12_1|CANCELLED by 0\n12_[2-3%1]|CANCELLED by 0\n13_0|FAILED\n"),
                       ("scontrol", "JobId=14 ArrayJobId=12 ArrayTaskId=1 JobState=NODE_FAIL Reason=None\n")):
        (tools / name).write_text(f"#!/bin/sh\ncat <<'END'\n{text}END\n")
        (tools / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    code = "from fa_cli.programs import slurm; print(slurm.task_states('12'))"
    said = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True).stdout
    assert said.strip() == str({0: "COMPLETED (sacct)", 1: "CANCELLED (sacct)", 2: "CANCELLED (sacct)",
                                3: "CANCELLED (sacct)"})  # scontrol's NODE_FAIL for task 1 comes second
    (tools / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2; exit 1\n")
    said = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True).stdout
    assert said.strip() == str({1: "NODE_FAIL (scontrol)"})

def test_interrupted_bench_array_cancels_its_job(cluster, tmp_path):
    """SIGTERM to fa while its job array runs: the job is cancelled and the work directory
    removed, rather than tasks running on into a directory that no longer exists."""
    slow = tmp_path / "slow"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "bench", "--program", str(slow), "--suite", "t01",
                             "--repeat", "1", "--launcher", "slurm", "--partition", "amd", "--slurm-array",
                             "-o", str(tmp_path / "r.json")], env=cluster, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def jobs():
        out = subprocess.run(["squeue", "-h", "-n", "fa-bench", "-o", "%i %T"], capture_output=True, text=True,
                             env=cluster).stdout
        return out.split()

    deadline = time.monotonic() + 30
    while "RUNNING" not in jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "RUNNING" in jobs(), "the array never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    said = [line for line in err.strip().splitlines() if not re.fullmatch(r"fa: \w+: \d+( of \d+)? done", line)]
    assert proc.returncode == 128 + signal.SIGTERM and said == ["fa: stopped by SIGTERM"], out + err  # progress aside
    deadline = time.monotonic() + 30
    while jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jobs() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow"]
