/* The linear oscillator core on the DSP path (Armv7E-M / Armv8-M with the DSP extension): the unrolled heads'
 * update, query and stream step from tables of int16 pairs (the wide head's in Thumb-2 assembly under EDGEOSC_ASM:
 * the functions of edgeosc_linear_dsp.S, declared here beside the tables they read; their C twins otherwise), other
 * heads in one pass over the state, and the division by the denominator. The same integers as the reference loops of
 * edgeosc_attention.c (linear_update_portable, linear_query_portable), bit for bit.
 * Compiled inside edgeosc_attention.c (it includes this file), not alone. */
#include "edgeosc_attention_fast.h"

#if EDGEOSC_DSP
/* divided() over a row for a divider with 1 <= e <= 31 (den in [2^23, 2^53]), its constants in registers, in
 * 32-bit halves: round(x / 2^e), saturated to int32 where its top word is not the sign of its bottom one (a select,
 * no branch), times inv and rounded: the rounding 2^(shift - 1) is 2^31 at shift 32 (SMMULR), else its top word
 * alone, which SMMLA adds exactly; SSAT. */
static inline __attribute__((always_inline)) void divided_dsp_row(const Divider *dv, const int64_t *num, int n,
                                                                  int8_t *out, const int top_round) {
  const int32_t e = dv->e, inv = dv->inv, zp = dv->zp_out, sh = dv->shift - 32, rh = (int32_t)(dv->round >> 32);
  const uint32_t half = (uint32_t)dv->half; /* e <= 31 */
  int8_t *const end = out + n;
  for (; out != end; ++out, ++num) {
    const uint64_t t = (uint64_t)*num + half;
    const int32_t hi = (int32_t)(t >> 32), lo = (int32_t)(((uint32_t)t >> e) | ((uint32_t)hi << (32 - e)));
    const int32_t sat = (hi >> 31) ^ INT32_MAX, y = (hi >> e) != (lo >> 31) ? sat : lo;
    int32_t r;
    if (top_round)
      __asm__("smmla %0, %1, %2, %3" : "=r"(r) : "r"(y), "r"(inv), "r"(rh));
    else
      r = edgeosc_smmulr(y, inv);
    *out = (int8_t)__ssat((r >> sh) + zp, 8);
  }
}

/* A query's n outputs num[d] / den: divided_dsp_row where the divider takes it, else divided */
static inline __attribute__((always_inline)) void divided_row(const Divider *dv, const int64_t *num, int n,
                                                              int8_t *out) {
  int d;
  if (dv->any && dv->e >= 1 && dv->e <= 31 && dv->shift > 32)
    divided_dsp_row(dv, num, n, out, 1);
  else if (dv->any && dv->e >= 1 && dv->e <= 31)
    divided_dsp_row(dv, num, n, out, 0);
  else
    for (d = 0; d < n; ++d) out[d] = divided(dv, num[d]);
}

/* The DSP path: one pass over a head's state that adds keys ta and tb and, for a stream's step (`query`), reads
 * query q from each updated word as it goes by, so the step loads and stores each word once (a query alone takes
 * the portable loops: it gains nothing here). `query` is a constant at each call: always_inline specialises both.
 *
 * Coupling. With K' = [1, K] and Q' = [c1, Q], the features [1, K_j, K_i K_j (i <= j)] are K'_i K'_j (i <= j) in
 * the state's order, row by row. Word pair (i, j) takes both keys in one SMLAD each, (K'_a, K'_b)_j against
 * (K'_a r_a, K'_b r_b)_i (all int16), and feeds h by SMLAL with weight m_i Q'_j: m_0 = 2 (2 c1 Q_j), m_i = 4 past
 * the diagonal; the diagonal's weight is 2 Q_i^2, and c1^2 (past 32 bits) at (0, 0). A table holds per j the
 * words {(K'_a, K'_b)_j, Q'_j, x_j for r_0 and r_1, m_j} (ROW_WORDS), then a sentinel pair.
 *
 * Readout. After z: each column's rows take (u_a, u_b) against (V_a, V_b) in one SMLAD, the ones column (V = 1,
 * the denominator) first. Row 0's u = gate x 128 reaches 2^15, so it pairs u / 2 (u is even) and doubles the sum.
 * Rows past 0 need u in int16 (KeyTerms.fits). A table holds per row {(u_a, u_b), beta}, then a sentinel beta.
 * The tables sit on the stack, sized for heads up to DSP_MAX_D_HEAD (d_head and d_value) so that the firmware's
 * stack holds them; wider heads take the portable loops.
 *
 * EDGEOSC_ASM takes the value columns two at a time and the coupling's rows in Thumb-2 assembly
 * (edgeosc_linear_dsp.S): they keep 14 registers whatever the compiler and its options. */
