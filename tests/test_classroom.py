"""fa class (fa_cli/classroom): a class of CPU submissions judged in one command, sandboxed, each
row what fa run says of that program alone; a re-run judges only what changed."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from helpers import DATA, fa, path_without_bwrap
from test_sandbox import bwrap_works
from test_student_build import toolkit_refuses_cxx11

import fa_cli
from fa_cli.classroom import judging, similarity, submissions, table
from fa_cli.errors import FaError
from fa_cli.judge import step_times
from fa_cli.programs.devices import list_devices

needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap (bwrap) able to make namespaces")


def a_class(tmp_path):
    """alice right, bob without the 1/sqrt(d) scale, carol's does not compile, dave looks for
    alice's source (handed in, and its copy) and her record."""
    subs = tmp_path / "subs"
    for student in ("alice", "bob", "carol", "dave"):
        (subs / student).mkdir(parents=True)
    right = (DATA / "student_hw4.cpp").read_text()
    (subs / "alice" / "hw4.cpp").write_text(right)
    (subs / "bob" / "hw4.cpp").write_text("#define MISTAKE NO_SCALE\n" + right)
    (subs / "carol" / "hw4.cpp").write_text("int main( { return 0; }\n")
    (subs / "dave" / "hw4.cpp").write_text(
        "#include <cstdio>\nint main() { const char *p[] = {\"%s\", \"%s\", \"%s\"}; int seen = 0;\n"
        "  for (const char *f : p) { FILE *x = fopen(f, \"r\"); if (x) { seen++; fclose(x); } }\n"
        "  fprintf(stderr, \"dave saw %%d files\\n\", seen); return 3; }\n"
        % (subs / "alice" / "hw4.cpp", tmp_path / "class" / "submissions" / "alice" / "hw4.cpp",
           tmp_path / "class" / "records" / "alice.cpu.json"))  # (judged before dave's runs: it is there)
    return subs


def rows(folder):
    return {r["student"]: r for r in json.loads((folder / "class.json").read_text())["rows"]}


