import numpy as np
import pytest

from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, FormatError, Shape, check_shape, header_bytes, open_output, read_header


def write_raw(path, header, payload_floats=0):
    with open(path, "wb") as f:
        f.write(np.array(header, dtype="<i4").tobytes())
        f.write(np.zeros(payload_floats, dtype="<f4").tobytes())
    return path


def test_round_trip_views_match_generated_batches(tmp_path):
    shape = Shape(3, 17, 32)
    path = tmp_path / "x.in"
    generate.write_input(path, shape, seed=5)
    inp = AttentionInput(path)
    assert inp.shape == shape
    for b in range(3):
        for got, want in zip(inp.qkv(b), generate.batch(shape, 5, "uniform", b)):
            np.testing.assert_array_equal(got[0], want)
    # Interleaved layout: batch 1's Q starts right after batch 0's V.
    raw = np.fromfile(path, dtype="<f4", offset=12)
    np.testing.assert_array_equal(raw[3 * 17 * 32 : 4 * 17 * 32].reshape(17, 32), inp.qkv(1)[0][0])


def test_header_bytes_little_endian():
    assert header_bytes(Shape(2, 3, 64)) == bytes([2, 0, 0, 0, 3, 0, 0, 0, 64, 0, 0, 0])


@pytest.mark.parametrize("header,floats,message", [
    (None, 0, "empty file"),
    ("short", 0, "short header (5 bytes)"),
    ([0, 4, 32], 0, "B = 0, must be positive"),
    ([2, -1, 32], 0, "N = -1, must be positive"),
    ([2, 4, 48], 0, "d = 48 is not supported (the programs support d = 32 and 64)"),
    ([2**31 - 1, 2**31 - 1, 64], 0, "overflows 64-bit file sizes"),
    ([2, 4, 32], 10, "file has 52 bytes, expected 12 + 12*B*N*d = 3084 for B=2, N=4, d=32"),
])
def test_read_header_rejects(tmp_path, header, floats, message):
    path = tmp_path / "bad.in"
    if header is None:
        path.write_bytes(b"")
    elif header == "short":
        path.write_bytes(b"\1\2\3\4\5")
    else:
        write_raw(path, header, floats)
    with pytest.raises(FormatError) as e:
        read_header(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(FormatError, match="cannot read input"):
        read_header(tmp_path / "nope.in")


def test_output_size_checked(tmp_path):
    shape = Shape(2, 4, 32)
    path = tmp_path / "o.out"
    np.zeros(shape.elements - 1, dtype="<f4").tofile(path)
    with pytest.raises(FormatError, match="expected 4\\*B\\*N\\*d = 1024"):
        open_output(path, shape)
    np.arange(shape.elements, dtype="<f4").tofile(path)
    assert open_output(path, shape)[1, 3, 31] == shape.elements - 1


def test_check_shape_accepts_course_extremes():
    assert check_shape(13000, 128, 32).elements == 53_248_000
    assert check_shape(1, 1, 64).input_bytes == 12 + 12 * 64
