"""report_readings: what a sanitizer's report tells beyond its lines, read against the run."""
import os

from fa_cli.judge import report_readings, tool_logs


def test_a_shared_access_past_what_the_launch_gave_is_said_with_both_sizes():
    """set31's s09: dynamic shared memory sized for 32-key tiles where the d = 32 instance uses 64:
    memcheck's out-of-bounds __shared__ write at 0x2500 (byte 9,472) against the 8,320 bytes the
    launch log says each block had. An access inside that size, or a kernel the log has at two
    sizes, is not said so."""
    from fa_cli.judge.report_readings import shared_past_end
    first = ["Invalid __shared__ write of size 4 bytes",
             "at void attention_tiled<(int)32, (int)64>(const float *, float *, int)+0x1450 in /s/s09.cu:126",
             "by thread (0,0,0) in block (0,1,0)", "Access to 0x2500 is out of bounds"]
    log = ("fa-launch: launches=1 untimed=0 ms=0.1 grid=2x2x1 block=64x1x1 smem=8320 regs=40 "
           "error=cudaErrorIllegalAddress kernel=void attention_tiled<(int)32, (int)64>(const float *, float *, int)\n")
    said = shared_past_end(first, log)
    assert said.startswith("the write is at byte 9,472 of its block's shared memory, and attention_tiled's launches "
                           "gave a block 8,320 bytes"), said
    assert shared_past_end(first[:3] + ["Access to 0x100 is out of bounds"], log) is None
    two = log + log.replace("smem=8320", "smem=16640").replace("(int)32, (int)64", "(int)64, (int)32")
    assert shared_past_end([first[0], first[1].replace("void attention_tiled<(int)32, (int)64>", "attention_tiled")]
                           + first[2:], two) is None
    assert shared_past_end(first, "") is None


def test_a_global_access_just_past_an_allocation_is_said_with_its_size_as_floats_of_the_input():
    """memcheck's out-of-bounds __global__ write 4 bytes after an allocation of 4 x B*N*d floats on a
    2 x 32768 x 32 input (partials for 4 key splits, written by 8): said with both figures, as what
    follows where that allocation is the buffer the line indexes (memcheck names the nearest one).
    Before an allocation, as far past it as its own size, or a __shared__ access: not said so."""
    from fa_cli.cases.format import Shape
    from fa_cli.judge.report_readings import global_past_end
    shape = Shape(2, 32768, 32)
    first = ["Invalid __global__ write of size 4 bytes",
             "at void attention_part<(int)32>(const float *, float *, int)+0x450 in /s/s04.cu:157",
             "by thread (0,0,0) in block (2048,0,0)", "Access to 0x7f0002000000 is out of bounds",
             "and is 4 bytes after the nearest allocation at 0x7f0000000000 of size 33,554,432 bytes"]
    said = global_past_end(first, shape)
    assert said == ("the write lies 4 bytes past the end of the allocation nearest it (33,554,432 bytes, 4 x B*N*d "
                    "floats = 8 x N*d floats on this B=2, N=32768, d=32 input); where that is the buffer the line indexes, the index "
                    "reaches past its end: a buffer allocated smaller than the kernel indexes it (for fewer splits, "
                    "tiles or rows than it writes), or an index bounded past the buffer's size"), said
    assert global_past_end(first[:4] + [first[4].replace("after", "before")], shape) is None
    assert global_past_end(first[:4] + [first[4].replace("4 bytes after", "40,000,000 bytes after")], shape) is None
    assert global_past_end([first[0].replace("__global__", "__shared__"), *first[1:]], shape) is None
    assert global_past_end(first[:4], shape) is None
    odd = global_past_end(first[:4] + [first[4].replace("33,554,432", "1,000")], shape)
    assert "nearest it (1,000 bytes);" in odd  # no count of floats fits: the size alone
    one = global_past_end(["Error: Invalid __global__ read of size 4 bytes", *first[1:4],
                           first[4].replace("4 bytes", "1 byte")], shape)
    assert one.startswith("the read lies 1 byte past the end"), one


