#!/usr/bin/env python3
"""ref_forward.py - an independent float64 numpy forward pass for llama, qwen2
and qwen3 GGUF models: the reference the runtime's logits are tested against.

It reads the file with the `gguf` package (GGUFReader), dequantizes every
tensor with gguf.quants.dequantize, and computes the logits of every position
of a prompt from the math of the architectures, sharing no code with the C
side:

    x = token_embd[ids]
    per layer:
      h = rms_norm(x) * attn_norm
      q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)     (biases: qwen2)
      q, k = rms_norm(q per head) * q_norm, ... * k_norm     (qwen3)
      q, k = rope(q), rope(k)
      o = softmax(q k^T / sqrt(head_dim) + causal) v        (GQA: query head h
                                                             reads kv head h // (n_head / n_head_kv))
      x = x + o Wo^T
      h = rms_norm(x) * ffn_norm
      x = x + (silu(h Wg^T) * (h Wu^T)) Wd^T
    logits = (rms_norm(x) * output_norm) Wout^T           (Wout = token_embd when tied)

RoPE rotates pairs by theta_i = pos * freq_scale * base^(-2i/n_rot) / ff[i]
(freq_scale = 1 / rope.scaling.factor, ff = rope_freqs.weight or 1). llama
uses the NORMAL pairing (x[2i], x[2i+1]): llama.cpp's converter permutes the
rows of Q and K so that this pairing on the file's weights equals Hugging
Face's rotate_half on the original ones (the self-test checks exactly that).
qwen2 and qwen3 use the NEOX pairing (x[i], x[i + n_rot/2]).

Everything runs in float64 so the reference's own rounding is negligible
against the tolerances the tests use; the weights are exactly the file's
values, so a quantized file is compared on the same (dequantized) weights.

Usage:
  ref_forward.py MODEL --ids "1 2 3" [--out LOGITS.f32]   logits (raw float32 [n][n_vocab])
  ref_forward.py --self-test                             checks of the reference itself
"""
import argparse
import math
import os
import sys

import numpy as np

NORMAL, NEOX = "normal", "neox"
ARCHS = ("llama", "qwen2", "qwen3")


class Model:
    """Hyperparameters (hp) and float64 weights (w, numpy order [n_out, n_in])."""

    def __init__(self, hp, w):
        self.hp = hp
        self.w = w


def _field(reader, key, default=None):
    f = reader.get_field(key)
    if f is None:
        return default
    return f.contents()


