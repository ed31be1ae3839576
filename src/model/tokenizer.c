/*
 * tokenizer.c - BPE tokenizers for GGUF vocabularies: byte-level ("gpt2") and
 * SentencePiece-style ("llama").
 *
 * The reference is Hugging Face `tokenizers`: for the same vocabulary the ids
 * must be the same, byte for byte, on any text. That decides most choices:
 *
 * - Special tokens first. Control, unknown and user-defined tokens are found
 *   in the raw text before anything else, leftmost-longest (what HF's
 *   Aho-Corasick matcher does), and the text between them is tokenized piece
 *   by piece. Control and unknown tokens are matched only when the caller asks
 *   (parse_special), user-defined ones always (llama.cpp's rule; HF matches
 *   all added tokens).
 * - Pre-tokenizer regexes run on PCRE2 (UTF + UCP, the same Unicode classes as
 *   the Oniguruma engine HF uses) rather than a hand-written matcher: the
 *   patterns are the published ones, so a new pre-tokenizer is a new string.
 *   PCRE2_MATCH_INVALID_UTF lets invalid UTF-8 through: such bytes never match
 *   a pattern item, end up in the gaps between matches, and are byte-mapped
 *   like anything else, so no input is rejected or lost.
 * - Merging is a binary heap over a linked list of symbols, O(n log n) per
 *   pre-token instead of the O(n^2) rescan, because pre-tokens can be long
 *   (a run of 10^5 spaces or digits is one pre-token for some regexes). Stale
 *   heap entries are detected on pop rather than removed. "gpt2" orders by
 *   merge rank, "llama" by the score of the merged token (best first, leftmost
 *   on ties), which is what SentencePiece's BPE and HF's conversion of it both
 *   compute.
 * - "llama" characters missing from the vocabulary become <0xNN> byte tokens,
 *   or one unk for a run of them (HF's fuse_unk) when there are no byte tokens.
 * - A tok is read-only after tok_new; every encode call carries its own scratch
 *   (symbols, heap, PCRE2 match data), so threads can share one tok. The cost
 *   is a few allocations per call, small next to the regex and merge work.
 * - Decoding returns raw bytes: where HF would print U+FFFD for a token that
 *   ends inside a UTF-8 character, we return the bytes, so a streaming caller
 *   can join pieces losslessly.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/tokenizer.h"

enum { TOK_KIND_BPE, TOK_KIND_SPM };

typedef struct tok_entry {
    uint32_t off, len; /* into tok.text */
    float score;
    uint8_t type;
    int16_t byte; /* "llama": the byte a <0xNN> token stands for, else -1 */
} tok_entry;

typedef struct tok_merge {
    uint64_t key; /* left id << 32 | right id; UINT64_MAX = empty slot */
    int32_t rank, id;
} tok_merge;

struct tok {
    int kind;
    bool ignore_merges; /* look a whole pre-token up before merging (Llama 3) */
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, unk, pad;
    int32_t n;
    tok_entry *tok;
    char *text;
    int32_t *slots; /* text -> id, open addressing, -1 empty */
    uint32_t slot_mask;
    tok_merge *merges; /* (left, right) -> rank, result */
    uint32_t merge_mask;
    int32_t byte_tok[256];   /* "gpt2": token of each byte's mapped char; "llama": <0xNN> */
    uint8_t byte_utf8[256][2], byte_utf8_len[256]; /* "gpt2": each byte's character */
    int16_t cp_byte[256 + 68];                      /* and back, -1 outside the alphabet */
    int32_t *special;        /* ids matched in raw text: by first byte, then longest first */
    int32_t special_first[257];
    pcre2_code *re;
    bool re_jit;
};

/* ---- pre-tokenizer patterns ------------------------------------------- */

static const char TOK_RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char TOK_RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char TOK_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
    const char *name;
    const char *re;
    bool ignore_merges;
} tok_pres[] = {
    {"default", TOK_RE_GPT2, false},     {"gpt2", TOK_RE_GPT2, false},
    {"gpt-2", TOK_RE_GPT2, false},       {"phi-2", TOK_RE_GPT2, false},
    {"llama3", TOK_RE_LLAMA3, true},     {"llama-bpe", TOK_RE_LLAMA3, true},
    {"llama-v3", TOK_RE_LLAMA3, true},   {"falcon3", TOK_RE_LLAMA3, true},
    {"qwen2", TOK_RE_QWEN2, false},      {"deepseek-r1-qwen", TOK_RE_QWEN2, false},
    {"megrez", TOK_RE_QWEN2, false},
};

