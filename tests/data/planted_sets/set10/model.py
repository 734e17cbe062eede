"""NumPy model of some set10 mechanisms (written with the key, before any compile or run).

Each function returns the output a planted program is expected to produce for one batch layout
(float64 arithmetic, except where the mistake is itself about precision). Prints the max abs error
against the float64 reference on the six judged shapes (B x N x d), inputs U(-3, 3), seed 0.
Only rows 0..ROWS-1 of every batch are modelled where a full model would be slow (see ROWS).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]
TOL = 5e-3


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, size=(B, 3, N, d)).astype(np.float32).astype(np.float64)


def attend(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p @ v) / p.sum(axis=1, keepdims=True)


def reference(x):
    return np.stack([attend(x[b, 0], x[b, 1], x[b, 2]) for b in range(x.shape[0])])


def g01(x):
    # every lane's score = 32 * (scaled q . k restricted to the dims of lane 31: 31 and 63)
    B, _, N, d = x.shape
    out = []
    for b in range(B):
        q, k, v = x[b]
        dims = [31] if d == 32 else [31, 63]
        s = 32 * (q[:, dims] @ k[:, dims].T) / np.sqrt(d)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        out.append((p @ v) / p.sum(axis=1, keepdims=True))
    return np.stack(out)


def bf16(a):
    a32 = np.asarray(a, dtype=np.float32)
    u = a32.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16  # round to nearest even
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def g04(x):
    return bf16(reference(x))


def g05(x):
    # column c (lane c % 32) = sum over tiles of (tile weight) * V[j0 + lane][c]; lanes past N read
    # the memory after V (next batch's Q or past the end: modelled as zeros)
    B, _, N, d = x.shape
    flat = np.concatenate([x.reshape(-1), np.zeros(64 * d)])
    out = np.zeros((B, N, d))
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        l = p.sum(axis=1)
        vbase = (b * 3 + 2) * N * d
        for j0 in range(0, N, 32):
            w = p[:, j0:j0 + 32].sum(axis=1)
            for c in range(d):
                lane = c % 32
                out[b, :, c] += w * flat[vbase + (j0 + lane) * d + c]
        out[b] /= l[:, None]
    return out


def g06(x):
    # the running max is never kept: every tile starts afresh, the output is the last tile's
    B, _, N, d = x.shape
    j0 = ((N - 1) // 32) * 32
    return np.stack([attend(x[b, 0], x[b, 1][j0:], x[b, 2][j0:]) for b in range(B)])


def g07(x):
    # the last partial tile scores all 32 lanes: keys N.. read K rows N.. (= V rows 0..) and V rows
    # N.. (= next batch's Q rows, or past the end: zeros here)
    B, _, N, d = x.shape
    pad = (-N) % 32
    flat = np.concatenate([x.reshape(-1), np.zeros(3 * 64 * d)])
    out = []
    for b in range(B):
        kb = (b * 3 + 1) * N * d
        vb = (b * 3 + 2) * N * d
        k = flat[kb:kb + (N + pad) * d].reshape(N + pad, d)
        v = flat[vb:vb + (N + pad) * d].reshape(N + pad, d)
        out.append(attend(x[b, 0], k, v))
    return np.stack(out)


def g08(x):
    return np.stack([attend(x[b, 0], x[b, 1], x[b, 1]) for b in range(x.shape[0])])


def g09(x):
    # K row j read from the floats 4*j*D .. 4*j*D + D - 1 after K's start
    B, _, N, d = x.shape
    flat = np.concatenate([x.reshape(-1), np.zeros(4 * N * d)])
    out = []
    for b in range(B):
        kb = (b * 3 + 1) * N * d
        k = np.stack([flat[kb + 4 * j * d: kb + 4 * j * d + d] for j in range(N)])
        out.append(attend(x[b, 0], k, x[b, 2]))
    return np.stack(out)


def g10(x):
    # d = 32: keys with (j mod 64) >= 32 are in l but not in o; d = 64 exact
    B, _, N, d = x.shape
    if d == 64:
        return reference(x)
    out = []
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        keep = (np.arange(N) % 64) < 32
        out.append(((p * keep) @ v) / p.sum(axis=1, keepdims=True))
    return np.stack(out)


def g12(x):
    # per-tile weight sum never reset: l_t = l_{t-1} * alpha_t + sum_{u <= t} P_u (P_u relative to m_u)
    B, _, N, d = x.shape
    BC = 64
    out = []
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        m = np.full(N, -np.inf)
        l = np.zeros(N)
        o = np.zeros((N, d))
        psum = np.zeros(N)
        for j0 in range(0, N, BC):
            st = s[:, j0:j0 + BC]
            mn = np.maximum(m, st.max(axis=1))
            a = np.exp(m - mn)
            p = np.exp(st - mn[:, None])
            o = o * a[:, None] + p @ v[j0:j0 + BC]
            psum = psum + p.sum(axis=1)
            l = l * a + psum
            m = mn
        out.append(o / l[:, None])
    return np.stack(out)


if __name__ == "__main__":
    models = [g01, g04, g05, g06, g07, g08, g09, g10, g12]
    print("%-5s" % "", " ".join("%12s" % ("%dx%dx%d" % s) for s in SHAPES))
    for f in models:
        errs = []
        for B, N, d in SHAPES:
            x = make(B, N, d)
            errs.append(np.nanmax(np.abs(f(x) - reference(x))))
        print("%-5s" % f.__name__, " ".join("%12.3g%s" % (e, "*" if e > TOL else " ") for e in errs))
    print("(* = over the 5e-3 tolerance)")
