/*
 * inject.c - deterministic fault injection (FAULTS.md section 10).
 *
 * A plan is a list of rules parsed from the TSL_FAULT grammar (see
 * tsl_backend_inject in backend.h). Backends ask fault_plan_fire at the
 * boundary where a real fault would appear (the driver's answer, a buffer
 * lookup, a kernel build, an allocation) and, when it fires, take exactly the
 * path the real fault takes. Plans belong to a backend, not to the process,
 * so two contexts can run side by side with different faults.
 *
 * Cost when nothing is injected: one relaxed atomic load per check. When
 * rules exist a mutex guards matching; drills and tests are the only users.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fault/fault.h"

enum { KEY_COMPUTE, KEY_NODE, KEY_TENSOR, KEY_OP, KEY_NAME, KEY_BYTES, KEY_TIMES, KEY_COPY };
enum { MAX_CONDS = 8, MAX_STR = TSL_MAX_NAME };

typedef struct {
    int key;
    char op; /* '=', '>', '<', '%' */
    double num;
    char str[MAX_STR];
    bool prefix; /* string ended in '*' */
} cond;

typedef struct {
    tsl_fault_class cls;
    int n_conds;
    cond conds[MAX_CONDS];
    int64_t times; /* -1 = unlimited */
    int64_t fired;
} rule;

struct fault_plan {
    pthread_mutex_t mu;
    _Atomic int n_rules;
    int cap;
    rule *rules;
    _Atomic uint64_t fired[TSL_FAULT_CLASS_COUNT];
};

static const char *CLASS_NAMES[TSL_FAULT_CLASS_COUNT] = {"retry", "lost",  "nobuf",   "kernel",
                                                         "alloc", "abort", "copylost"};
static const char *KEY_NAMES[] = {"compute", "node", "tensor", "op", "name", "bytes", "times", "copy"};

const char *tsl_fault_class_name(tsl_fault_class c) {
    return (unsigned)c < TSL_FAULT_CLASS_COUNT ? CLASS_NAMES[c] : "?";
}

fault_plan *fault_plan_new(void) {
    fault_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

void fault_plan_free(fault_plan *p) {
    if (!p) return;
    pthread_mutex_destroy(&p->mu);
    free(p->rules);
    free(p);
}

void fault_plan_clear(fault_plan *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->n_rules, 0);
    pthread_mutex_unlock(&p->mu);
}

bool fault_plan_empty(const fault_plan *p) {
    return !p || atomic_load_explicit(&((fault_plan *)p)->n_rules, memory_order_relaxed) == 0;
}

uint64_t fault_plan_fired(const fault_plan *p, tsl_fault_class cls) {
    if (!p || (unsigned)cls >= TSL_FAULT_CLASS_COUNT) return 0;
    return atomic_load(&((fault_plan *)p)->fired[cls]);
}

/* ---- parsing ---------------------------------------------------------------- */

static tsl_status parse_fail(tsl_error *err, const char *spec, const char *what, const char *at, size_t len) {
    return error_set(err, TSL_FAILED, "fault", NULL, -1, NULL, NULL, "TSL_FAULT '%s': %s at '%.*s'", spec, what,
                     (int)len, at);
}

