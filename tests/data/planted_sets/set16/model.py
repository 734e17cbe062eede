"""NumPy model of the set16 mechanisms that can be modelled numerically (written with the key,
before any compile or run).

Each function returns the output a planted program is expected to produce (float64). Prints the
max abs error against the float64 reference on the six judged shapes (B x N x d), inputs U(-3, 3),
seed 0. Memory a program never writes (or never loads) is modelled as zeros.
Not modelled: r12 (a race between wavefronts).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]
TOL = 5e-3


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, size=(B, 3, N, d)).astype(np.float32).astype(np.float64)


def weights(q, k):
    s = q @ k.T / np.sqrt(q.shape[1])
    return np.exp(s - s.max(axis=1, keepdims=True))


def attend(q, k, v):
    p = weights(q, k)
    return (p @ v) / p.sum(axis=1, keepdims=True)


def reference(x):
    return np.stack([attend(x[b, 0], x[b, 1], x[b, 2]) for b in range(x.shape[0])])


def per_batch(x, fn):
    return np.stack([fn(x[b, 0], x[b, 1], x[b, 2]) for b in range(x.shape[0])])


def r01(x):
    # the last tile of 32 keys (the pipeline's drain) is never computed
    N = x.shape[2]
    keep = ((N - 1) // 32) * 32
    return per_batch(x, lambda q, k, v: attend(q, k[:keep], v[:keep]))


def r02(x):
    # element 4*x4 + c of a row = right value of dimension x4 + c
    ref = reference(x)
    d = x.shape[3]
    out = np.empty_like(ref)
    for x4 in range(d // 4):
        for c in range(4):
            out[..., 4 * x4 + c] = ref[..., x4 + c]
    return out


def tree_kept(KT):
    # which tile positions reach red[0] in `for (h = KT/2; h > 0; h >>= 1) if (t < h) red[t] op= red[t+h]`
    sets = [{t} for t in range(KT)]
    h = KT // 2
    while h > 0:
        for t in range(h):
            sets[t] = sets[t] | sets[t + h]
        h >>= 1
    return sets[0]


def r03(x):
    KT = 192
    kept = tree_kept(KT)
    N = x.shape[2]
    mask = np.array([(j % KT) in kept for j in range(N)])
    def f(q, k, v):
        p = weights(q, k)
        return (p @ v) / p[:, mask].sum(axis=1, keepdims=True)
    return per_batch(x, f)


def r04(x):
    return np.zeros_like(reference(x))


def r05(x):
    # scores q.k / d
    def f(q, k, v):
        return attend(q / np.sqrt(q.shape[1]), k, v)
    return per_batch(x, f)


def r06(x):
    out = reference(x)
    out[8:] = 0.0
    return out


def r07(x):
    SPLITS = 4
    N = x.shape[2]
    chunk = (N + SPLITS - 1) // SPLITS
    def f(q, k, v):
        s = q @ k.T / np.sqrt(q.shape[1])
        ms, ls, os_ = [], [], []
        for sp in range(SPLITS):
            jb, je = sp * chunk, min(N, (sp + 1) * chunk)
            ss = s[:, jb:je]
            m = ss.max(axis=1, keepdims=True)
            p = np.exp(ss - m)
            l = p.sum(axis=1, keepdims=True)
            ms.append(m); ls.append(l); os_.append((p @ v[jb:je]) / l)
        M = np.max(np.concatenate(ms, axis=1), axis=1, keepdims=True)
        L = sum(l * np.exp(m - M) for m, l in zip(ms, ls))
        return sum(np.exp(m - M) * o for m, o in zip(ms, os_)) / L
    return per_batch(x, f)


def r08(x):
    d = x.shape[3]
    if d == 32:
        return reference(x)
    def f(q, k, v):
        k, v = k.copy(), v.copy()
        k[1::2] = 0.0  # odd rows of every 32-key tile (j0 even) never loaded
        v[1::2] = 0.0
        return attend(q, k, v)
    return per_batch(x, f)


def r09(x):
    N, d = x.shape[2], x.shape[3]
    def f(q, k, v):
        p = weights(q, k)
        o = p @ v
        out = np.empty_like(o)
        for lane in range(32):
            l = np.zeros((q.shape[0],))
            for j0 in range(0, N, 64):
                l += p[:, j0:min(N, j0 + 32)].sum(axis=1)
                if j0 + 32 + lane < N:
                    l += p[:, j0 + 32 + lane]
            for t in range(d // 32):
                out[:, lane + 32 * t] = o[:, lane + 32 * t] / l
        return out
    return per_batch(x, f)


def r10(x):
    B, _, N, d = x.shape
    out = reference(x).reshape(B * N, d)
    R = B * N
    covered = 4 * ((R + 7) // 8)
    out[covered:] = 0.0
    return out.reshape(B, N, d)


def r11(x):
    def f(q, k, v):
        qq = q.copy()
        pair = q[0::2] + q[1::2]
        qq[0::2] = pair
        qq[1::2] = pair
        # the pair's summed score is used as it is (scaled once): q' = q_2t + q_2t+1
        return attend(qq, k, v)
    return per_batch(x, f)


MODELS = {"r01": r01, "r02": r02, "r03": r03, "r04": r04, "r05": r05, "r06": r06, "r07": r07,
          "r08": r08, "r09": r09, "r10": r10, "r11": r11}


def main():
    data = [make(*shape) for shape in SHAPES]
    refs = [reference(x) for x in data]
    print("shapes:", " ".join("%dx%dx%d" % s for s in SHAPES))
    print("r03 tree with KT = 192 keeps tile positions %% 3 in %s" %
          sorted({t % 3 for t in tree_kept(192)}))
    for name, fn in MODELS.items():
        cells, fails = [], 0
        for x, ref in zip(data, refs):
            err = np.abs(fn(x) - ref).max()
            cells.append("%.3g" % err)
            fails += err > TOL
        print("%s  %s  fails on %d of 6" % (name, "  ".join(cells), fails))
    print("r12: not modelled (race between wavefronts)")


if __name__ == "__main__":
    main()
