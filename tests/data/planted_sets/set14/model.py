"""NumPy model of the set14 mechanisms that can be modelled numerically (written with the key,
before any compile or run).

Each function returns the output a planted program is expected to produce (float64). Prints the
max abs error against the float64 reference on the six judged shapes (B x N x d), inputs U(-3, 3),
seed 0. Memory a program reads or leaves unwritten outside the right places is modelled as zeros.
Not numerical: n04 (empty output file), n08 on A, B, E (0 blocks: launch refused, no output), n09
and n10 (right on the judged shapes), n01 is modelled as the race lost (stream 1's batches read
zeros).
"""
import numpy as np

SHAPES = [(2, 128, 32), (2, 128, 64), (3, 256, 64), (16, 128, 64), (1, 200, 64), (3, 200, 32)]
TOL = 5e-3


def make(B, N, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, size=(B, 3, N, d)).astype(np.float32).astype(np.float64)


def softmax_parts(s, v):
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return p @ v, p.sum(axis=1, keepdims=True)


def attend(q, k, v):
    o, l = softmax_parts(q @ k.T / np.sqrt(q.shape[1]), v)
    return o / l


def reference(x):
    return np.stack([attend(x[b, 0], x[b, 1], x[b, 2]) for b in range(x.shape[0])])


def n01(x):
    # race lost: batches [ceil(B/2), B) read all-zero Q, K, V: uniform weights over zero V rows
    B = x.shape[0]
    out = reference(x)
    out[(B + 1) // 2:] = 0.0
    return out


def n02(x):
    # every data element read 3 words early (the header words as floats: ~0)
    B, _, N, d = x.shape
    flat = x.reshape(-1)
    shifted = np.concatenate([np.zeros(3), flat[:-3]]).reshape(x.shape)
    return reference(shifted)


def n03(x):
    ref = reference(x)
    return np.broadcast_to(ref[0], ref.shape).copy()


def n05(x):
    # only the first blocks*128 output values divided by their row sum
    B, _, N, d = x.shape
    outs = []
    for b in range(B):
        q, k, v = x[b]
        o, l = softmax_parts(q @ k.T / np.sqrt(d), v)
        outs.append((o, l))
    o = np.stack([a for a, _ in outs]).reshape(B * N, d)
    l = np.stack([c for _, c in outs]).reshape(B * N, 1)
    flat = o.reshape(-1).copy()
    rows = B * N
    nblocks = (rows + 127) // 128
    done = min(nblocks * 128, flat.size)
    lflat = np.repeat(l.reshape(-1), d)
    flat[:done] /= lflat[:done]
    return flat.reshape(B, N, d)


def n06(x):
    # batch read as packed rows [q_i k_i v_i] of 3d floats
    B, _, N, d = x.shape
    out = []
    for b in range(B):
        rows = x[b].reshape(N, 3 * d)  # the batch's 3*N*d floats, 3d per "row"
        out.append(attend(rows[:, :d], rows[:, d:2 * d], rows[:, 2 * d:]))
    return np.stack(out)


def n07(x):
    # batch b written at flat row 256*ceil... (N rounded up to a multiple of 128) * b
    B, _, N, d = x.shape
    ref = reference(x)
    stride = ((N + 127) // 128) * 128
    out = np.zeros((B * N, d))
    for b in range(B):
        for i in range(N):
            r = stride * b + i
            if r < B * N:
                out[r] = ref[b, i]
    return out.reshape(B, N, d)


def n08(x):
    # ((rows + 127) // 256) // 2 blocks of 128 rows; 0 blocks: no output (None)
    B, _, N, d = x.shape
    rows = B * N
    blocks = ((rows + 127) // 256) // 2
    if blocks == 0:
        return None
    out = np.zeros((rows, d))
    done = min(blocks * 128, rows)
    out[:done] = reference(x).reshape(rows, d)[:done]
    return out.reshape(B, N, d)


def n11(x):
    # odd rows (within each batch; N even) are copies of the even row before them
    out = reference(x)
    out[:, 1::2] = out[:, 0::2]
    return out


def n12(x):
    # in every full tile of 64 keys, V rows 62, 63 (d = 32) or 63 (d = 64) read as 0 (o only)
    B, _, N, d = x.shape
    lost = (62, 63) if d == 32 else (63,)
    out = []
    for b in range(B):
        q, k, v = x[b]
        vz = v.copy()
        for j0 in range(0, N - 63, 64):  # full tiles only
            for r in lost:
                vz[j0 + r] = 0.0
        o, l = softmax_parts(q @ k.T / np.sqrt(d), vz)
        out.append(o / l)
    return np.stack(out)


MODELS = {"n01": n01, "n02": n02, "n03": n03, "n05": n05, "n06": n06, "n07": n07, "n08": n08,
          "n11": n11, "n12": n12}


def main():
    data = [make(*shape) for shape in SHAPES]
    refs = [reference(x) for x in data]
    print("shapes:", " ".join("%dx%dx%d" % s for s in SHAPES))
    for name, fn in MODELS.items():
        cells, fails = [], 0
        for x, ref in zip(data, refs):
            got = fn(x)
            if got is None:
                cells.append("no-output")
                fails += 1
                continue
            err = np.abs(got - ref).max()
            cells.append("%.3g" % err)
            fails += err > TOL
        print("%s  %s  fails on %d of 6" % (name, "  ".join(cells), fails))
    print("n04: empty output file on all 6; n09, n10: right on all 6 (n09 fails N = 32768, n10 B*N > 16384)")


if __name__ == "__main__":
    main()
