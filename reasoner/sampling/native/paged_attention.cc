// Paged attention for XLA:CPU as one fused FFI call (reasoner/sampling/native/__init__.py builds and registers it).
//
// The pure-JAX path (paged_device._paged_attention) gathers every slot's blocks into a contiguous copy, then runs
// two batched dots of tiny [G, Dh] x [Dh, L] matrices with a masked softmax between them; on CPU that is ~22% of a
// batch-16 decode step in gathers and ~14% in the dots, far below the machine's bandwidth. Here each (slot, kv
// head) pair reads its keys and values in place through the block table, once each, computes the G query heads'
// scores, softmax and weighted values, and writes its [C, G, Dh] output: no copies, no masked positions visited.
//
// Shapes (row-major):
//   q        [A, C, KV, G, Dh] f32   C queries per slot (1 when decoding), kv head, query heads of the group
//   k, v     [KV, NB, bs, Dh]  f32   the layer's block pools (paged_cache layout)
//   table    [A, J]            s32   a slot's blocks: position p lives in block table[p / bs] at offset p % bs
//   pos      [A, C]            s32   each query's position; it sees the positions t with lo <= t <= pos, where
//                                    lo = pos - window + 1 with a sliding window (window > 0), else 0, and t is
//                                    also below J * bs (the columns the table holds)
//   out      [A, C, KV, G, Dh] f32
// Attributes: scale (f32, multiplies the scores), window (s64, 0: none).
// A query that sees no position (only a finished row past its capacity with a window) gets zeros.
//
// Per (slot, kv head) pair, with the head size a multiple of the vector width (up to 8 vectors): the scores of a
// vector's width of positions at a time, each position's products summed lane-wise and the lanes of all of them
// summed by one transposing tree (SumLanes) instead of a horizontal sum per dot; the softmax with a vector exp
// (within 1 ulp of std::exp); the weighted values of up to 6 heads at a time in registers. Rows are prefetched
// kAhead positions ahead through the block table. Other head sizes take the scalar loops. At SmolLM2's shapes
// (16 slots, 3 kv heads of 3 query heads, Dh 64, 192 positions, 30 layers) that is 6.7 ms against 12.6 ms for a
// dot and an axpy a position and head (this kernel's first version), on 2 cores of an AVX-512 Xeon; reading the
// 142 MB of keys and values takes ~5.7 ms.
//
// The softmax is max, exp and sum in f32 over the visible positions; summation order differs from XLA's, so results
// agree within float32 rounding (tests/sampling/test_native_attention.py checks the bounds).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "pool_work.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kAccumulators = 24;  // of the 32 vector registers
#else
constexpr int kLanes = 8;  // AVX2 and others: 16 registers
constexpr int kAccumulators = 12;
#endif
constexpr int kMaxVecs = 8;   // head sizes of up to 8 vectors (128 under AVX-512) take the vector path
constexpr int kMaxGroup = 6;  // query heads that accumulate values together (more go in several passes)
constexpr int64_t kAhead = 32;  // key and value rows prefetched ahead: blocks are scattered, so the hardware
                                // prefetcher stops at every block's end
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Lanes __attribute__((vector_size(kLanes * sizeof(int32_t))));  // Exp's exponent bits

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}

struct Problem {
  const float* q;
  const float* k;
  const float* v;
  const int32_t* table;
  const int32_t* pos;
  float* out;
  int64_t A, C, KV, G, Dh, NB, bs, J;
  float scale;
  int64_t window;
};

// Row t of slot a's keys or values for kv head h, through the block table.
struct Rows {
  const float* pool;  // [KV, NB, bs, Dh]
  const int32_t* table;
  int64_t bs, Dh, offset;  // offset: h * NB
  const float* operator()(int64_t t) const { return pool + ((offset + table[t / bs]) * bs + t % bs) * Dh; }
  void Prefetch(int64_t t) const {
    const float* row = (*this)(t);
    for (int64_t d = 0; d < Dh; d += 64 / sizeof(float)) __builtin_prefetch(row + d, 0, 1);
  }
};

