"""launch_errors: what the judges' launch log tells of a kernel's fault."""


def test_a_shared_access_past_what_the_launch_gave_is_said_with_both_sizes():
    """set31's s09: dynamic shared memory sized for 32-key tiles where the d = 32 instance uses 64:
    memcheck's out-of-bounds __shared__ write at 0x2500 (byte 9,472) against the 8,320 bytes the
    launch log says each block had. An access inside that size, or a kernel the log has at two
    sizes, is not said so."""
    from fa_cli.judge.launch_errors import shared_past_end
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
