// Linked into the TSan tree's test binaries only (see sanitize_tree.sh).
//
// Debian's Abseil is not built with TSan, so TSan cannot see that
// absl::Mutex orders memory: every access guarded by one would be reported
// as a race. This file interposes the Mutex entry points the project uses:
// each forwards to the library's function (found with dlsym(RTLD_NEXT)) and
// tells TSan about the ordering with __tsan_acquire/__tsan_release on the
// mutex's address. Waits (Await*) release before and acquire after, as the
// real ones unlock while they wait. Races in project code stay visible; the
// only loss is that reader-reader ordering is over-approximated.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"

#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "expects Abseil built with an inline namespace (as Debian's is)"
#endif

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

// Itanium mangling of absl::<inline ns>::Mutex::<rest>.
#define METALSERVE_STR2(x) #x
#define METALSERVE_STR(x) METALSERVE_STR2(x)
std::string Mangled(const char* rest) {
  const std::string ns = METALSERVE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(ns.size()) + ns + "5Mutex" + rest;
}

template <typename Fn>
Fn Real(const char* rest) {
  void* f = dlsym(RTLD_NEXT, Mangled(rest).c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", Mangled(rest).c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