@pytest.mark.slow  # make test-all: a minute on 2 cores (docs/testing.md: what make test keeps of fa class)
@needs_bwrap
def test_a_class_is_judged_in_one_command_each_row_as_fa_run_says_it(tmp_path, cpu_program):
    subs, folder = a_class(tmp_path), tmp_path / "class"
    proc = fa("class", subs, "-o", folder, "t01", "c01", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = rows(folder)
    assert (got["alice"]["t01"].split()[0], got["alice"]["passed"], got["alice"]["sandboxed"]) == ("PASS", "2/2", "yes")
    assert got["bob"]["passed"] == "0/2" and "the scores are not divided by sqrt(d)" in got["bob"]["cause"]
    assert got["carol"]["build"].startswith("error: submissions/carol/hw4.cpp:1:") and "main" in got["carol"]["build"]
    assert got["dave"]["c01"].startswith("ERROR") and "dave saw 0 files" in got["dave"]["cause"]
    assert "4 students, 4 programs: 1 pass every case, 2 do not, 1 do not build" in proc.stdout
    # each half's wall in the record; the searches' longest said with their time
    bob = json.loads((folder / "records" / "bob.cpu.json").read_text())
    assert bob["seconds"]["timed"] > 0 and bob["seconds"]["looked_into"] > 0
    # and each step of its search with its seconds, the longest step named beside the longest searches
    assert {"runs again", "the probe input, run twice"} <= {line["what"] for line in bob["steps"]}, bob["steps"]
    assert {line["case"] for line in bob["steps"]} <= {"t01", "c01", ""}, bob["steps"]  # "": the run's own steps
    assert all(line["wall_s"] >= line["waited_s"] >= 0 for line in bob["steps"]), bob["steps"]
    assert re.search(r"fa class: the searches for a cause in [\d.]+ s, \d+ side by side, compute-sanitizer \d+ at "
                     r"a time; the longest: \w+\.cpu \d+ s", proc.stdout), proc.stdout
    assert f"bob.cpu {bob['seconds']['looked_into']:.0f} s" + (f" ({said})" if (said := step_times.longest(
        bob["steps"])) else ",") in proc.stdout  # a step of a second or more said beside its search
    alone = fa("run", "t01", "--program", subs / "bob" / "hw4.cpp", env={**os.environ, "COLUMNS": "120"}, cwd=tmp_path)
    report = (folder / "reports" / "bob.cpu.txt").read_text()
    assert alone.stdout.splitlines()[-1].split(";")[0] == "1 case: 1 WRONG"
    assert "no 1/sqrt(d) scale" in report and "no 1/sqrt(d) scale" in alone.stdout  # the same words
    # c01's input and expected output made once, in the class's cache, for all four
    assert (folder / "cache" / "c01.in").is_file() and len(list((folder / "cache" / "expected").glob("*.out"))) == 1
    page = (folder / "index.html").read_text()  # the page: each student a link to a report that is there
    for link in re.findall(r"href='([^']+)'", page):
        assert (folder / link).is_file(), link
    assert page.count("<tr>") == 5 and "addEventListener('click'" in page and "the page: " in proc.stdout
    for plot in re.findall(r"src='([^']+)'", page):
        assert (folder / plot).read_bytes().startswith(b"\x89PNG")
    assert len(re.findall(r"src='", page)) == 2
    assert "alice ~ bob (hw4.cpp)" in page  # bob's is alice's with one line added
    said = [json.loads(p.read_text())["errors"] for p in (folder / "records").glob("[!.]*.json")]
    assert not any("generated c01" in text for text in said) and (folder / "class.csv").is_file()  # made before


@needs_bwrap
def test_hostile_submissions_are_contained_and_the_next_students_run_is_unaffected(tmp_path, cpu_program):
    """A fork bomb (3000 processes at most) and a disk fill (200 MB at most) judged before alice:
    each killed and said in its row (a run may write its output's size and 16 MB more), and
    alice's verdict the same as judged alone."""
    subs = tmp_path / "subs"
    for student in ("aaron", "abby", "alice"):
        (subs / student).mkdir(parents=True)
    (subs / "aaron" / "hw4.cpp").write_text(
        "#include <unistd.h>\nint main() { for (int i = 0; i < 3000; i++) if (fork() == 0) { sleep(30); return 0; }"
        " sleep(30); return 0; }\n")
    (subs / "abby" / "hw4.cpp").write_text(
        "#include <cstdio>\nint main(int c, char **v) { FILE *f = fopen(v[2], \"wb\"); static char b[1 << 20];"
        " for (int i = 0; i < 200; i++) fwrite(b, 1, sizeof b, f); return 0; }\n")
    (subs / "alice" / "hw4.cpp").write_text((DATA / "student_hw4.cpp").read_text())
    proc = fa("class", subs, "-o", tmp_path / "class", "t01", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = rows(tmp_path / "class")
    assert "more than the sandbox's 256 processes" in got["aaron"]["cause"], got["aaron"]
    assert "SIGXFSZ" in got["abby"]["cause"], got["abby"]  # t01's output is 32 KB: 16 MB more at most
    assert got["alice"]["passed"] == "1/1"


@pytest.mark.slow
@needs_bwrap
def test_a_rerun_judges_only_what_changed_and_an_edited_submission_again(tmp_path, cpu_program):
    subs, folder = a_class(tmp_path), tmp_path / "class"
    assert fa("class", subs, "-o", folder, "t01", cwd=tmp_path).returncode == 0
    kept = {p.name: p.stat().st_mtime_ns for p in (folder / "records").glob("[!.]*.json")}
    again = fa("class", subs, "-o", folder, "t01", cwd=tmp_path)
    assert "4 judged before and unchanged, 0 to judge" in again.stdout
    assert kept == {p.name: p.stat().st_mtime_ns for p in (folder / "records").glob("[!.]*.json")}
    shutil.copy(subs / "alice" / "hw4.cpp", subs / "bob" / "hw4.cpp")  # bob fixes his
    fixed = fa("class", subs, "-o", folder, "t01", cwd=tmp_path)
    assert "3 judged before and unchanged, 1 to judge" in fixed.stdout
    assert rows(folder)["bob"]["passed"] == "1/1"
    other_cases = fa("class", subs, "-o", folder, "t01", "t02", cwd=tmp_path)
    assert "0 judged before and unchanged, 4 to judge" in other_cases.stdout


@pytest.mark.slow  # make test-all: nvcc builds (docs/testing.md)
@needs_bwrap
@pytest.mark.skipif(shutil.which("nvcc") is None or any(d.vendor == "nvidia" for d in list_devices()),
                    reason="needs nvcc, and no NVIDIA GPU")
def test_a_cuda_submission_on_a_machine_without_the_gpu_is_built_and_said_not_run(tmp_path):
    (tmp_path / "subs" / "erin").mkdir(parents=True)
    assert fa("init", tmp_path / "starter").returncode == 0
    shutil.copy(tmp_path / "starter" / "hw4.cu", tmp_path / "subs" / "erin" / "hw4.cu")
    if toolkit_refuses_cxx11():  # a source whose build the toolkit's own headers stop at the course's C++11
        (tmp_path / "subs" / "frank").mkdir()
        starter = (tmp_path / "starter" / "hw4.cu").read_text()
        (tmp_path / "subs" / "frank" / "hw4.cu").write_text("#include <cooperative_groups.h>\n" + starter)
    proc = fa("class", tmp_path / "subs", "-o", tmp_path / "class", "t01", cwd=tmp_path)
    students = len(list((tmp_path / "subs").iterdir()))
    assert proc.returncode == 1 and f"{students} not run" in proc.stdout, proc.stdout + proc.stderr  # no all-clear
    row = rows(tmp_path / "class")["erin"]
    assert row["build"] == "ok" and row["cause"].startswith("not run: hw4.cu is a CUDA program")
    assert "no NVIDIA GPU" in row["cause"]
    # built twice before any GPU time: as the course builds it, and with -g -lineinfo for the sanitizers
    builds = [p for p in (tmp_path / "class" / "cache" / "student").glob("hw4-*/hw4") if p.is_file()]
    assert len(builds) == 2 * len(rows(tmp_path / "class"))
    if toolkit_refuses_cxx11():  # what fa changed to build it, in its row
        assert rows(tmp_path / "class")["frank"]["build"].startswith(
            "ok; -std=c++11 stops in this toolkit's own headers"), rows(tmp_path / "class")["frank"]
    again = fa("class", tmp_path / "subs", "-o", tmp_path / "class", "t01", cwd=tmp_path)
    assert f"0 judged before and unchanged, {students} to judge" in again.stdout  # again: on a GPU node, it runs


def verdict_columns(folder):
    """The table without its times: what an interrupted and resumed run must give as a whole one does."""
    return {student: {k: (v.split()[0] if k.startswith("t") and v else v) for k, v in row.items()
                      if k not in ("time_s",)} for student, row in rows(folder).items()}


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("at_once, stop, said", [("1", signal.SIGINT, "interrupted:"),
                                                 ("3", signal.SIGINT, "interrupted:"),
                                                 ("3", signal.SIGTERM, "stopped by SIGTERM:")])
def test_interrupted_and_run_again_it_judges_nothing_twice_and_ends_as_a_whole_run(tmp_path, cpu_program, at_once,
                                                                                  stop, said):
    """Ctrl-C, or SIGTERM (a Slurm job's end, a TA's kill): the fa runs under way stopped, what is
    judged kept and shown; run again, nothing judged twice and the table a whole run's."""
    subs = a_class(tmp_path)
    whole = fa("class", subs, "-o", tmp_path / "whole", "t01", "t02", cwd=tmp_path)
    assert whole.returncode == 0
    folder = tmp_path / "class"
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "class", str(subs), "-o", str(folder), "t01", "t02",
                             "--side-by-side", at_once],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=DATA.parent.parent)
    deadline = time.monotonic() + 60
    while not list((folder / "records").glob("[!.]*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(stop)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + stop and said in out, out
    judged_before = {p.name: p.stat().st_mtime_ns for p in (folder / "records").glob("[!.]*.json")}
    assert 0 < len(judged_before) < 4
    # every case timed first, then the searches: the rest's timed halves kept whole, nothing half-written
    halves = sorted(p.name.removesuffix(".timed.json").removesuffix(".judged") for p in (folder / "records").glob(".*"))
    assert halves == sorted(2 * [p.name.removesuffix(".judged") for p in (folder / "records").glob(".*.judged")])
    timed = len(halves) // 2  # the rest, but for a build error (nothing to time)
    assert 0 < timed <= 4 - len(judged_before)
    again = fa("class", subs, "-o", folder, "t01", "t02", cwd=tmp_path)
    assert f"{len(judged_before)} judged before and unchanged, {4 - len(judged_before)} to judge ({timed} with its " \
        "cases timed before)" in again.stdout
    assert "every case of" not in again.stdout  # no case timed twice
    assert all((folder / "records" / n).stat().st_mtime_ns == t for n, t in judged_before.items())  # none twice
    assert verdict_columns(folder) == verdict_columns(tmp_path / "whole")


def test_without_bubblewrap_fa_class_says_how_to_get_it_or_to_go_unsandboxed(tmp_path, cpu_program):
    subs = a_class(tmp_path)
    env = {**os.environ, "PATH": path_without_bwrap(tmp_path / "bin")}
    argv = [sys.executable, "-m", "fa_cli", "class", str(subs), "-o", str(tmp_path / "class"), "t01"]
    root = DATA.parent.parent
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=root)
    assert proc.returncode == 1 and "apt-get install bubblewrap" in proc.stderr and "--unsandboxed" in proc.stderr
    unconfined = subprocess.run([*argv, "--unsandboxed"], capture_output=True, text=True, env=env, cwd=root)
    assert unconfined.returncode == 0, unconfined.stderr
    assert "UNSANDBOXED" in unconfined.stdout and rows(tmp_path / "class")["alice"]["sandboxed"] == "NO"


def test_student_folders_with_names_that_would_leave_the_class_folder_are_refused(tmp_path):
    (tmp_path / "subs" / "a b").mkdir(parents=True)
    with pytest.raises(FaError, match="letters, digits"):
        submissions.found(tmp_path / "subs")
    with pytest.raises(FaError, match="not a folder"):
        submissions.found(tmp_path / "none")


def test_the_class_folder_made_inside_the_submissions_folder_is_no_student(tmp_path):
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "out").mkdir()
    assert [s for s, _ in submissions.found(tmp_path / "subs", tmp_path / "subs" / "out")] == ["ann"]


