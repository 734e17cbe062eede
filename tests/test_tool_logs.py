"""fa_cli/judge/tool_logs.py: what compute-sanitizer, a debugger and AddressSanitizer print, read
as fa run quotes it; what a program runs on, read from its binary."""
import os
import time
from pathlib import Path

from fa_cli.cases.format import Shape
from fa_cli.judge import race_check, tool_logs
from fa_cli.judge.findings import Kind
from fa_cli.programs import programs


# ---------------------------------------------------------------- reading the tools
MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __shared__ write of size 16 bytes
=========     at void attention<(int)64>(const float *, float *, int, int)+0x2d0 in /home/s/hw4.cu:87
=========     by thread (1,0,0) in block (0,0,0)
=========     Address 0x104 is misaligned
=========     and is inside the nearest allocation at 0x0 of size 34,816 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main [0x9e41] in hw4
=========
========= Program hit cudaErrorMisalignedAddress (error 716) due to "misaligned address" on CUDA API call to cudaMemcpy.
========= ERROR SUMMARY: 2 errors
"""


RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void attention<(int)32>(const float *, float *, int, int)+0x1a0 in /home/s/hw4.cu:70
=========     and Read access at void attention<(int)32>(const float *, float *, int, int)+0x2b0 in /home/s/hw4.cu:80 [4096 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_memchecks_first_error_and_where():
    first = tool_logs.first_sanitizer_error(MEMCHECK_LOG)
    assert first[0] == "Invalid __shared__ write of size 16 bytes"
    assert tool_logs.short_place(first[1]) == "attention<(int)64>+0x2d0, hw4.cu:87"
    assert first[3] == "Address 0x104 is misaligned"
    assert len(first) == 4  # "inside the nearest allocation": nothing more to place
    assert tool_logs.sanitizer_count(MEMCHECK_LOG) == 2
    past = MEMCHECK_LOG.replace("is misaligned", "is out of bounds").replace("inside", "4 bytes after")
    assert tool_logs.first_sanitizer_error(past)[4] == "and is 4 bytes after the nearest allocation at 0x0 of size " \
        "34,816 bytes"
    one = past.replace("4 bytes after", "1 byte after")
    assert tool_logs.first_sanitizer_error(one)[4].startswith("and is 1 byte after the nearest allocation")


def test_racechecks_first_hazard():
    first = tool_logs.first_sanitizer_error(RACECHECK_LOG)
    assert first[0].startswith("Error: Race reported between Write access at") and first[0].endswith("hw4.cu:70")
    assert first[1].startswith("and Read access at") and "[4096 hazards]" in first[1]
    assert tool_logs.sanitizer_lines(first) == ["a shared-memory race: a write at attention<(int)32>+0x1a0, hw4.cu:70 "
                                            "against a read at attention<(int)32>+0x2b0, hw4.cu:80 [4096 hazards]"]


def test_memchecks_report_in_two_lines():
    lines = tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(MEMCHECK_LOG))
    assert lines == ["Invalid __shared__ write of size 16 bytes",
                     "attention<(int)64>+0x2d0, hw4.cu:87; by thread (1,0,0) in block (0,0,0); "
                     "Address 0x104 is misaligned"]


def test_a_program_that_made_no_cuda_call_gives_no_report():
    """compute-sanitizer's own error where it saw no CUDA call is no report on the program."""
    log = ("========= COMPUTE-SANITIZER\n========= Error: Target application terminated before first instrumented "
           "API call\n========= Tool execution finished with errors\n")
    assert tool_logs.first_sanitizer_error(log) == [] and tool_logs.NO_CUDA_CALL in log


