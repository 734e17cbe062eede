#!/usr/bin/env python3
"""Write testcases/manifest.json and the shipped small cases (run once; the output is committed).

Each case's input is generated here, hashed, and the hash recorded, so `fa gen --suite tNN`
anywhere can prove it wrote the same bytes. Shipped cases (t01-t10) keep their input and a
float64 reference output in git; the rest are generated on demand into testcases/cache/.
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fa_cli import generate, locations, suite  # noqa: E402
from fa_cli.format import AttentionInput, check_shape  # noqa: E402

# name: (B, N, d, distribution). Classes as the course's: t01-t10 small (2 s), t11-t20 medium
# (6 s), t21-t30 large (10 s) up to B*N*d just under 56,000,000; every N of the course, both d.
CASES = {
    "t01": (2, 128, 32, "uniform"), "t02": (2, 128, 64, "normal"), "t03": (4, 256, 32, "uniform"),
    "t04": (3, 256, 64, "extreme"), "t05": (2, 512, 32, "onehot"), "t06": (2, 512, 64, "uniform"),
    "t07": (2, 1024, 32, "constant"), "t08": (2, 1024, 64, "uniform"), "t09": (16, 128, 64, "uniform"),
    "t10": (2, 2048, 32, "uniform"),
    "t11": (64, 512, 64, "uniform"), "t12": (8, 2048, 64, "normal"), "t13": (4, 4096, 32, "uniform"),
    "t14": (2, 8192, 64, "extreme"), "t15": (2, 16384, 32, "uniform"), "t16": (512, 1024, 32, "uniform"),
    "t17": (64, 4096, 64, "uniform"), "t18": (1000, 256, 64, "extreme"), "t19": (4, 16384, 64, "onehot"),
    "t20": (2, 32768, 32, "uniform"),
    "t21": (13000, 128, 32, "uniform"), "t22": (6500, 128, 64, "normal"), "t23": (3400, 256, 64, "uniform"),
    "t24": (1700, 512, 64, "extreme"), "t25": (1700, 1024, 32, "uniform"), "t26": (400, 2048, 64, "uniform"),
    "t27": (26, 32768, 64, "uniform"), "t28": (52, 32768, 32, "uniform"), "t29": (100, 8192, 64, "normal"),
    "t30": (52, 16384, 64, "onehot"),
}
SHIPPED = {f"t{i:02d}" for i in range(1, 11)}


def main() -> None:
    cases = []
    for i, (name, (B, N, d, dist)) in enumerate(CASES.items()):
        shape = check_shape(B, N, d, name)
        suite.check_course_ranges(shape)
        seed = 1000 + i
        shipped = name in SHIPPED
        with tempfile.TemporaryDirectory() as tmp:
            path = locations.testcases() / f"{name}.in" if shipped else Path(tmp) / f"{name}.in"
            generate.write_input(path, shape, seed, dist)
            digest = suite.sha256_of(path)
            if shipped:
                generate.write_expected(AttentionInput(path), locations.testcases() / f"{name}.out")
        limit = 2 if i < 10 else 6 if i < 20 else 10
        cases.append(dict(name=name, B=B, N=N, d=d, dist=dist, seed=seed, time_limit=limit, shipped=shipped,
                          sha256=digest))
        print(name, shape, dist, digest[:12], flush=True)
    (locations.testcases() / "manifest.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