// Lane i of the fold of a and b below: the first half of the lanes comes from a (its groups of W lanes), the second
// from b (index kLanes + ...); within a half, each group's first W / 2 lanes, group after group.
constexpr int FoldLane(int W, int i) {
  return (i / (kLanes / 2)) * kLanes + ((i % (kLanes / 2)) / (W / 2)) * W + (i % (kLanes / 2)) % (W / 2);
}

// The halves of a's and b's lane groups (W lanes each) added: groups of W / 2 lanes, a's first, then b's.
template <int W, int... I>
inline Vec Fold(Vec a, Vec b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, FoldLane(W, I)...) + __builtin_shufflevector(a, b, (FoldLane(W, I) + W / 2)...);
}

// v[0][j] = the sum of v[j]'s lanes, for the W = kLanes vectors v (a transposing tree: W - 1 folds instead of a
// horizontal sum per vector).
template <int W>
inline void SumLanes(Vec* v) {
  for (int i = 0; i < W / 2; ++i) v[i] = Fold<W>(v[2 * i], v[2 * i + 1], std::make_integer_sequence<int, kLanes>{});
  if constexpr (W > 2) SumLanes<W / 2>(v);
}

// e^x lane by lane, within 1 ulp of std::exp on [-87, 0] (the softmax's exponents; 0 below -87, where e^x is
// under 2^-125): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by Cephes' degree-7 polynomial, 2^n in the exponent bits.
inline Vec Exp(Vec x) {
  const Vec floor = Vec{} - 87.0f;
  const Vec shifter = Vec{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const Vec clamped = x < floor ? floor : x;
  const Vec t = clamped * 1.44269504088896341f + shifter;
  const Vec n = t - shifter;
  const Vec r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 in two parts
  Vec poly = 1.9875691500e-4f * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * (r * r) + r + 1.0f;
  const Vec e = poly * (Vec)(((Lanes)t - (Lanes)shifter + 127) << 23);
  return x < floor ? Vec{} : e;
}

// s <- e^(s - max s) over L scores; returns their sum. Lanes past L are filled with -inf, whose e^x is 0.
float Softmax(float* s, int64_t L) {
  Vec top = Vec{} - INFINITY;
  for (int64_t i = 0; i < L; i += kLanes) {
    Vec chunk = Vec{} - INFINITY;
    std::memcpy(&chunk, s + i, static_cast<size_t>(std::min<int64_t>(kLanes, L - i)) * sizeof(float));
    top = chunk > top ? chunk : top;
  }
  float m = top[0];
  for (int j = 1; j < kLanes; ++j) m = std::max(m, top[j]);
  Vec sum = {};
  for (int64_t i = 0; i < L; i += kLanes) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kLanes, L - i));
    Vec chunk = Vec{} - INFINITY;
    std::memcpy(&chunk, s + i, n * sizeof(float));
    chunk = Exp(chunk - m);
    sum += chunk;
    std::memcpy(s + i, &chunk, n * sizeof(float));
  }
  float total = 0.0f;
  for (int j = 0; j < kLanes; ++j) total += sum[j];
  return total;
}

// scores[g * L + t - lo] = scale * q_g . key_t for t in [lo, hi), kLanes positions at a time.
template <int NV>
void Scores(const float* q, int64_t G, const Rows& keys, int64_t lo, int64_t hi, float scale, float* scores) {
  const int64_t L = hi - lo;
  const float* row[kLanes];
  for (int64_t t0 = lo; t0 < hi; t0 += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, hi - t0));
    for (int j = 0; j < n; ++j) {
      row[j] = keys(t0 + j);
      if (t0 + j + kAhead < hi) keys.Prefetch(t0 + j + kAhead);
    }
    for (int64_t g = 0; g < G; ++g) {
      Vec qg[NV];
      for (int v = 0; v < NV; ++v) qg[v] = Load(q + g * NV * kLanes + v * kLanes);
      Vec part[kLanes];
      for (int j = 0; j < kLanes; ++j) {
        Vec acc = {};
        if (j < n)
          for (int v = 0; v < NV; ++v) acc += qg[v] * Load(row[j] + v * kLanes);
        part[j] = acc;
      }
      SumLanes<kLanes>(part);
      float sums[kLanes];
      std::memcpy(sums, &part[0], sizeof(sums));
      for (int j = 0; j < n; ++j) scores[g * L + (t0 - lo) + j] = sums[j] * scale;
    }
  }
}

