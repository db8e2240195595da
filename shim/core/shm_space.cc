// The /dev/shm-full diagnosis (shm_core.h): /dev/shm's space, the one-line
// text for a SIGBUS (sigbus.cc) or an ENOSPC (shm_fds.cc), the --shm-size to
// suggest. Async-signal-safe where the header says so: no stdio, no malloc.
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "shim/base/log.h"
#include "shim/core/shm_core.h"
#include "shim/core/shm_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::shm {
namespace {

namespace f = fields;

std::atomic<bool> g_said_full{false};

// --- formatting (async-signal-safe) -------------------------------------------------

struct Out {
  char* buf;
  size_t cap;
  size_t len = 0;
  void S(const char* s) {
    while (*s && len + 1 < cap) buf[len++] = *s++;
    buf[len] = '\0';
  }
  void U(uint64_t v) {
    char tmp[24];
    FormatU64(tmp, sizeof tmp, v);
    S(tmp);
  }
  void Hex(uint64_t v) {
    char tmp[19] = "0x";
    char digits[17];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    for (int i = 0; i < n; ++i) tmp[2 + i] = digits[n - 1 - i];
    tmp[2 + n] = '\0';
    S(tmp);
  }
  // "32 MiB", "0.8 MiB", "1536 MiB": one decimal below 10 MiB.
  void MiB(uint64_t bytes) {
    constexpr uint64_t kMiB = 1ull << 20;
    uint64_t tenths = (bytes * 10 + kMiB / 2) / kMiB;
    if (bytes >= 10 * kMiB || tenths % 10 == 0) {
      U((bytes + kMiB / 2) / kMiB);
    } else {
      U(tenths / 10);
      S(".");
      U(tenths % 10);
    }
    S(" MiB");
  }
  // Docker's --shm-size syntax: "128m", "2g".
  void ShmSize(uint64_t bytes) {
    uint64_t mib = bytes >> 20;
    if (mib >= 1024 && mib % 1024 == 0) {
      U(mib / 1024);
      S("g");
    } else {
      U(mib);
      S("m");
    }
  }
};

}  // namespace

bool LooksFull(const ShmSpace& space) {
  return space.known && (space.free_bytes < (1ull << 20) || space.free_bytes * 50 < space.capacity);
}

uint64_t SuggestShmSize(uint64_t needed) {
  uint64_t want = 2 * needed, size = 64ull << 20;
  while (size < want) size <<= 1;
  return size;
}

ShmSpace ReadShmSpace() {
  ShmSpace s;
  struct statfs sf;
  // The statfs system call itself: glibc's statvfs may read /proc/mounts.
  if (syscall(SYS_statfs, "/dev/shm", &sf) == 0) {
    s.known = true;
    s.capacity = static_cast<uint64_t>(sf.f_blocks) * static_cast<uint64_t>(sf.f_bsize);
    s.free_bytes = static_cast<uint64_t>(sf.f_bavail) * static_cast<uint64_t>(sf.f_bsize);
  }
  return s;
}

size_t FormatShmDiagnosis(char* buf, size_t cap, const ShmFailure& fl, const ShmSpace& space,
                          const JobUsage& job) {
  if (cap == 0) return 0;
  Out o{buf, cap};
  o.S("pinscope: ");
  const char* kind = fl.on_dev_shm ? "shared-memory segment " : "memfd segment ";
  const char* seg = fl.segment && *fl.segment ? fl.segment : "(unnamed)";
  if (fl.call) {
    o.S(fl.call);
    o.S(" of ");
    o.MiB(fl.segment_bytes);
    o.S(" for ");
    o.S(kind);
    o.S(seg);
    o.S(" failed with ENOSPC: ");
  } else {
    o.S("Bus error at ");
    o.Hex(fl.fault_address);
    o.S(" inside ");
    o.S(kind);
    o.S(seg);
    o.S(" (");
    o.MiB(fl.segment_bytes);
    o.S("): ");
  }
  if (!fl.on_dev_shm) {
    o.S("its memory could not be allocated (a memory or cgroup limit), or the access lies past "
        "the end of the segment\n");
    return o.len;
  }
  if (!space.known) {
    o.S("/dev/shm could not be read; this job maps ");
    o.U(job.segments);
    o.S(" segments (");
    o.MiB(job.bytes);
    o.S(")\n");
    return o.len;
  }
  uint64_t used = space.capacity > space.free_bytes ? space.capacity - space.free_bytes : 0;
  if (!fl.call && !LooksFull(space)) {
    o.S("/dev/shm has ");
    o.MiB(space.free_bytes);
    o.S(" free of ");
    o.MiB(space.capacity);
    o.S(", so the access lies past the end of the segment (was it shrunk by ftruncate?)\n");
    return o.len;
  }
  o.S("/dev/shm is full: ");
  o.MiB(space.capacity);
  o.S(" capacity, ");
  o.MiB(used);
  o.S(" in use");
  if (job.segments) {
    o.S(" by ");
    o.U(job.segments);
    o.S(job.segments == 1 ? " segment" : " segments");
    o.S(" of this job (");
    o.MiB(job.bytes);
    o.S(" mapped)");
  }
  uint64_t needed = used > job.bytes ? used : job.bytes;
  if (fl.call) needed += fl.segment_bytes;
  o.S("; start the container with --shm-size of at least ");
  o.ShmSize(SuggestShmSize(needed));
  o.S("\n");
  return o.len;
}

void ReportNoSpace(const char* call, const char* name, uint64_t requested) {
  if (g_said_full.exchange(true)) return;  // once per process in the trace
  ShmFailure fl;
  fl.call = call;
  fl.segment = name;
  fl.segment_bytes = requested;
  char text[768];
  size_t n = FormatShmDiagnosis(text, sizeof text, fl, ReadShmSpace(), State().job.Usage());
  bool first = State().job.FirstDiagnosis();
  for (size_t off = 0; first && off < n;) {
    ssize_t w = write(2, text + off, n - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  if (n > 0 && text[n - 1] == '\n') text[n - 1] = '\0';
  RecordNotice(f::kError, "shm_full", text + 10);  // without "pinscope: "
}

}  // namespace pinscope::shim::shm
