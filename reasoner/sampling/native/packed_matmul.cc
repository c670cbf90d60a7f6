// y = x . W for small row counts on XLA:CPU, with W packed in column panels (reasoner/sampling/native builds it).
//
// A decode step multiplies a few rows (one per slot) by every weight of the model once: at 16 rows the matmuls are
// neither bound by memory (each weight is read once) nor by arithmetic, and XLA's and PyTorch's GEMMs both spend
// ~45 ms on SmolLM2's 540 MB of f32 weights where reading them takes ~22 ms. Here the weight is stored as panels of
// 32 columns, each panel's K rows contiguous ([NP, K, 32]), so one thread streams a panel front to back while
// up to kRows rows of x stay in registers: every weight element is loaded once and feeds kRows FMAs.
//
// Shapes (row-major):
//   x  [M, K]       f32
//   w  [NP, K, 32]  f32   panel j holds columns 32j..32j+31 of the [K, N] weight (zero past N)
//   y  [M, N]       f32   N = y's last dimension, at most NP * 32
// Each dot product sums k = 0..K-1 in order, one FMA at a time, so results agree with XLA's within float32
// rounding (tests/sampling/test_packed_matmul.py checks the bound). Panels are shared between the calling thread
// and XLA's intra-op pool; every panel multiplies all M rows, tile by tile, while it is in cache.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "pool_work.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kPanel = 32;  // columns per panel (the packing layout; independent of the vector width)
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kRows = 12;  // 12 rows x 2 vectors = 24 accumulators of the 32 registers
#else
constexpr int kLanes = 8;  // AVX2 and others: 16 registers
constexpr int kRows = 3;   // 3 rows x 4 vectors = 12 accumulators
#endif
constexpr int kVecs = kPanel / kLanes;
// Panel rows prefetched ahead, into L2 (4 KB): at 12-16 rows 10-15% faster than 8 rows into L1; 16 and 128 slower.
constexpr int64_t kAhead = 32;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}

// rows x 32 outputs of one panel: xt is the tile of x transposed, [K, kRows] (column r = row r of the tile).
template <int R>
void Tile(const float* xt, const float* panel, int64_t K, float* y, int64_t ldy, int64_t cols) {
  Vec acc[R][kVecs] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = panel + k * kPanel;
    __builtin_prefetch(wk + kAhead * kPanel, 0, 1);
    __builtin_prefetch(wk + kAhead * kPanel + 16, 0, 1);
    Vec w[kVecs];
    for (int v = 0; v < kVecs; ++v) w[v] = Load(wk + v * kLanes);
    const float* xk = xt + k * kRows;
    for (int r = 0; r < R; ++r) {
      const float s = xk[r];
      for (int v = 0; v < kVecs; ++v) acc[r][v] += s * w[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    float out[kPanel];
    std::memcpy(out, acc[r], sizeof(out));
    std::memcpy(y + r * ldy, out, static_cast<size_t>(cols) * sizeof(float));
  }
}

using TileFn = void (*)(const float*, const float*, int64_t, float*, int64_t, int64_t);

template <int... R>
constexpr std::array<TileFn, sizeof...(R)> MakeTiles(std::integer_sequence<int, R...>) {
  return {&Tile<R + 1>...};
}
const auto kTiles = MakeTiles(std::make_integer_sequence<int, kRows>{});  // kTiles[r - 1] computes r rows

// One call's work: its column panels, shared by the calling thread and the pool's tasks (pool_work.h).
struct Shared {
  const float* x;
  const float* w;
  float* y;
  int64_t M, K, N;
  reasoner_native::WorkQueue queue;  // one item a panel
};

void Drain(Shared& s) {
  // This thread's copy of x, transposed tile by tile: [tiles, K, kRows] (zero rows pad the last tile); made when
  // the thread claims its first panel.
  thread_local std::vector<float> xt;
  const int64_t tiles = (s.M + kRows - 1) / kRows;
  bool ready = false;
  s.queue.Drain([&](int64_t j) {
    if (!ready) {
      xt.assign(static_cast<size_t>(tiles * s.K * kRows), 0.0f);
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t k = 0; k < s.K; ++k) xt[((m / kRows) * s.K + k) * kRows + m % kRows] = s.x[m * s.K + k];
      ready = true;
    }
    const float* panel = s.w + j * s.K * kPanel;
    const int64_t cols = std::min<int64_t>(kPanel, s.N - j * kPanel);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t rows = std::min<int64_t>(kRows, s.M - t * kRows);
      kTiles[rows - 1](xt.data() + t * s.K * kRows, panel, s.K, s.y + t * kRows * s.N + j * kPanel, s.N, cols);
    }
  });
}

ffi::Error PackedMatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                            ffi::ResultBuffer<ffi::F32> y) {
  const auto xd = x.dimensions();
  const auto wd = w.dimensions();
  const auto yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || yd.size() != 2 || wd[2] != kPanel)
    return ffi::Error::InvalidArgument("packed_matmul: expected x [M, K], w [NP, K, 32], y [M, N]");
  if (wd[1] != xd[1] || yd[0] != xd[0] || yd[1] > wd[0] * kPanel || yd[1] <= (wd[0] - 1) * kPanel)
    return ffi::Error::InvalidArgument("packed_matmul: mismatched shapes (K differs, or N is not in the last panel)");
  if (xd[0] == 0) return ffi::Error::Success();
  auto shared = std::make_shared<Shared>();
  shared->x = x.typed_data();
  shared->w = w.typed_data();
  shared->y = y->typed_data();
  shared->M = xd[0];
  shared->K = xd[1];
  shared->N = yd[1];
  shared->queue.total = wd[0];
  reasoner_native::RunOnPool(pool, shared, Drain);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ReasonerPackedMatmul, PackedMatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