/* PCRE2's \s (with UCP) is Unicode White_Space plus U+180E, which left
 * White_Space in Unicode 6.3; Oniguruma's, which HF uses, is White_Space
 * only. The patterns keep their published spelling and \s / \S are rewritten
 * to this explicit set before compiling. */
#define TOK_WHITE_SPACE "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* Rewrite src into dst (cap bytes). Returns false if it does not fit or a \S
 * sits inside a class (no pattern here has one). */
static bool tok_pattern_expand(const char *src, char *dst, size_t cap) {
    size_t n = 0;
    bool in_class = false;
    for (const char *p = src; *p; p++) {
        const char *put = NULL;
        char one[3] = {0};
        if (p[0] == '\\' && p[1]) {
            if (p[1] == 's') put = in_class ? TOK_WHITE_SPACE : "[" TOK_WHITE_SPACE "]";
            else if (p[1] == 'S' && !in_class) put = "[^" TOK_WHITE_SPACE "]";
            else if (p[1] == 'S') return false;
            else { one[0] = p[0]; one[1] = p[1]; put = one; }
            p++;
        } else {
            if (*p == '[' && !in_class) {
                in_class = true;
                if (p[1] == '^') { one[0] = '['; one[1] = '^'; put = one; p++; }
                if (p[1] == ']') return false; /* a literal ']' first in a class: not handled */
            } else if (*p == ']' && in_class) {
                in_class = false;
            }
            if (!put) { one[0] = *p; put = one; }
        }
        size_t l = strlen(put);
        if (n + l + 1 > cap) return false;
        memcpy(dst + n, put, l);
        n += l;
    }
    dst[n] = 0;
    return true;
}

/* ---- small helpers ------------------------------------------------------ */

static bool tok_is_special_type(int type) { return type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN; }

/* Length of the valid UTF-8 character at s (1-4), or 0 when the bytes there
 * are not one (bad lead, bad or missing continuation, overlong, surrogate,
 * above U+10FFFF). */
static size_t tok_utf8_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

static uint32_t tok_utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes take the code points from U+0100 up, in byte order. All
 * are below U+0800, so each is one or two bytes of UTF-8. */
#define TOK_ALPHA_END (256 + 68)

static bool tok_byte_prints(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void tok_alphabet_init(tok *t) {
    uint32_t next = 256;
    for (int i = 0; i < TOK_ALPHA_END; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_prints(b) ? (uint32_t)b : next++;
        t->cp_byte[cp] = (int16_t)b;
        t->byte_utf8_len[b] = (uint8_t)tok_utf8_put((char *)t->byte_utf8[b], cp);
    }
}

static uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static uint64_t tok_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static int32_t tok_lookup(const tok *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)tok_hash(s, n) & t->slot_mask;
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->tok[id].len == n && memcmp(t->text + t->tok[id].off, s, n) == 0) return id;
        i = (i + 1) & t->slot_mask;
    }
}

static const tok_merge *tok_merge_find(const tok *t, int32_t l, int32_t r) {
    if (!t->merges) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint32_t i = (uint32_t)tok_mix(key) & t->merge_mask;
    for (;;) {
        const tok_merge *m = &t->merges[i];
        if (m->key == UINT64_MAX) return NULL;
        if (m->key == key) return m;
        i = (i + 1) & t->merge_mask;
    }
}

static uint32_t tok_pow2_above(uint64_t n) {
    uint32_t c = 16;
    while (c < n * 2) c <<= 1;
    return c;
}

static tok *tok_fail(tok *t, tsl_error *err, tsl_status s, const char *msg, const char *arg) {
    error_set(err, s, NULL, NULL, -1, NULL, NULL, "tokenizer: %s%s%s%s", msg, arg ? " '" : "", arg ? arg : "",
              arg ? "'" : "");
    tok_free(t);
    return NULL;
}

/* ---- construction ------------------------------------------------------- */

tok_vocab_desc tok_vocab_desc_default(void) {
    tok_vocab_desc d;
    memset(&d, 0, sizeof d);
    d.bos_id = d.eos_id = d.unk_id = d.pad_id = -1;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    return d;
}

/* Special tokens sort by first byte, then longest first, so the first hit
 * among a byte's candidates is the longest match. */
