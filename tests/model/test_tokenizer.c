/*
 * test_tokenizer.c - the tokenizer on tiny hand-made vocabularies, and a
 * command-line mode the HF comparison (tests/python/test_tokenizer_hf.py)
 * drives:
 *
 *   model_test_tokenizer --encode VOCABFILE TEXTFILE [--whole] [--no-add-special]
 *
 * reads a vocabulary written by tools/gen_vocab.py and prints, for each line
 * of TEXTFILE (split on '\n' exactly like Python's bytes.split(b"\n")), or for
 * the whole file with --whole, one line:
 *
 *   <ids separated by spaces> TAB <hex of decode(ids)> TAB <hex of decode(ids, skip_special)>
 *
 * Special tokens in the text are parsed (as HF's encode does).
 */
#include <pthread.h>
#include <stdint.h>

#include "model/tokenizer.h"
#include "test.h"

/* ---- building vocabularies ------------------------------------------------ */

/* GPT-2's byte-level character for byte b, as UTF-8, into out (3 bytes). */
static void byte_char(int b, char *out) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    unsigned cp = (unsigned)b;
    if (!printable) {
        unsigned k = 0;
        for (int i = 0; i < b; i++)
            if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

typedef struct vocab {
    char *tok[600];
    int32_t type[600];
    float score[600];
    int n;
    char *merge[64];
    int nm;
} vocab;

static int vadd(vocab *v, const char *s, int type, float score) {
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    v->score[v->n] = score;
    return v->n++;
}

static void vfree(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->nm; i++) free(v->merge[i]);
}

/* A byte-level vocabulary: the 256 byte characters (ids 0..255, id = byte),
 * then the extra tokens and the merges given in byte-level spelling
 * ("\xc4\xa0" is U+0120, the character for a space). */
static tok *bpe_new(vocab *v, const char *pre, const char *const *extra, const int *extra_types,
                    const char *const *merges) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char(b, s);
        vadd(v, s, TOK_TYPE_NORMAL, 0);
    }
    for (int i = 0; extra && extra[i]; i++) vadd(v, extra[i], extra_types ? extra_types[i] : TOK_TYPE_NORMAL, 0);
    for (int i = 0; merges && merges[i]; i++) v->merge[v->nm++] = strdup(merges[i]);
    tok_vocab_desc d = tok_vocab_desc_default();
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = v->n;
    d.tokens = (const char *const *)v->tok;
    d.token_types = v->type;
    d.n_merges = v->nm;
    d.merges = (const char *const *)v->merge;
    tsl_error err;
    tok *t = tok_new(&d, &err);
    if (!t) fprintf(stderr, "tok_new: %s\n", err.message);
    return t;
}

static int32_t id_of(const tok *t, const char *s) { return tok_find(t, s, strlen(s)); }

/* Encode s (NUL-terminated) into ids[] (capacity 64); returns the count. */
static int enc(const tok *t, const char *s, bool add_special, bool parse_special, int32_t *ids) {
    return tok_encode(t, s, strlen(s), add_special, parse_special, ids, 64);
}

static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* ---- byte-level BPE ---------------------------------------------------- */

static void test_bpe_merge_order(void) {
    /* "c d" has the better rank, so "bcd" must become b + cd, although the
     * pair b c comes first from the left; "abc" merges a b, then ab c. */
    static const char *extra[] = {"ab", "bc", "cd", "abc", NULL};
    static const char *merges[] = {"c d", "a b", "b c", "ab c", NULL};
    vocab v;
    tok *t = bpe_new(&v, "gpt2", extra, NULL, merges);
    CHECK(t != NULL);
    if (!t) return;
    int32_t ids[64];
    int n = enc(t, "bcd", false, false, ids);
    int32_t want1[] = {'b', id_of(t, "cd")};
    CHECK(same_ids(ids, n, want1, 2));
    n = enc(t, "abc", false, false, ids);
    int32_t want2[] = {id_of(t, "abc")};
    CHECK(same_ids(ids, n, want2, 1));
    n = enc(t, "abcd", false, false, ids); /* a b, c d (rank 0 first), then ab cd has no merge */
    int32_t want3[] = {id_of(t, "ab"), id_of(t, "cd")};
    CHECK(same_ids(ids, n, want3, 2));
    tok_free(t);
    vfree(&v);
}

