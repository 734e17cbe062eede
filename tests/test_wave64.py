

@pytest.fixture(scope="module")
def fa_hip_through_the_layer(tmp_path_factory):
    """Our own src_hip/fa_hip.hip built by nvcc through the MI210 emulation (FA_WAVE64_LAYER: hip_api.h
    takes the layer's hip/hip_runtime.h, as a student's hw4.hip does), for the GPU."""
    exe = tmp_path_factory.mktemp("wave64") / "fa-hip-wave64"
    argv = [*wave64.build_line("nvcc", "native"), "-std=c++17", "-DFA_WAVE64_LAYER", "-Xcompiler", "-pthread",
            "-o", str(exe), str(ROOT / "src_hip" / "fa_hip.hip")]
    subprocess.run(argv, check=True, cwd=ROOT)
    return exe


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, env", [("simt", {}), ("tiled", {"FA_HIP_BC": "64"}), ("mfma", {})])
def test_our_hip_program_through_the_layer_matches_hip_cuda(fa_hip_through_the_layer, tmp_path, kernel, env):
    """fa_hip.hip through the emulation gives hip-cuda's outputs (make hip-cuda): the default kernel,
    the homework kernel at Bc = 64 (its row butterfly a single 64-lane __shfl_xor here, the xor-32 step
    crossing the warps, which hip-cuda does through shared memory instead) and the MFMA kernel."""
    import numpy as np
    from fa_cli import generate
    from fa_cli.format import Shape
    from helpers import build
    hip_cuda = build("hip-cuda")
    run_env = {**__import__("os").environ, "FA_KERNEL": kernel, **env}
    for shape in (Shape(3, 200, 32), Shape(2, 333, 64), Shape(1, 1024, 64)):
        inp = tmp_path / f"{shape.N}_{shape.d}.in"
        generate.write_input(inp, shape, 7, "uniform")
        outs = []
        for exe in (fa_hip_through_the_layer, hip_cuda):
            out = tmp_path / f"{exe.name}.out"
            proc = subprocess.run([str(exe), str(inp), str(out)], capture_output=True, text=True, env=run_env,
                                  timeout=120)
            assert proc.returncode == 0, (exe.name, proc.stderr)
            outs.append(np.fromfile(out, "<f4"))
        assert np.abs(outs[0] - outs[1]).max() <= 1e-5, (kernel, shape)