def test_a_clean_log_has_no_error():
    assert tool_logs.first_sanitizer_error("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []


def test_gdb_backtrace_is_read():
    log = ("Program received signal SIGSEGV, Segmentation fault.\n"
           "0x00007ffff7e4a in __memmove_avx_unaligned_erms () at ../sysdeps/x86_64/memmove.S:598\n"
           "#0  __memmove_avx_unaligned_erms () at ../sysdeps/x86_64/memmove.S:598\n"
           "#1  0x0000555555555e2c in main (argc=3, argv=0x7fffffffe0b8) at hw4.cu:119\n")
    signal, frames = tool_logs.backtrace(log)
    assert signal == "SIGSEGV" and len(frames) == 2
    assert not tool_logs.is_own_frame(frames[0]) and tool_logs.is_own_frame(frames[1])
    assert not tool_logs.is_own_frame("#0  __GI___call_tls_dtors () at ./stdlib/cxa_thread_atexit_impl.c:155")
    assert tool_logs.frame_text(frames[1]) == "main () at hw4.cu:119"


def test_what_a_program_runs_on(cpu_program):
    assert tool_logs.gpu_kind(programs.Program("fa-cpu", cpu_program)) == "cpu"
    assert tool_logs.gpu_kind(programs.named("cuda")) == "cuda" and tool_logs.gpu_kind(programs.named("hip")) == "hip"


# ---------------------------------------------------------------- reading a debugger
WORKER_CRASH = """[Thread debugging using libthread_db enabled]
[New Thread 0x7ffff7a00640 (LWP 1234)]

Thread 2 "hw4_omp" received signal SIGSEGV, Segmentation fault.
[Switching to Thread 0x7ffff7a00640 (LWP 1234)]
0x0000555555555a1c in main._omp_fn.0 () at hw4.cpp:42
42	    row_max[i] = m;
#0  0x0000555555555a1c in main._omp_fn.0 () at hw4.cpp:42
#1  0x00007ffff7f2b9b6 in ?? () from /lib/x86_64-linux-gnu/libgomp.so.1
#2  0x00007ffff7c94ac3 in start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442
"""


def test_a_debugger_report_from_a_worker_thread_is_read():
    signal, frames = tool_logs.backtrace(WORKER_CRASH)
    assert signal == "SIGSEGV" and tool_logs.caught_in(WORKER_CRASH) == 'Thread 2 "hw4_omp"'
    assert tool_logs.frame_text(frames[0]) == "main._omp_fn.0 () at hw4.cpp:42" and tool_logs.is_own_frame(frames[0])
    main_thread = WORKER_CRASH.replace('Thread 2 "hw4_omp"', 'Thread 1 "hw4"')
    assert tool_logs.backtrace(main_thread)[0] == "SIGSEGV" and tool_logs.caught_in(main_thread) is None


def test_a_debugger_only_clears_a_crash_it_saw_end_normally():
    assert tool_logs.debugger_exit("[Inferior 1 (process 77) exited normally]\n") == "exited normally"
    assert tool_logs.debugger_exit("[Inferior 1 (process 77) exited with code 02]\n") == "exited with code 02"
    assert tool_logs.debugger_exit("warning: Error disabling address space randomization\n") is None
    assert tool_logs.debugger_exit("\nProgram terminated with signal SIGKILL, Killed.\n") == "terminated with SIGKILL"


WARNING_AND_ERROR_LOG = """========= COMPUTE-SANITIZER
========= Warning: Race reported between Write access at k(float *)+0x2f70 in /s/hw4.cu:247
=========     and Read access at k(float *)+0x3000 in /s/hw4.cu:250 [64 hazards]
=========
========= Error: Race reported between Write access at k(float *)+0x100 in /s/hw4.cu:63
=========     and Read access at k(float *)+0x200 in /s/hw4.cu:150 [7168 hazards]
=========
========= Error: Race reported between Write access at fa_wave64::meet(int)+0x56b0 in /x/wave64_device.h:173
=========     and Read access at fa_wave64::meet(int)+0x5700 in /x/wave64_device.h:177 [10 hazards]
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
"""


def test_racechecks_errors_come_before_its_warnings_and_the_emulations_own_go():
    first = tool_logs.first_sanitizer_error(tool_logs.without_layer(WARNING_AND_ERROR_LOG))
    assert tool_logs.sanitizer_lines(first) == ["a shared-memory race: a write at k+0x100, hw4.cu:63 against a read "
                                                "at k+0x200, hw4.cu:150 [7168 hazards]"]
    warning_only = "\n".join(WARNING_AND_ERROR_LOG.splitlines()[:4])
    said = tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(tool_logs.without_layer(warning_only)))
    assert said[0].startswith("a shared-memory hazard at racecheck's warning level (threads that rely on running")
    assert said[0].endswith("a write at k+0x2f70, hw4.cu:247 against a read at k+0x3000, hw4.cu:250 [64 hazards]")
    layer_only = "\n".join(WARNING_AND_ERROR_LOG.splitlines()[7:])
    assert tool_logs.first_sanitizer_error(tool_logs.without_layer(layer_only)) == []