#define ROW_WORDS 5
#define DSP_MAX_D_HEAD 16
#define COUPLING_SENTINEL 0x80008000 /* (K'_a, K'_b) = (-2^15, -2^15): no key's (|K| <= 255) */
#define READOUT_SENTINEL 0x80000000  /* no beta's (|beta| < 2^30 for p <= 8) */

/* Readout columns c0 and c1 (col1 == col for a single column: both loads precede both stores), rows 0.. */
static inline __attribute__((always_inline)) void readout_columns(int32_t *col, int32_t *col1, int32_t vv0,
                                                                 int32_t vv1, int stride, const int32_t *ub,
                                                                 int64_t *n0, int64_t *n1, const int query) {
  int32_t x0 = (int32_t)((uint32_t)*col + ((uint32_t)__smuad(vv0, ub[0]) << 1)); /* row 0: u / 2, doubled */
  int32_t x1 = (int32_t)((uint32_t)*col1 + ((uint32_t)__smuad(vv1, ub[0]) << 1));
  int64_t s0 = 0, s1 = 0;
  *col = x0, *col1 = x1;
  if (query) s0 += (int64_t)ub[1] * x0, s1 += (int64_t)ub[1] * x1;
  for (ub += 2; ub[1] != (int32_t)READOUT_SENTINEL; ub += 2) {
    col += stride, col1 += stride;
    x0 = __smlad(vv0, ub[0], *col), x1 = __smlad(vv1, ub[0], *col1);
    *col = x0, *col1 = x1;
    if (query) s0 += (int64_t)ub[1] * x0, s1 += (int64_t)ub[1] * x1;
  }
  *n0 = s0, *n1 = s1;
}

/* A coupling feature's two words (against r_0 and r_1): k x (x0, x1) added in one SMLAD each, then weight w times
 * the sums into h. */
static inline __attribute__((always_inline)) void coupling_words(int32_t *sc, int32_t k, int32_t x0, int32_t x1,
                                                                int32_t w, int64_t *h0, int64_t *h1,
                                                                const int query) {
  const int32_t s0 = __smlad(k, x0, sc[0]), s1 = __smlad(k, x1, sc[1]);
  sc[0] = s0, sc[1] = s1;
  if (query) *h0 += (int64_t)w * s0, *h1 += (int64_t)w * s1;
}

#if EDGEOSC_ASM
/* In edgeosc_linear_dsp.S. The coupling's rows after (0, 0) (row 0 from (0, 1), every other row from its diagonal):
 * words from sc, table t, h (int64[2]) in and out. */
void edgeosc_coupling_step_asm(int32_t *sc, const int32_t *t, int64_t *h);

/* The value columns two at a time: for each pair, its words from col (col and col + 1, then + stride_bytes a row),
 * (V_a, V_b) of both from vv, the numerators to num (int64, two a pair). Its field order is the assembly's. */
typedef struct {
  int32_t *col;
  const int32_t *ub, *vv;
  int64_t *num;
  int32_t stride_bytes, pairs;
} ReadoutPairs;

void edgeosc_readout_pairs_step_asm(ReadoutPairs *a);
#endif