typedef struct tok_skey {
    uint8_t first;
    uint32_t len;
    int32_t id;
} tok_skey;

static int tok_skey_cmp(const void *a, const void *b) {
    const tok_skey *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int16_t tok_parse_byte_token(const char *s, uint32_t n) {
    /* "<0xNN>" with hex digits in either case */
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return (int16_t)v;
}

static int32_t tok_check_id(int32_t id, int32_t n, const char *what) {
    if (id >= -1 && id < n) return id;
    TSL_LOGW("tokenizer: %s id %d is out of range (vocabulary of %d), ignored", what, id, n);
    return -1;
}

tok *tok_new(const tok_vocab_desc *d, tsl_error *err) {
    if (err) tsl_error_clear(err);
    if (!d) return tok_fail(NULL, err, TSL_FAILED, "no vocabulary description", NULL);
    if (!d->model) return tok_fail(NULL, err, TSL_FAILED, "no tokenizer model (tokenizer.ggml.model)", NULL);
    int kind;
    if (strcmp(d->model, "gpt2") == 0) kind = TOK_KIND_BPE;
    else if (strcmp(d->model, "llama") == 0) kind = TOK_KIND_SPM;
    else return tok_fail(NULL, err, TSL_FAILED, "unsupported tokenizer model", d->model);
    if (d->n_tokens <= 0 || !d->tokens)
        return tok_fail(NULL, err, TSL_FAILED, "empty vocabulary (tokenizer.ggml.tokens)", NULL);
    if (d->n_merges < 0 || (d->n_merges > 0 && !d->merges))
        return tok_fail(NULL, err, TSL_FAILED, "merge count without merges", NULL);

    tok *t = calloc(1, sizeof *t);
    if (!t) return tok_fail(NULL, err, TSL_ALLOC_FAILED, "out of memory", NULL);
    t->kind = kind;
    t->n = d->n_tokens;

    /* token texts, types, scores */
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n; i++) {
        if (!d->tokens[i]) {
            char num[24];
            snprintf(num, sizeof num, "%d", i);
            return tok_fail(t, err, TSL_FAILED, "NULL token at index", num);
        }
        total += d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
    }
    if (total > UINT32_MAX) return tok_fail(t, err, TSL_FAILED, "token texts exceed 4 GiB", NULL);
    t->tok = calloc((size_t)t->n, sizeof *t->tok);
    t->text = malloc(total ? (size_t)total : 1);
    if (!t->tok || !t->text) return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL);
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n; i++) {
        uint32_t len = (uint32_t)(d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]));
        memcpy(t->text + off, d->tokens[i], len);
        tok_entry *e = &t->tok[i];
        e->off = off;
        e->len = len;
        off += len;
        e->score = d->scores ? d->scores[i] : -(float)i;
        int ty = d->token_types ? d->token_types[i] : TOK_TYPE_NORMAL;
        if (ty < TOK_TYPE_UNDEFINED || ty > TOK_TYPE_BYTE) {
            char msg[64];
            snprintf(msg, sizeof msg, "%d of token %d", ty, i);
            return tok_fail(t, err, TSL_FAILED, "bad token type", msg);
        }
        e->type = (uint8_t)ty;
        e->byte = kind == TOK_KIND_SPM ? tok_parse_byte_token(t->text + e->off, len) : -1;
    }

    /* text -> id; the last of duplicate texts wins, as in llama.cpp */
    uint32_t cap = tok_pow2_above((uint64_t)t->n);
    t->slots = malloc((size_t)cap * sizeof *t->slots);
    if (!t->slots) return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL);
    memset(t->slots, 0xff, (size_t)cap * sizeof *t->slots);
    t->slot_mask = cap - 1;
    for (int32_t i = 0; i < t->n; i++) {
        const tok_entry *e = &t->tok[i];
        if (e->len == 0) continue;
        uint32_t h = (uint32_t)tok_hash(t->text + e->off, e->len) & t->slot_mask;
        for (;;) {
            int32_t o = t->slots[h];
            if (o < 0 || (t->tok[o].len == e->len && memcmp(t->text + t->tok[o].off, t->text + e->off, e->len) == 0)) {
                t->slots[h] = i;
                break;
            }
            h = (h + 1) & t->slot_mask;
        }
    }

    t->bos = tok_check_id(d->bos_id, t->n, "bos");
    t->eos = tok_check_id(d->eos_id, t->n, "eos");
    t->unk = tok_check_id(d->unk_id, t->n, "unk");
    t->pad = tok_check_id(d->pad_id, t->n, "pad");
    t->add_eos = d->add_eos > 0;
    t->add_space_prefix = d->add_space_prefix < 0 ? kind == TOK_KIND_SPM : d->add_space_prefix != 0;

    /* the bytes */
    tok_alphabet_init(t);
    for (int b = 0; b < 256; b++) {
        if (kind == TOK_KIND_BPE) {
            t->byte_tok[b] = tok_lookup(t, (const char *)t->byte_utf8[b], t->byte_utf8_len[b]);
        } else {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            t->byte_tok[b] = tok_lookup(t, s, 6);
        }
    }

    /* tokens matched in raw text */
    int32_t ns = 0;
    for (int32_t i = 0; i < t->n; i++) {
        int ty = t->tok[i].type;
        if (t->tok[i].len && (tok_is_special_type(ty) || ty == TOK_TYPE_USER_DEFINED)) ns++;
    }
    t->special = malloc((size_t)(ns ? ns : 1) * sizeof *t->special);
    if (!t->special) return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL);
    ns = 0;
    for (int32_t i = 0; i < t->n; i++) {
        int ty = t->tok[i].type;
        if (t->tok[i].len && (tok_is_special_type(ty) || ty == TOK_TYPE_USER_DEFINED)) t->special[ns++] = i;
    }
    tok_skey *keys = malloc((size_t)(ns ? ns : 1) * sizeof *keys);
    if (!keys) return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL);
    for (int32_t k = 0; k < ns; k++) {
        const tok_entry *e = &t->tok[t->special[k]];
        keys[k] = (tok_skey){(uint8_t)t->text[e->off], e->len, t->special[k]};
    }
    qsort(keys, (size_t)ns, sizeof *keys, tok_skey_cmp);
    for (int32_t k = 0; k < ns; k++) t->special[k] = keys[k].id;
    free(keys);
    for (int b = 0, k = 0; b <= 256; b++) {
        while (k < ns && (uint8_t)t->text[t->tok[t->special[k]].off] < b) k++;
        t->special_first[b] = b == 256 ? ns : k;
    }

    t->add_bos = kind == TOK_KIND_SPM;
    if (kind == TOK_KIND_BPE) {
        const char *pre = d->pre && d->pre[0] ? d->pre : "default";
        const char *re = NULL;
        for (size_t i = 0; i < sizeof tok_pres / sizeof tok_pres[0]; i++) {
            if (strcmp(pre, tok_pres[i].name) == 0) {
                re = tok_pres[i].re;
                t->ignore_merges = tok_pres[i].ignore_merges;
                t->add_bos = tok_pres[i].re == TOK_RE_LLAMA3; /* the family default; the key overrides */
            }
        }
        if (!re) {
            /* llama.cpp's choice too: a model still loads, with GPT-2's split */
            TSL_LOGW("tokenizer: unknown pre-tokenizer '%s', using the GPT-2 pattern", pre);
            re = TOK_RE_GPT2;
        }
        char pat[1024];
        if (!tok_pattern_expand(re, pat, sizeof pat))
            return tok_fail(t, err, TSL_FAILED, "pre-tokenizer pattern cannot be rewritten:", re);
        int ec;
        PCRE2_SIZE eo;
        t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              &ec, &eo, NULL);
        if (!t->re) {
            char msg[160];
            pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
            return tok_fail(t, err, TSL_FAILED, "pre-tokenizer pattern does not compile:", msg);
        }
        t->re_jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;

        /* merges: "left right", split at the first space after the first byte
         * (a token may itself start with a space in some vocabularies) */
        if (d->n_merges > 0) {
            uint32_t mcap = tok_pow2_above((uint64_t)d->n_merges);
            t->merges = malloc((size_t)mcap * sizeof *t->merges);
            if (!t->merges) return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL);
            for (uint32_t i = 0; i < mcap; i++) t->merges[i].key = UINT64_MAX;
            t->merge_mask = mcap - 1;
            char *buf = NULL;
            size_t bufcap = 0;
            int32_t skipped = 0;
            for (int32_t r = 0; r < d->n_merges; r++) {
                const char *m = d->merges[r];
                if (!m) { skipped++; continue; }
                size_t len = d->merge_lens ? d->merge_lens[r] : strlen(m);
                const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
                if (!sp) { skipped++; continue; }
                size_t ll = (size_t)(sp - m), rl = len - ll - 1;
                int32_t l = tok_lookup(t, m, ll), rr = tok_lookup(t, sp + 1, rl);
                if (ll + rl > bufcap) {
                    char *nb = realloc(buf, ll + rl);
                    if (!nb) { free(buf); return tok_fail(t, err, TSL_ALLOC_FAILED, "out of memory", NULL); }
                    buf = nb;
                    bufcap = ll + rl;
                }
                memcpy(buf, m, ll);
                memcpy(buf + ll, sp + 1, rl);
                int32_t res = tok_lookup(t, buf, ll + rl);
                if (l < 0 || rr < 0 || res < 0) { skipped++; continue; }
                uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)rr;
                uint32_t h = (uint32_t)tok_mix(key) & t->merge_mask;
                while (t->merges[h].key != UINT64_MAX && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
                if (t->merges[h].key == key) continue; /* a repeated pair keeps its first (best) rank */
                t->merges[h] = (tok_merge){key, r, res};
            }
            free(buf);
            if (skipped)
                TSL_LOGW("tokenizer: %d of %d merges name tokens not in the vocabulary; skipped", skipped,
                         d->n_merges);
        }
    }
    if (d->add_bos >= 0) t->add_bos = d->add_bos != 0;
    return t;
}

