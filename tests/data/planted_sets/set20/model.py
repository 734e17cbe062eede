"""NumPy model of set20's planted mistakes (float64 unless the mistake is a precision one).

Written after ANSWERS.md and before any compile. It models the deterministic mistakes; u08
(stale shared memory) is not modelled, and u05 models the skipped rows as zeros. Phantom memory
past the end of the input (u04, last batch) is modelled as zeros.
Run: python3 model.py  -> max abs error per program and shape ('x' = over 5e-3).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, (B, 3, N, d)).astype(np.float32).astype(np.float64)


def ref(X):
    Q, K, V = X[:, 0], X[:, 1], X[:, 2]
    d = Q.shape[-1]
    S = Q @ K.transpose(0, 2, 1) / np.sqrt(d)
    P = np.exp(S - S.max(-1, keepdims=True))
    return (P / P.sum(-1, keepdims=True)) @ V


def flat(X):
    return X.reshape(-1)


def row_at(X, b, r, d):
    """Row r (of d floats) counted from the start of batch b's K block in the flat input."""
    f = flat(X)
    N = X.shape[2]
    start = (b * 3 * N + N + r) * d
    if start + d > f.size:
        return np.zeros(d)
    return f[start:start + d]


def online_tiles(S, V, BC, alpha_fn):
    """Tile-by-tile online softmax for all rows: S (rows, N), V (N, d)."""
    rows, N = S.shape
    m = np.full(rows, -np.inf)
    l = np.zeros(rows)
    o = np.zeros((rows, V.shape[1]))
    with np.errstate(invalid='ignore', over='ignore'):
        for j0 in range(0, N, BC):
            s = S[:, j0:j0 + BC]
            tmax = s.max(1)
            m_new = np.maximum(m, tmax)
            alpha = alpha_fn(m, m_new, tmax)
            p = np.exp(s - m_new[:, None])
            o = o * alpha[:, None] + p @ V[j0:j0 + BC]
            l = l * alpha + p.sum(1)
            m = m_new
    return o / l[:, None]


def u01(X):
    O = ref(X)
    d = X.shape[-1]
    if d == 64:
        Q, K = X[:, 0], X[:, 1]
        S = Q @ K.transpose(0, 2, 1) / np.sqrt(d)
        l = np.exp(S - S.max(-1, keepdims=True)).sum(-1)
        O[:, :, 32:] *= l[:, :, None]
    return O


def u02(X):
    B, _, N, d = X.shape
    out = np.zeros((B, N, d))
    for b in range(B):
        S = X[b, 0] @ X[b, 1].T / np.sqrt(d)
        out[b] = online_tiles(S, X[b, 2], 32, lambda m, mn, t: np.exp(m - t))
    return out


def u03(X):
    B, _, N, d = X.shape
    S = X[:, 0] @ X[:, 1].transpose(0, 2, 1) / np.sqrt(d)
    m = S.max(-1, keepdims=True)
    p = np.exp(S - m)
    l = p.sum(-1, keepdims=True)
    w = np.exp(p - m)
    return (w @ X[:, 2]) / l


def u04(X):
    B, _, N, d = X.shape
    c = (N + 31) // 32
    out = np.zeros((B, N, d))
    for b in range(B):
        Q, K, V = X[b, 0] / np.sqrt(d), X[b, 1], X[b, 2]
        Ks, Vs = [K], [V]
        for lane in range(32):
            jb = lane * c
            if jb >= N:  # phantom key: "K row" jb and "V row" jb counted from K_b / V_b
                Ks.append(row_at(X, b, jb, d)[None])
                Vs.append(row_at(X, b, N + jb, d)[None])
        Ka, Va = np.vstack(Ks), np.vstack(Vs)
        S = Q @ Ka.T
        P = np.exp(S - S.max(1, keepdims=True))
        out[b] = (P / P.sum(1, keepdims=True)) @ Va
    return out