static inline __attribute__((always_inline)) void linear_pass(const EdgeoscLinearParams *p, int32_t *state,
                                                             const KeyTerms *ta, const KeyTerms *tb, const int8_t *q,
                                                             int8_t *out, const int query) {
  const int n = p->d_head + 1, dv = p->d_value, nr = 2 * p->p + 1, stride = dv + 1;
  int32_t t[ROW_WORDS * (DSP_MAX_D_HEAD + 1) + 1]; /* the coupling's table */
  int32_t vv[DSP_MAX_D_HEAD + 1];                   /* the columns' (V_a, V_b), V = v - zp_v; (1, 1) */
  int32_t ub[2 * EDGEOSC_LINEAR_ROWS(EDGEOSC_LINEAR_MAX_P) + 2]; /* the readout's table */
  int32_t beta[EDGEOSC_LINEAR_ROWS(EDGEOSC_LINEAR_MAX_P)];
  int64_t h[2], num[DSP_MAX_D_HEAD], n0, n1;
  int32_t *const sr = state + 2 * EDGEOSC_LINEAR_COUPLING(p->d_head);
  int32_t i, m, d;
  Divider div;
  /* the coupling's table, (0, 0), then the rows */
  t[0] = 0x00010001, t[1] = query ? p->c1 : 0, t[4] = 2 * t[1];
  t[2] = edgeosc_pack_bottoms(ta->r0, tb->r0), t[3] = edgeosc_pack_bottoms(ta->r1, tb->r1);
  for (i = 1; i < n; ++i) {
    int32_t *const row = t + ROW_WORDS * i;
    const int32_t ka = ta->K[i - 1], kb = tb->K[i - 1];
    row[0] = edgeosc_pack_bottoms(ka, kb), row[1] = query ? q[i - 1] - p->zp_q : 0, row[4] = 4 * row[1];
    row[2] = edgeosc_pack_bottoms(ka * ta->r0, kb * tb->r0), row[3] = edgeosc_pack_bottoms(ka * ta->r1, kb * tb->r1);
  }
  t[ROW_WORDS * n] = (int32_t)COUPLING_SENTINEL;
  coupling_words(state, t[0], t[2], t[3], 0, &h[0], &h[1], 0);
  h[0] = (int64_t)p->c1 * p->c1 * state[0], h[1] = (int64_t)p->c1 * p->c1 * state[1];
#if EDGEOSC_ASM
  if (query)
    edgeosc_coupling_step_asm(state + 2, t, h);
  else
#endif
  {
    int32_t *sc = state + 2;
    for (i = 0; i < n; ++i) {
      const int32_t *row = t + ROW_WORDS * i, *kj = row + ROW_WORDS, *const end = t + ROW_WORDS * n;
      if (i) coupling_words(sc, row[0], row[2], row[3], 2 * row[1] * row[1], &h[0], &h[1], query), sc += 2;
      for (; kj < end; kj += ROW_WORDS, sc += 2)
        coupling_words(sc, kj[0], row[2], row[3], row[4] * kj[1], &h[0], &h[1], query);
    }
  }
  /* the readout's table, the ones column (the denominator), then the values two at a time */
  if (query) readout_weights(p, h[0], h[1], beta);
  ub[0] = edgeosc_pack_bottoms(ta->u[0] >> 1, tb->u[0] >> 1), ub[1] = query ? beta[0] : 0;
  for (m = 1; m < nr; ++m) ub[2 * m] = edgeosc_pack_bottoms(ta->u[m], tb->u[m]), ub[2 * m + 1] = query ? beta[m] : 0;
  ub[2 * nr] = 0, ub[2 * nr + 1] = (int32_t)READOUT_SENTINEL;
  for (d = 0; d < dv; ++d) vv[d] = edgeosc_pack_bottoms(ta->v[d] - p->zp_v, tb->v[d] - p->zp_v);
  vv[dv] = 0x00010001;
  readout_columns(sr + dv, sr + dv, vv[dv], vv[dv], stride, ub, &n0, &n1, query);
  if (query) divider(p, n0, &div);
#if EDGEOSC_ASM
  if (query && dv > 1) {
    ReadoutPairs a;
    a.col = sr, a.ub = ub, a.vv = vv, a.num = num, a.stride_bytes = 4 * stride, a.pairs = dv / 2;
    edgeosc_readout_pairs_step_asm(&a);
  } else
#endif
    for (d = 0; d + 1 < dv; d += 2)
      readout_columns(sr + d, sr + d + 1, vv[d], vv[d + 1], stride, ub, &num[d], &num[d + 1], query);
  if (dv & 1)
    readout_columns(sr + dv - 1, sr + dv - 1, vv[dv - 1], vv[dv - 1], stride, ub, &num[dv - 1], &n1, query);
  if (query) divided_row(&div, num, dv, out);
}