void tok_free(tok *t) {
    if (!t) return;
    if (t->re) pcre2_code_free(t->re);
    free(t->tok);
    free(t->text);
    free(t->slots);
    free(t->merges);
    free(t->special);
    free(t);
}

/* ---- per-call scratch ------------------------------------------------- */

typedef struct tok_sym {
    int32_t id;          /* token of this symbol, -1 if none */
    int32_t prev, next;  /* neighbours in the word, -1 at the ends */
    uint32_t off, len;   /* "llama": bytes of the symbol in the work buffer; len 0 = merged away */
} tok_sym;

typedef struct tok_cand {
    uint64_t key; /* heap order: smaller first */
    int32_t pos;  /* left symbol */
    int32_t a, b; /* "gpt2": left and right ids; "llama": a = merged byte length */
    int32_t id;   /* the merged token */
} tok_cand;

typedef struct tok_work {
    tok_sym *sym;
    size_t sym_cap;
    tok_cand *heap;
    size_t heap_n, heap_cap;
    char *buf;
    size_t buf_cap;
    pcre2_match_data *md;
    int32_t *out;
    int64_t cap, n;
    bool failed;
} tok_work;

static bool work_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static void work_push(tok_work *w, int32_t id) {
    if (w->n < w->cap) w->out[w->n] = id;
    w->n++;
}