static void test_bpe_long_word(void) {
    /* 100000 'a's in one pre-token: merges through the heap, not a rescan */
    static const char *extra[] = {"aa", "aaaa", NULL};
    static const char *merges[] = {"a a", "aa aa", NULL};
    vocab v;
    tok *t = bpe_new(&v, "gpt2", extra, NULL, merges);
    CHECK(t != NULL);
    if (!t) return;
    size_t n = 100001;
    char *s = malloc(n);
    memset(s, 'a', n);
    int32_t *ids = malloc(sizeof *ids * n);
    int32_t k = tok_encode(t, s, n, false, false, ids, (int32_t)n);
    CHECK(k == 25001);
    int ok = 1;
    for (int i = 0; i < 25000 && k == 25001; i++) ok &= ids[i] == id_of(t, "aaaa");
    CHECK(ok);
    CHECK(k == 25001 && ids[25000] == 'a');
    char *back = malloc(n + 1);
    CHECK(tok_decode(t, ids, (size_t)k, false, back, n + 1) == (int64_t)n);
    CHECK(memcmp(back, s, n) == 0);
    free(back);
    free(ids);
    free(s);
    tok_free(t);
    vfree(&v);
}

static void test_bpe_pre_tokenizers(void) {
    /* "'S" is one pre-token for the llama3 and qwen2 patterns (case-insensitive
     * contractions), two for GPT-2's; digits go in threes for llama3, one by
     * one for qwen2, as a run for GPT-2. */
    static const char *extra[] = {"'S", "12", "123", "23", NULL};
    static const char *merges[] = {"' S", "1 2", "12 3", "2 3", NULL};
    const char *pres[] = {"gpt2", "llama3", "qwen2"};
    int32_t ids[64];
    for (int p = 0; p < 3; p++) {
        vocab v;
        tok *t = bpe_new(&v, pres[p], extra, NULL, merges);
        CHECK(t != NULL);
        if (!t) continue;
        int n = enc(t, "I'S", false, false, ids);
        if (p == 0) {
            int32_t want[] = {'I', '\'', 'S'};
            CHECKF(same_ids(ids, n, want, 3), "pre %s: n=%d", pres[p], n);
        } else {
            int32_t want[] = {'I', id_of(t, "'S")};
            CHECKF(same_ids(ids, n, want, 2), "pre %s: n=%d", pres[p], n);
        }
        n = enc(t, "12323", false, false, ids);
        if (p == 0) { /* one run: 1 2 3 2 3 -> 12 3 2 3 -> ... rank order: "1 2" then "12 3" then "2 3" */
            int32_t want[] = {id_of(t, "123"), id_of(t, "23")};
            CHECKF(same_ids(ids, n, want, 2), "pre %s: n=%d", pres[p], n);
        } else if (p == 1) { /* 123 | 23 */
            int32_t want[] = {id_of(t, "123"), id_of(t, "23")};
            CHECKF(same_ids(ids, n, want, 2), "pre %s: n=%d", pres[p], n);
        } else { /* every digit alone */
            int32_t want[] = {'1', '2', '3', '2', '3'};
            CHECKF(same_ids(ids, n, want, 5), "pre %s: n=%d", pres[p], n);
        }
        tok_free(t);
        vfree(&v);
    }
}

static void test_bpe_contractions(void) {
    /* "'Tis": llama3 and qwen2 split "'T" off case-insensitively; without the
     * (?i:) the letters alternative would take "'Tis" whole (and llama3 would
     * then find it in the vocabulary). GPT-2's contractions are lowercase only. */
    static const char *extra[] = {"'T", "is", "'Tis", NULL};
    static const char *merges[] = {"' T", "i s", "'T is", NULL};
    const char *pres[] = {"gpt2", "llama3", "qwen2"};
    int32_t ids[64];
    for (int p = 0; p < 3; p++) {
        vocab v;
        tok *t = bpe_new(&v, pres[p], extra, NULL, merges);
        CHECK(t != NULL);
        if (!t) continue;
        int n = enc(t, "'Tis", false, false, ids);
        if (p == 0) {
            int32_t want[] = {'\'', 'T', id_of(t, "is")};
            CHECKF(same_ids(ids, n, want, 3), "pre %s: n=%d", pres[p], n);
        } else {
            int32_t want[] = {id_of(t, "'T"), id_of(t, "is")};
            CHECKF(same_ids(ids, n, want, 2), "pre %s: n=%d", pres[p], n);
        }
        tok_free(t);
        vfree(&v);
    }
}

static void test_bpe_white_space_set(void) {
    /* U+180E is not White_Space (since Unicode 6.3), so for HF's engine it is
     * punctuation-like and joins the apostrophe in one pre-token, which this
     * vocabulary (llama3: whole pre-tokens first) has as one token. */
    char tk[32] = "";
    const char *sep = "\xe1\xa0\x8e'";
    for (const char *c = sep; *c; c++) {
        char b[4];
        byte_char((uint8_t)*c, b);
        strcat(tk, b);
    }
    const char *extra[] = {tk, NULL};
    vocab v;
    tok *t = bpe_new(&v, "llama3", extra, NULL, NULL);
    CHECK(t != NULL);
    if (!t) return;
    int32_t ids[64];
    int n = enc(t, "x\xe1\xa0\x8e'", false, false, ids);
    int32_t want[] = {'x', id_of(t, tk)};
    CHECKF(same_ids(ids, n, want, 2), "n=%d", n);
    /* a real White_Space character (U+2028) does not join */
    n = enc(t, "x\xe2\x80\xa8'", false, false, ids);
    CHECKF(n == 5, "n=%d", n);
    tok_free(t);
    vfree(&v);
}

