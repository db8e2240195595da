// The calling thread's resource usage so far: its CPU time, exact
// (clock_gettime(CLOCK_THREAD_CPUTIME_ID) brings the scheduler's count up to
// date), and from getrusage(RUSAGE_THREAD) the page faults (exact) and the
// user/system split (proportional to timer ticks, so only a share; the
// kernel updates those counters at ticks and switches). Two system calls
// (about 0.4 us together), no allocation, async-signal-safe.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <cstdint>

namespace pinscope::shim {

struct Usage {
  uint64_t cpu_ns = 0;
  uint64_t user_ns = 0;
  uint64_t sys_ns = 0;
  uint64_t minor_faults = 0;
  uint64_t major_faults = 0;
};

// The calling thread's CPU time only (one system call): where faults and
// the user/system split say nothing (a wait).
inline Usage ThreadCpuNow() {
  Usage u;
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
    u.cpu_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  return u;
}

inline Usage ThreadUsageNow() {
  rusage ru;
  Usage u = ThreadCpuNow();
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return u;
  u.user_ns = static_cast<uint64_t>(ru.ru_utime.tv_sec) * 1000000000ull +
              static_cast<uint64_t>(ru.ru_utime.tv_usec) * 1000ull;
  u.sys_ns = static_cast<uint64_t>(ru.ru_stime.tv_sec) * 1000000000ull +
             static_cast<uint64_t>(ru.ru_stime.tv_usec) * 1000ull;
  u.minor_faults = static_cast<uint64_t>(ru.ru_minflt);
  u.major_faults = static_cast<uint64_t>(ru.ru_majflt);
  return u;
}

// --- a thread's readings around its calls ----------------------------------
// A reading is a system call (CLOCK_THREAD_CPUTIME_ID has no vDSO path: 0.22
// us on the H100 hosts, 0.33 on the development machine). The copy and wait
// hooks and the DataLoader spans take theirs through these two, which leave
// out the readings that a short stretch of running makes exact:
//
// - a call (or span) shorter than kShortCallNs whose usage is its CPU time
//   only gets no exit reading: it ran on the CPU throughout (too short to
//   have slept; a wait that blocks takes longer to be woken), so its exit
//   is the entry's CPU time plus its wall time. 98% of a Hugging Face
//   loop's waits and 80-85% of its copies took less
//   (tests/data/h100/cost/hf_trainer);
// - one that begins under kShortCallNs after the thread's previous call
//   or span returned gets no entry reading: its CPU time is the previous
//   exit's plus the gap (PyTorch's synchronous copy is a cudaMemcpyAsync
//   and a cudaStreamSynchronize microseconds apart; a pin thread's RECV
//   span ends microseconds before its PIN span begins). A chain of such
//   derived readings ends kChainNs after its last real reading.
//
// `whole` usages (page faults and the user/system split) are always read.
// trace.proto and docs/trace-format.md say so.
inline constexpr uint64_t kShortCallNs = 20'000;
inline constexpr uint64_t kChainNs = 200'000;

// The usage at a call's entry, and the entry's time (MonoNs) in *t_enter.
Usage EntryUsage(bool whole, uint64_t* t_enter);
// The usage at the exit (at t_exit) of a call entered with `enter` at
// t_enter; noted for the thread's next EntryUsage.
Usage ExitUsage(bool whole, const Usage& enter, uint64_t t_enter, uint64_t t_exit);

}  // namespace pinscope::shim