// out[r] += sum over t of weights[r * L + t - lo] * value_t for R heads, their accumulators in registers.
template <int NV, int R>
void WeightedValues(const float* weights, int64_t L, const Rows& values, int64_t lo, int64_t hi, bool prefetch,
                    float* out) {
  Vec acc[R][NV] = {};
  for (int64_t t = lo; t < hi; ++t) {
    if (prefetch && t + kAhead < hi) values.Prefetch(t + kAhead);
    const float* row = values(t);
    for (int v = 0; v < NV; ++v) {
      const Vec value = Load(row + v * kLanes);
      for (int r = 0; r < R; ++r) acc[r][v] += weights[r * L + (t - lo)] * value;
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(out + r * NV * kLanes, acc[r], sizeof(acc[r]));
}

using ScoresFn = void (*)(const float*, int64_t, const Rows&, int64_t, int64_t, float, float*);
using ValuesFn = void (*)(const float*, int64_t, const Rows&, int64_t, int64_t, bool, float*);

template <int NV, int... R>
constexpr std::array<ValuesFn, sizeof...(R)> ValuesRow(std::integer_sequence<int, R...>) {
  return {&WeightedValues<NV, R + 1>...};
}
template <int... NV>
constexpr std::array<ScoresFn, sizeof...(NV)> MakeScores(std::integer_sequence<int, NV...>) {
  return {&Scores<NV + 1>...};
}
template <int... NV>
constexpr std::array<std::array<ValuesFn, kMaxGroup>, sizeof...(NV)> MakeValues(std::integer_sequence<int, NV...>) {
  return {ValuesRow<NV + 1>(std::make_integer_sequence<int, kMaxGroup>{})...};
}
const auto kScores = MakeScores(std::make_integer_sequence<int, kMaxVecs>{});  // kScores[NV - 1]
const auto kValues = MakeValues(std::make_integer_sequence<int, kMaxVecs>{});  // kValues[NV - 1][R - 1]

// Head sizes the vector path does not take (not a multiple of kLanes, or over kMaxVecs vectors): one dot and one
// axpy a position and head.
void ScoresScalar(const float* q, int64_t G, int64_t Dh, const Rows& keys, int64_t lo, int64_t hi, float scale,
                  float* scores) {
  for (int64_t t = lo; t < hi; ++t) {
    const float* key = keys(t);
    for (int64_t g = 0; g < G; ++g) {
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < Dh; ++d) dot += q[g * Dh + d] * key[d];
      scores[g * (hi - lo) + (t - lo)] = dot * scale;
    }
  }
}

void ValuesScalar(const float* weights, int64_t G, int64_t Dh, const Rows& values, int64_t lo, int64_t hi,
                  float* out) {
  for (int64_t t = lo; t < hi; ++t) {
    const float* value = values(t);
    for (int64_t g = 0; g < G; ++g) {
      const float w = weights[g * (hi - lo) + (t - lo)];
#pragma omp simd
      for (int64_t d = 0; d < Dh; ++d) out[g * Dh + d] += w * value[d];
    }
  }
}

// One (slot a, kv head h) pair: all C queries and G heads of the group.
void Attend(const Problem& p, int64_t a, int64_t h, std::vector<float>& scores) {
  const int64_t G = p.G, Dh = p.Dh;
  const int64_t capacity = p.J * p.bs;
  const Rows keys{p.k, p.table + a * p.J, p.bs, Dh, h * p.NB};
  const Rows values{p.v, p.table + a * p.J, p.bs, Dh, h * p.NB};
  const int64_t NV = Dh / kLanes;
  const bool vector = Dh % kLanes == 0 && NV >= 1 && NV <= kMaxVecs;
  for (int64_t c = 0; c < p.C; ++c) {
    const int64_t at = p.pos[a * p.C + c];
    const int64_t hi = std::min<int64_t>(at + 1, capacity);  // one past the last visible position
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, at - p.window + 1) : 0;
    const float* q = p.q + (((a * p.C + c) * p.KV + h) * G) * Dh;  // [G, Dh]
    float* out = p.out + (((a * p.C + c) * p.KV + h) * G) * Dh;     // [G, Dh]
    std::fill(out, out + G * Dh, 0.0f);
    if (hi <= lo) continue;
    const int64_t L = hi - lo;
    scores.resize(static_cast<size_t>(G * L));
    // Scores: each key row is read from memory once for the G heads of the group.
    if (vector)
      kScores[NV - 1](q, G, keys, lo, hi, p.scale, scores.data());
    else
      ScoresScalar(q, G, Dh, keys, lo, hi, p.scale, scores.data());
    // Softmax per head, normalised at the end (one division per output instead of one per position).
    float denom[64];  // G <= 64 is checked by the handler
    for (int64_t g = 0; g < G; ++g) denom[g] = Softmax(scores.data() + g * L, L);
    // Weighted values: up to kMaxGroup heads a pass (as many as fit in registers), the first pass from memory.
    if (vector) {
      const int64_t group = std::max<int64_t>(1, std::min<int64_t>(kMaxGroup, kAccumulators / NV));
      for (int64_t g0 = 0; g0 < G; g0 += group) {
        const int64_t R = std::min(group, G - g0);
        kValues[NV - 1][R - 1](scores.data() + g0 * L, L, values, lo, hi, g0 == 0, out + g0 * Dh);
      }
    } else {
      ValuesScalar(scores.data(), G, Dh, values, lo, hi, out);
    }
    for (int64_t g = 0; g < G; ++g) {
      const float inv = 1.0f / denom[g];
      for (int64_t d = 0; d < Dh; ++d) out[g * Dh + d] *= inv;
    }
  }
}

