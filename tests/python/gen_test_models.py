#!/usr/bin/env python3
"""gen_test_models.py - small random-weight GGUF models for the model tests.

Writes llama, qwen2 and qwen3 models the way llama.cpp's converter lays them
out (tensor names, metadata keys, ggml dimension order, a byte-level BPE
vocabulary with its merges), small enough that a float64 numpy forward pass
(ref_forward.py) runs in well under a second, and large enough to exercise
what a real model does: GQA (4 query heads over 2 KV heads), two layers,
biases, per-head q/k norms, a qwen3 head_dim that is not n_embd / n_head,
tied and untied output, linear RoPE scaling and llama3 frequency factors.

The vocabulary is trained with HF `tokenizers` on the test corpus by
tools/gen_vocab.py's functions (the llama3 and qwen2 pre-tokenizer flavours),
and written as convert_hf_to_gguf.py writes a gpt2-model vocabulary:
tokenizer.ggml.model "gpt2", .pre "llama-bpe" / "qwen2", tokens, token_type,
merges, bos/eos ids and add_bos_token. Training is cached in the process,
so writing every variant costs one training per flavour.

Design choices:
- Weights are drawn once, in float32, from a generator seeded by (seed,
  variant), so the F32, F16, Q8_0 and Q4_0 files of a variant hold the same
  model, quantized differently; the reference reads each file back and
  dequantizes, so it never depends on this file's in-memory arrays.
- Scales keep activations O(1) through the layers: projections draw from
  N(0, 1/n_in), so a normalized input gives unit-variance outputs; norm
  weights are 1 + N(0, 0.1^2) and biases N(0, 0.5^2), large enough that a
  runtime which ignored them would be caught, small enough to stay stable.
  The output projection is scaled up (x2) to give peaked logits, so argmax
  comparisons between runtimes are meaningful.
- Every matrix's row length (ne0) is a multiple of 32, the block size of
  Q8_0 / Q4_0. 2-D weights (token_embd and output included) take the file's
  type; norms, biases and rope_freqs stay F32, as llama.cpp's quantizer
  leaves 1-D tensors.
- Files are generated on demand into a temporary directory by the tests and
  never committed.

Usage: gen_test_models.py OUTDIR [--variant NAME ...] [--type T ...] [--seed S]
"""
import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

CORPUS = os.path.join(ROOT, "tests", "data", "corpus")
VOCAB_SIZE = 2000

TYPES = {"f32": QT.F32, "f16": QT.F16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}

# The variants. vocab names a gen_vocab flavour; pre is what the file's
# tokenizer.ggml.pre says (llama.cpp's names for those flavours).
_BASE = dict(n_layer=2, n_head=4, n_head_kv=2, n_ctx=256, eps=1e-5)
VARIANTS = {
    "llama": dict(_BASE, arch="llama", n_embd=64, n_ff=192, head_dim=16, rope_base=10000.0,
                  vocab="llama3", pre="llama-bpe", tied=False),
    "llama-rope-linear": dict(_BASE, arch="llama", n_embd=64, n_ff=192, head_dim=16, rope_base=10000.0,
                              vocab="llama3", pre="llama-bpe", tied=False, rope_linear=2.0),
    "llama-rope-freqs": dict(_BASE, arch="llama", n_embd=64, n_ff=192, head_dim=16, rope_base=10000.0,
                             vocab="llama3", pre="llama-bpe", tied=False, rope_freqs=True),
    "qwen2": dict(_BASE, arch="qwen2", n_embd=128, n_ff=256, head_dim=32, rope_base=1000000.0, eps=1e-6,
                  vocab="qwen2", pre="qwen2", tied=False),
    "qwen2-tied": dict(_BASE, arch="qwen2", n_embd=128, n_ff=256, head_dim=32, rope_base=1000000.0, eps=1e-6,
                       vocab="qwen2", pre="qwen2", tied=True),
    # head_dim 32 with n_embd 64 and 4 heads: q is 128 wide, not 64.
    "qwen3": dict(_BASE, arch="qwen3", n_embd=64, n_ff=160, head_dim=32, rope_base=1000000.0, eps=1e-6,
                  vocab="qwen2", pre="qwen2", tied=False),
}

# llama3 frequency-factor parameters, with the "original context" scaled down
# from Llama 3's 8192 to 64 so that, at the positions a test reaches (< 256)
# and with 16-wide heads, the factors take all three regimes (1, the smooth
# ramp, the full factor) across the rotated pairs.
LLAMA3_FREQS = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=64)


def llama3_freq_factors(head_dim, base, factor, low_freq_factor, high_freq_factor, original_context):
    """The per-pair divisors llama.cpp's converter stores in rope_freqs.weight
    for Llama 3.1-style scaling: 1 for short wavelengths, `factor` for long
    ones, and a smooth ramp between."""
    out = []
    low_wavelen = original_context / low_freq_factor
    high_wavelen = original_context / high_freq_factor
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


_vocab_cache = {}


def _train(flavour):
    if flavour not in _vocab_cache:
        import gen_vocab  # tools/gen_vocab.py; needs the `tokenizers` package
        lines = gen_vocab.training_lines(gen_vocab.corpus_texts(CORPUS))
        tok, meta, tokens, _scores, types, merges = gen_vocab.train_byte_level(flavour, lines, VOCAB_SIZE)
        _vocab_cache[flavour] = (tok, (tokens, types, merges, meta))
    return _vocab_cache[flavour]


