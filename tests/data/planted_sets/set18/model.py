"""NumPy model of the set18 mechanisms that can be modelled numerically (written after the key,
before any compile or run).

Each function returns the output a planted program is expected to produce (float64). Prints the
max abs error against the float64 reference on the six judged shapes (B x N x d), inputs U(-3, 3),
seed 0. Memory a program leaves unwritten, and memory read past the end of the input, is modelled as
zeros. Not modelled: q07 (shared-memory layout chosen by the compiler), q08 (an extra launch reading
and writing out of bounds), q11 (a race).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]
TOL = 5e-3


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, size=(B, 3, N, d)).astype(np.float32).astype(np.float64)


def softmax_rows(s):
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def reference(x):
    d = x.shape[3]
    return np.stack([softmax_rows(x[b, 0] @ x[b, 1].T / np.sqrt(d)) @ x[b, 2] for b in range(x.shape[0])])


def q01(x):
    B, _, N, d = x.shape
    out = np.zeros((B, N, d))
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(axis=1)
        o = np.zeros((N, d))
        for j0 in range(0, N, 32):
            bc = min(32, N - j0)
            pt = np.zeros((N, 32))
            pt[:, :bc] = p[:, j0:j0 + bc]
            for jj in range(bc):
                lo = pt[:, jj % 16]
                hi = pt[:, 16 + jj % 16]
                for xx in range(d):
                    w = lo if xx % 32 < 16 else hi
                    o[:, xx] += w * v[j0 + jj, xx]
        out[b] = o / l[:, None]
    return out


def q02(x):
    B, _, N, d = x.shape
    out = np.zeros((B, N, d))
    keep = (np.arange(N) % 64) < 32
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        m = s[:, keep].max(axis=1, keepdims=True)
        p = np.exp(s - m)
        l = p[:, keep].sum(axis=1, keepdims=True)
        out[b] = (p @ v) / l
    return out


def q03(x):
    B, _, N, d = x.shape
    out = np.zeros((B, N, d))
    kmax = (N // 32) * 32
    for b in range(B):
        q, k, v = x[b]
        s = q @ k.T / np.sqrt(d)
        s[:, kmax:] = 0.0
        out[b] = softmax_rows(s) @ v
    return out


def q04(x):
    out = np.zeros(reference(x).shape)
    out[0] = reference(x[:1])[0]
    return out


def q05(x):
    B = x.shape[0]
    ref = reference(x)
    out = np.zeros(ref.shape)
    for b in range(B):
        if 3 * b < B:
            out[3 * b] = ref[b]
    return out


def q06(x):
    B, _, N, d = x.shape
    return np.stack([softmax_rows(np.log(2) * x[b, 0] @ x[b, 1].T / np.sqrt(d)) @ x[b, 2] for b in range(B)])


def q09(x):
    B, _, N, d = x.shape
    if d == 64:
        return reference(x)
    flat = np.concatenate([x.reshape(-1), np.zeros(N * 64)])
    out = np.zeros((B, N, d))
    for b in range(B):
        Q0 = b * 3 * N * d
        K0, V0 = Q0 + N * d, Q0 + 2 * N * d
        rows = lambda base, n: np.stack([flat[base + r * 64: base + r * 64 + d] for r in range(n)])
        q, k, v = rows(Q0, N), rows(K0, N), rows(V0, N)
        out[b] = softmax_rows(q @ k.T / np.sqrt(d)) @ v
    return out


def q10(x):
    B, _, N, d = x.shape
    out = np.zeros((B * N, d))
    Q = x[:, 0].reshape(B * N, d)
    ref = reference(x).reshape(B * N, d)
    if d == 32:
        out[0::2] = ref[0::2]
        return out.reshape(B, N, d)
    for r in range(0, B * N, 2):
        b = r // N
        k, v = x[b, 1], x[b, 2]
        qm = np.concatenate([Q[r, :32], Q[r + 1, 32:]])
        w = softmax_rows((qm @ k.T / np.sqrt(d))[None, :])[0]
        o = w @ v
        out[r, :32] = o[:32]
        out[r + 1, 32:] = o[32:]
    return out.reshape(B, N, d)


def q12(x):
    B, _, N, d = x.shape
    flat = np.concatenate([x.reshape(-1), np.zeros(N * d)])
    out = np.zeros((B, N, d))
    for b in range(B):
        base = b * 3 * N * d
        for i in range(N):
            q = flat[base + i * d: base + i * d + d]
            kb = base + (N + i) * d
            vb = kb + N * d
            k = flat[kb: kb + N * d].reshape(N, d)
            v = flat[vb: vb + N * d].reshape(N, d)
            w = softmax_rows((q @ k.T / np.sqrt(d))[None, :])[0]
            out[b, i] = w @ v
    return out


MODELS = [('q01', q01), ('q02', q02), ('q03', q03), ('q04', q04), ('q05', q05), ('q06', q06),
          ('q09', q09), ('q10', q10), ('q12', q12)]

if __name__ == '__main__':
    data = {s: make(*s) for s in SHAPES}
    refs = {s: reference(data[s]) for s in SHAPES}
    print('shape      ' + ' '.join('%-12s' % ('%dx%dx%d' % s) for s in SHAPES))
    for name, f in MODELS:
        errs = []
        for s in SHAPES:
            e = np.abs(f(data[s]) - refs[s]).max()
            errs.append('%.2e%s' % (e, ' x' if e > TOL else ' .'))
        print('%-10s ' % name + ' '.join('%-12s' % e for e in errs))