def test_a_copy_keeps_sources_and_makefile_only_with_their_hashes(tmp_path):
    src = tmp_path / "erin"
    src.mkdir()
    (src / "hw4.cu").write_text("kernel")
    (src / "Makefile").write_text("all:\n")
    (src / "notes.txt").write_text("not judged")
    (src / "hw4.hip").symlink_to("/etc/passwd")  # a link: not followed
    copy = submissions.copied("erin", src, tmp_path / "class")
    assert sorted(copy.files) == ["Makefile", "hw4.cu"] and [p.name for p in copy.sources()] == ["hw4.cu"]
    assert copy.digest == json.loads((copy.folder / "submission.json").read_text())["sha256"]
    (src / "hw4.cu").write_text("kernel, edited")
    assert submissions.copied("erin", src, tmp_path / "class").digest != copy.digest


def test_a_row_says_the_first_failing_case_and_a_program_never_run(tmp_path):
    record = dict(student="s", platform="cuda", cases=["t01", "t02"], sandboxed=True, build_error=None, runs=[],
                  errors="fa: error: this machine has no NVIDIA GPU\n", exit_code=2)
    assert table.row_of(record)["cause"] == "not run: this machine has no NVIDIA GPU"
    killed = dict(record, errors="", exit_code=-9)  # its fa run killed from outside before any case
    assert table.row_of(killed)["cause"] == "not run: fa run was killed by SIGKILL"
    record["errors"] = ("fa: error: hw4.cu builds (/c/cache/student/hw4-1f/hw4); /c/submissions/s/hw4.cu is a CUDA "
                        "program, and this machine has no NVIDIA GPU to run it\n")
    assert table.row_of(record)["cause"] == ("not run: hw4.cu is a CUDA program, and this machine has no NVIDIA GPU "
                                             "to run it")
    record["runs"] = [dict(input="t01", verdict="PASS", wall_s=0.1), dict(input="t02", verdict="TLE", wall_s=2.0,
                                                                          diagnosis_text=["past its limit"])]
    row = table.row_of(record)
    assert (row["passed"], row["cause"], row["t02"]) == ("1/2", "t02: past its limit", "TLE 2.000")
    record["words"] = "table\npasses here, but racecheck reports a shared-memory race at hw4.cu:88 on 2x128x32\n"
    assert table.row_of(record)["warnings"].startswith("passes here, but racecheck reports")


