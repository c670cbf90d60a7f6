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
// The softmax is exact (max, exp, sum in f32 over the visible positions); summation order differs from XLA's, so
// results agree within float32 rounding (tests/sampling/test_native_attention.py checks the bound).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

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

// One (slot a, kv head h) pair: all C queries and G heads of the group.
void Attend(const Problem& p, int64_t a, int64_t h, std::vector<float>& scores) {
  const int64_t G = p.G, Dh = p.Dh, bs = p.bs;
  const int64_t capacity = p.J * bs;
  const int32_t* row_table = p.table + a * p.J;
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
    // Scores: each key row is read once for the G heads of the group.
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t block = row_table[t / bs];
      const float* key = p.k + ((h * p.NB + block) * bs + t % bs) * Dh;
      for (int64_t g = 0; g < G; ++g) {
        const float* qg = q + g * Dh;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < Dh; ++d) dot += qg[d] * key[d];
        scores[g * L + (t - lo)] = dot * p.scale;
      }
    }
    // Softmax per head, normalised at the end (one division per output instead of one per position).
    float denom[64];  // G <= 64 is checked by the handler
    for (int64_t g = 0; g < G; ++g) {
      float* s = scores.data() + g * L;
      const float m = *std::max_element(s, s + L);
      float sum = 0.0f;
      for (int64_t i = 0; i < L; ++i) {
        s[i] = std::exp(s[i] - m);
        sum += s[i];
      }
      denom[g] = sum;
    }
    // Weighted values: each value row is read once for the G heads.
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t block = row_table[t / bs];
      const float* value = p.v + ((h * p.NB + block) * bs + t % bs) * Dh;
      for (int64_t g = 0; g < G; ++g) {
        const float w = scores[g * L + (t - lo)];
        float* og = out + g * Dh;
#pragma omp simd
        for (int64_t d = 0; d < Dh; ++d) og[d] += w * value[d];
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const float inv = 1.0f / denom[g];
      for (int64_t d = 0; d < Dh; ++d) out[g * Dh + d] *= inv;
    }
  }
}

// Work shared by the calling thread and the pool's tasks. Tasks that start after every pair is done find nothing
// to do and touch only this struct, which they co-own, never the buffers.
struct Shared {
  Problem problem;
  int64_t total = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

void Drain(Shared& s) {
  thread_local std::vector<float> scores;
  int64_t finished = 0;
  for (int64_t i = s.next.fetch_add(1); i < s.total; i = s.next.fetch_add(1)) {
    Attend(s.problem, i / s.problem.KV, i % s.problem.KV, scores);
    ++finished;
  }
  if (finished) s.done.fetch_add(finished, std::memory_order_acq_rel);
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
  shared->total = qd[0] * qd[2];
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), shared->total) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([shared] { Drain(*shared); });
  Drain(*shared);
  while (shared->done.load(std::memory_order_acquire) < shared->total) std::this_thread::yield();
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
