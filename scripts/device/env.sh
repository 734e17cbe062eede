# Sourced by the device scripts, on the device machine: the carried wheels and bubblewrap, fa from
# this checkout, a cache and $OUT.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .device/whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 PATH=$PWD/.device/bwrap/bin:$PATH
export FA_CACHE=${FA_CACHE:-/tmp/fa-cache} COLUMNS=200 OUT=${OUT:-/tmp/out}
mkdir -p "$FA_CACHE" "$OUT"
fa() { python3 -m fa_cli "$@"; }