static void test_bpe_ignore_merges(void) {
    /* Llama 3 takes a pre-token that is a whole token as is, even with no
     * merge path to it; GPT-2 merges (here: cannot, so three tokens). */
    static const char *extra[] = {"xyz", NULL};
    int32_t ids[64];
    vocab v;
    tok *t = bpe_new(&v, "llama3", extra, NULL, NULL);
    CHECK(t && enc(t, "xyz", false, false, ids) == 1 && ids[0] == id_of(t, "xyz"));
    tok_free(t);
    vfree(&v);
    t = bpe_new(&v, "gpt2", extra, NULL, NULL);
    int32_t want[] = {'x', 'y', 'z'};
    CHECK(t && same_ids(ids, enc(t, "xyz", false, false, ids), want, 3));
    tok_free(t);
    vfree(&v);
}

static void test_bpe_space_mapping(void) {
    /* " world" is one pre-token; its space is U+0120 in the vocabulary */
    static const char *extra[] = {"\xc4\xa0w", "or", "\xc4\xa0wor", NULL};
    static const char *merges[] = {"\xc4\xa0 w", "o r", "\xc4\xa0w or", NULL};
    vocab v;
    tok *t = bpe_new(&v, "gpt2", extra, NULL, merges);
    CHECK(t != NULL);
    if (!t) return;
    int32_t ids[64];
    int n = enc(t, "a world", false, false, ids);
    int32_t want[] = {'a', id_of(t, "\xc4\xa0wor"), 'l', 'd'};
    CHECK(same_ids(ids, n, want, 4));
    char out[64];
    CHECK(tok_decode(t, ids, (size_t)n, false, out, sizeof out) == 7 && strcmp(out, "a world") == 0);
    char piece[16];
    CHECK(tok_token_to_piece(t, id_of(t, "\xc4\xa0wor"), false, piece, sizeof piece) == 4 &&
          strcmp(piece, " wor") == 0);
    tok_free(t);
    vfree(&v);
}

static void test_special_tokens(void) {
    static const char *extra[] = {"<|end|>", "<|a|>", "<|a|>b", "<tool>", NULL};
    static const int types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_USER_DEFINED};
    vocab v;
    tok *t = bpe_new(&v, "gpt2", extra, types, NULL);
    CHECK(t != NULL);
    if (!t) return;
    int32_t ids[64];
    int n = enc(t, "x<|end|>y<tool>z", false, true, ids);
    int32_t want[] = {'x', id_of(t, "<|end|>"), 'y', id_of(t, "<tool>"), 'z'};
    CHECK(same_ids(ids, n, want, 5));
    /* without parse_special, control text is plain text; user-defined still matched */
    n = enc(t, "<|end|><tool>", false, false, ids);
    int32_t want2[] = {'<', '|', 'e', 'n', 'd', '|', '>', id_of(t, "<tool>")};
    CHECKF(same_ids(ids, n, want2, 8), "n=%d", n);
    /* longest match wins at a position */
    n = enc(t, "<|a|>bc<|a|>", false, true, ids);
    int32_t want3[] = {id_of(t, "<|a|>b"), 'c', id_of(t, "<|a|>")};
    CHECK(same_ids(ids, n, want3, 3));
    /* a token cut short is text */
    n = enc(t, "<|end|", false, true, ids);
    CHECK(n == 6);
    /* decode: control tokens kept or skipped; user-defined always kept */
    int32_t seq[] = {id_of(t, "<|end|>"), 'h', 'i', id_of(t, "<tool>"), id_of(t, "<|end|>")};
    char out[64];
    CHECK(tok_decode(t, seq, 5, false, out, sizeof out) == 22 && strcmp(out, "<|end|>hi<tool><|end|>") == 0);
    CHECK(tok_decode(t, seq, 5, true, out, sizeof out) == 8 && strcmp(out, "hi<tool>") == 0);
    CHECK(tok_token_to_piece(t, seq[0], false, out, sizeof out) == 0 && out[0] == 0);
    CHECK(tok_token_to_piece(t, seq[0], true, out, sizeof out) == 7 && strcmp(out, "<|end|>") == 0);
    tok_free(t);
    vfree(&v);
}