def test_the_cause_column_says_the_cause_fa_named_then_where_on_whichever_case_it_named_it():
    """The cause named first: a terminal shows the column's start, and the cause is what a TA reads
    it for."""
    where = "1300388 of 1310720 values checked (99.2%) are over 0.005; none is NaN or infinite"
    measured = "measured: batches 1, 2 hold 0 in every row in every run, whatever V is: never written"
    causes = [dict(kind="hypothesis", lines=[], looks_like=["batches after the first not written"]),
              dict(kind="observed", lines=["probe: the output is not a linear map of V"]),
              dict(kind="measured", lines=[measured]), dict(kind="clean", lines=["also: memcheck clean"])]
    runs = [dict(input="c01", verdict="WRONG", wall_s=0.5, diagnosis_text=[where, "worst: 2.97 at batch 16"]),
            dict(input="c02", verdict="WRONG", wall_s=0.5, diagnosis_text=[where, "the probes' lines"],
                 diagnosis=dict(causes=causes))]
    record = dict(student="s", platform="cuda", cases=["c01", "c02"], sandboxed=True, build_error=None, runs=runs)
    assert table.row_of(record)["cause"] == f"c02: {measured}; {where}"
    runs[1]["diagnosis"]["causes"] = causes[:2]  # nothing named: the first failing case's diagnosis, as it is
    assert table.row_of(record)["cause"] == f"c01: {where}; worst: 2.97 at batch 16"