def load(path):
    """Read a GGUF model into a Model; every tensor dequantized to float64."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(path)
    arch = _field(r, "general.architecture")
    if arch not in ARCHS:
        raise ValueError(f"{path}: architecture {arch!r} is not one of {ARCHS}")

    def key(k, default=None):
        v = _field(r, f"{arch}.{k}", default)
        if v is None:
            raise ValueError(f"{path}: missing {arch}.{k}")
        return v

    n_embd = int(key("embedding_length"))
    n_head = int(key("attention.head_count"))
    head_dim = int(key("attention.key_length", n_embd // n_head))
    scaling = _field(r, f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ValueError(f"{path}: rope scaling {scaling!r} is not modelled by the reference")
    factor = float(key("rope.scaling.factor", 0.0))
    hp = dict(
        arch=arch,
        n_embd=n_embd,
        n_layer=int(key("block_count")),
        n_ff=int(key("feed_forward_length")),
        n_head=n_head,
        n_head_kv=int(key("attention.head_count_kv", n_head)),
        head_dim=head_dim,
        head_dim_v=int(key("attention.value_length", head_dim)),
        n_rot=int(key("rope.dimension_count", head_dim)),
        eps=float(key("attention.layer_norm_rms_epsilon")),
        rope_base=float(key("rope.freq_base", 10000.0)),
        # llama.cpp: a factor of 0 (or none) means no scaling.
        freq_scale=1.0 / factor if factor != 0.0 else 1.0,
        rope_mode=NORMAL if arch == "llama" else NEOX,
    )
    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        # ggml order (ne0 first) reversed is numpy order.
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        while len(shape) > 1 and shape[0] == 1:
            shape = shape[1:]
        w[t.name] = a.reshape(shape)
    hp["n_vocab"] = w["token_embd.weight"].shape[0]
    return Model(hp, w)


def rms_norm(x, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def rope(x, pos, n_rot, base, freq_scale=1.0, freq_factors=None, mode=NORMAL):
    """Rotate x [T, H, D] at positions pos [T]; dims past n_rot pass through."""
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=np.float64)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * freq_scale * inv_freq[None, :]
    c = np.cos(theta)[:, None, :]
    s = np.sin(theta)[:, None, :]
    out = np.array(x, dtype=np.float64, copy=True)
    if mode == NORMAL:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * c - b * s
        out[..., 1:n_rot:2] = a * s + b * c
    elif mode == NEOX:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * c - b * s
        out[..., half:n_rot] = a * s + b * c
    else:
        raise ValueError(f"rope mode {mode!r}")
    return out


def attention(q, k, v, scale):
    """Causal GQA attention. q [T, H, D], k [T, KV, D], v [T, KV, Dv] -> [T, H, Dv]."""
    T, H, _ = q.shape
    KV = k.shape[1]
    group = H // KV
    kv_of = np.arange(H) // group            # query head -> its kv head
    kh = k[:, kv_of, :]                      # [T, H, D]
    vh = v[:, kv_of, :]
    s = np.einsum("thd,shd->hts", q, kh) * scale
    future = np.triu(np.ones((T, T), dtype=bool), 1)
    s = np.where(future[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, vh)


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(m, ids, pos0=0):
    """Logits [len(ids), n_vocab] (float64) of every position of ids, the
    first at position pos0."""
    hp, w = m.hp, m.w
    ids = np.asarray(ids, dtype=np.int64)
    T = len(ids)
    if T == 0:
        raise ValueError("empty prompt")
    if ids.min() < 0 or ids.max() >= hp["n_vocab"]:
        raise ValueError("token id out of range")
    H, KV, D, Dv = hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["head_dim_v"]
    eps = hp["eps"]
    pos = np.arange(pos0, pos0 + T)
    ff = w.get("rope_freqs.weight")

    x = w["token_embd.weight"][ids]
    for il in range(hp["n_layer"]):
        p = f"blk.{il}."
        h = rms_norm(x, eps) * w[p + "attn_norm.weight"]
        q = h @ w[p + "attn_q.weight"].T
        k = h @ w[p + "attn_k.weight"].T
        v = h @ w[p + "attn_v.weight"].T
        if p + "attn_q.bias" in w:
            q = q + w[p + "attn_q.bias"]
            k = k + w[p + "attn_k.bias"]
            v = v + w[p + "attn_v.bias"]
        q = q.reshape(T, H, D)
        k = k.reshape(T, KV, D)
        v = v.reshape(T, KV, Dv)
        if p + "attn_q_norm.weight" in w:
            q = rms_norm(q, eps) * w[p + "attn_q_norm.weight"]
            k = rms_norm(k, eps) * w[p + "attn_k_norm.weight"]
        q = rope(q, pos, hp["n_rot"], hp["rope_base"], hp["freq_scale"], ff, hp["rope_mode"])
        k = rope(k, pos, hp["n_rot"], hp["rope_base"], hp["freq_scale"], ff, hp["rope_mode"])
        o = attention(q, k, v, 1.0 / math.sqrt(D)).reshape(T, H * Dv)
        x = x + o @ w[p + "attn_output.weight"].T
        h = rms_norm(x, eps) * w[p + "ffn_norm.weight"]
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + (silu(g) * u) @ w[p + "ffn_down.weight"].T
    x = rms_norm(x, eps) * w["output_norm.weight"]
    out = w.get("output.weight")
    if out is None:
        out = w["token_embd.weight"]
    return x @ out.T


# ---------------------------------------------------------------------------
# Self-test: the reference checked against a loop-by-loop hand computation,
# against llama.cpp's Q/K permutation convention, and against itself.
# ---------------------------------------------------------------------------

def hf_to_gguf_permute(wq, n_head):
    """The row permutation llama.cpp's converter applies to llama's Q and K
    weights: within each head, rows (j, j + D/2) become rows (2j, 2j + 1)."""
    n_out = wq.shape[0]
    return wq.reshape(n_head, 2, n_out // n_head // 2, *wq.shape[1:]).swapaxes(1, 2).reshape(wq.shape)


def naive_forward(hp, w, ids):
    """The same model, scalar by scalar with Python loops and math.*: slow, and
    shaped like the formulas rather than like numpy, so that an indexing slip
    in forward() (a transposed weight, the wrong rope pairing, a GQA mapping,
    the mask) shows up as a difference."""
    E, H, KV, D = hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    n_rot, eps = hp["n_rot"], hp["eps"]
    ff = w.get("rope_freqs.weight")

    def matvec(W, v, b=None):
        return [sum(W[o][i] * v[i] for i in range(len(v))) + (b[o] if b is not None else 0.0) for o in range(len(W))]

    def norm(v, g):
        r = 1.0 / math.sqrt(sum(t * t for t in v) / len(v) + eps)
        return [v[i] * r * g[i] for i in range(len(v))]

    def rot(vec, p):
        vec = list(vec)
        for i in range(n_rot // 2):
            th = p * hp["freq_scale"] * hp["rope_base"] ** (-2.0 * i / n_rot)
            if ff is not None:
                th /= ff[i]
            if hp["rope_mode"] == NORMAL:
                a, b = 2 * i, 2 * i + 1
            else:
                a, b = i, i + n_rot // 2
            xa, xb = vec[a], vec[b]
            vec[a] = xa * math.cos(th) - xb * math.sin(th)
            vec[b] = xa * math.sin(th) + xb * math.cos(th)
        return vec

    xs = [list(w["token_embd.weight"][t]) for t in ids]
    for il in range(hp["n_layer"]):
        p = f"blk.{il}."
        Q, K, V = [], [], []
        for t, x in enumerate(xs):
            h = norm(x, w[p + "attn_norm.weight"])
            q = matvec(w[p + "attn_q.weight"], h, w.get(p + "attn_q.bias"))
            k = matvec(w[p + "attn_k.weight"], h, w.get(p + "attn_k.bias"))
            v = matvec(w[p + "attn_v.weight"], h, w.get(p + "attn_v.bias"))
            qh = [q[j * D:(j + 1) * D] for j in range(H)]
            kh = [k[j * D:(j + 1) * D] for j in range(KV)]
            if p + "attn_q_norm.weight" in w:
                qh = [norm(a, w[p + "attn_q_norm.weight"]) for a in qh]
                kh = [norm(a, w[p + "attn_k_norm.weight"]) for a in kh]
            Q.append([rot(a, t) for a in qh])
            K.append([rot(a, t) for a in kh])
            V.append([v[j * D:(j + 1) * D] for j in range(KV)])
        new = []
        for t, x in enumerate(xs):
            o = []
            for j in range(H):
                g = j // (H // KV)
                sc = [sum(Q[t][j][d] * K[s][g][d] for d in range(D)) / math.sqrt(D) for s in range(t + 1)]
                mx = max(sc)
                e = [math.exp(z - mx) for z in sc]
                tot = sum(e)
                o.extend(sum(e[s] / tot * V[s][g][d] for s in range(t + 1)) for d in range(D))
            a = matvec(w[p + "attn_output.weight"], o)
            x = [x[i] + a[i] for i in range(E)]
            h = norm(x, w[p + "ffn_norm.weight"])
            gt = matvec(w[p + "ffn_gate.weight"], h)
            up = matvec(w[p + "ffn_up.weight"], h)
            act = [gt[i] / (1.0 + math.exp(-gt[i])) * up[i] for i in range(len(gt))]
            dn = matvec(w[p + "ffn_down.weight"], act)
            new.append([x[i] + dn[i] for i in range(E)])
        xs = new
    out = w.get("output.weight", w["token_embd.weight"])
    return [matvec(out, norm(x, w["output_norm.weight"])) for x in xs]


def _tiny(arch, seed, rope_mode, with_ff=False, freq_scale=1.0):
    rng = np.random.default_rng(seed)
    E, H, KV, D, F, V = 8, 4, 2, 4 if arch != "qwen3" else 6, 12, 11
    hp = dict(arch=arch, n_embd=E, n_layer=2, n_ff=F, n_head=H, n_head_kv=KV, head_dim=D, head_dim_v=D,
              n_rot=D, eps=1e-5, rope_base=10000.0 if arch == "llama" else 1e6, freq_scale=freq_scale,
              rope_mode=rope_mode, n_vocab=V)
    w = {"token_embd.weight": rng.standard_normal((V, E)), "output_norm.weight": 1 + 0.1 * rng.standard_normal(E),
         "output.weight": rng.standard_normal((V, E))}
    for il in range(2):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "attn_q.weight"] = rng.standard_normal((H * D, E)) / math.sqrt(E)
        w[p + "attn_k.weight"] = rng.standard_normal((KV * D, E)) / math.sqrt(E)
        w[p + "attn_v.weight"] = rng.standard_normal((KV * D, E)) / math.sqrt(E)
        if arch == "qwen2":
            for n, o in (("q", H * D), ("k", KV * D), ("v", KV * D)):
                w[p + f"attn_{n}.bias"] = 0.5 * rng.standard_normal(o)
        if arch == "qwen3":
            w[p + "attn_q_norm.weight"] = 1 + 0.1 * rng.standard_normal(D)
            w[p + "attn_k_norm.weight"] = 1 + 0.1 * rng.standard_normal(D)
        w[p + "attn_output.weight"] = rng.standard_normal((E, H * D)) / math.sqrt(H * D)
        w[p + "ffn_norm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "ffn_gate.weight"] = rng.standard_normal((F, E)) / math.sqrt(E)
        w[p + "ffn_up.weight"] = rng.standard_normal((F, E)) / math.sqrt(E)
        w[p + "ffn_down.weight"] = rng.standard_normal((E, F)) / math.sqrt(F)
    if with_ff:
        w["rope_freqs.weight"] = np.array([1.0, 3.5, 8.0][:D // 2] + [8.0] * max(0, D // 2 - 3))
    return Model(hp, w)


def self_test(model_dir=None, report=print):
    """Run the reference's own checks; returns (passed, failed). With
    model_dir, also checks files written by gen_test_models into it."""
    passed = failed = 0

    def check(cond, what):
        nonlocal passed, failed
        if cond:
            passed += 1
        else:
            failed += 1
            report(f"FAIL ref self-test: {what}")

    # 1. Hand-checkable numbers.
    v = rms_norm(np.array([3.0, 4.0]), 0.0)
    check(np.allclose(v, [3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]), "rms_norm([3,4])")
    x = np.zeros((1, 1, 4))
    x[0, 0] = [1.0, 0.0, 0.0, 1.0]
    # n_rot 4, base 100: theta_0 = pos, theta_1 = pos / 10.
    r = rope(x, [2], 4, 100.0, mode=NORMAL)[0, 0]
    check(np.allclose(r, [math.cos(2), math.sin(2), -math.sin(0.2), math.cos(0.2)]), "rope NORMAL by hand")
    r = rope(x, [2], 4, 100.0, mode=NEOX)[0, 0]
    # pairs (x0, x2) = (1, 0) by theta 2 and (x1, x3) = (0, 1) by theta 0.2
    check(np.allclose(r, [math.cos(2), -math.sin(0.2), math.sin(2), math.cos(0.2)]), "rope NEOX by hand")
    r = rope(x, [4], 4, 100.0, freq_scale=0.5, freq_factors=[2.0, 1.0], mode=NORMAL)[0, 0]
    check(np.allclose(r, [math.cos(1), math.sin(1), -math.sin(0.2), math.cos(0.2)]), "rope scale and factors by hand")
    q = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])                 # T=2, H=1
    k = np.array([[[1.0, 0.0]], [[1.0, 1.0]]])
    vv = np.array([[[1.0, 2.0]], [[3.0, 4.0]]])
    o = attention(q, k, vv, 1.0)
    p1 = math.exp(1) / (math.exp(0) + math.exp(1))             # t=1: scores (0, 1)
    check(np.allclose(o[0, 0], [1, 2]) and np.allclose(o[1, 0], [(1 - p1) * 1 + p1 * 3, (1 - p1) * 2 + p1 * 4]),
          "causal attention by hand")

    # 2. Rope pairing against the converter's permutation: NORMAL rope on
    #    permuted Q/K rows equals rotate_half (NEOX) rope on the original rows,
    #    row for row after the same permutation, so attention scores agree.
    rng = np.random.default_rng(7)
    H, D, E, T = 4, 8, 16, 5
    wq = rng.standard_normal((H * D, E))
    wk = rng.standard_normal((H * D, E))
    xs = rng.standard_normal((T, E))
    pos = np.arange(3, 3 + T)
    q_hf = rope((xs @ wq.T).reshape(T, H, D), pos, D, 10000.0, mode=NEOX)
    k_hf = rope((xs @ wk.T).reshape(T, H, D), pos, D, 10000.0, mode=NEOX)
    q_gg = rope((xs @ hf_to_gguf_permute(wq, H).T).reshape(T, H, D), pos, D, 10000.0, mode=NORMAL)
    k_gg = rope((xs @ hf_to_gguf_permute(wk, H).T).reshape(T, H, D), pos, D, 10000.0, mode=NORMAL)
    perm = hf_to_gguf_permute(np.arange(D)[:, None], 1)[:, 0]   # gguf row r holds hf row perm[r]
    check(np.allclose(q_gg, q_hf[..., perm]), "NORMAL rope on permuted weights == NEOX rope on HF weights")
    check(np.allclose(np.einsum("thd,shd->hts", q_gg, k_gg), np.einsum("thd,shd->hts", q_hf, k_hf)),
          "attention scores invariant under the converter permutation")
    # relative position: q(m).k(n) depends on m - n only
    a = rope(np.ones((1, 1, D)), [5], D, 10000.0, mode=NORMAL)[0, 0]
    b = rope(np.full((1, 1, D), 0.5), [2], D, 10000.0, mode=NORMAL)[0, 0]
    a2 = rope(np.ones((1, 1, D)), [25], D, 10000.0, mode=NORMAL)[0, 0]
    b2 = rope(np.full((1, 1, D), 0.5), [22], D, 10000.0, mode=NORMAL)[0, 0]
    check(abs(a @ b - a2 @ b2) < 1e-12, "rope scores depend on relative position")

    # 3. Vectorized forward against the loop-by-loop one, every arch and rope flavour.
    cases = [("llama", NORMAL, False, 1.0), ("llama", NORMAL, True, 0.5), ("qwen2", NEOX, False, 1.0),
             ("qwen3", NEOX, False, 1.0)]
    for i, (arch, mode, with_ff, fs) in enumerate(cases):
        m = _tiny(arch, 100 + i, mode, with_ff, fs)
        ids = [3, 1, 4, 1, 5, 9]
        got = forward(m, ids)
        ref = np.array(naive_forward(m.hp, m.w, ids))
        err = np.abs(got - ref).max() / np.abs(ref).max()
        check(err < 1e-12, f"forward vs loop computation ({arch}, ff={with_ff}, scale={fs}): rel {err:.2e}")
        # 4. causality: a prefix's logits do not depend on what follows it
        pre = forward(m, ids[:3])
        check(np.abs(pre - got[:3]).max() < 1e-12, f"causal prefix invariance ({arch})")
        # GQA mapping matters: swapping the kv heads changes the result
        m2 = Model(m.hp, dict(m.w))
        kvd = m.hp["head_dim"]
        wk = m.w["blk.0.attn_k.weight"]
        m2.w["blk.0.attn_k.weight"] = np.concatenate([wk[kvd:2 * kvd], wk[:kvd]])
        check(np.abs(forward(m2, ids) - got).max() > 1e-6, f"kv head order is observable ({arch})")

    # 5. Files written by the generator (when given a directory).
    if model_dir is not None:
        import gen_test_models as gtm
        from gguf.quants import quantize, dequantize
        from gguf import GGMLQuantizationType as QT
        for variant in ("llama", "qwen2-tied", "qwen3", "llama-rope-linear", "llama-rope-freqs"):
            f32 = load(gtm.ensure_model(model_dir, variant, "f32"))
            hp, w0 = gtm.make_weights(variant, n_vocab=f32.hp["n_vocab"])
            check(all(np.array_equal(f32.w[n], w0[n].astype(np.float64)) for n in w0) and set(f32.w) == set(w0),
                  f"{variant}: F32 file holds the generator's weights exactly")
            for k in ("n_embd", "n_layer", "n_ff", "n_head", "n_head_kv", "head_dim"):
                check(f32.hp[k] == hp[k], f"{variant}: hparam {k} read back")
            check(abs(f32.hp["freq_scale"] - 1.0 / hp.get("rope_linear", 1.0)) < 1e-7,
                  f"{variant}: freq_scale read back")
            check(("output.weight" in f32.w) != hp["tied"], f"{variant}: output tied as intended")
            q8 = load(gtm.ensure_model(model_dir, variant, "q8_0"))
            wq = q8.w["blk.0.ffn_up.weight"]
            exp = dequantize(quantize(w0["blk.0.ffn_up.weight"], QT.Q8_0), QT.Q8_0)
            check(np.array_equal(wq, exp.astype(np.float64)), f"{variant}: Q8_0 weights are the dequantized ones")
            ids = np.random.default_rng(3).integers(0, f32.hp["n_vocab"], 12)
            l32, l8 = forward(f32, ids), forward(q8, ids)
            rel = np.abs(l32 - l8).max() / np.abs(l32).max()
            check(0 < rel < 3e-2, f"{variant}: F32 vs Q8_0 logits differ by quantization only (rel {rel:.2e})")
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--ids", help="space- or comma-separated token ids")
    ap.add_argument("--out", help="write raw float32 logits [n][n_vocab] here")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--model-dir", help="with --self-test: also check generated files (written here)")
    a = ap.parse_args()
    if a.self_test:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        p, f = self_test(a.model_dir)
        print(f"{p} passed, {f} failed")
        return 1 if f else 0
    if not a.model or not a.ids:
        ap.error("MODEL and --ids are needed (or --self-test)")
    ids = [int(t) for t in a.ids.replace(",", " ").split()]
    logits = forward(load(a.model), ids)
    if a.out:
        logits.astype("<f4").tofile(a.out)
    else:
        for row in logits:
            j = int(np.argmax(row))
            print(f"argmax {j} ({row[j]:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
