"""NumPy models of some set9 mechanisms (written with the key; no GPU was used).

Each model takes U(-3, 3) inputs of one batch, a few query rows, and compares with a float64
reference. Printed: max abs error over the modelled rows. Run: python3 model.py
"""
import numpy as np

rng = np.random.default_rng(9)


def data(N, d, rows):
    q = rng.uniform(-3, 3, (rows, d))
    k = rng.uniform(-3, 3, (N, d))
    v = rng.uniform(-3, 3, (N, d))
    return q, k, v


def ref(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(1, keepdims=True))
    return (p @ v) / p.sum(1, keepdims=True)


def f05(q, k, v, skip=10.0):
    """Per-key online softmax that skips keys more than `skip` below the running max."""
    s = q @ k.T / np.sqrt(q.shape[1])
    R, N = s.shape
    m = np.full(R, -np.inf); l = np.zeros(R); o = np.zeros((R, v.shape[1]))
    for j in range(N):
        sj = s[:, j]
        take = sj >= m - skip
        mn = np.where(take, np.maximum(m, sj), m)
        with np.errstate(invalid="ignore"):
            a = np.where(take, np.exp(m - mn), 1.0)
        a = np.nan_to_num(a)
        p = np.where(take, np.exp(sj - mn), 0.0)
        l = l * a + p
        o = o * a[:, None] + p[:, None] * v[j]
        m = mn
    return o / l[:, None]


def f08(q, k, v, BC=32):
    """Tile-by-tile softmax, o kept normalised, old o rescaled by alpha / l_new only."""
    s = q @ k.T / np.sqrt(q.shape[1])
    R, N = s.shape
    m = np.full(R, -np.inf); l = np.zeros(R); o = np.zeros((R, v.shape[1]))
    for j0 in range(0, N, BC):
        st = s[:, j0:j0 + BC]
        mn = np.maximum(m, st.max(1))
        a = np.exp(m - mn)
        p = np.exp(st - mn[:, None])
        ln = l * a + p.sum(1)
        o = (o * a[:, None] + p @ v[j0:j0 + BC]) / ln[:, None]
        l, m = ln, mn
    return o


def f02(q, k, v, BC=32):
    """Every key of a tile gets the tile max as its score (weights exp(tmax - m_new))."""
    s = q @ k.T / np.sqrt(q.shape[1])
    R, N = s.shape
    m = np.full(R, -np.inf); l = np.zeros(R); o = np.zeros((R, v.shape[1]))
    for j0 in range(0, N, BC):
        bc = min(BC, N - j0)
        tm = s[:, j0:j0 + bc].max(1)
        mn = np.maximum(m, tm)
        a = np.exp(m - mn)
        p = np.exp(tm - mn)
        l = l * a + BC * p  # all 32 lanes hold the tile max, padded ones too
        o = o * a[:, None] + p[:, None] * v[j0:j0 + bc].sum(0)
        m = mn
    return o / l[:, None]


def f07(q, k, v, BC=32):
    """Last partial tile: lanes past N keep the previous tile's score (counted in l, not in o)."""
    s = q @ k.T / np.sqrt(q.shape[1])
    R, N = s.shape
    m = np.full(R, -np.inf); l = np.zeros(R); o = np.zeros((R, v.shape[1]))
    lane_s = np.full((R, BC), -np.inf)
    for j0 in range(0, N, BC):
        bc = min(BC, N - j0)
        lane_s[:, :bc] = s[:, j0:j0 + bc]
        mn = np.maximum(m, lane_s.max(1))
        a = np.exp(m - mn)
        p = np.exp(lane_s - mn[:, None])
        l = l * a + p.sum(1)
        o = o * a[:, None] + p[:, :bc] @ v[j0:j0 + bc]
        m = mn
    return o / l[:, None]


def f10(q, k, v):
    """Weight sum doubled by the first butterfly step (own value added)."""
    return ref(q, k, v) / 2.0


def err(fn, N, d, rows=64):
    q, k, v = data(N, d, rows)
    return np.abs(fn(q, k, v) - ref(q, k, v)).max()


if __name__ == "__main__":
    for name, fn, Ns in (("f05", f05, (128, 512, 1024, 2048, 4096, 8192, 32768)),
                         ("f08", f08, (128, 1024)),
                         ("f02", f02, (128, 1024)),
                         ("f07", f07, (100, 128, 173, 1000, 4097)),
                         ("f10", f10, (128, 1024))):
        for d in (32, 64):
            print(name, "d=%d" % d, " ".join("N=%d:%.2e" % (N, err(fn, N, d)) for N in Ns), flush=True)