def test_the_terminal_table_names_the_cases_not_passed_in_one_column_where_a_suite_has_thirty():
    """30 case columns fold a terminal table past reading: it shows the fixed columns and the cases
    that did not pass, each with its verdict; the files keep a column a case."""
    runs = [dict(input=f"c{i:02d}", verdict="PASS", wall_s=0.1) for i in range(1, 31)]
    runs[6] = dict(input="c07", verdict="FAIL", wall_s=0.2)
    record = dict(student="s", platform="cuda", cases=[r["input"] for r in runs], sandboxed=True, build_error=None,
                  runs=runs)
    shown = table.terminal_table([record])
    headers = [c.header for c in shown.columns]
    assert "c01" not in headers and headers[-1] == table.NOT_PASSED
    assert list(shown.columns[-1].cells) == ["c07 FAIL"]
    assert "c30" in table.rows_of([record])[0]
    stopped = dict(record, runs=runs[:2])  # a run stopped after two cases that passed: the rest said as not run
    assert table.not_passed(stopped) == "not run: " + " ".join(f"c{i:02d}" for i in range(3, 31))

def test_a_copy_with_renamed_variables_is_the_top_similar_pair_and_the_starter_is_not_flagged(tmp_path):
    """ben's own kernel, cat's the same with every name changed, ann's and dan's fa init's starter
    (dan's with its comments changed): ben and cat are the first pair, and the starter pair is not
    among them (copydetect's boilerplate); a pair names where the shared code is."""
    starter = (Path(similarity.__file__).parents[1] / "starter" / "hw4.cu").read_text()
    own = (DATA / "class" / "own_kernel.cu").read_text()
    renamed = own
    for name, other in {"running_max": "m_i", "running_sum": "l_i", "accumulator": "acc", "score": "s",
                        "weight": "p", "correction": "alpha", "attention_rows": "flash_fwd", "check": "ok",
                        "batches": "B", "host_q": "hq", "host_o": "ho", "device_q": "dq"}.items():
        renamed = re.sub(rf"\b{name}\b", other, renamed)
    assert renamed != own
    texts = {"ann": starter, "ben": own, "cat": renamed, "dan": starter.replace("// ", "// dan: ")}
    copies = []
    for student, text in texts.items():
        (tmp_path / student).mkdir()
        (tmp_path / student / "hw4.cu").write_text(text)
        copies.append(submissions.copied(student, tmp_path / student, tmp_path / "class"))
    found = similarity.pairs(copies)
    assert (found[0]["a"], found[0]["b"]) == ("ben", "cat") and min(found[0]["share_a"], found[0]["share_b"]) > 0.9
    assert not [p for p in found if {p["a"], p["b"]} == {"ann", "dan"}]
    start, end = found[0]["spans_b"][0]
    assert renamed[start:end].strip()  # a span of cat's own text