static void test_bpe_invalid_utf8(void) {
    vocab v;
    tok *t = bpe_new(&v, "llama3", NULL, NULL, NULL);
    CHECK(t != NULL);
    if (!t) return;
    /* lone continuation, truncated 3-byte char, 0xFF, an overlong, a NUL */
    const char s[] = "a\x80 b\xe2\x82 \xff\xfe c\xc0\xaf\x00z";
    size_t n = sizeof s - 1;
    int32_t ids[64];
    int32_t k = tok_encode(t, s, n, false, false, ids, 64);
    CHECK(k == (int32_t)n); /* no merges: one token per byte, none lost */
    int ok = 1;
    for (int32_t i = 0; i < k && i < 64; i++) ok &= ids[i] == (uint8_t)s[i];
    CHECK(ok);
    char out[64];
    CHECK(tok_decode(t, ids, (size_t)k, false, out, sizeof out) == (int64_t)n && memcmp(out, s, n) == 0);
    tok_free(t);
    vfree(&v);
}

static void test_empty_and_capacity(void) {
    static const char *extra[] = {"<s>", "</s>", NULL};
    static const int types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    vocab v;
    memset(&v, 0, sizeof v);
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char(b, s);
        vadd(&v, s, TOK_TYPE_NORMAL, 0);
    }
    for (int i = 0; extra[i]; i++) vadd(&v, extra[i], types[i], 0);
    tok_vocab_desc d = tok_vocab_desc_default();
    d.model = "gpt2";
    d.n_tokens = v.n;
    d.tokens = (const char *const *)v.tok;
    d.token_types = v.type;
    d.bos_id = 256;
    d.eos_id = 257;
    d.add_bos = d.add_eos = true;
    tok *t = tok_new(&d, NULL);
    CHECK(t != NULL);
    if (!t) { vfree(&v); return; }
    int32_t ids[8] = {0};
    CHECK(tok_encode(t, "", 0, false, false, ids, 8) == 0);
    CHECK(tok_encode(t, NULL, 0, false, false, NULL, 0) == 0);
    CHECK(tok_encode(t, "", 0, true, false, ids, 8) == 2 && ids[0] == 256 && ids[1] == 257);
    /* too small: the needed count comes back, only cap ids are written */
    ids[2] = -7;
    CHECK(tok_encode(t, "hello", 5, true, false, ids, 2) == 7);
    CHECK(ids[0] == 256 && ids[1] == 'h' && ids[2] == -7);
    CHECK(tok_encode(t, "hello", 5, true, false, NULL, 0) == 7);
    /* bad arguments */
    CHECK(tok_encode(NULL, "x", 1, false, false, ids, 8) == -1);
    CHECK(tok_encode(t, NULL, 3, false, false, ids, 8) == -1);
    CHECK(tok_encode(t, "x", 1, false, false, NULL, 8) == -1);
    /* decode: sizes, truncation, bad ids */
    int32_t seq[] = {256, 'h', 'i', 257};
    char out[16];
    memset(out, 'X', sizeof out);
    CHECK(tok_decode(t, seq, 4, true, out, 2) == 2 && out[0] == 'h' && out[1] == 'i' && out[2] == 'X');
    CHECK(tok_decode(t, seq, 4, false, NULL, 0) == 9);
    CHECK(tok_decode(t, NULL, 0, false, out, sizeof out) == 0 && out[0] == 0);
    int32_t bad[] = {'h', 258};
    CHECK(tok_decode(t, bad, 2, false, out, sizeof out) == -1);
    int32_t neg[] = {-1};
    CHECK(tok_decode(t, neg, 1, false, out, sizeof out) == -1);
    CHECK(tok_token_to_piece(t, 9999, true, out, sizeof out) == -1);
    CHECK(tok_bos(t) == 256 && tok_eos(t) == 257 && tok_unk(t) == -1 && tok_n_tokens(t) == 258);
    CHECK(tok_token_type(t, 256) == TOK_TYPE_CONTROL && tok_token_type(t, -3) == TOK_TYPE_UNDEFINED);
    tok_free(t);
    vfree(&v);
}

static void test_long_whitespace_and_digits(void) {
    /* long runs are single pre-tokens or many short ones; neither may fail
     * (JIT stack, match limits) and the text must come back intact */
    const char *pres[] = {"gpt2", "llama3", "qwen2"};
    size_t n = 200000;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = i < n / 2 ? ' ' : (char)('0' + i % 10);
    s[n / 4] = '\n';
    int32_t *ids = malloc(sizeof *ids * n);
    char *back = malloc(n + 1);
    for (int p = 0; p < 3; p++) {
        vocab v;
        tok *t = bpe_new(&v, pres[p], NULL, NULL, NULL);
        CHECK(t != NULL);
        if (!t) continue;
        int32_t k = tok_encode(t, s, n, false, false, ids, (int32_t)n);
        CHECKF(k == (int32_t)n, "pre %s: %d", pres[p], k);
        CHECK(k > 0 && tok_decode(t, ids, (size_t)k, false, back, n + 1) == (int64_t)n && memcmp(back, s, n) == 0);
        tok_free(t);
        vfree(&v);
    }
    free(back);
    free(ids);
    free(s);
}