static void trim(const char **s, const char **e) {
    while (*s < *e && isspace((unsigned char)**s)) (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

static tsl_status parse_cond(const char *spec, const char *s, const char *e, cond *c, rule *r, tsl_error *err) {
    trim(&s, &e);
    const char *o = s;
    while (o < e && (isalnum((unsigned char)*o) || *o == '_')) o++;
    if (o == e) return parse_fail(err, spec, "condition needs an operator (= > < %)", s, (size_t)(e - s));
    size_t klen = (size_t)(o - s);
    int key = -1;
    for (int k = 0; k < (int)(sizeof KEY_NAMES / sizeof KEY_NAMES[0]); k++)
        if (strlen(KEY_NAMES[k]) == klen && strncasecmp(KEY_NAMES[k], s, klen) == 0) key = k;
    if (key < 0)
        return parse_fail(err, spec, "unknown key (compute node tensor op name bytes times copy)", s, (size_t)(e - s));
    char op = *o;
    if (op != '=' && op != '>' && op != '<' && op != '%')
        return parse_fail(err, spec, "unknown operator (= > < %)", o, (size_t)(e - o));
    const char *v = o + 1, *ve = e;
    trim(&v, &ve);
    if (v == ve) return parse_fail(err, spec, "missing value", s, (size_t)(e - s));
    memset(c, 0, sizeof *c);
    c->key = key;
    c->op = op;
    if (key == KEY_TENSOR || key == KEY_OP || key == KEY_NAME) {
        if (op != '=') return parse_fail(err, spec, "names compare with '=' only", s, (size_t)(e - s));
        size_t n = (size_t)(ve - v);
        if (n >= MAX_STR) return parse_fail(err, spec, "name too long", v, n);
        if (v[n - 1] == '*') {
            c->prefix = true;
            n--;
        }
        memcpy(c->str, v, n);
        c->str[n] = 0;
    } else {
        char buf[64];
        size_t n = (size_t)(ve - v);
        if (n >= sizeof buf) return parse_fail(err, spec, "number too long", v, n);
        memcpy(buf, v, n);
        buf[n] = 0;
        char *end;
        errno = 0;
        double d = strtod(buf, &end);
        if (*end || errno || !isfinite(d) || d < 0) return parse_fail(err, spec, "bad number", v, n);
        if (op == '%' && d < 1) return parse_fail(err, spec, "'%' needs a count >= 1", v, n);
        c->num = d;
        if (key == KEY_TIMES) {
            if (op != '=') return parse_fail(err, spec, "times takes '='", s, (size_t)(e - s));
            r->times = (int64_t)d;
            return TSL_SUCCESS;
        }
    }
    if (r->n_conds >= MAX_CONDS) return parse_fail(err, spec, "too many conditions", s, (size_t)(e - s));
    r->conds[r->n_conds++] = *c;
    return TSL_SUCCESS;
}

static tsl_status parse_rule(const char *spec, const char *s, const char *e, rule *r, tsl_error *err) {
    trim(&s, &e);
    memset(r, 0, sizeof *r);
    r->times = -1;
    const char *at = memchr(s, '@', (size_t)(e - s));
    const char *ce = at ? at : e;
    const char *cs = s;
    trim(&cs, &ce);
    int cls = -1;
    for (int i = 0; i < TSL_FAULT_CLASS_COUNT; i++)
        if (strlen(CLASS_NAMES[i]) == (size_t)(ce - cs) && strncasecmp(CLASS_NAMES[i], cs, (size_t)(ce - cs)) == 0)
            cls = i;
    if (cls < 0)
        return parse_fail(err, spec, "unknown fault class (retry lost nobuf kernel alloc abort copylost)", s,
                          (size_t)(e - s));
    r->cls = (tsl_fault_class)cls;
    if (!at) return TSL_SUCCESS;
    const char *p = at + 1;
    if (p >= e) return parse_fail(err, spec, "'@' needs a condition", s, (size_t)(e - s));
    while (p < e) {
        const char *q = memchr(p, ',', (size_t)(e - p));
        if (!q) q = e;
        cond c;
        tsl_status st = parse_cond(spec, p, q, &c, r, err);
        if (st != TSL_SUCCESS) return st;
        p = q + 1;
    }
    return TSL_SUCCESS;
}

tsl_status fault_plan_add(fault_plan *p, const char *spec, tsl_error *err) {
    if (!p || !spec) return error_set(err, TSL_FAILED, "fault", NULL, -1, NULL, NULL, "no plan or no spec");
    /* parse everything first: a bad spec adds nothing */
    int n = 0, cap = 4;
    rule *tmp = malloc(sizeof(rule) * (size_t)cap);
    if (!tmp) return error_set(err, TSL_ALLOC_FAILED, "fault", NULL, -1, NULL, NULL, "out of memory");
    const char *s = spec, *end = spec + strlen(spec);
    while (s < end) {
        const char *q = memchr(s, ';', (size_t)(end - s));
        if (!q) q = end;
        const char *a = s, *b = q;
        trim(&a, &b);
        if (a < b) {
            if (n == cap) {
                rule *t2 = realloc(tmp, sizeof(rule) * (size_t)(cap *= 2));
                if (!t2) {
                    free(tmp);
                    return error_set(err, TSL_ALLOC_FAILED, "fault", NULL, -1, NULL, NULL, "out of memory");
                }
                tmp = t2;
            }
            tsl_status st = parse_rule(spec, a, b, &tmp[n], err);
            if (st != TSL_SUCCESS) {
                free(tmp);
                return st;
            }
            n++;
        }
        s = q + 1;
    }
    pthread_mutex_lock(&p->mu);
    int have = atomic_load(&p->n_rules);
    if (have + n > p->cap) {
        int nc = (have + n) * 2;
        rule *nr = realloc(p->rules, sizeof(rule) * (size_t)nc);
        if (!nr) {
            pthread_mutex_unlock(&p->mu);
            free(tmp);
            return error_set(err, TSL_ALLOC_FAILED, "fault", NULL, -1, NULL, NULL, "out of memory");
        }
        p->rules = nr;
        p->cap = nc;
    }
    if (n) memcpy(p->rules + have, tmp, sizeof(rule) * (size_t)n);
    atomic_store(&p->n_rules, have + n);
    pthread_mutex_unlock(&p->mu);
    free(tmp);
    return TSL_SUCCESS;
}

/* ---- matching ---------------------------------------------------------------- */

static bool match_num(const cond *c, double v) {
    switch (c->op) {
    case '=': return v == c->num;
    case '>': return v > c->num;
    case '<': return v < c->num;
    case '%': return v >= 1 && fmod(v, c->num) == 0;
    }
    return false;
}

static bool match_str(const cond *c, const char *v) {
    if (!v) return false;
    return c->prefix ? strncmp(v, c->str, strlen(c->str)) == 0 : strcmp(v, c->str) == 0;
}

static bool match(const rule *r, const fault_site *s) {
    for (int i = 0; i < r->n_conds; i++) {
        const cond *c = &r->conds[i];
        bool ok = false;
        switch (c->key) {
        case KEY_COMPUTE: ok = s->compute > 0 && match_num(c, (double)s->compute); break;
        case KEY_NODE: ok = s->node >= 0 && match_num(c, (double)s->node); break;
        case KEY_BYTES: ok = s->bytes > 0 && match_num(c, (double)s->bytes); break;
        case KEY_COPY: ok = s->copy > 0 && match_num(c, (double)s->copy); break;
        case KEY_TENSOR: ok = match_str(c, s->tensor ? s->tensor->name : s->tensor_name); break;
        case KEY_OP: ok = s->tensor && match_str(c, tsl_op_name(s->tensor->op)); break;
        case KEY_NAME: ok = match_str(c, s->kernel); break;
        }
        if (!ok) return false;
    }
    return true;
}

bool fault_plan_fire(fault_plan *p, tsl_fault_class cls, const fault_site *site) {
    if (!p || atomic_load_explicit(&p->n_rules, memory_order_relaxed) == 0) return false;
    bool fire = false;
    pthread_mutex_lock(&p->mu);
    int n = atomic_load(&p->n_rules);
    for (int i = 0; i < n && !fire; i++) {
        rule *r = &p->rules[i];
        if (r->cls != cls || (r->times >= 0 && r->fired >= r->times)) continue;
        if (match(r, site)) {
            r->fired++;
            fire = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (fire) atomic_fetch_add(&p->fired[cls], 1);
    return fire;
}
