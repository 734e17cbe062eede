"""fa_cli/judge/across_cases.py: what the cases of one run say together: a verdict that changes
where a size product passes 2^31, or with N or d a multiple of a tile or not; the cases to run next."""
from types import SimpleNamespace

import numpy as np
import pytest

from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape
from fa_cli.judge import across_cases, diagnose, reference
from fa_cli.judge.diagnose import Diagnosis


# ---------------------------------------------------------------- across cases: a size
COURSE_C = [Shape(*s) for s in ((500, 2048, 32), (100, 4096, 64), (30, 8192, 32), (10, 16384, 32))]


def test_a_verdict_that_changes_where_n_n_4_passes_2_31_is_named():
    found = across_cases.size_finding(COURSE_C, [Shape(4, 32768, 32), Shape(2, 32768, 64)])
    assert found is not None
    assert found.lines[0].startswith("size: passes up to N=16384, fails from N=32768: N*N*4 bytes = 4 GiB passes "
                                     "2^31 there: a 32-bit size?")


def test_a_size_in_b_is_named_by_its_product():
    passed = [Shape(2, 1024, 64), Shape(100, 1024, 64)]
    failed = [Shape(9000, 1024, 64)]  # B*N*d*4 = 2.36e9: past 2^31
    found = across_cases.size_finding(passed, failed)
    assert found and "B*N*d*4 bytes" in found.lines[0] and "passes up to B=100, fails from B=9000" in found.lines[0]


@pytest.mark.parametrize("passed, failed", [
    ([], [Shape(2, 32768, 64)]),  # nothing passed: no size to compare with
    ([Shape(2, 32768, 64)], [Shape(2, 128, 32)]),  # the small one fails
    ([Shape(4, 32768, 32)], [Shape(2, 32768, 64)]),  # same N*N on both sides
])
def test_no_size_is_blamed_without_evidence(passed, failed):
    assert across_cases.size_finding(passed, failed) is None


# ---------------------------------------------------------------- across cases: a split
def test_a_split_by_tile_multiple_is_named():
    found = across_cases.split_findings([Shape(2, 1024, 32), Shape(2, 128, 64)], [Shape(2, 1000, 32), Shape(2, 100, 64)])
    assert [f.lines[0] for f in found] == ["split: fails only where N is not a multiple of 16 (failing N: 100, 1000; "
                                           "passing N: 128, 1024; not a multiple of 32, 64 or 128 fits them as well: "
                                           "these cases do not tell the tiles apart)"]
    found = across_cases.split_findings([Shape(2, 1024, 32), Shape(2, 48, 64)], [Shape(2, 1000, 32)])
    assert found[0].lines[0].endswith("(failing N: 1000; passing N: 48, 1024)")  # 48: a multiple of 16 alone
    found = across_cases.split_findings([Shape(2, 128, 32), Shape(3, 256, 64)], [Shape(1, 200, 64)])
    assert [f.lines[0] for f in found] == [  # B = 1 fits as well: both said, neither alone
        "split: fails only where N is not a multiple of 16 (failing N: 200; passing N: 128, 256; not a multiple of 32, "
        "64 or 128 fits them as well: these cases do not tell the tiles apart; where B = 1 fits them as well: these "
        "cases do not tell which)",
        "split: fails only where B = 1 (failing B: 1; passing B: 2, 3; where N is not a multiple of 16 fits them as "
        "well: these cases do not tell which)"]


@pytest.mark.parametrize("passed, failed, what", [
    ([Shape(2, 128, 64), Shape(4, 256, 64)], [Shape(2, 128, 32), Shape(4, 256, 32)], "d = 32"),
    ([Shape(1, 128, 32), Shape(1, 512, 64)], [Shape(2, 128, 32), Shape(3, 512, 64)], "B > 1"),
    # a half of the batches that is empty at B = 1 (held-out set33's s09): not "d = 64 and N not a multiple of 16"
    ([Shape(2, 128, 64), Shape(3, 256, 64), Shape(3, 200, 32)], [Shape(1, 200, 64)], "B = 1"),
])
def test_a_split_by_a_feature_is_named(passed, failed, what):
    found = across_cases.split_findings(passed, failed)
    assert found and found[0].lines[0].startswith(f"split: fails only where {what} ")


def test_a_split_from_some_n_on_is_named():
    found = across_cases.split_findings([Shape(2, 128, 32), Shape(2, 1024, 32)], [Shape(2, 2048, 32), Shape(2, 4096, 64)])
    assert found[0].lines[0].startswith("split: fails from N = 2048 on, passes up to N = 1024")


def test_where_every_case_failed_cases_to_run_are_suggested():
    from fa_cli.cases import suite
    [hint] = across_cases.across_cases([], [Shape(320, 128, 32)], suite.cases("c"))
    assert hint.kind == "suggest" and hint.lines[0].startswith("the one case run failed; to see which inputs fail: ")
    assert "fa run c02 (d = 64; every case run has d = 32)" in hint.lines[0]
    assert "fa gen -B 1 -N 128 -d 32 -o b1.in, then fa run b1.in" in hint.lines[0]
    assert across_cases.across_cases([], [Shape(320, 128, 32)], suite.cases("c"), suggest=False) == []


def test_splits_on_two_axes_that_both_fit_are_said_as_not_told_apart():
    """The failing cases are N = 200 with B = 1 and 3, the passing ones N = 128 with B = 2 and 16:
    N not a multiple of 16 and B odd both fit; each line says so (the cases cannot tell which)."""
    found = across_cases.split_findings([Shape(2, 128, 32), Shape(16, 128, 64)], [Shape(1, 200, 64), Shape(3, 200, 32)])
    lines = [f.lines[0] for f in found]
    assert len(lines) == 2 and lines[1].startswith("split: fails only where B is odd (failing B: 1, 3; passing B: 2, 16;"), lines
    assert lines[1].endswith("where N is not a multiple of 16 fits them as well: these cases do not tell which)"), lines
    assert "where B is odd fits them as well: these cases do not tell which" in lines[0], lines


