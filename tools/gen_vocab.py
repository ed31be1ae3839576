#!/usr/bin/env python3
"""gen_vocab.py - train small vocabularies with HF `tokenizers` for the tokenizer tests.

Four vocabularies are trained on the test corpus (tests/data/corpus/*.txt):

  gpt2    byte-level BPE, ByteLevel pre-tokenizer with the GPT-2 regex
  llama3  byte-level BPE, Split(llama3 regex) + ByteLevel(use_regex=False),
          ignore_merges, whole-word tokens no merge reaches, a BOS added
          by a template (as Llama 3 does)
  qwen2   byte-level BPE, Split(qwen2 regex) + ByteLevel(use_regex=False),
          plus two non-special added tokens (<think>, </think>)
  spm     the way HF represents SentencePiece Llama tokenizers: a BPE model
          with byte_fallback, <0x00>..<0xFF> byte tokens, a normalizer that
          prepends U+2581 and replaces spaces with it, scores = -rank, and the
          merge list rebuilt from the scores (every pair whose concatenation is
          in the vocabulary, best score first), which is what HF's converter
          does for SentencePiece models and what a score-driven merge computes.

Each is written twice into OUTDIR: NAME.json (the HF tokenizer, the reference)
and NAME.vocab (the same vocabulary as GGUF would carry it, in a plain format
the C test reads):

    tsl-vocab 1
    model gpt2|llama
    pre <name>
    bos|eos|unk|pad <id or -1>
    add_bos|add_eos|add_space_prefix <0|1>
    tokens <N>
    <hex of token bytes> <score> <type>      (N lines; type as GGUF token_type)
    merges <M>
    <hex of "left right">                     (M lines)

Usage: gen_vocab.py [--corpus DIR] [--vocab-size N] OUTDIR
The outputs are generated on demand (tests call this), never committed.
"""
import argparse
import glob
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# GGUF token types
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6

SPM_SPACE = "\u2581"
NAMES = ("gpt2", "llama3", "qwen2", "spm")


def corpus_texts(corpus_dir):
    files = sorted(glob.glob(os.path.join(corpus_dir, "*.txt")))
    if not files:
        raise SystemExit(f"gen_vocab: no *.txt in {corpus_dir}")
    return [open(f, "rb").read().decode("utf-8") for f in files]


def training_lines(texts):
    # Lines keep their terminators so newline and CRLF handling gets merges too.
    out = []
    for t in texts:
        out.extend(t.splitlines(keepends=True))
    return out


def merges_of(tok):
    m = json.loads(tok.to_str())["model"]["merges"]
    return [x if isinstance(x, str) else " ".join(x) for x in m]


def write_vocab(path, meta, tokens, scores, types, merges):
    with open(path, "w", encoding="ascii") as f:
        f.write("tsl-vocab 1\n")
        for k in ("model", "pre", "bos", "eos", "unk", "pad", "add_bos", "add_eos", "add_space_prefix"):
            f.write(f"{k} {meta[k]}\n")
        f.write(f"tokens {len(tokens)}\n")
        for t, s, ty in zip(tokens, scores, types):
            f.write(f"{t.encode('utf-8').hex()} {s!r} {ty}\n")
        f.write(f"merges {len(merges)}\n")
        for m in merges:
            f.write(m.encode("utf-8").hex() + "\n")


def train_byte_level(name, lines, vocab_size):
    tok = Tokenizer(models.BPE())
    if name == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pat = LLAMA3_RE if name == "llama3" else QWEN2_RE
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)

    if name == "llama3":
        # Llama 3 matches a whole pre-token against the vocabulary before
        # merging. Its vocabulary has tokens no merge sequence reaches; give
        # this one some too (the most frequent pre-tokens that the merges
        # split), so that the rule decides ids.
        j = json.loads(tok.to_str())
        freq = {}
        for line in lines:
            for w, _ in tok.pre_tokenizer.pre_tokenize_str(line):
                freq[w] = freq.get(w, 0) + 1
        vocab = j["model"]["vocab"]
        split = [w for w in freq if w not in vocab and len(tok.model.tokenize(w)) > 1]
        split.sort(key=lambda w: (-freq[w], w))
        for w in split[:64]:
            vocab[w] = len(vocab)
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))

    # Special tokens after the learned vocabulary, as GPT-2 / Qwen / Llama 3 place them.
    if name == "llama3":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    users = ["<think>", "</think>"] if name == "qwen2" else []
    if users:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in users])

    meta = dict(model="gpt2", pre=name, bos=-1, eos=tok.token_to_id("<|endoftext|>"), unk=-1, pad=-1,
                add_bos=0, add_eos=0, add_space_prefix=0)
    if name == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", bos)])
        meta.update(bos=bos, eos=tok.token_to_id("<|end_of_text|>"), add_bos=1)

    n = tok.get_vocab_size(with_added_tokens=True)
    tokens = [tok.id_to_token(i) for i in range(n)]
    types = [T_CONTROL if t in specials else T_USER if t in users else T_NORMAL for t in tokens]
    return tok, meta, tokens, [0.0] * n, types, merges_of(tok)