/* The unrolled heads on the DSP path: the wide head (d_head = d_value = 8) and the narrow one (4), both at
 * p = EDGEOSC_LINEAR_D8_P (NR rows); `dh` is a constant at every call (always_inline specialises each width).
 * A query alone: the portable query's sums, the coupling's features after (0, 0) each one weight (a table: 2 c1 Q_a,
 * then per row 2 Q_a^2 and 4 Q_a Q_b) times its two words, the readout's dh + 1 columns, the division by
 * divided_row. Under EDGEOSC_ASM the wide head runs both loops in Thumb-2 assembly (edgeosc_linear_dsp.S),
 * straight through: runs of loads (LDM, or LDR after LDR, one cycle a word after the first) then SMLAL, which gcc's
 * own scheduling spreads apart; the narrow head's loops, a third the size, stay in C. */
#define DH_MAX 8
#define NR EDGEOSC_LINEAR_ROWS(EDGEOSC_LINEAR_D8_P)
#define FEATURES(dh) (EDGEOSC_LINEAR_COUPLING(dh) - 1)

#if EDGEOSC_ASM
/* In edgeosc_linear_dsp.S, for the wide head. h (int64[2]) += sum_f w[f] (sc[2f], sc[2f + 1]) over the 44
 * features */
void edgeosc_coupling_d8_asm(const int32_t *sc, const int32_t *w, int64_t *h);
/* num[d] = sum_m beta[m] col_d[m] for the nine columns of the readout's NR rows (stride 9 words) */
void edgeosc_readout_d8_asm(const int32_t *sr, const int32_t *beta, int64_t *num);
#endif

/* The query's coupling weights w[FEATURES(dh)] (2 c1 Q_a, then per row 2 Q_a^2 and 4 Q_a Q_b) */
static inline __attribute__((always_inline)) void query_weights(const EdgeoscLinearParams *p, const int8_t *q,
                                                                int32_t *w, const int dh) {
  const int32_t c2 = 2 * p->c1, zq = p->zp_q; /* locals: the stores to w could alias p */
  int32_t Q2[DH_MAX], a, b;
#pragma GCC unroll 8
  for (a = 0; a < dh; ++a) Q2[a] = 2 * (q[a] - zq);
#pragma GCC unroll 8
  for (a = 0; a < dh; ++a) *w++ = c2 * Q2[a] >> 1;
#pragma GCC unroll 8
  for (a = 0; a < dh; ++a) {
    *w++ = Q2[a] * Q2[a] >> 1; /* a == b: weight 2, a < b: 4 (both orders) */
#pragma GCC unroll 8
    for (b = a + 1; b < dh; ++b) *w++ = Q2[a] * Q2[b];
  }
}

/* The query from h, its coupling sums past (0, 0): c1^2 times word pair (0, 0), then z, the readout, the division */
static inline __attribute__((always_inline)) void query_from_h(const EdgeoscLinearParams *p, const int32_t *state,
                                                               int64_t *h, int8_t *out, const int dh) {
  const int32_t *const sr = state + 2 * EDGEOSC_LINEAR_COUPLING(dh);
  int32_t beta[NR];
  int64_t num[DH_MAX + 1];
  Divider div;
  h[0] += (int64_t)p->c1 * p->c1 * state[0], h[1] += (int64_t)p->c1 * p->c1 * state[1];
  readout_weights_of(h[0], h[1], beta, EDGEOSC_LINEAR_D8_P);
#if EDGEOSC_ASM
  if (dh == 8)
    edgeosc_readout_d8_asm(sr, beta, num);
  else
#endif
  {
    int32_t a, b;
#pragma GCC unroll 9
    for (b = 0; b <= dh; ++b) { /* column b */
      const int32_t *col = sr + b;
      int64_t sum = 0;
#pragma GCC unroll 9
      for (a = 0; a < NR; ++a, col += dh + 1) sum += (int64_t)beta[a] * col[0];
      num[b] = sum;
    }
  }
  divider(p, num[dh], &div);
  divided_row(&div, num, dh, out);
}

