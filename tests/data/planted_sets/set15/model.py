"""NumPy model of the set15 mechanisms that can be modelled numerically (written with the key,
before any compile or run).

Each function returns the output a planted program is expected to produce (float64). Prints the
max abs error against the float64 reference on the six judged shapes (B x N x d), inputs U(-3, 3),
seed 0. Memory a program leaves unwritten is modelled as zeros. Not numerical: p12 (a race).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]
TOL = 5e-3


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, size=(B, 3, N, d)).astype(np.float32).astype(np.float64)


def weights(s):
    m = s.max(axis=1, keepdims=True)
    return np.exp(s - m), m


def attend_scores(s, v):
    p, _ = weights(s)
    return (p @ v) / p.sum(axis=1, keepdims=True)


def reference(x):
    d = x.shape[3]
    return np.stack([attend_scores(x[b, 0] @ x[b, 1].T / np.sqrt(d), x[b, 2]) for b in range(x.shape[0])])


def scan_weights():
    # lane 31 after the guarded inclusive scan `if (lane >= off) s += __shfl_up_sync(FULL, s, off)`
    # for off = 1, 2, 4, 8 only (the loop stops before 16): the sum of lanes 16..31
    w = np.eye(32)
    off = 1
    while off < 16:
        src = np.array([i - off if i >= off else i for i in range(32)])
        add = np.array([1.0 if i >= off else 0.0 for i in range(32)])[:, None]
        w = w + add * w[src]
        off <<= 1
    return w[31]


def p01(x):
    B, _, N, d = x.shape
    w = scan_weights()
    lane_w = np.tile(w, d // 32)  # dim x belongs to lane x % 32
    return np.stack([attend_scores((x[b, 0] * lane_w) @ x[b, 1].T / np.sqrt(d), x[b, 2]) for b in range(B)])


def p02(x):
    # l = sum over tiles of the tile's largest weight exp(tmax - m)
    B, _, N, d = x.shape
    out = []
    for b in range(B):
        s = x[b, 0] @ x[b, 1].T / np.sqrt(d)
        p, m = weights(s)
        l = np.zeros((N, 1))
        for j0 in range(0, N, 32):
            l += p[:, j0:j0 + 32].max(axis=1, keepdims=True)
        out.append((p @ x[b, 2]) / l)
    return np.stack(out)


def p03(x):
    # every tile loads keys 0..bc-1 (tile pointers never advanced)
    B, _, N, d = x.shape
    idx = np.concatenate([np.arange(min(32, N - j0)) for j0 in range(0, N, 32)])
    return np.stack([attend_scores(x[b, 0] @ x[b, 1][idx].T / np.sqrt(d), x[b, 2][idx]) for b in range(B)])


def p04(x):
    # o / (weight sum of the last tile only)
    B, _, N, d = x.shape
    last = ((N - 1) // 32) * 32
    out = []
    for b in range(B):
        p, _ = weights(x[b, 0] @ x[b, 1].T / np.sqrt(d))
        out.append((p @ x[b, 2]) / p[:, last:].sum(axis=1, keepdims=True))
    return np.stack(out)


def p05(x):
    B, _, N, d = x.shape
    return np.stack([attend_scores(x[b, 0] @ x[b, 1].T / d, x[b, 2]) for b in range(B)])


def p06(x):
    # l counts (32 - r) extra copies of the last key's weight in the last partial tile
    B, _, N, d = x.shape
    r = N % 32
    extra = 0 if r == 0 else 32 - r
    out = []
    for b in range(B):
        p, _ = weights(x[b, 0] @ x[b, 1].T / np.sqrt(d))
        l = p.sum(axis=1, keepdims=True) + extra * p[:, N - 1:N]
        out.append((p @ x[b, 2]) / l)
    return np.stack(out)


def c_scale(d):
    raw = np.array([1.0 / np.sqrt(float(d))], dtype='<f8').tobytes()[:4]
    return float(np.frombuffer(raw, dtype='<f4')[0])


def p07(x):
    B, _, N, d = x.shape
    c = c_scale(d)
    return np.stack([attend_scores(x[b, 0] @ x[b, 1].T * c, x[b, 2]) for b in range(B)])


def p08(x):
    ref = reference(x)
    out = np.zeros_like(ref)
    out[0] = ref[-1]
    return out


def p09(x):
    return reference(x.astype(np.float16).astype(np.float64))


def p10(x):
    B, _, N, d = x.shape
    if d == 64:
        return reference(x)
    return np.stack([attend_scores(2 * x[b, 0] @ x[b, 1].T / np.sqrt(d), x[b, 2]) for b in range(B)])


def p11(x):
    out = reference(x)
    out[..., 32:] = 0.0
    return out


MODELS = [p01, p02, p03, p04, p05, p06, p07, p08, p09, p10, p11]

if __name__ == '__main__':
    for d in (32, 64):
        print('p07 c_scale for d = %d: %r (right: %r)' % (d, c_scale(d), 1 / np.sqrt(d)))
    print('p01 scan weights of lanes 0..31:', scan_weights().astype(int).tolist())
    names = ['%dx%dx%d' % s for s in SHAPES]
    print('%-5s ' % 'prog' + ' '.join('%12s' % n for n in names))
    for f in MODELS:
        errs = []
        for (B, N, d) in SHAPES:
            x = make(B, N, d)
            errs.append(np.abs(f(x) - reference(x)).max())
        print('%-5s ' % f.__name__ + ' '.join('%8.3g %s  ' % (e, 'x' if e > TOL else '.') for e in errs))