static bool heap_push(tok_work *w, tok_cand c) {
    if (!work_grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof *w->heap)) return false;
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (w->heap[p].key <= c.key) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
    return true;
}

static bool heap_pop(tok_work *w, tok_cand *out) {
    if (!w->heap_n) return false;
    *out = w->heap[0];
    tok_cand last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && w->heap[c + 1].key < w->heap[c].key) c++;
        if (last.key <= w->heap[c].key) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return true;
}

/* ---- byte-level BPE ("gpt2") ---------------------------------------- */

static bool bpe_try(const tok *t, tok_work *w, int32_t l, int32_t r) {
    if (w->sym[l].id < 0 || w->sym[r].id < 0) return true;
    const tok_merge *m = tok_merge_find(t, w->sym[l].id, w->sym[r].id);
    if (!m) return true;
    uint64_t key = ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)l;
    return heap_push(w, (tok_cand){key, l, w->sym[l].id, w->sym[r].id, m->id});
}

static void bpe_emit(const tok *t, tok_work *w, int32_t id) {
    if (id >= 0) work_push(w, id);
    else if (t->unk >= 0) work_push(w, t->unk); /* a byte whose character the vocabulary lacks */
}

/* One pre-token: its bytes mapped to the byte-level alphabet, then merged. */
static void bpe_word(const tok *t, tok_work *w, const uint8_t *s, size_t n) {
    if (n == 0 || w->failed) return;
    if (n > INT32_MAX / 4) { w->failed = true; return; }
    if (t->ignore_merges && n > 1) {
        if (!work_grow((void **)&w->buf, &w->buf_cap, 2 * n, 1)) { w->failed = true; return; }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(w->buf + k, t->byte_utf8[s[i]], 2);
            k += t->byte_utf8_len[s[i]];
        }
        int32_t id = tok_lookup(t, w->buf, k);
        if (id >= 0 && !tok_is_special_type(t->tok[id].type)) {
            work_push(w, id);
            return;
        }
    }
    if (n == 1) { bpe_emit(t, w, t->byte_tok[s[0]]); return; }
    if (!work_grow((void **)&w->sym, &w->sym_cap, n, sizeof *w->sym)) { w->failed = true; return; }
    tok_sym *sym = w->sym;
    for (size_t i = 0; i < n; i++)
        sym[i] = (tok_sym){t->byte_tok[s[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 0, 1};
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!bpe_try(t, w, (int32_t)i, (int32_t)i + 1)) { w->failed = true; return; }
    tok_cand c;
    while (heap_pop(w, &c)) {
        tok_sym *L = &sym[c.pos];
        if (L->id != c.a || L->next < 0 || sym[L->next].id != c.b) continue; /* stale */
        tok_sym *R = &sym[L->next];
        L->id = c.id;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = c.pos;
        R->id = -2;
        R->prev = R->next = -1;
        if ((L->prev >= 0 && !bpe_try(t, w, L->prev, c.pos)) || (L->next >= 0 && !bpe_try(t, w, c.pos, L->next))) {
            w->failed = true;
            return;
        }
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) bpe_emit(t, w, sym[i].id);
}