static inline __attribute__((always_inline)) void unrolled_query(const EdgeoscLinearParams *p, const int32_t *state,
                                                                 const int8_t *q, int8_t *out, const int dh) {
  int32_t w[FEATURES(DH_MAX)];
  int64_t h[2] = {0, 0};
  query_weights(p, q, w, dh);
#if EDGEOSC_ASM
  if (dh == 8)
    edgeosc_coupling_d8_asm(state + 2, w, h);
  else
#endif
  {
    const int32_t *sc = state + 2;
    int32_t f;
#pragma GCC unroll 44
    for (f = 0; f < FEATURES(dh); ++f, sc += 2) h[0] += (int64_t)w[f] * sc[0], h[1] += (int64_t)w[f] * sc[1];
  }
  query_from_h(p, state, h, out, dh);
}

/* Two keys into the state on the DSP path for an unrolled head, linear_pass's sums (query 0) unrolled: each
 * coupling word one SMLAD of K'_j against K'_i r, each readout word one SMLAD of (V_a, V_b) against (u_a, u_b).
 * C packs the pairs into a table (UPDATE_WORDS: kp, x0, x1 per coupling row, vv per readout column, u per readout
 * row); the sums read it. */
#define UPDATE_KP 0
#define UPDATE_X0(dh) ((dh) + 1)
#define UPDATE_X1(dh) (2 * ((dh) + 1))
#define UPDATE_VV(dh) (3 * ((dh) + 1))
#define UPDATE_U(dh) (4 * ((dh) + 1))
#define UPDATE_WORDS(dh) (4 * ((dh) + 1) + NR)

#if EDGEOSC_ASM
/* In edgeosc_linear_dsp.S, for the wide head: the update's sums, every state word loaded, summed and stored once,
 * with the pairs each word takes held in registers (gcc spills them): the coupling's, then the readout's (sr: the
 * readout rows) */
void edgeosc_update_coupling_d8_asm(int32_t *state, const int32_t *t);
void edgeosc_update_readout_d8_asm(int32_t *sr, const int32_t *t);

/* A stream step's coupling: each word pair (i, j) takes both keys and, updated, feeds h (int64[2], from its features
 * past (0, 0)) with the query's weight, so each word is loaded and stored once for the update and the query together;
 * the weights from qv = [c1, 2 Q_0..2 Q_7], passed at qv + 1 */
void edgeosc_step_coupling_d8_asm(int32_t *state, const int32_t *t, const int32_t *qv, int64_t *h);
#endif

/* n (4 or 8) int8 values of keys a and b less the zero point (zp2 in both halves) as int16 pairs (x_a, x_b) */
static inline __attribute__((always_inline)) void value_pairs(const int8_t *a, const int8_t *b, int32_t zp2,
                                                              int32_t *out, const int n) {
  int w;
#pragma GCC unroll 2
  for (w = 0; w < n; w += 4) {
    const int32_t wa = edgeosc_read4(a + w), wb = edgeosc_read4(b + w);
    const int32_t ea = __sxtb16(wa), eb = __sxtb16(wb), oa = edgeosc_sxtb16_ror8(wa), ob = edgeosc_sxtb16_ror8(wb);
    out[w] = __ssub16(edgeosc_pack_bottoms(ea, eb), zp2);
    out[w + 1] = __ssub16(edgeosc_pack_bottoms(oa, ob), zp2);
    out[w + 2] = __ssub16(edgeosc_pack_tops(ea, eb), zp2);
    out[w + 3] = __ssub16(edgeosc_pack_tops(oa, ob), zp2);
  }
}

/* The update's table for keys a and b (b may be NULL: a key whose terms are all 0) straight from their bytes,
 * the terms of key_terms_of already in pairs. Returns 0 where a readout coefficient leaves int16 (the portable
 * loops take those keys). */
