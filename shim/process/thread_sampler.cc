// ThreadSample packets; see thread_sampler.h.
#include "shim/process/thread_sampler.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/record/host_facts.h"
#include "shim/record/recorder.h"

namespace pinscope::shim {
namespace {

// linux_dirent64 (getdents64(2)); glibc does not declare it.
struct Dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

uint64_t ParseU64(const char** p) {
  while (**p == ' ') ++*p;
  uint64_t v = 0;
  while (**p >= '0' && **p <= '9') v = v * 10 + static_cast<uint64_t>(*(*p)++ - '0');
  return v;
}

struct Entry {
  uint32_t tid = 0;
  uint64_t cpu_ns = 0, runqueue_ns = 0, minor_faults = 0, major_faults = 0;
};

bool ReadThread(uint32_t tid, Entry* out) {
  char path[64];
  char buf[1024];
  out->tid = tid;
  snprintf(path, sizeof path, "/proc/self/task/%u/schedstat", tid);
  if (ReadSmallFile(path, buf, sizeof buf) > 0) {
    const char* p = buf;
    out->cpu_ns = ParseU64(&p);
    out->runqueue_ns = ParseU64(&p);
  }
  snprintf(path, sizeof path, "/proc/self/task/%u/stat", tid);
  long n = ReadSmallFile(path, buf, sizeof buf);
  if (n <= 0) return out->cpu_ns > 0;
  // "pid (comm) state ppid ... minflt cminflt majflt": comm may hold spaces
  // and parentheses, so count fields after the last ')'.
  const char* p = strrchr(buf, ')');
  if (!p) return out->cpu_ns > 0;
  ++p;
  // Fields after comm: 3 state, 4 ppid, 5 pgrp, 6 session, 7 tty_nr,
  // 8 tpgid, 9 flags, 10 minflt, 11 cminflt, 12 majflt.
  for (int field = 3; field <= 12 && *p; ++field) {
    while (*p == ' ') ++p;
    if (field == 10) {
      out->minor_faults = ParseU64(&p);
    } else if (field == 12) {
      out->major_faults = ParseU64(&p);
    } else {
      while (*p && *p != ' ') ++p;
    }
  }
  return true;
}

// Entries per packet: a Packet holds 4 KiB, an entry takes at most ~45 bytes.
constexpr int kPerPacket = 64;

void Flush(const Entry* entries, int n) {
  if (n == 0) return;
  namespace t = fields::thread_sample;
  Packet p(fields::packet::kThreadSample, MonoNs());
  for (int i = 0; i < n; ++i) {
    size_t m = p.e().BeginNested(t::kThreads);
    p.e().Varint(t::entry::kTid, entries[i].tid);
    p.e().Varint(t::entry::kCpuNs, entries[i].cpu_ns);
    p.e().Varint(t::entry::kRunqueueNs, entries[i].runqueue_ns);
    p.e().Varint(t::entry::kMinorFaults, entries[i].minor_faults);
    p.e().Varint(t::entry::kMajorFaults, entries[i].major_faults);
    p.e().EndNested(m);
  }
  p.Commit();
}

}  // namespace

void WriteThreadSample() {
  if (!RecorderLive()) return;  // at exit too when paused
  HookScope scope;
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  Entry entries[kPerPacket];
  int n = 0;
  for (;;) {
    long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (got <= 0) break;
    for (long off = 0; off < got;) {
      const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (name[0] < '0' || name[0] > '9') continue;
      const char* q = name;
      uint32_t tid = static_cast<uint32_t>(ParseU64(&q));
      if (tid == 0 || !ReadThread(tid, &entries[n])) continue;
      if (++n == kPerPacket) {
        Flush(entries, n);
        n = 0;
      }
    }
  }
  close(fd);
  Flush(entries, n);
}

}  // namespace pinscope::shim