/* Text between special tokens: split by the regex; the gaps between matches
 * (only bytes no pattern item matches, such as invalid UTF-8) are pre-tokens
 * too, as HF's "isolated" split keeps them. */
static void bpe_segment(const tok *t, tok_work *w, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t off = 0, last = 0;
    while (off < n && !w->failed) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, 0, w->md, NULL);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && t->re_jit) /* e.g. JIT stack exhausted: interpret */
            rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_JIT, w->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            TSL_LOGE("tokenizer: pre-tokenizer match failed (PCRE2 error %d)", rc);
            w->failed = true;
            return;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* the patterns never match empty; step over it if one ever does */
            off = ms + 1;
            continue;
        }
        if (ms > last) bpe_word(t, w, u + last, ms - last);
        bpe_word(t, w, u + ms, me - ms);
        last = off = me;
    }
    if (n > last) bpe_word(t, w, u + last, n - last);
}

/* ---- SentencePiece-style BPE ("llama") -------------------------------- */

static bool spm_mergeable(int type) {
    return type != TOK_TYPE_CONTROL && type != TOK_TYPE_UNKNOWN && type != TOK_TYPE_BYTE;
}

/* Scores map to heap keys so the best score pops first and, among equal
 * scores, the leftmost pair: the float's bits made monotonic, then inverted. */
static uint64_t spm_key(float score, int32_t pos) {
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)~u << 32) | (uint32_t)pos;
}

static bool spm_try(const tok *t, tok_work *w, int32_t l, int32_t r) {
    const tok_sym *L = &w->sym[l], *R = &w->sym[r];
    uint32_t size = L->len + R->len;
    int32_t id = tok_lookup(t, w->buf + L->off, size);
    if (id < 0 || !spm_mergeable(t->tok[id].type)) return true;
    return heap_push(w, (tok_cand){spm_key(t->tok[id].score, l), l, (int32_t)size, 0, id});
}