static inline __attribute__((always_inline)) int update_table(const EdgeoscLinearParams *p, const EdgeoscLinearKey *a,
                                                              const EdgeoscLinearKey *b, int32_t *t, const int dh) {
  int8_t none_k[DH_MAX], none_v[DH_MAX];
  const int8_t none_r[2] = {0, 0};
  EdgeoscLinearKey none;
  int32_t ua[NR], ub[NR], rr0, rr1, i, m;
  if (!b) { /* k and v at their zero points, no anchor, no gate */
    for (i = 0; i < dh; ++i) none_k[i] = (int8_t)p->zp_k, none_v[i] = (int8_t)p->zp_v;
    none.k = none_k, none.v = none_v, none.r = none_r, none.gate = 0, none.sign = 1;
    b = &none;
  }
  if (!readout_terms(a, ua, EDGEOSC_LINEAR_D8_P) || !readout_terms(b, ub, EDGEOSC_LINEAR_D8_P)) return 0;
  /* row 0: u = gate x 128 reaches 2^15, so it pairs u / 2 (u is even) and doubles the product */
  t[UPDATE_U(dh)] = edgeosc_pack_bottoms(ua[0] >> 1, ub[0] >> 1);
#pragma GCC unroll 8
  for (m = 1; m < NR; ++m) t[UPDATE_U(dh) + m] = edgeosc_pack_bottoms(ua[m], ub[m]);
  t[UPDATE_KP] = 0x00010001;
  value_pairs(a->k, b->k, edgeosc_pair(p->zp_k), t + UPDATE_KP + 1, dh);
  rr0 = edgeosc_pack16(a->sign * a->r[0], b->sign * b->r[0]);
  rr1 = edgeosc_pack16(a->sign * a->r[1], b->sign * b->r[1]);
  t[UPDATE_X0(dh)] = rr0, t[UPDATE_X1(dh)] = rr1;
#pragma GCC unroll 8
  for (i = 1; i <= dh; ++i) { /* K r in int16: |K| <= 255, |r| <= 128 */
    const int32_t kp = t[UPDATE_KP + i];
    t[UPDATE_X0(dh) + i] = edgeosc_pack_bottoms((int16_t)kp * (int16_t)rr0, (kp >> 16) * (rr0 >> 16));
    t[UPDATE_X1(dh) + i] = edgeosc_pack_bottoms((int16_t)kp * (int16_t)rr1, (kp >> 16) * (rr1 >> 16));
  }
  value_pairs(a->v, b->v, edgeosc_pair(p->zp_v), t + UPDATE_VV(dh), dh);
  t[UPDATE_VV(dh) + dh] = 0x00010001;
  return 1;
}

/* The table's sums into the state */
static inline __attribute__((always_inline)) void update_sums(int32_t *state, const int32_t *t, const int dh) {
  int32_t *sc = state, *sr = state + 2 * EDGEOSC_LINEAR_COUPLING(dh), i, j, m, d;
#if EDGEOSC_ASM
  if (dh == 8) {
    edgeosc_update_coupling_d8_asm(state, t);
    edgeosc_update_readout_d8_asm(sr, t);
    return;
  }
#endif
#pragma GCC unroll 9
  for (i = 0; i <= dh; ++i)
#pragma GCC unroll 9
    for (j = i; j <= dh; ++j, sc += 2) {
      const int32_t s0 = sc[0], s1 = sc[1];
      sc[0] = __smlad(t[UPDATE_KP + j], t[UPDATE_X0(dh) + i], s0);
      sc[1] = __smlad(t[UPDATE_KP + j], t[UPDATE_X1(dh) + i], s1);
    }
#pragma GCC unroll 9
  for (d = 0; d <= dh; ++d)
    sr[d] = (int32_t)((uint32_t)sr[d] + ((uint32_t)__smuad(t[UPDATE_VV(dh) + d], t[UPDATE_U(dh)]) << 1));
#pragma GCC unroll 8
  for (m = 1; m < NR; ++m) {
    int32_t *row = sr + m * (dh + 1);
#pragma GCC unroll 9
    for (d = 0; d <= dh; ++d) row[d] = __smlad(t[UPDATE_VV(dh) + d], t[UPDATE_U(dh) + m], row[d]);
  }
}