def test_a_split_that_an_n_from_which_every_case_fails_fits_too_says_so():
    """set31's s10.hip: rows from 128 on never written fails 3x256x64, 1x200x64 and 3x200x32 and
    passes the N = 128 cases, whose B are even: "B is odd" alone would be a false lead; from
    N = 200 on fits them as well and is said beside it."""
    found = across_cases.split_findings([Shape(2, 128, 32), Shape(2, 128, 64), Shape(16, 128, 64)],
                                        [Shape(3, 256, 64), Shape(1, 200, 64), Shape(3, 200, 32)])
    [line] = [f.lines[0] for f in found]
    assert line.startswith("split: fails only where B is odd") and \
        "from N = 200 on fits them as well: these cases do not tell which" in line, line
    # where the tiles are not told apart either, both are said
    line, _ = [f.lines[0] for f in across_cases.split_findings([Shape(2, 128, 32), Shape(2, 128, 64)],
                                                               [Shape(3, 200, 64), Shape(1, 200, 32)])]
    assert line.startswith("split: fails only where N is not a multiple of 16") and "from N = 200 on fits them as " \
        "well" in line and "do not tell the tiles apart" in line, line


def test_two_features_that_split_together_are_named_beside_an_n_that_fits_too():
    """One failing case, 2x256x64, against 2x128x32, 3x200x32 and 1x200x64: no feature alone splits
    them; d = 64 with B > 1 does, and so does N from 256: both said, neither alone."""
    found = across_cases.split_findings([Shape(2, 128, 32), Shape(3, 200, 32), Shape(1, 200, 64)], [Shape(2, 256, 64)])
    lines = [f.lines[0] for f in found]
    assert lines[0].startswith("split: fails only where d = 64 and B > 1 (a batch's offset or stride written with 32 "
                               "where d belongs"), lines
    assert "from N = 256 on fits them as well: these cases do not tell which" in lines[0]
    assert lines[1].startswith("split: fails from N = 256 on") and "where d = 64 and B > 1 fits them as well" in lines[1]
    # a feature alone that splits leaves pairs unsaid
    alone = across_cases.split_findings([Shape(2, 128, 64), Shape(1, 200, 64)], [Shape(2, 128, 32), Shape(3, 256, 32)])
    assert [f.fields for f in alone] == [{"only_where": "d = 32"}]


# ---------------------------------------------------------------- across cases: the catalogue's leads
def every_batch_from_batch_0(path, B, N, d, seed):
    """An input, the right output and the output of a program that computes every batch from
    batch 0's Q, K and V (set38's s07: each stream's launch given the first batch's pointer)."""
    generate.write_input(path, Shape(B, N, d), seed)
    inp = AttentionInput(path)
    right = np.concatenate([reference.attention(*inp.qkv(b)) for b in range(B)]).astype(np.float32)
    return inp, right, np.repeat(right[:1], B, axis=0)


def test_leads_that_fit_only_the_two_batch_case_are_taken_out_where_another_lead_fits_every_case(tmp_path):
    """At B = 2 "batch b holds b-1's output" and "every batch from batch 0's input" write the same
    output; at B = 3 only the second fits: it is the lead kept for both cases, and the first is said
    as fitting t01 alone."""
    results = []
    for name, B in (("t01", 2), ("t04", 3)):
        inp, right, out = every_batch_from_batch_0(tmp_path / f"{name}.in", B, 64, 32, B)
        found = diagnose.looks_like(inp, out, 5e-3)
        names = [m.name for m, _ in found]
        lines = [f"looks like: {n}; check: ..." for n in names]
        results.append(SimpleNamespace(verdict="WRONG", target=SimpleNamespace(name=name),
                                       diagnosis=Diagnosis(lines, dict(mistakes=names, looks_like=list(names)))))
    first, second = results
    kept = second.diagnosis.fields["mistakes"]
    assert "every batch computed from batch 0's Q/K/V" in kept and "batch b holds batch b-1's output" not in kept
    assert {"batch b holds batch b-1's output", *kept} <= set(first.diagnosis.fields["mistakes"])
    across_cases.narrow_leads(results)
    assert first.diagnosis.fields["mistakes"] == kept and second.diagnosis.fields["mistakes"] == kept
    assert first.diagnosis.lines[-1] == "also fits this case, not t04 (which the leads above fit too): batch b holds " \
        "batch b-1's output"
    assert first.diagnosis.fields["leads_of_this_case_alone"] == ["batch b holds batch b-1's output"]
    assert [line.startswith("looks like: ") for line in first.diagnosis.lines].count(True) == len(kept)


def test_leads_are_left_as_they_are_where_no_lead_fits_every_failing_case():
    def case(name, leads):
        return SimpleNamespace(verdict="WRONG", target=SimpleNamespace(name=name), diagnosis=Diagnosis(
            [f"looks like: {n}; check: x" for n in leads], dict(mistakes=list(leads), looks_like=list(leads))))
    results = [case("t01", ["a", "b"]), case("t02", ["c"]), case("t03", [])]
    across_cases.narrow_leads(results)
    assert [r.diagnosis.fields["mistakes"] for r in results] == [["a", "b"], ["c"], []]
    assert len(results[0].diagnosis.lines) == 2
