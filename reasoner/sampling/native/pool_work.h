// Work split between the thread XLA calls a custom call on and XLA's intra-op pool (both kernels of this folder).
//
// A call's items (attention's (slot, kv head) pairs, the matmul's column panels) are claimed one at a time from an
// atomic counter, so a thread that finishes early takes the next item and no thread waits on a fixed share. The
// work struct is co-owned (shared_ptr) by the call and every task it schedules: a task that starts after all items
// are done finds nothing to claim and touches only that struct, never the call's buffers.

#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace reasoner_native {

// Items 0 .. total - 1, claimed by the threads that drain it.
struct WorkQueue {
  int64_t total = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  // Calls item(i) for every item this thread claims, until none is left; counts them done at the end.
  template <class Item>
  void Drain(Item&& item) {
    int64_t finished = 0;
    for (int64_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      item(i);
      ++finished;
    }
    if (finished) done.fetch_add(finished, std::memory_order_acq_rel);
  }
};

// Runs drain(*work) on this thread and on up to num_threads - 1 tasks of the pool; returns once work->queue has
// every item done. `Work` holds a `WorkQueue queue`; `drain` drains it (with its thread's own scratch).
template <class Work, class DrainFn>
void RunOnPool(xla::ffi::ThreadPool& pool, const std::shared_ptr<Work>& work, DrainFn drain) {
  const int64_t total = work->queue.total;
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), total) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([work, drain] { drain(*work); });
  drain(*work);
  while (work->queue.done.load(std::memory_order_acquire) < total) std::this_thread::yield();
}

}  // namespace reasoner_native
