#!/usr/bin/env python3
"""Write testcases/manifest.json and the shipped small cases (run once; the output is committed).

    python3 scripts/make_suite.py [t|c ...]     (default: every suite)

Each case's input is generated here, hashed, and the hash recorded, so `fa gen --suite NAME`
anywhere can prove it wrote the same bytes. Shipped cases (t01-t10) keep their input and a
float64 reference output in git; the rest are generated on demand into the cache directory.
A suite not named keeps its entries in the manifest as they are.
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fa_cli import locations  # noqa: E402
from fa_cli.cases import generate, suite  # noqa: E402
from fa_cli.cases.format import AttentionInput, check_shape  # noqa: E402

# Suite t, our own: name -> (B, N, d, distribution). Classes as the course's: t01-t10 small (2 s),
# t11-t20 medium (6 s), t21-t30 large (10 s) up to B*N*d just under 56,000,000; every N of the
# course, both d, and the distributions that stress the softmax.
OURS = {
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
# Suite c, the course's: the 30 test shapes B, N, d of the 2024 offering as published in a
# student's report, values uniform in [-3, 3]. Two of them (c12 9600x128x64, c22 500x2048x64)
# exceed the B*N*d < 56,000,000 the course states; they are kept as published.
COURSE = """
320,128,32   160,128,64   160,256,32   80,256,64    80,512,32    40,512,64    40,1024,32   20,1024,64
20,2048,32   10,2048,64   13600,128,32 9600,128,64  6400,256,32  2000,256,64  2000,512,32  800,512,64
800,1024,32  300,1024,64  300,2048,32  100,2048,64  500,2048,32  500,2048,64  100,4096,32  100,4096,64
30,8192,32   10,8192,64   10,16384,32  4,16384,64   4,32768,32   2,32768,64
"""
THEIRS = {f"c{i + 1:02d}": (*map(int, text.split(",")), "uniform") for i, text in enumerate(COURSE.split())}

SUITES = {
    "t": dict(cases=OURS, first_seed=1000, shipped={f"t{i:02d}" for i in range(1, 11)}, ranges=True,
              source="fa's own: every N and d of the course, five value distributions, sizes up to the "
                     "course's largest"),
    "c": dict(cases=THEIRS, first_seed=2000, shipped=set(), ranges=False,
              source="the course's 30 test shapes (2024 offering, as published in a student's report), "
                     "values uniform in [-3, 3]; c12 and c22 exceed the course's stated B*N*d < 56,000,000"),
}


def make_suite(prefix: str) -> list[dict]:
    spec, cases = SUITES[prefix], []
    for i, (name, (B, N, d, dist)) in enumerate(spec["cases"].items()):
        shape = check_shape(B, N, d, name)
        if spec["ranges"]:
            suite.check_course_ranges(shape)
        seed = spec["first_seed"] + i
        shipped = name in spec["shipped"]
        with tempfile.TemporaryDirectory() as tmp:
            path = locations.testcases() / f"{name}.in" if shipped else Path(tmp) / f"{name}.in"
            generate.write_input(path, shape, seed, dist)
            digest = suite.sha256_of(path)
            if shipped:
                generate.write_expected(AttentionInput(path), locations.testcases() / f"{name}.out")
        cases.append(dict(name=name, B=B, N=N, d=d, dist=dist, seed=seed, time_limit=suite.time_limit_of(i),
                          shipped=shipped, sha256=digest))
        print(name, shape, dist, digest[:12], flush=True)
    return cases


def main(wanted: list[str]) -> None:
    path = locations.testcases() / "manifest.json"
    old = json.loads(path.read_text()) if path.exists() else {"cases": []}
    cases = []
    for prefix in SUITES:
        if prefix in (wanted or SUITES):
            cases += make_suite(prefix)
        else:
            cases += [c for c in old["cases"] if c["name"].startswith(prefix)]
    suites = {prefix: spec["source"] for prefix, spec in SUITES.items()}
    path.write_text(json.dumps({"suites": suites, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(SUITES)
    if unknown:
        sys.exit(f"make_suite: no suite {', '.join(sorted(unknown))} (suites: {', '.join(SUITES)})")
    main(sys.argv[1:])