static void spm_segment(const tok *t, tok_work *w, const char *s, size_t n, bool prefix) {
    /* escaped text: an optional leading space, every space as U+2581 */
    size_t cap = (n + 1) * 3;
    if (n > (size_t)INT32_MAX / 4 || !work_grow((void **)&w->buf, &w->buf_cap, cap, 1)) {
        w->failed = true;
        return;
    }
    size_t m = 0;
    for (size_t i = 0; i < n + prefix; i++) {
        char c = (prefix && i == 0) ? ' ' : s[i - prefix];
        if (c == ' ') {
            memcpy(w->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            w->buf[m++] = c;
        }
    }
    if (!work_grow((void **)&w->sym, &w->sym_cap, m, sizeof *w->sym)) { w->failed = true; return; }
    tok_sym *sym = w->sym;
    int32_t ns = 0;
    for (size_t i = 0; i < m;) {
        size_t l = tok_utf8_len((const uint8_t *)w->buf + i, m - i);
        if (!l) l = 1; /* an invalid byte is a symbol of its own and falls back to <0xNN> */
        int32_t id = tok_lookup(t, w->buf + i, l);
        if (id >= 0 && !spm_mergeable(t->tok[id].type)) id = -1;
        sym[ns] = (tok_sym){id, ns - 1, ns + 1, (uint32_t)i, (uint32_t)l};
        ns++;
        i += l;
    }
    if (!ns) return;
    sym[ns - 1].next = -1;
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (!spm_try(t, w, i, i + 1)) { w->failed = true; return; }
    tok_cand c;
    while (heap_pop(w, &c)) {
        tok_sym *L = &sym[c.pos];
        if (L->len == 0 || L->next < 0 || L->len + sym[L->next].len != (uint32_t)c.a) continue; /* stale */
        tok_sym *R = &sym[L->next];
        L->len += R->len;
        L->id = c.id;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = c.pos;
        R->len = 0;
        if ((L->prev >= 0 && !spm_try(t, w, L->prev, c.pos)) || (L->next >= 0 && !spm_try(t, w, c.pos, L->next))) {
            w->failed = true;
            return;
        }
    }
    bool last_unk = false;
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const tok_sym *y = &sym[i];
        if (y->id >= 0) {
            work_push(w, y->id);
            last_unk = false;
            continue;
        }
        bool bytes = true;
        for (uint32_t k = 0; k < y->len; k++) bytes = bytes && t->byte_tok[(uint8_t)w->buf[y->off + k]] >= 0;
        if (bytes) {
            for (uint32_t k = 0; k < y->len; k++) work_push(w, t->byte_tok[(uint8_t)w->buf[y->off + k]]);
            last_unk = false;
        } else if (t->unk >= 0 && !last_unk) {
            work_push(w, t->unk);
            last_unk = true;
        }
    }
}

/* ---- encode ------------------------------------------------------------ */

/* The longest special token at s, if any. */
static int32_t tok_special_at(const tok *t, const char *s, size_t n, bool parse_special) {
    uint8_t b = (uint8_t)s[0];
    for (int32_t k = t->special_first[b]; k < t->special_first[b + 1]; k++) {
        const tok_entry *e = &t->tok[t->special[k]];
        if (!parse_special && tok_is_special_type(e->type)) continue;
        if (e->len <= n && memcmp(t->text + e->off, s, e->len) == 0) return t->special[k];
    }
    return -1;
}

static void tok_segment(const tok *t, tok_work *w, const char *s, size_t n, bool after_special) {
    if (t->kind == TOK_KIND_BPE) bpe_segment(t, w, s, n);
    else spm_segment(t, w, s, n, t->add_space_prefix && after_special);
}

int32_t tok_encode(const tok *t, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *out, int32_t cap) {
    if (!t || (!text && len) || cap < 0 || (!out && cap)) return -1;
    tok_work w;
    memset(&w, 0, sizeof w);
    w.out = out;
    w.cap = cap;
    if (t->re) {
        w.md = pcre2_match_data_create_from_pattern(t->re, NULL);
        if (!w.md) return -1;
    }
    if (add_special && t->add_bos && t->bos >= 0) work_push(&w, t->bos);
    /* SentencePiece prefixes a space to the text and to each piece that
     * follows a special token (HF's normalizer sees each piece separately) */
    bool after_special = true;
    size_t seg = 0;
    for (size_t p = 0; p < len && !w.failed;) {
        int32_t id = t->special_first[256] ? tok_special_at(t, text + p, len - p, parse_special) : -1;
        if (id < 0) {
            p++;
            continue;
        }
        if (p > seg) tok_segment(t, &w, text + seg, p - seg, after_special);
        work_push(&w, id);
        after_special = true;
        p += t->tok[id].len;
        seg = p;
    }
    if (len > seg && !w.failed) tok_segment(t, &w, text + seg, len - seg, after_special);
    if (add_special && t->add_eos && t->eos >= 0) work_push(&w, t->eos);
    free(w.sym);
    free(w.heap);
    free(w.buf);
    if (w.md) pcre2_match_data_free(w.md);
    if (w.failed || w.n > INT32_MAX) return -1;
    return (int32_t)w.n;
}

/* ---- decode ------------------------------------------------------------ */

typedef struct tok_sink {
    char *out;
    size_t cap, n;
    bool strip_space; /* drop the first byte if it is a space (SentencePiece's prefix) */
} tok_sink;