def test_a_zip_export_is_a_folder_a_student_or_a_prefix_a_student_and_stays_in_the_class_folder(tmp_path):
    """Moodle puts each student's files in a folder, Canvas prefixes each file with the login; an
    entry that climbs out (../) is written by its base name, inside the class folder."""
    export = tmp_path / "export.zip"
    with zipfile.ZipFile(export, "w") as z:
        z.writestr("Ann Lee_1234_assignsubmission_file_/hw4.cu", "ann's kernel")
        z.writestr("Ann Lee_1234_assignsubmission_file_/notes.txt", "not judged")
        z.writestr("bob_55_901_hw4.hip", "bob's port")
        z.writestr("bob_55_902_Makefile", "hw4:\n")
        z.writestr("../../escaped/hw4.cu", "climbs out")
    folder = submissions.unpacked(export, tmp_path / "class")
    students = dict(submissions.found(folder))
    assert sorted(students) == ["Ann_Lee_1234_assignsubmission_file_", "bob", "escaped"]
    assert (students["bob"] / "hw4.hip").read_text() == "bob's port" and (students["bob"] / "Makefile").is_file()
    assert sorted(p.name for p in students["Ann_Lee_1234_assignsubmission_file_"].iterdir()) == ["hw4.cu"]
    assert all(tmp_path / "class" in p.parents for p in tmp_path.rglob("*") if p.is_file() and p != export)
    (tmp_path / "broken.zip").write_bytes(b"PK no")
    with pytest.raises(FaError, match="not a zip file"):
        submissions.unpacked(tmp_path / "broken.zip", tmp_path / "class")


