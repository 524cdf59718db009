// StagingPool without LibTorch: which buffer a batch gets, what is kept, and
// that a buffer still shared (a model that kept its input) is never lent
// again. The allocation is a counting fake over new[].
#include "server/runtime/staging_pool.h"

#include <atomic>
#include <cstring>
#include <new>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metalserve {
namespace {

struct Allocations {
  int count = 0;
  std::vector<int64_t> sizes;
  StagingPool::AllocateFn Fn() {
    return [this](int64_t bytes) {
      ++count;
      sizes.push_back(bytes);
      return StagingPool::Block(new char[bytes], [](void* p) { delete[] static_cast<char*>(p); });
    };
  }
};

TEST(StagingPoolTest, ABufferGivenBackIsLentAgainInsteadOfAllocated) {
  Allocations a;
  StagingPool pool(2, a.Fn());
  StagingPool::Lease first = pool.Take(1000);
  EXPECT_FALSE(first.reused);
  EXPECT_EQ(first.capacity, 1000);
  void* const where = first.data();
  std::memset(first.data(), 7, 1000);
  pool.Give(std::move(first));
  EXPECT_EQ(pool.kept_bytes(), 1000);

  StagingPool::Lease second = pool.Take(600);  // smaller: the kept one holds it
  EXPECT_TRUE(second.reused);
  EXPECT_EQ(second.data(), where);
  EXPECT_EQ(second.capacity, 1000);
  EXPECT_EQ(second.data()[999], 7);  // contents are left as they were
  EXPECT_EQ(pool.kept_bytes(), 0);   // lent, not kept
  EXPECT_EQ(a.count, 1);

  StagingPool::Lease bigger = pool.Take(2000);  // nothing kept holds it
  EXPECT_FALSE(bigger.reused);
  EXPECT_EQ(a.count, 2);
  EXPECT_EQ(a.sizes, (std::vector<int64_t>{1000, 2000}));
  pool.Give(std::move(second));
  pool.Give(std::move(bigger));
  EXPECT_EQ(pool.kept_bytes(), 3000);
}

TEST(StagingPoolTest, TakeLendsTheSmallestKeptBufferThatHoldsTheBatch) {
  Allocations a;
  StagingPool pool(3, a.Fn());
  StagingPool::Lease l100 = pool.Take(100), l500 = pool.Take(500), l300 = pool.Take(300);
  void* const at300 = l300.data();
  void* const at500 = l500.data();
  pool.Give(std::move(l100));
  pool.Give(std::move(l500));
  pool.Give(std::move(l300));
  StagingPool::Lease got = pool.Take(250);
  EXPECT_EQ(got.data(), at300);
  StagingPool::Lease next = pool.Take(250);
  EXPECT_EQ(next.data(), at500);
  EXPECT_EQ(a.count, 3);
}

TEST(StagingPoolTest, AtMostKeepBuffersAreKeptTheLargestWinning) {
  Allocations a;
  StagingPool pool(2, a.Fn());
  StagingPool::Lease l1 = pool.Take(100), l2 = pool.Take(200), l3 = pool.Take(300);
  pool.Give(std::move(l1));
  pool.Give(std::move(l2));
  EXPECT_EQ(pool.kept_bytes(), 300);
  pool.Give(std::move(l3));  // full: replaces the smallest (100)
  EXPECT_EQ(pool.kept_bytes(), 500);
  StagingPool::Lease small = pool.Take(50);
  pool.Give(StagingPool::Lease{small.block, small.capacity, false});  // still shared
  small = {};
  StagingPool::Lease l4 = pool.Take(10);  // 300 left kept; takes it
  EXPECT_EQ(l4.capacity, 300);
  StagingPool::Lease l5 = pool.Take(10);  // nothing kept: allocates
  EXPECT_FALSE(l5.reused);
  EXPECT_EQ(l5.capacity, 10);
  pool.Give(std::move(l4));
  pool.Give(std::move(l5));
  StagingPool::Lease tiny = pool.Take(1);
  EXPECT_EQ(tiny.capacity, 10);  // the smallest of {300, 10}
  pool.Give(std::move(tiny));
  StagingPool::Lease l6 = pool.Take(5);
  pool.Give(StagingPool::Lease{});  // an empty lease is ignored
  pool.Give(std::move(l6));
  EXPECT_EQ(pool.kept_bytes(), 310);
  // A smaller one given back to a full pool is dropped.
  StagingPool::Lease extra = pool.Take(400);
  StagingPool::Lease other = pool.Take(300);
  StagingPool::Lease third = pool.Take(10);
  pool.Give(std::move(extra));
  pool.Give(std::move(other));
  pool.Give(std::move(third));
  EXPECT_EQ(pool.kept_bytes(), 700);
}

TEST(StagingPoolTest, ABufferStillSharedIsDroppedNotLentAgain) {
  Allocations a;
  StagingPool pool(2, a.Fn());
  StagingPool::Lease lease = pool.Take(64);
  StagingPool::Block kept_by_model = lease.block;  // e.g. a tensor the model held on to
  void* const where = lease.data();
  pool.Give(std::move(lease));
  EXPECT_EQ(pool.dropped_shared(), 1);
  EXPECT_EQ(pool.kept_bytes(), 0);
  StagingPool::Lease next = pool.Take(64);
  EXPECT_FALSE(next.reused);
  EXPECT_NE(next.data(), where);
  EXPECT_EQ(kept_by_model.use_count(), 1);  // alive for its holder alone
  EXPECT_EQ(a.count, 2);
}

TEST(StagingPoolTest, KeepZeroAllocatesEveryTime) {
  Allocations a;
  StagingPool pool(0, a.Fn());
  for (int i = 0; i < 3; ++i) {
    StagingPool::Lease l = pool.Take(32);
    EXPECT_FALSE(l.reused);
    pool.Give(std::move(l));
  }
  EXPECT_EQ(a.count, 3);
  EXPECT_EQ(pool.kept_bytes(), 0);
}

TEST(StagingPoolTest, AFailedAllocationLendsAndKeepsNothing) {
  StagingPool pool(2, [](int64_t) -> StagingPool::Block { throw std::bad_alloc(); });
  EXPECT_THROW(pool.Take(8), std::bad_alloc);
  EXPECT_EQ(pool.kept_bytes(), 0);
}

// Several executors at once: every lease is its holder's alone (no two
// holders ever share a buffer), and what is kept never exceeds `keep`.
TEST(StagingPoolTest, ConcurrentBorrowersNeverShareABuffer) {
  std::atomic<int> allocations{0};
  StagingPool pool(2, [&](int64_t bytes) {
    allocations.fetch_add(1);
    return StagingPool::Block(new char[bytes], [](void* p) { delete[] static_cast<char*>(p); });
  });
  std::atomic<bool> clash{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        StagingPool::Lease l = pool.Take(256);
        std::memset(l.data(), t, 256);
        std::this_thread::yield();
        for (int b = 0; b < 256; ++b) {
          if (l.data()[b] != static_cast<char>(t)) clash = true;
        }
        pool.Give(std::move(l));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(clash.load());
  EXPECT_LE(pool.kept_bytes(), 2 * 256);
  EXPECT_LT(allocations.load(), 4 * 500);  // buffers were lent again
}

}  // namespace
}  // namespace metalserve