static void sink_put(tok_sink *o, const char *s, size_t n) {
    if (n && o->strip_space) {
        o->strip_space = false;
        if (s[0] == ' ') { s++; n--; }
    }
    for (size_t i = 0; i < n; i++, o->n++)
        if (o->n < o->cap) o->out[o->n] = s[i];
}

static void tok_piece(const tok *t, int32_t id, bool special, tok_sink *o) {
    const tok_entry *e = &t->tok[id];
    const char *s = t->text + e->off;
    if (tok_is_special_type(e->type)) {
        if (special) sink_put(o, s, e->len);
        return;
    }
    if (e->type == TOK_TYPE_USER_DEFINED && t->kind == TOK_KIND_BPE) {
        sink_put(o, s, e->len);
        return;
    }
    if (t->kind == TOK_KIND_SPM) {
        if (e->type == TOK_TYPE_BYTE && e->byte >= 0) {
            char c = (char)e->byte;
            sink_put(o, &c, 1);
            return;
        }
        uint32_t i = 0, run = 0;
        for (; i < e->len; i++) {
            if (i + 3 <= e->len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                sink_put(o, s + run, i - run);
                sink_put(o, " ", 1);
                i += 2;
                run = i + 1;
            }
        }
        sink_put(o, s + run, e->len - run);
        return;
    }
    /* byte level: every character back to its byte; a token with a character
     * outside the alphabet is passed through raw, as HF does */
    char tmp[256];
    char *buf = e->len <= sizeof tmp ? tmp : malloc(e->len);
    if (!buf) { sink_put(o, s, e->len); return; }
    size_t k = 0;
    bool raw = false;
    for (uint32_t i = 0; i < e->len && !raw;) {
        size_t l = tok_utf8_len((const uint8_t *)s + i, e->len - i);
        uint32_t cp = l == 1   ? (uint8_t)s[i]
                      : l == 2 ? ((uint32_t)(s[i] & 0x1F) << 6) | (uint32_t)(s[i + 1] & 0x3F)
                               : UINT32_MAX;
        int b = cp < TOK_ALPHA_END ? t->cp_byte[cp] : -1;
        if (b < 0) raw = true;
        else buf[k++] = (char)b;
        i += l ? (uint32_t)l : 1;
    }
    if (raw) sink_put(o, s, e->len);
    else sink_put(o, buf, k);
    if (buf != tmp) free(buf);
}

static int64_t sink_finish(tok_sink *o) {
    if (o->n < o->cap) o->out[o->n] = '\0';
    return o->n > INT64_MAX ? -1 : (int64_t)o->n;
}

int64_t tok_decode(const tok *t, const int32_t *ids, size_t n, bool skip_special, char *out, size_t cap) {
    if (!t || (!ids && n) || (!out && cap)) return -1;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n) return -1;
    tok_sink o = {out, cap, 0, t->kind == TOK_KIND_SPM && t->add_space_prefix};
    for (size_t i = 0; i < n; i++) tok_piece(t, ids[i], !skip_special, &o);
    return sink_finish(&o);
}

int64_t tok_token_to_piece(const tok *t, int32_t id, bool special, char *out, size_t cap) {
    if (!t || id < 0 || id >= t->n || (!out && cap)) return -1;
    tok_sink o = {out, cap, 0, false};
    tok_piece(t, id, special, &o);
    return sink_finish(&o);
}

/* ---- accessors --------------------------------------------------------- */

int32_t tok_n_tokens(const tok *t) { return t ? t->n : 0; }
int32_t tok_bos(const tok *t) { return t ? t->bos : -1; }
int32_t tok_eos(const tok *t) { return t ? t->eos : -1; }
int32_t tok_unk(const tok *t) { return t ? t->unk : -1; }
int32_t tok_pad(const tok *t) { return t ? t->pad : -1; }

const char *tok_token_text(const tok *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok[id].len;
    return t->text + t->tok[id].off;
}

tok_type tok_token_type(const tok *t, int32_t id) {
    return (!t || id < 0 || id >= t->n) ? TOK_TYPE_UNDEFINED : (tok_type)t->tok[id].type;
}

float tok_token_score(const tok *t, int32_t id) { return (!t || id < 0 || id >= t->n) ? 0.0f : t->tok[id].score; }

int32_t tok_find(const tok *t, const char *text, size_t len) {
    if (!t || (!text && len) || !len) return -1;
    return tok_lookup(t, text, len);
}