// One call's work: its (slot, kv head) pairs, shared by the calling thread and the pool's tasks (pool_work.h).
struct Shared {
  Problem problem;
  reasoner_native::WorkQueue queue;
};

void Drain(Shared& s) {
  thread_local std::vector<float> scores;
  s.queue.Drain([&](int64_t i) { Attend(s.problem, i / s.problem.KV, i % s.problem.KV, scores); });
}

ffi::Error PagedAttentionImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                              ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> table, ffi::Buffer<ffi::S32> pos,
                              ffi::ResultBuffer<ffi::F32> out, float scale, int64_t window) {
  const auto qd = q.dimensions();
  const auto kd = k.dimensions();
  const auto td = table.dimensions();
  if (qd.size() != 5 || kd.size() != 4 || td.size() != 2 || pos.dimensions().size() != 2)
    return ffi::Error::InvalidArgument("paged_attention: expected q [A,C,KV,G,Dh], k/v [KV,NB,bs,Dh], table [A,J], pos [A,C]");
  const auto vd = v.dimensions();
  const bool same_pools = vd.size() == 4 && std::equal(kd.begin(), kd.end(), vd.begin());
  const auto pd = pos.dimensions();
  if (kd[0] != qd[2] || kd[3] != qd[4] || td[0] != qd[0] || pd[0] != qd[0] || pd[1] != qd[1] || !same_pools ||
      qd[3] > 64)
    return ffi::Error::InvalidArgument("paged_attention: mismatched shapes (or more than 64 query heads per kv head)");
  auto shared = std::make_shared<Shared>();
  shared->problem = Problem{q.typed_data(), k.typed_data(), v.typed_data(), table.typed_data(), pos.typed_data(),
                            out->typed_data(), qd[0], qd[1], qd[2], qd[3], qd[4], kd[1], kd[2], td[1], scale, window};
  shared->queue.total = qd[0] * qd[2];
  reasoner_native::RunOnPool(pool, shared, Drain);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ReasonerPagedAttention, PagedAttentionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale")
                                  .Attr<int64_t>("window"));