def test_a_fault_launched_through_the_layers_hook_is_the_students_and_the_layers_own_calls_go():
    """Under the GTX 1080's rules every launch goes through fa_gtx1080's hook, so the hook is in
    every kernel report's host backtrace: the fault stays (hw4.cu:87 is quoted); a failed CUDA
    call made by the layer itself (its launch log's) goes, one made by main stays."""
    hooked = MEMCHECK_LOG.replace(
        "=========         Host Frame: main [0x9e41] in hw4\n",
        "=========         Host Frame: [0x2d5e4f] in libcuda.so.1\n"
        "=========         Host Frame: fa_gtx1080::launch(void const*, dim3, dim3) [0x9a10] in hw4\n"
        "=========         Host Frame: main [0x9e41] in hw4\n")
    own_call = ("========= Program hit cudaErrorMisalignedAddress (error 716) due to \"misaligned address\" on CUDA "
                "API call to cudaEventSynchronize.\n"
                "=========     Saved host backtrace up to driver entry point at error\n"
                "=========         Host Frame: [0x2d5e4f] in libcuda.so.1\n"
                "=========         Host Frame: cudaEventSynchronize [0x4a3b0] in libcudart.so.12\n"
                "=========         Host Frame: fa_launch_log::collect(bool) [0x9c00] in hw4\n")
    text = tool_logs.without_layer(hooked.replace("========= ERROR SUMMARY", own_call + "========= ERROR SUMMARY"))
    assert tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(text))[0] == "Invalid __shared__ write of size 16 bytes"
    assert "hw4.cu:87" in text and "cudaEventSynchronize" not in text and "on CUDA API call to cudaMemcpy" in text


def test_one_sanitizer_call_runs_the_tool_where_the_program_runs_and_reads_its_log(tmp_path, monkeypatch):
    """tool_logs.sanitize_side_by_side, the one call of compute-sanitizer (a failing case's cause, a passing
    build's race check): a stand-in writes MEMCHECK_LOG to the --log-file it is given and records
    its arguments; the report is that log's first error and count, the command wrapped as given."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "log.txt").write_text(MEMCHECK_LOG)
    (tools / "compute-sanitizer").write_text(
        "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/argv\"\n"
        "while [ \"$1\" != --log-file ]; do shift; done; cp \"$(dirname \"$0\")/log.txt\" \"$2\"\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    wrapped = []
    [said] = tool_logs.sanitize_side_by_side(("memcheck",), ["./hw4"], tmp_path / "in.bin", tmp_path, 30,
                                             wrap=lambda argv: wrapped.append(argv) or argv)
    assert said.finished and said.count == 2 and said.first[0].startswith("Invalid __shared__ write of size 16")
    assert wrapped and (tools / "argv").read_text().split() == [
        "--tool", "memcheck", "--print-limit", "100", "--log-file", str(tmp_path / "memcheck.log"), "./hw4",
        str(tmp_path / "in.bin"), str(tmp_path / "memcheck.out")]
    (tools / "log.txt").write_text(RACECHECK_LOG)
    [said] = tool_logs.sanitize_side_by_side(("racecheck",), ["./hw4"], tmp_path / "in.bin", tmp_path, 30)
    assert said.count is None and said.first and "--racecheck-report analysis" in (tools / "argv").read_text()
    monkeypatch.setattr(tool_logs, "find_tool", lambda name: None)  # not installed
    assert tool_logs.sanitize_side_by_side(("memcheck",), ["./hw4"], tmp_path / "in.bin", tmp_path, 30) is None


def test_tools_side_by_side_share_one_time_limit_and_are_stopped_at_it(tmp_path, monkeypatch):
    """Three tools at once that would run for 30 s each, given 1 s: all three started before that
    limit (one after another, the second would start after it), each stopped and said unfinished,
    none left running."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "compute-sanitizer").write_text(f"#!/bin/sh\necho $$ $(date +%s.%N) >> {tmp_path}/started\n"
                                             "exec sleep 30\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    said = tool_logs.sanitize_side_by_side(("racecheck", "synccheck", "initcheck"), ["./hw4"], tmp_path / "in.bin",
                                           tmp_path, 1.0)
    assert [r.tool for r in said] == ["racecheck", "synccheck", "initcheck"] and not any(r.finished for r in said)
    started = [line.split() for line in (tmp_path / "started").read_text().splitlines()]
    times = [float(t) for _, t in started]
    assert len(started) == 3 and max(times) - min(times) < 1.0
    assert not [pid for pid, _ in started if os.path.exists(f"/proc/{pid}")]


