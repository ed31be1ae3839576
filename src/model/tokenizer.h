/*
 * tokenizer.h - text to token ids and back, for GGUF vocabularies.
 *
 * Two families, named as GGUF's tokenizer.ggml.model names them:
 *
 *   "gpt2"   byte-level BPE (GPT-2, Llama 3, Qwen 2/3, ...): the text is split
 *            by a pre-tokenizer regex chosen by tokenizer.ggml.pre, each piece's
 *            bytes are mapped to the GPT-2 printable alphabet, and merges are
 *            applied by rank.
 *   "llama"  SentencePiece-style BPE: spaces become U+2581 (with one prepended
 *            when add_space_prefix), pairs are merged best score first, and a
 *            character missing from the vocabulary falls back to <0xNN> byte
 *            tokens (or unk).
 *
 * The vocabulary comes in as plain arrays (tok_vocab_desc), exactly as the
 * GGUF keys hold them, so this module does not depend on the GGUF reader. The
 * results match Hugging Face `tokenizers` for the same vocabulary (checked by
 * tests/python/test_tokenizer_hf.py).
 *
 * A tok is immutable after tok_new: any number of threads may encode and
 * decode with one tok at the same time.
 */
#ifndef TSL_MODEL_TOKENIZER_H
#define TSL_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensile/tensile.h"

/* GGUF tokenizer.ggml.token_type values. */
typedef enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

/* A vocabulary as GGUF describes it. Everything is borrowed for the duration
 * of tok_new only; the tok keeps its own copies. */
typedef struct tok_vocab_desc {
    const char *model;           /* tokenizer.ggml.model: "gpt2" or "llama" */
    const char *pre;             /* tokenizer.ggml.pre: "gpt2", "default", "llama3"/"llama-bpe",
                                    "qwen2", ...; NULL or "" means "default" (the GPT-2 regex) */
    int32_t n_tokens;
    const char *const *tokens;   /* n_tokens strings */
    const uint32_t *token_lens;  /* optional byte lengths (GGUF strings are not NUL-terminated);
                                    NULL: each token is NUL-terminated */
    const float *scores;         /* optional, n_tokens; "llama" merges by them (NULL: -id) */
    const int32_t *token_types;  /* optional, n_tokens, tok_type values (NULL: all NORMAL) */
    int32_t n_merges;            /* "gpt2": tokenizer.ggml.merges, "left right", by rank */
    const char *const *merges;
    const uint32_t *merge_lens;  /* optional, like token_lens */
    int32_t bos_id, eos_id, unk_id, pad_id; /* -1: none */
    /* 1 or 0 as the GGUF keys say; -1 where a key is absent: the family's
     * default, as llama.cpp applies it (add_bos: yes for "llama" and the
     * Llama 3 pre-tokenizers, else no; add_eos: no; add_space_prefix: yes for
     * "llama", no for "gpt2") */
    int add_bos, add_eos;
    int add_space_prefix;        /* "llama": prepend a space to the text and after each special token */
} tok_vocab_desc;

/* A desc with every id and flag -1 and everything else zero. */
tok_vocab_desc tok_vocab_desc_default(void);

typedef struct tok tok;

/* Build a tokenizer. Returns NULL and fills err (status FAILED, message naming
 * the problem: an unknown model, an empty vocabulary, a NULL token, a token
 * type outside 0..6) on bad input, or ALLOC_FAILED when memory runs out; err
 * may be NULL and is cleared on success. What llama.cpp tolerates only warns
 * (tsl_log): a special id out of range is ignored (-1), an unknown
 * pre-tokenizer falls back to the GPT-2 pattern, merges naming tokens not in
 * the vocabulary are skipped. */
tok *tok_new(const tok_vocab_desc *d, tsl_error *err);
void tok_free(tok *t);

/* Encode len bytes of text (need not be valid UTF-8 nor NUL-terminated).
 * add_special: add BOS/EOS as the vocabulary asks (add_bos/add_eos).
 * parse_special: control and unknown-type tokens written in the text (e.g.
 *   "<|im_end|>") become those tokens; user-defined tokens always do.
 * Writes at most cap ids to out and returns the number of ids the text needs,
 * so a return value > cap means out was too small (call again with that
 * capacity); out may be NULL when cap is 0. Returns -1 on bad arguments (NULL
 * tok, NULL text with len > 0, NULL out with cap > 0), on memory exhaustion, or
 * if the count would not fit in int32_t. */
int32_t tok_encode(const tok *t, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *out, int32_t cap);

/* Decode ids to text: the byte-level mapping reversed ("gpt2"), U+2581 to
 * space and <0xNN> to bytes ("llama", plus HF's removal of the one leading
 * space add_space_prefix put there). skip_special leaves out control and
 * unknown tokens, like HF's decode(skip_special_tokens=True). The bytes are
 * the raw ones (a sequence cut inside a UTF-8 character is not replaced by
 * U+FFFD). Writes at most cap bytes and, when there is room, a NUL after them;
 * returns the byte length of the full text (excluding the NUL), so a value >=
 * cap means out was too small. Returns -1 on an id out of range or bad
 * arguments. */
int64_t tok_decode(const tok *t, const int32_t *ids, size_t n, bool skip_special, char *out, size_t cap);

/* The text of one token as generation streams it: like tok_decode of the
 * single id, but no leading space is removed; control and unknown tokens give
 * their text only when special is true. Same return convention as tok_decode. */
int64_t tok_token_to_piece(const tok *t, int32_t id, bool special, char *out, size_t cap);

int32_t tok_n_tokens(const tok *t);
int32_t tok_bos(const tok *t); /* -1 when none */
int32_t tok_eos(const tok *t);
int32_t tok_unk(const tok *t);
int32_t tok_pad(const tok *t);
/* The stored token text (not NUL-terminated; *len gets its length), its type
 * and score. NULL / TOK_TYPE_UNDEFINED / 0 for an id out of range. */
const char *tok_token_text(const tok *t, int32_t id, size_t *len);
tok_type tok_token_type(const tok *t, int32_t id);
float tok_token_score(const tok *t, int32_t id);
/* The id of a token given its exact text, or -1. */
int32_t tok_find(const tok *t, const char *text, size_t len);

#endif