def vocabulary(flavour):
    """(tokens, token_types, merges, meta) of a byte-level BPE vocabulary
    trained on the corpus; cached for the life of the process."""
    return _train(flavour)[1]


def hf_tokenizer(flavour):
    """The HF `tokenizers` Tokenizer of that vocabulary (the reference for
    what the files' vocabulary must encode a text to)."""
    return _train(flavour)[0]


def stable_seed(seed, name):
    # Stable across processes (hash() of a str is salted).
    h = 0
    for c in name.encode():
        h = (h * 131 + c) % (1 << 31)
    return [seed, h]


def make_weights(variant, seed=1, n_vocab=None):
    """The variant's weights as float32 numpy arrays in numpy order
    ([n_out, n_in]), keyed by llama.cpp tensor name, plus its hparams."""
    hp = dict(VARIANTS[variant])
    if n_vocab is None:
        n_vocab = len(vocabulary(hp["vocab"])[0])
    hp["n_vocab"] = n_vocab
    rng = np.random.default_rng(stable_seed(seed, variant))
    E, F, H, KV, D = hp["n_embd"], hp["n_ff"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]

    def mat(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.5 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((n_vocab, E)).astype(np.float32)}
    for il in range(hp["n_layer"]):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm(E)
        w[p + "attn_q.weight"] = mat(H * D, E)
        w[p + "attn_k.weight"] = mat(KV * D, E)
        w[p + "attn_v.weight"] = mat(KV * D, E)
        if hp["arch"] == "qwen2":
            w[p + "attn_q.bias"] = bias(H * D)
            w[p + "attn_k.bias"] = bias(KV * D)
            w[p + "attn_v.bias"] = bias(KV * D)
        if hp["arch"] == "qwen3":
            w[p + "attn_q_norm.weight"] = norm(D)
            w[p + "attn_k_norm.weight"] = norm(D)
        w[p + "attn_output.weight"] = mat(E, H * D)
        w[p + "ffn_norm.weight"] = norm(E)
        w[p + "ffn_gate.weight"] = mat(F, E)
        w[p + "ffn_up.weight"] = mat(F, E)
        w[p + "ffn_down.weight"] = mat(E, F)
    w["output_norm.weight"] = norm(E)
    if not hp["tied"]:
        w["output.weight"] = mat(n_vocab, E, gain=2.0)
    if hp.get("rope_freqs"):
        w["rope_freqs.weight"] = llama3_freq_factors(D, hp["rope_base"], **LLAMA3_FREQS)
    return hp, w


def write_model(path, variant, wtype="f32", seed=1):
    """Write one model file; returns its hparams (with n_vocab)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (have {', '.join(VARIANTS)})")
    if wtype not in TYPES:
        raise ValueError(f"unknown type {wtype!r} (have {', '.join(TYPES)})")
    cfg = VARIANTS[variant]
    tokens, types, merges, meta = vocabulary(cfg["vocab"])
    hp, weights = make_weights(variant, seed, len(tokens))
    arch = hp["arch"]

    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tensile-test-{variant}")
    w.add_file_type(int(FILE_TYPES[wtype]))
    if wtype in ("q8_0", "q4_0"):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(hp["n_vocab"])
    w.add_context_length(hp["n_ctx"])
    w.add_embedding_length(hp["n_embd"])
    w.add_block_count(hp["n_layer"])
    w.add_feed_forward_length(hp["n_ff"])
    w.add_head_count(hp["n_head"])
    w.add_head_count_kv(hp["n_head_kv"])
    w.add_layer_norm_rms_eps(hp["eps"])
    w.add_rope_freq_base(hp["rope_base"])
    w.add_rope_dimension_count(hp["head_dim"])
    if hp["head_dim"] * hp["n_head"] != hp["n_embd"]:
        w.add_key_length(hp["head_dim"])
        w.add_value_length(hp["head_dim"])
    if hp.get("rope_linear"):
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(hp["rope_linear"])

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(cfg["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if cfg["vocab"] == "llama3":
        w.add_bos_token_id(meta["bos"])
        w.add_eos_token_id(meta["eos"])
        w.add_add_bos_token(True)
    else:
        # Qwen's files name <|endoftext|> as both and add no BOS.
        w.add_bos_token_id(meta["eos"])
        w.add_eos_token_id(meta["eos"])
        w.add_add_bos_token(False)

    qt = TYPES[wtype]
    for name, a in weights.items():
        if a.ndim == 1 or qt == QT.F32:
            w.add_tensor(name, a.astype(np.float32))
        elif qt == QT.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, qt)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hp


def model_path(outdir, variant, wtype):
    return os.path.join(outdir, f"{variant}-{wtype}.gguf")


def ensure_model(outdir, variant, wtype, seed=1):
    """Path of the model, written first if it is not there yet."""
    p = model_path(outdir, variant, wtype)
    if not os.path.exists(p):
        write_model(p, variant, wtype, seed)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--type", action="append", choices=sorted(TYPES))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for v in a.variant or list(VARIANTS):
        for t in a.type or list(TYPES):
            p = model_path(a.outdir, v, t)
            hp = write_model(p, v, t, a.seed)
            print(f"{p}: {hp['arch']} n_embd {hp['n_embd']} n_vocab {hp['n_vocab']} ({os.path.getsize(p)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