def u05(X):
    B, _, N, d = X.shape
    O = ref(X)
    if N % 64:
        O[:, (N // 64) * 64:] = 0.0
    return O


def u06(X):
    B, _, N, d = X.shape
    out = np.zeros((B, N, d))
    sc = 1 / np.sqrt(d)
    with np.errstate(invalid='ignore', over='ignore'):
        for b in range(B):
            dot = X[b, 0] @ X[b, 1].T
            s = dot * sc
            m = np.full(N, -np.inf)
            l = np.zeros(N)
            o = np.zeros((N, d))
            for j in range(N):
                mn = np.maximum(m, s[:, j])
                a = np.exp(m - mn)
                p = np.exp(dot[:, j] - mn)
                l = l * a + p
                o = o * a[:, None] + p[:, None] * X[b, 2, j][None]
                m = mn
            out[b] = o / l[:, None]
    return out


def u07(X):
    B, _, N, d = X.shape
    S = (X[:, 0] @ X[:, 1].transpose(0, 2, 1) / np.sqrt(d)).astype(np.float16).astype(np.float64)
    P = np.exp(S - S.max(-1, keepdims=True))
    return (P / P.sum(-1, keepdims=True)) @ X[:, 2]


def u09(X):
    B, _, N, d = X.shape
    out = np.zeros((B, N, d))
    for b in range(B):
        S = X[b, 0] @ X[b, 1].T / np.sqrt(d)
        V = X[b, 2]
        part = []
        for h in range(2):
            s = S[:, h::2]
            m = s.max(1)
            p = np.exp(s - m[:, None])
            part.append((m, p.sum(1), p @ V[h::2]))
        M = np.maximum(part[0][0], part[1][0])
        f = [np.exp(part[h][0] - M) for h in range(2)]
        l = part[0][1] * f[0] + part[1][1] * f[1]
        for h in range(2):
            oh = (part[h][2] + part[1 - h][2]) * f[h][:, None]
            out[b][:, h::2] = (oh / l[:, None])[:, h::2]
    return out


def u10(X):
    B, _, N, d = X.shape
    out = np.zeros((B, N, d))
    with np.errstate(invalid='ignore'):
        for b in range(B):
            S = X[b, 0] @ X[b, 1].T / np.sqrt(d)
            V = X[b, 2]
            m = np.full((N, 2), -np.inf)  # running max per half
            l = np.zeros((N, 2))          # l as held by a lane of each half
            o = np.zeros((N, d))
            for j0 in range(0, N, 64):
                s = np.full((N, 64), -np.inf)
                bc = min(64, N - j0)
                s[:, :bc] = S[:, j0:j0 + bc]
                hm = np.stack([s[:, :32].max(1), s[:, 32:].max(1)], 1)
                mn = np.maximum(m, hm)
                a = np.exp(m - mn)
                p = np.exp(s - np.repeat(mn, 32, axis=1))
                psum = p.sum(1)
                l = l * a + psum[:, None]
                pv = p[:, :bc] @ V[j0:j0 + bc]
                half = (np.arange(d) >= 32).astype(int)
                o = o * a[:, half] + pv
                m = mn
            out[b] = o / l[:, (np.arange(d) >= 32).astype(int)]
    return out


def u11(X):
    B, _, N, d = X.shape
    O = ref(X)
    if N <= 192:  # some wavefront's first slice is empty
        O[:] = np.nan
    return O


def u12(X):
    B, _, N, d = X.shape
    out = np.zeros((B, N, d))
    for b in range(B):
        Q, K, V = X[b, 0] / np.sqrt(d), X[b, 1], X[b, 2]
        extra = []
        for j0 in range(0, N, 128):
            for lane in range(64):
                jb = j0 + 64 + lane
                if jb >= N and j0 + lane + 32 < N:
                    extra.append(row_at(X, b, jb, d))
        S = Q @ K.T
        Se = Q @ np.array(extra).T if extra else np.zeros((N, 0))
        M = np.maximum(S.max(1), Se.max(1) if extra else -np.inf)
        P = np.exp(S - M[:, None])
        l = P.sum(1) + (np.exp(Se - M[:, None]).sum(1) if extra else 0)
        out[b] = (P @ V) / l[:, None]
    return out


MODELS = dict(u01=u01, u02=u02, u03=u03, u04=u04, u05=u05, u06=u06, u07=u07, u09=u09,
              u10=u10, u11=u11, u12=u12)

if __name__ == '__main__':
    print('prog | ' + ' | '.join('%dx%dx%d' % s for s in SHAPES))
    for name, fn in MODELS.items():
        cells = []
        for s in SHAPES:
            X = make(*s)
            with np.errstate(invalid='ignore'):
                e = np.abs(fn(X) - ref(X))
            err = np.inf if np.isnan(e).any() else e.max()
            cells.append('%.3g %s' % (err, 'x' if not err <= 5e-3 else '.'))
        print(name + ' | ' + ' | '.join(cells))
