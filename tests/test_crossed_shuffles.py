"""fa_cli/judge/probes/crossed_shuffles.py: a butterfly line that reduces one value's shuffle into
another value (set50's s10: `s1 += __shfl_xor(s0, off)` under `s0 += __shfl_xor(s0, off)`) is
found, with its line; butterflies that each reduce a value into itself, or a shuffle of a value
nothing else reduces, are not."""
from fa_cli.judge.probes.crossed_shuffles import crossed


def said(tmp_path, text: str) -> str:
    source = tmp_path / "hw4.hip"
    source.write_text(text)
    return crossed(source)


def test_a_second_value_summed_from_the_firsts_shuffle_is_found_with_its_line(tmp_path):
    text = "for (int off = 32; off > 0; off >>= 1) {\n  s0 += __shfl_xor(s0, off);\n  s1 += __shfl_xor(s0, off);\n}\n"
    assert said(tmp_path, text).startswith("the source's line 3 (`s1 += __shfl_xor(s0, off);`) reduces the shuffle of "
                                           "s0 into s1")


def test_a_max_of_another_values_shuffle_with_a_mask_is_found(tmp_path):
    text = "m0 = fmaxf(m0, __shfl_xor_sync(0xffffffff, m0, o));\nm1 = fmaxf(m1, __shfl_xor_sync(0xffffffff, m0, o));\n"
    assert "line 2" in said(tmp_path, text) and "of m0 into m1" in said(tmp_path, text)


def test_butterflies_that_each_reduce_their_own_value_or_a_lone_shuffle_are_not_found(tmp_path):
    assert said(tmp_path, "s0 += __shfl_xor(s0, off);\ns1 += __shfl_xor(s1, off);\n") == ""
    assert said(tmp_path, "acc += __shfl_down(part, off);\n") == ""  # part is reduced into nothing of its own
    assert said(tmp_path, "// s1 += __shfl_xor(s0, off);\ns0 += __shfl_xor(s0, off);\n") == ""
    assert crossed(None) == "" and crossed(tmp_path / "missing.cu") == ""