/* A stream's step on an unrolled head from its update table: the update then query q (out [dh]); in assembly, for the
 * wide head, the coupling's update and the query's sums in one pass */
static inline __attribute__((always_inline)) void unrolled_step(const EdgeoscLinearParams *p, int32_t *state,
                                                                const int32_t *t, const int8_t *q, int8_t *out,
                                                                const int dh) {
#if EDGEOSC_ASM
  if (dh == 8) {
    int32_t qv[DH_MAX + 1], a;
    int64_t h[2] = {0, 0};
    qv[0] = p->c1;
#pragma GCC unroll 8
    for (a = 0; a < dh; ++a) qv[a + 1] = 2 * (q[a] - p->zp_q);
    edgeosc_step_coupling_d8_asm(state, t, qv + 1, h);
    edgeosc_update_readout_d8_asm(state + 2 * EDGEOSC_LINEAR_COUPLING(dh), t);
    query_from_h(p, state, h, out, dh);
    return;
  }
#endif
  update_sums(state, t, dh);
  unrolled_query(p, state, q, out, dh);
}

/* The entry points. Keys a and b (b may be NULL) into an unrolled head's state straight from their bytes; 0: another
 * head, or keys whose readouts leave int16 (they take the portable loops) */
static inline int linear_update_unrolled_dsp(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                                             const EdgeoscLinearKey *b) {
  int32_t t[UPDATE_WORDS(DH_MAX)];
  if (wide_head(p) && update_table(p, a, b, t, 8))
    update_sums(state, t, 8);
  else if (narrow_head(p) && update_table(p, a, b, t, 4))
    update_sums(state, t, 4);
  else
    return 0;
  return 1;
}

/* A stream's step on an unrolled head: keys a and b (b may be NULL) in, then query q; 0 as
 * linear_update_unrolled_dsp */
static inline int linear_step_unrolled_dsp(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                                           const EdgeoscLinearKey *b, const int8_t *q, int8_t *out) {
  int32_t t[UPDATE_WORDS(DH_MAX)];
  if (wide_head(p) && update_table(p, a, b, t, 8))
    unrolled_step(p, state, t, q, out, 8);
  else if (narrow_head(p) && update_table(p, a, b, t, 4))
    unrolled_step(p, state, t, q, out, 4);
  else
    return 0;
  return 1;
}

/* A query alone on an unrolled head; 0: another head (the portable query: the pass gains it nothing) */
static inline int linear_query_dsp(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
  if (wide_head(p))
    unrolled_query(p, state, q, out, 8);
  else if (narrow_head(p))
    unrolled_query(p, state, q, out, 4);
  else
    return 0;
  return 1;
}
#undef DH_MAX
#undef NR
#undef FEATURES

/* Whether the DSP pass takes these keys (else the portable loops): readouts in int16, the head in its tables. */
static int dsp_pass(const EdgeoscLinearParams *p, const KeyTerms *ta, const KeyTerms *tb) {
  return ta->fits && tb->fits && p->d_head <= DSP_MAX_D_HEAD && p->d_value <= DSP_MAX_D_HEAD;
}

/* Key terms ta and tb into the state in one pass (linear_pass), for the heads linear_update_unrolled_dsp does not take
 * (the unrolled heads' keys that failed there fail here too); 0: the portable loops */
static inline int linear_update_dsp(const EdgeoscLinearParams *p, int32_t *state, const KeyTerms *ta,
                                    const KeyTerms *tb) {
  if (!dsp_pass(p, ta, tb)) return 0;
  linear_pass(p, state, ta, tb, 0, 0, 0);
  return 1;
}

/* A stream's step from key terms: the update and query q in one pass; 0: the portable loops */
static inline int linear_step_dsp(const EdgeoscLinearParams *p, int32_t *state, const KeyTerms *ta, const KeyTerms *tb,
                                  const int8_t *q, int8_t *out) {
  if (!dsp_pass(p, ta, tb)) return 0;
  linear_pass(p, state, ta, tb, q, out, 1);
  return 1;
}
#endif