def test_an_allocations_size_is_read_as_floats_of_the_input_every_way_that_fits():
    """8 MiB on 2 x 32768 x 32 is B*N*d floats and 2 x N*d; on 1 x 64 x 64, 64 x 64 floats are N*N,
    B*N*d and N*d alike; a size of no whole float, none."""
    from fa_cli.cases.format import Shape
    from fa_cli.judge.report_readings import as_floats
    assert as_floats(2 * 32768 * 32 * 4, Shape(2, 32768, 32)) == "B*N*d floats = 2 x N*d floats"
    assert as_floats(64 * 64 * 4, Shape(1, 64, 64)) == "B*N*N floats = B*N*d floats = N*N floats = N*d floats"
    assert as_floats(1001, Shape(2, 32768, 32)) is None


def test_an_unwritten_part_of_the_output_is_placed_by_initchecks_copy_report():
    """The copy back of a 2 x 128 x 32 output read unwritten from byte 16384: batch 1, row 0 (every
    batch's launch wrote batch 0's place); a copy of another size is not placed."""
    first = ["Host API memory access error at host access to 0x7f23ec818000 of size 32,768 bytes",
             "Uninitialized access to 0x7f23ec81c000 on access by cudaMemcpy source"]
    said = report_readings.unwritten_output(first, 2, 128, 32)
    assert said == ("the copy back is the whole output (32,768 bytes); the first value initcheck found unwritten in it "
                    "is at byte 16,384: the output's batch 1, row 0, column 0")
    assert report_readings.unwritten_output(first, 2, 128, 64) is None
    assert report_readings.unwritten_output(first[:1], 2, 128, 32) is None