/* ---- SentencePiece-style ------------------------------------------------- */

#define SP "\xe2\x96\x81" /* U+2581 */

static tok *spm_new(vocab *v, bool bytes, const char *const *extra, const float *scores) {
    memset(v, 0, sizeof *v);
    vadd(v, "<unk>", TOK_TYPE_UNKNOWN, 0);
    vadd(v, "<s>", TOK_TYPE_CONTROL, 0);
    vadd(v, "</s>", TOK_TYPE_CONTROL, 0);
    if (bytes) {
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            vadd(v, s, TOK_TYPE_BYTE, 0);
        }
    }
    for (int i = 0; extra[i]; i++) vadd(v, extra[i], TOK_TYPE_NORMAL, scores[i]);
    tok_vocab_desc d = tok_vocab_desc_default();
    d.model = "llama";
    d.n_tokens = v->n;
    d.tokens = (const char *const *)v->tok;
    d.token_types = v->type;
    d.scores = v->score;
    d.bos_id = 1;
    d.eos_id = 2;
    d.unk_id = 0;
    d.add_bos = true;
    tsl_error err;
    tok *t = tok_new(&d, &err);
    if (!t) fprintf(stderr, "tok_new: %s\n", err.message);
    return t;
}

static void test_spm_score_order(void) {
    static const char *extra[] = {SP, "a", "b", "c", "ab", "bc", SP "a", NULL};
    float sc[] = {-1, -2, -3, -4, -10, -5, -20};
    int32_t ids[64];
    vocab v;
    tok *t = spm_new(&v, true, extra, sc);
    CHECK(t != NULL);
    if (!t) return;
    /* " abc": bc (-5) beats ab (-10) and ▁a (-20); then nothing joins a|bc,
     * and ▁a still can (score -20) */
    int n = enc(t, "abc", true, false, ids);
    int32_t want[] = {1, id_of(t, SP "a"), id_of(t, "bc")};
    CHECKF(same_ids(ids, n, want, 3), "n=%d", n);
    tok_free(t);
    vfree(&v);
    /* scores swapped: ab first, then ▁ can no longer join a */
    float sc2[] = {-1, -2, -3, -4, -5, -10, -20};
    t = spm_new(&v, true, extra, sc2);
    n = enc(t, "abc", false, false, ids);
    int32_t want2[] = {id_of(t, SP), id_of(t, "ab"), id_of(t, "c")};
    CHECKF(t && same_ids(ids, n, want2, 3), "n=%d", n);
    /* decode drops the prefixed space, as HF's Strip decoder does */
    char out[64];
    CHECK(tok_decode(t, ids, (size_t)n, false, out, sizeof out) == 3 && strcmp(out, "abc") == 0);
    tok_free(t);
    vfree(&v);
}

static void test_spm_leftmost_tie(void) {
    /* equal scores: the leftmost pair merges first */
    static const char *extra[] = {SP, "a", "aa", NULL};
    float sc[] = {-1, -2, -3};
    int32_t ids[64];
    vocab v;
    tok *t = spm_new(&v, true, extra, sc);
    CHECK(t != NULL);
    if (!t) return;
    int n = enc(t, "aaa", false, false, ids);
    int32_t want[] = {id_of(t, SP), id_of(t, "aa"), id_of(t, "a")};
    CHECKF(same_ids(ids, n, want, 3), "n=%d", n);
    tok_free(t);
    vfree(&v);
}

static void test_spm_byte_fallback(void) {
    static const char *extra[] = {SP, "a", "b", SP "a", "\n", NULL};
    float sc[] = {-1, -2, -3, -4, -5};
    int32_t ids[64];
    vocab v;
    tok *t = spm_new(&v, true, extra, sc);
    CHECK(t != NULL);
    if (!t) return;
    /* é (C3 A9) and ☃ (E2 98 83) are not in the vocabulary: bytes; so is an
     * invalid byte */
    int n = enc(t, "a\xc3\xa9 b\xe2\x98\x83\xff", false, false, ids);
    int32_t want[] = {id_of(t, SP "a"), 3 + 0xC3, 3 + 0xA9, id_of(t, SP), id_of(t, "b"),
                      3 + 0xE2,         3 + 0x98, 3 + 0x83, 3 + 0xFF};
    CHECKF(same_ids(ids, n, want, 9), "n=%d", n);
    char out[64];
    CHECK(tok_decode(t, ids, (size_t)n, false, out, sizeof out) == 9 &&
          strcmp(out, "a\xc3\xa9 b\xe2\x98\x83\xff") == 0);
    char piece[8];
    CHECK(tok_token_to_piece(t, 3 + 0xC3, false, piece, sizeof piece) == 1 && (uint8_t)piece[0] == 0xC3);
    tok_free(t);
    vfree(&v);
    /* without byte tokens: one <unk> for a run of unknown characters */
    t = spm_new(&v, false, extra, sc);
    n = enc(t, "a\xc3\xa9\xe2\x98\x83" "b", false, false, ids);
    int32_t want2[] = {id_of(t, SP "a"), 0, id_of(t, "b")};
    CHECKF(t && same_ids(ids, n, want2, 3), "n=%d", n);
    CHECK(tok_decode(t, ids, (size_t)n, true, out, sizeof out) == 2 && strcmp(out, "ab") == 0);
    CHECK(tok_decode(t, ids, (size_t)n, false, out, sizeof out) == 7 && strcmp(out, "a<unk>b") == 0);
    tok_free(t);
    vfree(&v);
}