def spm_merges(vocab, score):
    """Every split of every token into two tokens, best score of the whole first,
    ties by the ids of the parts (the order HF's SentencePiece converter uses)."""
    out = []
    for piece, pid in vocab.items():
        local = []
        for i in range(1, len(piece)):
            l, r = piece[:i], piece[i:]
            if l in vocab and r in vocab:
                local.append((vocab[l], vocab[r], l, r))
        local.sort()
        out.extend((score[pid], l, r) for _, _, l, r in local)
    out.sort(key=lambda x: -x[0])  # stable: keeps the per-piece order within a score
    return [(l, r) for _, l, r in out]


def train_spm(lines, vocab_size):
    # Train on words (split before each U+2581) so the pieces look like SentencePiece's.
    base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    base.normalizer = normalizers.Sequence([normalizers.Prepend(SPM_SPACE), normalizers.Replace(" ", SPM_SPACE)])
    base.pre_tokenizer = pre_tokenizers.Split(SPM_SPACE, behavior="merged_with_next")
    # A limited alphabet leaves the rarest characters out, so byte fallback is exercised.
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 259, min_frequency=1, show_progress=False,
                                  limit_alphabet=400)
    base.train_from_iterator(lines, trainer)
    learned = base.get_vocab()
    order = sorted(learned.items(), key=lambda kv: kv[1])

    tokens, types, scores = ["<unk>", "<s>", "</s>"], [T_UNKNOWN, T_CONTROL, T_CONTROL], [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(T_BYTE)
        scores.append(0.0)
    rank = 0
    for t, _ in order:
        if t in ("<unk>", "<s>", "</s>"):
            continue
        tokens.append(t)
        types.append(T_NORMAL)
        scores.append(float(-rank))
        rank += 1
    extra = ["<|im_start|>", "<|im_end|>"]
    for t in extra:
        tokens.append(t)
        types.append(T_CONTROL)
        scores.append(0.0)

    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t: i for i, t in enumerate(tokens) if types[i] == T_NORMAL}
    score = {i: scores[i] for i in range(len(tokens))}
    merges = spm_merges(normal, score)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPM_SPACE), normalizers.Replace(" ", SPM_SPACE)])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"] + extra])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    meta = dict(model="llama", pre="default", bos=1, eos=2, unk=0, pad=-1, add_bos=1, add_eos=0, add_space_prefix=1)
    return tok, meta, tokens, scores, types, [f"{l} {r}" for l, r in merges]


def generate(outdir, corpus_dir, vocab_size=2500, names=NAMES):
    os.makedirs(outdir, exist_ok=True)
    lines = training_lines(corpus_texts(corpus_dir))
    made = {}
    for name in names:
        if name == "spm":
            tok, meta, tokens, scores, types, merges = train_spm(lines, vocab_size)
        else:
            tok, meta, tokens, scores, types, merges = train_byte_level(name, lines, vocab_size)
        tok.save(os.path.join(outdir, name + ".json"))
        write_vocab(os.path.join(outdir, name + ".vocab"), meta, tokens, scores, types, merges)
        made[name] = (os.path.join(outdir, name + ".json"), os.path.join(outdir, name + ".vocab"))
    return made


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--corpus", default=os.path.join(here, "..", "tests", "data", "corpus"))
    ap.add_argument("--vocab-size", type=int, default=2500)
    a = ap.parse_args()
    for name, (js, vf) in generate(a.outdir, a.corpus, a.vocab_size).items():
        n = Tokenizer.from_file(js).get_vocab_size(with_added_tokens=True)
        print(f"{name}: {n} tokens -> {vf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