def a_repository(folder, files: dict[str, str]) -> str:
    """A git repository with these files committed; its commit."""
    folder.mkdir(parents=True)
    git = ["git", "-C", str(folder), "-c", "user.name=s", "-c", "user.email=s@x"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "hw4"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_list_of_repositories_at_a_commit_is_fetched_as_a_class(tmp_path):
    """repository,path,commit: each one's file at that commit (an edit after it is not taken),
    named hw4 and its suffix, with the Makefile beside it; a row that cannot be fetched is said."""
    first = a_repository(tmp_path / "repos" / "ann-pp", {"hw4/hw4_final.cu": "ann's", "hw4/Makefile": "hw4:\n"})
    (tmp_path / "repos" / "ann-pp" / "hw4" / "hw4_final.cu").write_text("ann's, later")
    subprocess.run(["git", "-C", str(tmp_path / "repos" / "ann-pp"), "-c", "user.name=s", "-c", "user.email=s@x",
                    "commit", "-qam", "later"], check=True)
    bob = a_repository(tmp_path / "repos" / "bob", {"hw4.cpp": "bob's"})
    listing = tmp_path / "class.csv"
    listing.write_text(f"# a class\nrepository,path,commit\n{tmp_path}/repos/ann-pp,hw4/hw4_final.cu,{first}\n"
                       f"{tmp_path}/repos/bob,hw4.cpp,{bob}\n{tmp_path}/repos/none,hw4.cu,{bob}\n")
    said = []
    folder = submissions.fetched(listing, tmp_path / "class", said.append)
    students = dict(submissions.found(folder))
    assert sorted(students) == ["ann-pp", "bob"] and len(said) == 1 and said[0].startswith("none:")
    assert (students["ann-pp"] / "hw4.cu").read_text() == "ann's" and (students["ann-pp"] / "Makefile").is_file()
    assert (students["bob"] / "hw4.cpp").read_text() == "bob's"


LOGGED = """#include <cstdio>
#include <ctime>
static double fa_now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define main student_main
%s
#undef main
int main(int argc, char** argv) {  // the student's program, its run's span logged (a log all the class's runs share)
  const double start = fa_now();
  const timespec pause = {0, 30000000};
  nanosleep(&pause, nullptr);  // long enough a run for another's to overlap it, were it let
  const int code = student_main(argc, argv);
  FILE* log = fopen("%s", "a");
  fprintf(log, "%s %%s %%.6f %%.6f\\n", argc > 1 ? argv[1] : "-", start, fa_now());
  fclose(log);
  return code;
}
"""


@pytest.mark.slow  # make test-all (docs/testing.md)
def test_programs_judged_side_by_side_never_run_beside_a_timed_run(tmp_path, cpu_program):
    """Three students at once (--side-by-side 3, unconfined so that their runs share one log): each
    case's timed run overlaps no other run, the wrong program's probes (untimed) may overlap one
    another; the verdicts are those of one at a time."""
    subs, log = tmp_path / "subs", tmp_path / "spans.log"
    right = (DATA / "student_hw4.cpp").read_text()
    for student, source in (("alice", right), ("bob", "#define MISTAKE NO_SCALE\n" + right), ("eve", right)):
        (subs / student).mkdir(parents=True)
        (subs / student / "hw4.cpp").write_text(LOGGED % (source, log, student))
    proc = fa("class", subs, "-o", tmp_path / "class", "t01", "t02", "--unsandboxed", "--side-by-side", "3",
              cwd=tmp_path)
    assert proc.returncode == 0 and "(3 programs side by side, each timed run alone on the GPU)" in proc.stdout, \
        proc.stdout + proc.stderr
    spans = sorted((float(a), float(b), who, name) for who, name, a, b in (l.split() for l in log.read_text().splitlines()))
    # a student's timed runs are its first on each case: fa run judges every case, then looks for causes
    timed = [next(s for s in spans if s[2:] == (who, case)) for who in ("alice", "bob", "eve")
             for case in {s[3] for s in spans if Path(s[3]).name in ("t01.in", "t02.in")}]
    assert len(timed) == 6 and len(spans) > 6, spans  # two cases of three students, and bob's reruns
    for a, b, who, case in timed:
        assert [s for s in spans if s[0] < b and a < s[1]] == [(a, b, who, case)], spans
    assert {s: r["t01"].split()[0] for s, r in rows(tmp_path / "class").items()} == dict(
        alice="PASS", bob="WRONG", eve="PASS")
    # the searches side by side, as their budgets count them: each started and ended in the log
    counts = [int(line.split()[1]) for line in (tmp_path / "class" / ".gpu-shares").read_text().splitlines()]
    assert len(counts) == 6 and counts[0] == 1 and counts[-1] == 0 and max(counts) >= 2  # started together


def test_a_timed_half_holds_for_its_submission_cases_fa_and_sandbox_only(tmp_path, monkeypatch):
    """A class stopped between its halves, then run with other cases (or another fa, or the other
    sandbox setting): the kept half is not taken for them; it is removed, and the cases timed again."""
    task = judging.Task(submissions.Submission("ann", tmp_path, {"hw4.cpp": "00"}, "ab" * 32), tmp_path / "hw4.cpp")
    kept = judging._halfway(tmp_path, task, ["t01"], True)
    others = [judging._halfway(tmp_path, task, ["t01", "t02"], True), judging._halfway(tmp_path, task, ["t01"], False)]
    monkeypatch.setattr(fa_cli, "__version__", "0.0.0-other")
    others.append(judging._halfway(tmp_path, task, ["t01"], True))
    assert len({kept, *others}) == 4
    monkeypatch.undo()
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    timed = []

    def fa_run(class_folder, task, cases, limits, sandboxed, half, beside=None, at_once=1):
        timed.append(cases)
        Path(half[1]).write_bytes(b"state")
        return dict(exit_code=0, runs=[], words="", errors="")
    monkeypatch.setattr(judging, "_fa_run", fa_run)
    judging.time_cases(tmp_path, task, ["t01", "t02"], 4.0, True)
    new = judging._halfway(tmp_path, task, ["t01", "t02"], True)
    assert timed == [["t01", "t02"]] and not any(p.exists() for p in kept)
    assert json.loads(new[0].read_text())["saved"] and judging.timed_before(tmp_path, task, ["t01", "t02"], True)
    judging.time_cases(tmp_path, task, ["t01", "t02"], 4.0, True)
    assert timed == [["t01", "t02"]]  # kept for these cases: not timed twice


def test_each_fa_run_side_by_side_gets_its_share_of_the_cores_for_numpys_math(tmp_path, monkeypatch):
    """A dozen searches side by side, each with NumPy's math library on every core, would leave the
    sanitizers beside them none: each fa run fa class starts gets cores / side by side (1 at least)."""
    task = judging.Task(submissions.Submission("ann", tmp_path, {"hw4.cpp": "00"}, "ab" * 32), tmp_path / "hw4.cpp")
    seen = []

    def run_tool(argv, env, **kwargs):
        seen.append(env["FA_MATH_THREADS"])
        return subprocess.CompletedProcess(argv, 0, "", "")
    monkeypatch.setattr(judging, "run_tool", run_tool)
    monkeypatch.setattr(judging, "cores", lambda: 16)
    for at_once in (1, 4, 12, 32):
        judging._fa_run(tmp_path, task, ["t01"], 4.0, True, ["--from-judged", str(tmp_path / "state")], None, at_once)
    assert seen == ["16", "4", "1", "1"]


def test_the_searches_side_by_side_share_a_few_sanitizer_slots(tmp_path, monkeypatch):
    """The second half's fa runs get FA_TOOL_SLOTS (a folder in the class folder; 4 slots, one for
    every 4 cores on a smaller host): a dozen searches' sanitizers at once get through fewer."""
    task = judging.Task(submissions.Submission("ann", tmp_path, {"hw4.cpp": "00"}, "ab" * 32), tmp_path / "hw4.cpp")
    timed, state = judging._halfway(tmp_path, task, ["t01"], True)
    timed.parent.mkdir(parents=True, exist_ok=True)
    timed.write_text(json.dumps(dict(exit_code=0, saved=True, words="", errors="", seconds=1.0)))
    seen = []

    def fa_run(class_folder, task, cases, limits, sandboxed, half, beside=None, at_once=1):
        seen.append(beside)
        return dict(exit_code=0, runs=[], words="", errors="", seconds=0.5)
    monkeypatch.setattr(judging, "_fa_run", fa_run)
    monkeypatch.setattr(judging, "cores", lambda: 16)
    judging.look_into(tmp_path, task, ["t01"], 4.0, True, None, tmp_path / "shares", 12)
    assert seen[0]["FA_TOOL_SLOTS"] == f"{tmp_path / '.tool-slots'}:4" and (tmp_path / ".tool-slots").is_dir()
    assert seen[0]["FA_GPU_SHARES"] == str(tmp_path / "shares")
    monkeypatch.setattr(judging, "cores", lambda: 8)
    timed.write_text(json.dumps(dict(exit_code=0, saved=True, words="", errors="", seconds=1.0)))  # taken back above
    judging.look_into(tmp_path, task, ["t01"], 4.0, True, None, tmp_path / "shares", 12)
    assert seen[1]["FA_TOOL_SLOTS"].endswith(":2")