static void test_spm_special_prefix(void) {
    /* each piece after a special token gets its own space prefix (HF runs the
     * normalizer per piece; llama.cpp does the same) */
    static const char *extra[] = {SP, "a", "b", SP "a", SP "b", NULL};
    float sc[] = {-1, -2, -3, -4, -5};
    int32_t ids[64];
    vocab v;
    tok *t = spm_new(&v, true, extra, sc);
    CHECK(t != NULL);
    if (!t) return;
    int n = enc(t, "a</s>b", true, true, ids);
    int32_t want[] = {1, id_of(t, SP "a"), 2, id_of(t, SP "b")};
    CHECKF(same_ids(ids, n, want, 4), "n=%d", n);
    char out[64];
    CHECK(tok_decode(t, ids, (size_t)n, false, out, sizeof out) == 11 && strcmp(out, "<s> a</s> b") == 0);
    CHECK(tok_decode(t, ids, (size_t)n, true, out, sizeof out) == 3 && strcmp(out, "a b") == 0);
    CHECK(enc(t, "", true, true, ids) == 1 && ids[0] == 1);
    tok_free(t);
    vfree(&v);
}

/* ---- construction errors, threads ---------------------------------------- */

static void test_new_errors(void) {
    tsl_error err;
    CHECK(tok_new(NULL, &err) == NULL && err.status == TSL_FAILED);
    const char *toks[] = {"a", NULL, "c"};
    int32_t types[] = {1, 1, 9};
    tok_vocab_desc d = tok_vocab_desc_default();
    d.model = "bert";
    d.n_tokens = 1;
    d.tokens = toks;
    CHECK(tok_new(&d, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "bert");
    d.model = "gpt2";
    d.n_tokens = 3;
    CHECK(tok_new(&d, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "NULL token");
    toks[1] = "b";
    d.token_types = types;
    CHECK(tok_new(&d, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "token type");
    types[2] = 1;
    d.n_tokens = 0;
    CHECK(tok_new(&d, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "empty vocabulary");
    /* an out-of-range special id and an unknown pre-tokenizer only warn */
    d.n_tokens = 3;
    d.bos_id = 77;
    d.pre = "no-such-pre";
    tok *t = tok_new(&d, &err);
    CHECK(t != NULL && tok_bos(t) == -1 && err.status == TSL_SUCCESS);
    tok_free(t);
    tok_free(NULL);
}

static void test_flag_defaults(void) {
    /* absent GGUF keys (-1): BOS for SentencePiece and the Llama 3 family, a
     * space prefix for SentencePiece only; a key present (0/1) wins */
    const char *toks[] = {"<s>", "</s>", "a", SP "a"};
    int32_t types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL};
    struct { const char *model, *pre; int add_bos, add_space_prefix; int32_t want0, n; } cases[] = {
        {"llama", NULL, -1, -1, 0, 2},      /* <s> ▁a */
        {"llama", NULL, 0, -1, 3, 1},       /* ▁a */
        {"llama", NULL, -1, 0, 0, 2},       /* <s> a */
        {"gpt2", "llama-bpe", -1, -1, 0, 2},/* <s> a */
        {"gpt2", "qwen2", -1, -1, 2, 1},    /* a */
        {"gpt2", "qwen2", 1, -1, 0, 2},     /* <s> a */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tok_vocab_desc d = tok_vocab_desc_default();
        d.model = cases[i].model;
        d.pre = cases[i].pre;
        d.n_tokens = 4;
        d.tokens = toks;
        d.token_types = types;
        d.bos_id = 0;
        d.eos_id = 1;
        d.add_bos = cases[i].add_bos;
        d.add_space_prefix = cases[i].add_space_prefix;
        tok *t = tok_new(&d, NULL);
        int32_t ids[8];
        int n = t ? tok_encode(t, "a", 1, true, false, ids, 8) : -1;
        CHECKF(n == cases[i].n && ids[0] == cases[i].want0 && ids[n - 1] == (cases[i].add_space_prefix == 0 ||
               !strcmp(cases[i].model, "gpt2") ? 2 : 3), "case %zu: n=%d", i, n);
        tok_free(t);
    }
}

typedef struct {
    const tok *t;
    const char *s;
    int32_t ids[256];
    int32_t n;
} enc_job;

static void *enc_thread(void *p) {
    enc_job *j = p;
    for (int r = 0; r < 200; r++) j->n = tok_encode(j->t, j->s, strlen(j->s), false, true, j->ids, 256);
    return NULL;
}

static void test_threads_share_a_tok(void) {
    static const char *extra[] = {"\xc4\xa0w", "or", "\xc4\xa0wor", "<|x|>", NULL};
    static const int types[] = {1, 1, 1, TOK_TYPE_CONTROL};
    static const char *merges[] = {"\xc4\xa0 w", "o r", "\xc4\xa0w or", NULL};
    vocab v;
    tok *t = bpe_new(&v, "qwen2", extra, types, merges);
    CHECK(t != NULL);
    if (!t) return;
    const char *s = "hello world<|x|> 123 worlds of words, again and again";
    enc_job a = {t, s, {0}, 0}, b = {t, s, {0}, 0};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, enc_thread, &a) == 0);
    CHECK(pthread_create(&tb, NULL, enc_thread, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    int32_t ref[256];
    int32_t n = tok_encode(t, s, strlen(s), false, true, ref, 256);
    CHECK(n > 0 && same_ids(a.ids, a.n, ref, n) && same_ids(b.ids, b.n, ref, n));
    tok_free(t);
    vfree(&v);
}

/* ---- --encode mode --------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* Decode a hex string in place; returns the byte length or -1. */
static long unhex(char *s) {
    size_t n = strlen(s);
    if (n % 2) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int h = hexval(s[2 * i]), l = hexval(s[2 * i + 1]);
        if (h < 0 || l < 0) return -1;
        s[i] = (char)(h * 16 + l);
    }
    s[n / 2] = 0;
    return (long)(n / 2);
}

typedef struct vfile {
    char *data;
    char **tokens, **merges;
    uint32_t *tlen, *mlen;
    float *scores;
    int32_t *types;
    tok_vocab_desc d;
} vfile;

static char *next_line(char **p) {
    char *s = *p;
    if (!s || !*s) return NULL;
    char *e = strchr(s, '\n');
    if (e) {
        *e = 0;
        *p = e + 1;
    } else {
        *p = s + strlen(s);
    }
    return s;
}

static int load_vocab(const char *path, vfile *v) {
    size_t len;
    memset(v, 0, sizeof *v);
    v->d = tok_vocab_desc_default();
    v->data = read_file(path, &len);
    if (!v->data) return -1;
    char *p = v->data, *line;
    static char model[16], pre[64];
    if (!(line = next_line(&p)) || strcmp(line, "tsl-vocab 1") != 0) return -1;
    while ((line = next_line(&p))) {
        char key[32];
        long val;
        if (sscanf(line, "model %15s", model) == 1) v->d.model = model;
        else if (sscanf(line, "pre %63s", pre) == 1) v->d.pre = pre;
        else if (sscanf(line, "%31s %ld", key, &val) == 2 && strcmp(key, "tokens") != 0 && strcmp(key, "merges") != 0) {
            if (!strcmp(key, "bos")) v->d.bos_id = (int32_t)val;
            else if (!strcmp(key, "eos")) v->d.eos_id = (int32_t)val;
            else if (!strcmp(key, "unk")) v->d.unk_id = (int32_t)val;
            else if (!strcmp(key, "pad")) v->d.pad_id = (int32_t)val;
            else if (!strcmp(key, "add_bos")) v->d.add_bos = val != 0;
            else if (!strcmp(key, "add_eos")) v->d.add_eos = val != 0;
            else if (!strcmp(key, "add_space_prefix")) v->d.add_space_prefix = (int)val;
        } else if (sscanf(line, "tokens %ld", &val) == 1) {
            int32_t n = (int32_t)val;
            v->tokens = calloc((size_t)n, sizeof *v->tokens);
            v->tlen = calloc((size_t)n, sizeof *v->tlen);
            v->scores = calloc((size_t)n, sizeof *v->scores);
            v->types = calloc((size_t)n, sizeof *v->types);
            if (!v->tokens || !v->tlen || !v->scores || !v->types) return -1;
            for (int32_t i = 0; i < n; i++) {
                char *l = next_line(&p);
                if (!l) return -1;
                char *sp1 = strchr(l, ' ');
                if (!sp1) return -1;
                *sp1 = 0;
                long bl = unhex(l);
                if (bl < 0 || sscanf(sp1 + 1, "%f %d", &v->scores[i], &v->types[i]) != 2) return -1;
                v->tokens[i] = l;
                v->tlen[i] = (uint32_t)bl;
            }
            v->d.n_tokens = n;
            v->d.tokens = (const char *const *)v->tokens;
            v->d.token_lens = v->tlen;
            v->d.scores = v->scores;
            v->d.token_types = v->types;
        } else if (sscanf(line, "merges %ld", &val) == 1) {
            int32_t n = (int32_t)val;
            v->merges = calloc((size_t)(n ? n : 1), sizeof *v->merges);
            v->mlen = calloc((size_t)(n ? n : 1), sizeof *v->mlen);
            if (!v->merges || !v->mlen) return -1;
            for (int32_t i = 0; i < n; i++) {
                char *l = next_line(&p);
                long bl = l ? unhex(l) : -1;
                if (bl < 0) return -1;
                v->merges[i] = l;
                v->mlen[i] = (uint32_t)bl;
            }
            v->d.n_merges = n;
            v->d.merges = (const char *const *)v->merges;
            v->d.merge_lens = v->mlen;
        } else {
            return -1;
        }
    }
    return v->d.model && v->d.n_tokens > 0 ? 0 : -1;
}

static void free_vocab(vfile *v) {
    free(v->data);
    free(v->tokens);
    free(v->merges);
    free(v->tlen);
    free(v->mlen);
    free(v->scores);
    free(v->types);
}

static void print_hex(const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) printf("%02x", (uint8_t)s[i]);
}

static int encode_doc(const tok *t, const char *s, size_t n, bool add_special) {
    int32_t need = tok_encode(t, s, n, add_special, true, NULL, 0);
    if (need < 0) return -1;
    int32_t *ids = malloc(sizeof *ids * (size_t)(need ? need : 1));
    if (!ids || tok_encode(t, s, n, add_special, true, ids, need) != need) { free(ids); return -1; }
    for (int32_t i = 0; i < need; i++) printf(i ? " %d" : "%d", ids[i]);
    for (int skip = 0; skip < 2; skip++) {
        int64_t m = tok_decode(t, ids, (size_t)need, skip, NULL, 0);
        char *out = m >= 0 ? malloc((size_t)m + 1) : NULL;
        if (!out || tok_decode(t, ids, (size_t)need, skip, out, (size_t)m + 1) != m) {
            free(out);
            free(ids);
            return -1;
        }
        putchar('\t');
        print_hex(out, m);
        free(out);
    }
    putchar('\n');
    free(ids);
    return 0;
}

static int encode_main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s --encode VOCABFILE TEXTFILE [--whole] [--no-add-special]\n", argv[0]);
        return 2;
    }
    bool whole = false, add_special = true;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--whole")) whole = true;
        else if (!strcmp(argv[i], "--no-add-special")) add_special = false;
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    vfile v;
    if (load_vocab(argv[2], &v) != 0) {
        fprintf(stderr, "cannot read vocabulary %s\n", argv[2]);
        free_vocab(&v);
        return 1;
    }
    tsl_error err;
    tok *t = tok_new(&v.d, &err);
    if (!t) {
        fprintf(stderr, "%s\n", err.message);
        free_vocab(&v);
        return 1;
    }
    size_t len;
    char *text = read_file(argv[3], &len);
    int rc = text ? 0 : 1;
    if (text && whole) {
        rc = encode_doc(t, text, len, add_special);
    } else if (text) {
        size_t start = 0;
        for (size_t i = 0; i <= len && rc == 0; i++) {
            if (i == len || text[i] == '\n') {
                rc = encode_doc(t, text + start, i - start, add_special);
                start = i + 1;
            }
        }
    }
    if (rc) fprintf(stderr, "encoding failed\n");
    free(text);
    tok_free(t);
    free_vocab(&v);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--encode") == 0) return encode_main(argc, argv);
    RUN(test_bpe_merge_order);
    RUN(test_bpe_long_word);
    RUN(test_bpe_pre_tokenizers);
    RUN(test_bpe_contractions);
    RUN(test_bpe_white_space_set);
    RUN(test_bpe_ignore_merges);
    RUN(test_bpe_space_mapping);
    RUN(test_special_tokens);
    RUN(test_bpe_invalid_utf8);
    RUN(test_empty_and_capacity);
    RUN(test_long_whitespace_and_digits);
    RUN(test_spm_score_order);
    RUN(test_spm_leftmost_tie);
    RUN(test_spm_byte_fallback);
    RUN(test_spm_special_prefix);
    RUN(test_new_errors);
    RUN(test_flag_defaults);
    RUN(test_threads_share_a_tok);
    return test_summary();
}
