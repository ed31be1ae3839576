"""Byte-for-byte agreement of tsl_quantize with the gguf Python package.

The files we write must be the files llama.cpp's tools write. For each input
set below, core_test_quant --emit quantizes raw f32 with tsl_quantize and the
bytes are compared with gguf.quants.quantize (Q8_0, Q4_0, BF16) and numpy's
float16 cast (F16). Inputs stress the rounding rules: exact ties where x * id
lands on .5, all-zero rows (and -0.0 first), a single non-zero, values at the
fp16 limits of d, and magnitudes from 1e-30 to 1e30.

Prints "N passed, N failed" and exits non-zero on any difference.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

BIN = os.path.join(os.environ.get("TSL_TEST_BIN", "build/tests"), "core_test_quant")


def cases():
    rng = np.random.default_rng(1234)
    c = {}
    for scale in (1e-30, 1e-6, 1e-3, 1.0, 3.0, 1e3, 1e5, 1e20):
        c[f"normal*{scale:g}"] = rng.standard_normal(32 * 256) * scale
    c["uniform[-1,1)"] = rng.uniform(-1, 1, 32 * 256)
    c["uniform[0,10)"] = rng.uniform(0, 10, 32 * 256)
    c["negative"] = -rng.uniform(0, 5, 32 * 64)

    # Q8_0 ties: amax 127 gives id = 1, so halves are exact ties at x * id.
    t = np.tile(np.arange(-64, 64, dtype=np.float64) + 0.5, 2)
    t[0] = 127.0
    t[128] = -127.0
    c["q8 ties (id=1)"] = t
    # amax 127 * 2^k keeps id a power of two: ties survive the multiply.
    blocks = []
    for k in range(-10, 11):
        b = (np.arange(32, dtype=np.float64) - 15.5) * 2.0 ** k
        b[0] = 127 * 2.0 ** k
        blocks.append(b)
    c["q8 ties (id=2^k)"] = np.concatenate(blocks)
    # Q4_0 ties: max -8 gives id = 1; x + 8.5 lands on integers and halves.
    blocks = []
    for off in np.arange(-8, 8, 0.25):
        b = np.full(32, off)
        b[3] = -8.0
        b[20] = off + 0.5
        blocks.append(b)
    c["q4 ties (id=1)"] = np.concatenate(blocks)
    # x * id within an ulp of a tie, both sides.
    base = np.linspace(-127, 127, 32 * 32)
    c["near ties"] = np.concatenate([np.nextafter(base + 0.5, np.inf), np.nextafter(base + 0.5, -np.inf)])

    # Elements whose exact x / d is a half-integer: whether the quantizer
    # rounds x * (1/d) or x / d, and whether x * id + 8.5 is fused into one
    # rounding, decides the result for many of them.
    blocks = []
    for i in range(256):
        amax = np.float32(rng.uniform(1, 2) * 10.0 ** rng.integers(-3, 4))
        if i % 2:
            d = np.float32(amax / np.float32(127))
            k = rng.integers(-127, 127, 32) + 0.5
        else:
            d = np.float32(amax / np.float32(8))
            k = rng.integers(-8, 8, 32) + 0.5
        b = np.clip((k * d).astype(np.float32), -amax, amax)
        b[0] = -amax
        blocks.append(b)
    c["half-steps of d"] = np.concatenate(blocks)

    z = np.zeros(32 * 8)
    c["zeros"] = z
    nz = np.zeros(32 * 4)
    nz[0] = -0.0  # all-zero block led by -0.0: Q4_0 d takes x[0]'s sign
    nz[64 + 5] = -0.0
    nz[96:] = -0.0  # a block of -0.0 only
    c["negative zeros"] = nz
    one = np.zeros(32 * 4)
    one[5] = 3.25
    one[32 + 31] = -1e-3
    one[64] = 1e6
    one[96 + 16] = -7.0
    c["single non-zero"] = one
    # largest magnitude appears twice with opposite signs: first one wins for Q4_0
    tw = rng.uniform(-1, 1, 32 * 4)
    tw[2], tw[9] = 5.0, -5.0
    tw[32 + 1], tw[32 + 30] = -5.0, 5.0
    c["tied maxima"] = tw
    # d at the fp16 limits: subnormal d, the largest finite d, overflow to inf
    lim = []
    for amax in (1e-7, 6e-8 * 127, 65504.0 * 127, 65520.0 * 127, 1e30, 3e38, 1e-38):
        b = rng.uniform(-1, 1, 32) * amax
        b[7] = amax
        lim.append(b)
    c["fp16 limits of d"] = np.concatenate(lim)
    c["large magnitudes"] = rng.standard_normal(32 * 64) * 1e30
    c["mixed magnitudes"] = rng.standard_normal(32 * 64) * 10.0 ** rng.integers(-20, 20, 32 * 64)
    # values that exercise fp16/bf16 rounding: halfway points and the range ends
    h = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)]
    mids = (h[:-1].astype(np.float64) + h[1:]) / 2
    c["fp16 values and midpoints"] = np.concatenate([h, mids[np.isfinite(mids)]])
    c["beyond fp16"] = np.array([65504, 65519.99, 65520, 1e5, 1e38, -1e38, 6e-8, 3e-8, 2.9e-8, 1e-45] * 32)
    return {k: np.asarray(v, dtype=np.float32) for k, v in c.items()}


def ours(tname, x, tmp):
    inp = os.path.join(tmp, "in.f32")
    out = os.path.join(tmp, "out.bin")
    x.astype("<f4").tofile(inp)
    r = subprocess.run([BIN, "--emit", tname, inp, out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{BIN} --emit {tname} failed: {r.stderr.strip()}")
    with open(out, "rb") as f:
        return f.read()


def theirs(tname, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow in 1/d for subnormal blocks is expected
        if tname == "q8_0":
            return quants.quantize(x.reshape(-1, 32), QT.Q8_0).tobytes()
        if tname == "q4_0":
            return quants.quantize(x.reshape(-1, 32), QT.Q4_0).tobytes()
        if tname == "bf16":
            return quants.quantize(x, QT.BF16).tobytes()
        if tname == "f16":
            return x.astype("<f2").tobytes()
        if tname == "f32":
            return x.astype("<f4").tobytes()
    raise ValueError(tname)


def first_difference(a, b, tname):
    bs = {"q8_0": 34, "q4_0": 18, "f16": 2, "bf16": 2, "f32": 4}[tname]
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            k = i // bs
            return f"unit {k} (byte {i}): ours {a[k*bs:(k+1)*bs].hex()} theirs {b[k*bs:(k+1)*bs].hex()}"
    return f"length ours {len(a)} theirs {len(b)}"


def main():
    if not os.path.exists(BIN):
        print(f"missing {BIN} (set TSL_TEST_BIN)")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, x in cases().items():
            for tname in ("q8_0", "q4_0", "f16", "bf16", "f32"):
                xx = x
                if tname in ("q8_0", "q4_0") and len(xx) % 32:
                    xx = xx[: len(xx) - len(xx) % 32]
                a = ours(tname, xx, tmp)
                b = theirs(tname, xx)
                if a == b:
                    passed += 1
                else:
                    failed += 1
                    print(f"FAIL {tname} {name}: {first_difference(a, b, tname)}")
        # lengths that are not whole blocks are refused, not truncated
        x = np.ones(33, dtype=np.float32)
        inp = os.path.join(tmp, "odd.f32")
        x.tofile(inp)
        r = subprocess.run([BIN, "--emit", "q8_0", inp, os.path.join(tmp, "odd.out")], capture_output=True)
        if r.returncode != 0:
            passed += 1
        else:
            failed += 1
            print("FAIL q8_0 of 33 values was accepted")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
