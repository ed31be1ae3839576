"""The C tokenizer against Hugging Face `tokenizers`, the reference.

tools/gen_vocab.py trains four vocabularies on the corpus (tests/data/corpus):
byte-level BPE with the gpt2, llama3 and qwen2 pre-tokenizers, and a
SentencePiece-style BPE with byte fallback. For each, the C tokenizer
(model_test_tokenizer --encode) and HF encode every corpus line, the whole
corpus as one string, and a set of seeded random strings built from the
corpus's characters, with and without the BOS the vocabulary adds; the ids
must be equal, C's decode must equal HF's decode (with and without
skip_special_tokens), and decode(encode(x)) must give x back.

Prints "N passed, N failed" and exits non-zero on any mismatch.
"""
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_vocab  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

TEST_BIN = os.environ.get("TSL_TEST_BIN", os.path.join(ROOT, "build", "tests"))
EXE = os.path.join(TEST_BIN, "model_test_tokenizer")
CORPUS = os.path.join(ROOT, "tests", "data", "corpus")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<s>", "</s>", "<unk>",
            "<think>", "</think>"]

passed = failed = 0
shown = 0


def check(cond, what, detail=""):
    global passed, failed, shown
    if cond:
        passed += 1
        return
    failed += 1
    if shown < 25:
        shown += 1
        print("FAIL", what, detail, file=sys.stderr)


def fuzz_docs(text, n=300, seed=1234):
    """Random strings from the corpus's own characters, in runs (letters next
    to digits next to spaces...), sometimes with special-token text inside."""
    rng = random.Random(seed)
    chars = sorted(set(text) - {"\n"})
    extra = [" ", "  ", "\t", "\r", "\r\n", "123456", "\u00a0", "\u3000", "...", "'s", "'S", "'t", "'T", "'re",
             "'RE", "'Ve", "'m", "'M", "'ll", "'LL", "'d", "'D", "'", "\u180e", "\u0085", "\u2028", "\u200b",
             "\ufeff", "\x0b", "\x0c", "\u017f", "\u212a"]
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.15:
                parts.append(rng.choice(extra))
            elif r < 0.2:
                parts.append(rng.choice(SPECIALS))
            elif r < 0.45:
                c = rng.choice(chars)
                parts.append(c * rng.randint(1, 5))
            else:
                parts.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 8))))
        docs.append("".join(parts).replace("\n", " "))
    return docs


def run_c(vocab_file, text_file, whole, add_special):
    cmd = [EXE, "--encode", vocab_file, text_file]
    if whole:
        cmd.append("--whole")
    if not add_special:
        cmd.append("--no-add-special")
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    if r.returncode != 0:
        return None, r.stderr.decode(errors="replace")
    out = []
    for line in r.stdout.decode("ascii").split("\n")[:-1]:
        ids, dec, dec_skip = line.split("\t")
        out.append(([int(x) for x in ids.split()], bytes.fromhex(dec), bytes.fromhex(dec_skip)))
    return out, ""


def compare(name, hf, vocab_file, label, docs, text_file, whole):
    for add_special in (True, False):
        res, err = run_c(vocab_file, text_file, whole, add_special)
        check(res is not None and len(res) == len(docs), f"{name}/{label}: C tool ran on {len(docs)} documents",
              err[-500:] if res is None else f"got {len(res)}")
        if res is None or len(res) != len(docs):
            continue
        for i, (doc, (ids, dec, dec_skip)) in enumerate(zip(docs, res)):
            where = f"{name}/{label}[{i}] add_special={add_special}"
            want = hf.encode(doc, add_special_tokens=add_special).ids
            if ids != want:
                k = next((j for j in range(min(len(ids), len(want))) if ids[j] != want[j]), min(len(ids), len(want)))
                check(False, where + ": ids differ",
                      f"at {k}: C {ids[max(0, k - 3):k + 5]} HF {want[max(0, k - 3):k + 5]} "
                      f"({[hf.id_to_token(x) for x in want[max(0, k - 3):k + 5]]}) text {doc[:80]!r}")
                continue
            check(True, where)
            check(dec == hf.decode(ids, skip_special_tokens=False).encode(), where + ": decode",
                  f"C {dec[:80]!r} HF {hf.decode(ids, skip_special_tokens=False)[:80]!r}")
            check(dec_skip == hf.decode(ids, skip_special_tokens=True).encode(), where + ": decode(skip_special)",
                  f"C {dec_skip[:80]!r} HF {hf.decode(ids, skip_special_tokens=True)[:80]!r}")
            # round trip: exact for byte-level BPE; SentencePiece puts a space
            # after each special token, so only text without them comes back
            if not add_special and (name != "spm" or not any(s in doc for s in SPECIALS)):
                check(dec == doc.encode(), where + ": decode(encode(x)) == x", f"{dec[:80]!r} vs {doc[:80]!r}")


def main():
    if not os.path.exists(EXE):
        print(f"FAIL missing {EXE} (build the tests first)", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1
    texts = [open(os.path.join(CORPUS, f), "rb").read() for f in sorted(os.listdir(CORPUS)) if f.endswith(".txt")]
    corpus = b"".join(texts)
    lines = corpus.split(b"\n")
    fuzz = fuzz_docs(corpus.decode("utf-8"))
    tmp_parent = TEST_BIN if os.path.isdir(TEST_BIN) else None
    with tempfile.TemporaryDirectory(prefix="tsl-tok-", dir=tmp_parent) as tmp:
        made = gen_vocab.generate(tmp, CORPUS)
        files = {}
        for label, data in (("lines", corpus), ("fuzz", "\n".join(fuzz).encode())):
            files[label] = os.path.join(tmp, label + ".txt")
            with open(files[label], "wb") as f:
                f.write(data)
        for name, (js, vocab_file) in made.items():
            hf = Tokenizer.from_file(js)
            before = failed
            compare(name, hf, vocab_file, "line", [l.decode("utf-8") for l in lines], files["lines"], False)
            compare(name, hf, vocab_file, "corpus", [corpus.decode("utf-8")], files["lines"], True)
            compare(name, hf, vocab_file, "fuzz", fuzz, files["fuzz"], False)
            compare(name, hf, vocab_file, "fuzz-all", ["\n".join(fuzz)], files["fuzz"], True)
            n_tok = hf.get_vocab_size(with_added_tokens=True)
            print(f"{'ok  ' if failed == before else 'FAIL'} {name}: {n_tok} tokens, {len(lines)} lines, "
                  f"{len(fuzz)} random strings, whole corpus ({len(corpus)} bytes)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