def test_a_tool_that_has_printed_its_print_limit_is_stopped_there_and_said_so(tmp_path, monkeypatch):
    """initcheck writes its 100 reports, then would go on counting for 30 s: fa stops it once its log
    holds them (finished, not stopped at the limit), its first report kept, its count said as the
    first 100 shown; racecheck, whose analysis comes at its end, is never stopped so."""
    tools = tmp_path / "bin"
    tools.mkdir()
    report = ("========= Uninitialized __global__ memory read of size 4 bytes\n"
              "=========     at attention+0x21f0 in /x/hw4.cu:187\n"
              "=========     by thread (0,0,0) in block (0,1,0)\n")
    (tools / "report.txt").write_text(report * 100)
    (tools / "compute-sanitizer").write_text(
        "#!/bin/sh\nwhile [ \"$1\" != --log-file ]; do shift; done\n"
        "cp \"$(dirname \"$0\")/report.txt\" \"$2\"; exec sleep 30\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    start = time.monotonic()
    [init, race] = tool_logs.sanitize_side_by_side(("initcheck", "racecheck"), ["./hw4"], tmp_path / "in.bin",
                                                   tmp_path, 3.0)
    assert init.shown_all and init.finished and init.first[0].startswith("Uninitialized __global__ memory read")
    assert init.counted() == "its first 100 reports shown: fa stopped the tool there, any more would only be counted"
    assert not race.shown_all and not race.finished  # ran to fa's limit
    assert time.monotonic() - start < 10
    assert tool_logs.reports_in(tmp_path / "initcheck.log") == 100 and tool_logs.reports_in(tmp_path / "none") == 0
    # reports in the code of fa's MI210 emulation count toward the limit, as the tool's own print limit counts them;
    # stopped there with none of the program's, the tool is not said to have run whole, nor the program clean
    (tools / "report.txt").write_text(report.replace("/x/hw4.cu:187", "/x/wave64_device.h:40") * 100)
    [init] = tool_logs.sanitize_side_by_side(("initcheck",), ["./hw4"], tmp_path / "in.bin", tmp_path, 3.0)
    assert init.shown_all and not init.first and not init.finished and init.in_layers == 100
    [said] = race_check.told(init, Shape(2, 256, 32), 3.0)
    assert said.kind == Kind.MISSING_TOOL and said.lines[0] == (
        "race check: initcheck on B=2, N=256, d=32: its first 100 reports all in the code of fa's judge-GPU layer (the "
        "MI210 emulation's or the launch log's own); fa stopped it there, before any report at a line of the "
        "program's")
    whole = tool_logs.SanitizerReport("memcheck", ["x"], 21533, finished=True)
    assert whole.counted("errors") == "21533 errors in all" and whole.counted() == "21533 in all"
    assert tool_logs.SanitizerReport("memcheck", [], None, finished=True).counted() is None


def test_a_build_of_another_form_is_not_counted_in_the_budget():
    budget = tool_logs.Budget(60.0)
    with budget.build():
        time.sleep(0.3)
    assert budget.used < 0.25  # the 0.3 s of the build are not in it, whatever the load
    time.sleep(0.2)
    assert budget.used >= 0.2


def test_a_tool_whose_every_report_is_in_fas_layers_is_not_said_clean(tmp_path, monkeypatch):
    """racecheck's reports all inside the MI210 emulation's own code: counted, and said as such, not
    as a clean run; with none at all, clean."""
    from types import SimpleNamespace
    from fa_cli.judge.cause import Sanitizer
    layer_only = WARNING_AND_ERROR_LOG.replace("/s/hw4.cu", "/x/wave64_device.h")

    def tool_ran(argvs, consoles, timeout, watched=None):  # compute-sanitizer as it logs: into --log-file
        for argv in argvs:
            Path(argv[argv.index("--log-file") + 1]).write_text(layer_only)
        return [0] * len(argvs)
    monkeypatch.setattr(tool_logs, "find_tool", lambda name: "/bin/compute-sanitizer")
    monkeypatch.setattr(tool_logs, "_side_by_side", tool_ran)
    [said] = tool_logs.sanitize_side_by_side(("racecheck",), ["prog"], tmp_path / "in", tmp_path, 10.0)
    assert said.first == [] and said.in_layers == 3 and said.finished, said
    ctx = SimpleNamespace(done=[], findings=[])
    case = SimpleNamespace(label="t01")
    assert Sanitizer.told(ctx, case, said) is True
    assert ctx.done == ["racecheck on t01: 3 reports, each in the code of fa's judge-GPU layer (the MI210 "
                        "emulation's or the launch log's own), none at a line of the program's"], ctx.done
    ctx.done.clear()
    Sanitizer.told(ctx, case, tool_logs.SanitizerReport("racecheck", [], None, finished=True))
    assert ctx.done == ["racecheck clean on t01"]


def test_two_writes_of_one_line_against_each_other_are_said_as_an_index_that_gives_two_threads_one_place():
    """set38's s10: a tile's load splitting its flat index by 64 where d = 32: two threads store one
    element from the same line. A write against a read, or writes of two lines, keep the plain words."""
    log = RACECHECK_LOG.replace("Read access", "Write access").replace("hw4.cu:80", "hw4.cu:70")
    [said] = tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(log))
    assert said.startswith("a shared-memory race: a write at attention<(int)32>+0x1a0, hw4.cu:70 against a write at "
                           "attention<(int)32>+0x2b0, hw4.cu:70 [4096 hazards]: threads of a block store to one shared "
                           "place from the same line"), said
    [plain] = tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(RACECHECK_LOG))
    assert "same line" not in plain
    two_lines = RACECHECK_LOG.replace("Read access", "Write access")
    assert "same line" not in tool_logs.sanitizer_lines(tool_logs.first_sanitizer_error(two_lines))[0]
