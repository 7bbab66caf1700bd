"""Throughput of the native kernels against the best NumPy expression of the same computation.

For every kernel and size (64 KiB, 1 MiB, 64 MiB of float32 input) the two contenders run
alternately in one process, on the same pre-touched buffers; the table gives GB/s of input
(or, for decompressors, of output) at the median and at the best repetition, and the ratio
of median times (native / NumPy speed-up).  Ratios within one launch are the meaningful
figure on a shared machine.  Targets from the issue are checked at the end.

    python -m bench.kernels [--sizes 64K,1M,64M] [--kernels int8,topk] [--time 0.3] [--json out]
"""
import argparse
import json
import sys
import time

import numpy as np

from collectives import _compress as C
from collectives import _kernels as R
from collectives.ops import OP_CODE, dtype_code

B = 512            # bucket size of the quantizers
F32 = dtype_code(np.float32)
F16 = dtype_code(np.float16)
SUM = OP_CODE["sum"]

# kernel -> minimum speed-up demanded by the issue, at every size unless the size is given.
TARGETS = {"reduce_sum_f32": 1.0, "int8_compress": 4.0, "int8_decompress_add": 4.0,
           ("topk_1pct", "64M"): 3.0, "sign_compress": 5.0}


def parse_size(s):
    """'64K' -> 65536 bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def cases(n, rng):
    """(name, native callable, NumPy callable, bytes counted) for arrays of n float32."""
    x = rng.standard_normal(n).astype(np.float32) * np.exp(rng.uniform(-3, 3, n)).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a, a2 = x.copy(), x.copy()
    tmp, tmp2 = np.empty(n, np.float32), np.empty(n, np.float32)
    nb = -(-n // B)
    q, sc = np.empty(n, np.int8), np.empty(nb, np.float32)
    C.int8_compress(x, B, q, sc)
    xb, tb, qb = x.reshape(nb, B), tmp.reshape(nb, B), q.reshape(nb, B)
    h = x.astype(np.float16)
    h2, hh = y.astype(np.float16), x.astype(np.float16)
    bits, mags = np.empty(-(-n // 8), np.uint8), np.empty(nb, np.float32)
    C.sign_compress(x, B, bits, mags)
    k = max(1, n // 100)
    idx, vals = np.empty(k, np.int64), np.empty(k, np.float32)
    nrng = np.random.default_rng(0)

    def np_int8():
        amax = np.abs(xb).max(axis=1)
        np.multiply(xb, (127 / amax)[:, None], out=tb)
        np.rint(tb, out=tb)
        qb[...] = tb
        return amax / 127

    def np_int8_stoch():
        amax = np.abs(xb).max(axis=1)
        np.multiply(xb, (127 / amax)[:, None], out=tb)
        np.add(tb, nrng.random((nb, B), np.float32), out=tb)
        np.floor(tb, out=tb)
        qb[...] = tb

    def np_qsgd():
        norm = np.sqrt(np.einsum("ij,ij->i", xb, xb))
        np.abs(xb, out=tb)
        np.multiply(tb, (15 / norm)[:, None], out=tb)
        np.add(tb, nrng.random((nb, B), np.float32), out=tb)
        np.floor(tb, out=tb)
        np.copysign(tb, xb, out=tb)
        qb[...] = tb

    def np_sign():
        np.abs(xb).mean(axis=1)
        return np.packbits(x >= 0, bitorder="little")

    def np_sign_add():
        m = np.repeat(mags, B)
        s = np.unpackbits(bits, bitorder="little").view(bool)
        np.add(a2, np.where(s, m, -m), out=a2)

    def np_fp16():
        np.multiply(x, np.float32(0.5), out=tmp)
        h[...] = tmp
        return np.isfinite(h).all()

    def np_topk():
        i = np.argpartition(np.abs(x), n - k)[n - k:]
        return x[i]

    def np_threshold():
        i = np.flatnonzero(np.abs(x) >= 3.0)
        return x[i]

    def np_randk():
        i = np.flatnonzero(nrng.random(n, np.float32) < 0.01)
        return x[i]

    sel = np.sort(nrng.choice(n, k, replace=False))
    sv = x[sel].copy()
    nbytes = 4 * n
    return [
        ("reduce_sum_f32", lambda: R.reduce_into(a, y, F32, SUM), lambda: np.add(a2, y, out=a2), nbytes),
        ("reduce_scaled_f32", lambda: R.reduce_scaled(a, y, F32, 0.5),
         lambda: (np.add(a2, y, out=a2), np.multiply(a2, np.float32(0.5), out=a2)), nbytes),
        ("reduce_sum_f16", lambda: R.reduce_into(hh, h2, F16, SUM), lambda: np.add(h, h2, out=h), nbytes // 2),
        ("sum_f16_f32", lambda: R.sum_f16_f32(a, h2), lambda: np.add(a2, h2, out=a2), nbytes // 2),
        ("fp16_compress", lambda: C.fp16_compress(x, 0.5, hh), np_fp16, nbytes),
        ("fp16_decompress_add", lambda: C.fp16_decompress_add(h2, 2.0, a),
         lambda: (np.multiply(h2, np.float32(0.5), out=tmp2), np.add(a2, tmp2, out=a2)), nbytes),
        ("int8_compress", lambda: C.int8_compress(x, B, q, sc), np_int8, nbytes),
        ("int8_compress_stochastic", lambda: C.int8_compress(x, B, q, sc, True, 1), np_int8_stoch, nbytes),
        ("int8_decompress_add", lambda: C.int8_decompress_add(q, sc, B, a),
         lambda: (np.multiply(qb, sc[:, None], out=tmp2.reshape(nb, B)), np.add(a2, tmp2, out=a2)), nbytes),
        ("qsgd_compress", lambda: C.qsgd_compress(x, B, 15, 1, q, sc), np_qsgd, nbytes),
        ("sign_compress", lambda: C.sign_compress(x, B, bits, mags), np_sign, nbytes),
        ("sign_decompress_add", lambda: C.sign_decompress_add(bits, mags, B, a), np_sign_add, nbytes),
        ("topk_1pct", lambda: C.topk(x, k, idx, vals), np_topk, nbytes),
        ("approx_topk_1pct", lambda: C.approx_topk(x, k, max(64, n // 100), 1, idx, vals), np_topk, nbytes),
        ("threshold", lambda: C.threshold(x, 3.0, np.empty(n // 10, np.int64), np.empty(n // 10, np.float32)),
         np_threshold, nbytes),
        ("randk_1pct", lambda: C.randk(x, k, 1, np.empty(2 * k, np.float32)), np_randk, nbytes),
        ("scatter_add_1pct", lambda: C.scatter_add(a, sel, sv), lambda: np.add.at(a2, sel, sv), 12 * k),
    ]


def measure(native, ref, budget):
    """Alternate the two callables until ``budget`` seconds pass; per-call times of each."""
    native(), ref()
    tn, tr = [], []
    start = time.perf_counter()
    while len(tn) < 7 or (time.perf_counter() - start < budget and len(tn) < 2000):
        t0 = time.perf_counter()
        native()
        t1 = time.perf_counter()
        ref()
        t2 = time.perf_counter()
        tn.append(t1 - t0)
        tr.append(t2 - t1)
    return np.array(tn), np.array(tr)


def main(argv=None):
    """Run the sweep and print the table; exit status 0 (targets are reported, not enforced)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64K,1M,64M")
    ap.add_argument("--kernels", default="", help="comma-separated substrings of kernel names")
    ap.add_argument("--time", type=float, default=0.3, help="seconds per cell")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    want = [w for w in args.kernels.split(",") if w]
    rows = []
    print(f"{'kernel':<26}{'size':>6}{'native GB/s':>13}{'(best)':>9}{'numpy GB/s':>12}{'(best)':>9}"
          f"{'ratio':>8}{'reps':>6}")
    for label in args.sizes.split(","):
        n = parse_size(label) // 4
        for name, native, ref, nbytes in cases(n, np.random.default_rng(n)):
            if want and not any(w in name for w in want):
                continue
            tn, tr = measure(native, ref, args.time)
            row = dict(kernel=name, size=label, bytes=nbytes, reps=len(tn),
                       native_median=float(np.median(tn)), native_min=float(tn.min()),
                       numpy_median=float(np.median(tr)), numpy_min=float(tr.min()))
            row["ratio"] = row["numpy_median"] / row["native_median"]
            rows.append(row)
            gb = lambda t: nbytes / t / 1e9
            print(f"{name:<26}{label:>6}{gb(row['native_median']):>13.2f}{gb(row['native_min']):>9.2f}"
                  f"{gb(row['numpy_median']):>12.2f}{gb(row['numpy_min']):>9.2f}{row['ratio']:>7.2f}x"
                  f"{len(tn):>6}", flush=True)
    print("\ntargets (ratio of medians):")
    for row in rows:
        target = TARGETS.get((row["kernel"], row["size"]), TARGETS.get(row["kernel"]))
        if target is not None:
            verdict = "met" if row["ratio"] >= target else "NOT MET"
            print(f"  {row['kernel']:<22}{row['size']:>5}  {row['ratio']:6.2f}x  >= {target}x  {verdict}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