def test_an_atomic_add_onto_memory_never_written_is_said_as_an_accumulator_not_zeroed(tmp_path, monkeypatch):
    """initcheck's first report read by an atomicAdd (a split's part added into an accumulator a
    cudaMemset of too few bytes left unwritten): said as such; a kernel's own read is not."""
    tools = tmp_path / "bin"
    tools.mkdir()
    report = ("========= Uninitialized __global__ memory read of size 4 bytes\n"
              "=========     at atomicAdd(float *, float)+0x2580 in /usr/local/cuda/include/sm_20_atomic_functions.hpp:84\n"
              "=========     by thread (0,0,0) in block (3,2,0)\n"
              "========= ERROR SUMMARY: 1 error\n")
    (tools / "compute-sanitizer").write_text(
        "#!/bin/sh\nwhile [ \"$1\" != --log-file ]; do shift; done\n"
        f"cat > \"$2\" <<'LOG'\n{report}LOG\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    [init] = tool_logs.sanitize_side_by_side(("initcheck",), ["./hw4"], tmp_path / "in.bin", tmp_path, 10.0)
    assert report_readings.unwritten_output(init.first, 2, 128, 32) == report_readings.ATOMIC_UNWRITTEN, init.first
    assert report_readings.ATOMIC_UNWRITTEN.startswith("an atomic add onto memory nothing wrote first")
    for other in ("attention", "atomicMax(int *, int)", "atomic_attention_kernel"):  # not an atomic add
        own = [line.replace("atomicAdd(float *, float)", other) for line in init.first]
        assert report_readings.unwritten_output(own, 2, 128, 32) is None, other


def test_memchecks_global_write_past_an_allocation_reaches_the_finding():
    """A memcheck log as compute-sanitizer writes it (the allocation's line after three placing
    lines): Sanitizer.told adds the reading to the report's lines."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.judge.cause import Sanitizer
    log = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
           "=========     at void attention_part<(int)32>(const float *, float *, int)+0x450 in /s/s04.cu:157\n"
           "=========     by thread (0,0,0) in block (2048,0,0)\n"
           "=========     Access to 0x7f0002000000 is out of bounds\n"
           "=========     and is 4 bytes after the nearest allocation at 0x7f0000000000 of size 33,554,432 bytes\n"
           "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
           "========= ERROR SUMMARY: 1 error\n")
    first = tool_logs.first_sanitizer_error(log)
    ctx = SimpleNamespace(done=[], findings=[], run_stderr="", source=None)
    case = SimpleNamespace(label="larger.in", shape=Shape(2, 32768, 32))
    assert Sanitizer.told(ctx, case, tool_logs.SanitizerReport("memcheck", first, 1, finished=True)) is False
    found, = ctx.findings
    assert found.lines[-1].startswith("the write lies 4 bytes past the end of the allocation nearest it (33,554,432 "
                                      "bytes, 4 x B*N*d floats"), found.lines


NULL_READ = ["Invalid __global__ read of size 4 bytes",
             "at attention_batched<(int)32>+0x250 in /s/s08.cu:120",
             "by thread (0,0,0) in block (0,1,0)",
             "Access to 0x0 is out of bounds",
             "and is 140,658,878,709,760 bytes before the nearest allocation at 0x7fedb2800000 of size 98,304 bytes"]


def test_an_access_at_a_null_pointer_is_said_with_the_short_copy_of_a_pointer_table(tmp_path):
    """set35's s08: a device table of 4 B pointers copied with tab.size() * sizeof(float) bytes;
    blocks of the later batches read a null pointer. A copy counted in sizeof(float*) is not said."""
    source = tmp_path / "hw4.cu"
    source.write_text("int main() {\n  std::vector<float*> tab(4 * B);\n  float** d_tab = NULL;\n"
                      "  cudaMalloc(&d_tab, tab.size() * sizeof(float*));\n"
                      "  cudaMemcpy(d_tab, tab.data(), tab.size() * sizeof(float), cudaMemcpyHostToDevice);\n"
                      "  cudaMemcpy(d_q, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice);\n}\n")
    said = report_readings.null_pointer(NULL_READ, source)
    assert said[0].startswith("the read is at address 0x0, 0 bytes past 0: a null pointer dereferenced"), said
    assert said[1:] == ["line 5 copies d_tab, a table of pointers (8 bytes an entry), with a byte count in "
                        "sizeof(float) (4 bytes an entry): only the first half of the table reaches the device, the "
                        "rest of it is never set: `cudaMemcpy(d_tab, tab.data(), tab.size() * sizeof(float), "
                        "cudaMemcpyHostToDevice);`"], said
    source.write_text(source.read_text().replace("tab.size() * sizeof(float), cudaMemcpyHostToDevice",
                                                 "tab.size() * sizeof(float*), cudaMemcpyHostToDevice"))
    assert len(report_readings.null_pointer(NULL_READ, source)) == 1
    far = [line.replace("Access to 0x0", "Access to 0x7fedb2818000") for line in NULL_READ]
    assert report_readings.null_pointer(far, source) == []


MISALIGNED_READ = ["Invalid __global__ read of size 16 bytes",
                   "at attention_vec4<(int)32>+0x220 in s02.cu:151",
                   "by thread (0,0,0) in block (8,0,0)",
                   "Access to 0x7f1a7680200c is misaligned"]


def test_a_vector_read_off_its_alignment_is_said_with_its_offset_in_floats_and_the_lines(tmp_path):
    """set47's s02: float4 loads from a base 3 floats past a cudaMalloc'ed buffer (its header skipped):
    12 bytes past a 16-byte boundary, the cast and the base's line shown; a null pointer is not it."""
    source = tmp_path / "hw4.cu"
    source.write_text("__global__ void k(const float* q) {\n"
                      "  for (int j = 0; j < 4; ++j) x += j + 1;\n"
                      "  float4 a = reinterpret_cast<const float4*>(q + i * D)[x4];\n}\n"
                      "int main() {\n  const float* d_data = d_qkv + 3;  // after the header\n}\n")
    said = report_readings.address_readings(MISALIGNED_READ, source)
    assert said[0].startswith("the read of 16 bytes is at 0x7f1a7680200c, 12 bytes past a 16-byte boundary"), said
    assert said[0].endswith("a pointer moved off that alignment by 3 floats, no multiple of 4 (a base plus a "
                            "constant, a row, tile or batch start at such a pitch)"), said
    assert said[1] == ("lines with a vector cast or a constant offset in hw4.cu: 3 `float4 a = reinterpret_cast<const "
                       "float4*>(q + i * D)[x4];`, 6 `const float* d_data = d_qkv + 3;`"), said
    assert report_readings.address_readings(NULL_READ, source)[0].startswith("the read is at address 0x0")


def test_a_misaligned_scalar_is_said_in_bytes_and_either_spelling_of_the_address_is_read():
    first = ["Invalid __global__ write of size 4 bytes", "at k+0x20 in a.cu:3", "Address 0x7f0000000002 is misaligned"]
    said = report_readings.misaligned(first, None)
    assert said == ["the write of 4 bytes is at 0x7f0000000002, 2 bytes past a 4-byte boundary: an access of 4 "
                    "bytes needs an address that is a multiple of 4, and cudaMalloc's are 256-byte aligned: a pointer "
                    "moved off that alignment"], said

