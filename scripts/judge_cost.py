"""What judging every value costs: expected outputs computed the first time, then compared once cached.

    python3 scripts/judge_cost.py --suite c --program cuda -o docs/results/h200/judge-cost.json

For the suite's cases (inputs generated first, not timed), it removes their cached expected
outputs and times computing them all (fa's own path: PyTorch float64 on a GPU where installed,
else numpy on every core); then it runs the program once on each case and times, on that output
still in the page cache, the compare of every value against the cached expected output, beside
the sampled check fa made before (32 rows per batch against float64). Prints a table and
writes one JSON record.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa_cli.cases import suite  # noqa: E402
from fa_cli.cases.format import AttentionInput, open_output  # noqa: E402
from fa_cli.judge import expected, verdict, verify  # noqa: E402
from fa_cli.programs import programs, system  # noqa: E402
from fa_cli.report import records  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="c", choices=suite.SUITES)
    parser.add_argument("--program", default="cuda")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()

    targets = [verdict.target_for(name) for name in suite.cases(args.suite)]
    needs = [expected.Need(t.input_path, t.shape, expected.path_of(t)) for t in targets if t.expected_path is None]
    for need in needs:
        need.path.unlink(missing_ok=True)
    compute = expected.backend()
    start = time.perf_counter()
    for need in needs:
        expected.write(need, compute)
    first_s = time.perf_counter() - start
    print(f"expected outputs of {len(needs)} cases ({expected.describe_work(needs)}) with {compute.where}: "
          f"{first_s:.1f} s")

    program = programs.ensure_built(programs.resolve(args.program))
    rows = []
    with tempfile.TemporaryDirectory(prefix="fa-judge-cost-") as tmp:
        for t in targets:
            out_path = Path(tmp) / "o.out"
            run = programs.run(program, t.input_path, out_path)
            if run.error:
                sys.exit(f"{t.name}: {program.name} failed: {run.error}")
            start = time.perf_counter()
            out = open_output(out_path, t.shape)
            every = verify.against_expected(out, expected.output_of(t), shape=t.shape)
            every_s = time.perf_counter() - start
            start = time.perf_counter()
            sampled = verify.against_reference(AttentionInput(t.input_path), out,
                                               check=verify.RowCheck(sample=verify.DEFAULT_SAMPLE_ROWS))
            sampled_s = time.perf_counter() - start
            rows.append(dict(case=t.name, shape=str(t.shape), values=every.checked, every_value_s=every_s,
                             sampled_s=sampled_s, passed=every.passed, max_err=every.max_err,
                             sampled_passed=sampled.passed))
            print(f"{t.name} {t.shape.B}x{t.shape.N}x{t.shape.d}: every value {every_s:.3f} s "
                  f"({'PASS' if every.passed else 'WRONG'}, max err {every.max_err:.2e}); sampled {sampled_s:.3f} s")
    mean = statistics.fmean(r["every_value_s"] for r in rows)
    print(f"compare of every value, cached: mean {mean:.3f} s a case, "
          f"median {statistics.median(r['every_value_s'] for r in rows):.3f} s; "
          f"the sampled check: mean {statistics.fmean(r['sampled_s'] for r in rows):.3f} s")
    if args.output:
        record = dict(command=" ".join(sys.argv), system=system.describe(), source=records.source_revision(),
                      date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), backend=compute.where,
                      first_computation_s=first_s, cases_computed=len(needs), compare_mean_s=mean, cases=rows)
        args.output.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
