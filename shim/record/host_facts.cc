// Host facts for the process header; see host_facts.h.
#include "shim/record/host_facts.h"

#include <dirent.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "shim/base/log.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

uint64_t ParseLeadingU64(const char* s) {
  while (*s == ' ' || *s == '\t') ++s;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + static_cast<uint64_t>(*s++ - '0');
  return v;
}

// Value of "Key:   123 kB" in /proc/meminfo, bytes.
}  // namespace

uint64_t MeminfoBytes(const char* key) {
  char buf[4096];
  if (ReadSmallFile("/proc/meminfo", buf, sizeof buf) <= 0) return 0;
  const char* p = strstr(buf, key);
  if (!p) return 0;
  return ParseLeadingU64(p + strlen(key)) * 1024;
}

// cgroup v2 path of this process ("0::/path" in /proc/self/cgroup).
bool CgroupFile(const char* name, char* out, size_t cap) {
  char buf[1024];
  if (ReadSmallFile("/proc/self/cgroup", buf, sizeof buf) > 0) {
    const char* p = strstr(buf, "0::");
    if (p) {
      p += 3;
      size_t n = strcspn(p, "\n");
      size_t len = CopyString(out, cap, "/sys/fs/cgroup");
      if (len + n + 2 < cap) {
        memcpy(out + len, p, n);
        len += n;
        if (out[len - 1] != '/') out[len++] = '/';
        out[len] = '\0';
        CopyString(out + len, cap - len, name);
        if (access(out, R_OK) == 0) return true;
      }
    }
  }
  size_t len = CopyString(out, cap, "/sys/fs/cgroup/");
  CopyString(out + len, cap - len, name);
  return access(out, R_OK) == 0;
}

uint32_t CgroupCpuMillicores() {
  char path[1024], buf[128];
  if (!CgroupFile("cpu.max", path, sizeof path) || ReadSmallFile(path, buf, sizeof buf) <= 0)
    return 0;
  if (!strncmp(buf, "max", 3)) return 0;
  uint64_t quota = ParseLeadingU64(buf);
  const char* sp = strchr(buf, ' ');
  uint64_t period = sp ? ParseLeadingU64(sp) : 100000;
  return period ? static_cast<uint32_t>(quota * 1000 / period) : 0;
}

uint64_t CgroupMemoryLimit() {
  char path[1024], buf[128];
  if (!CgroupFile("memory.max", path, sizeof path) || ReadSmallFile(path, buf, sizeof buf) <= 0)
    return 0;
  if (!strncmp(buf, "max", 3)) return 0;
  return ParseLeadingU64(buf);
}

namespace {

uint32_t PhysicalCores(uint32_t logical) {
  // Distinct (package, core) pairs; small fixed table, no allocation.
  constexpr int kMax = 1024;
  static uint64_t seen[kMax];
  int nseen = 0;
  for (uint32_t cpu = 0; cpu < logical && cpu < 4096; ++cpu) {
    char path[128], num[24], buf[32];
    FormatU64(num, sizeof num, cpu);
    size_t n = CopyString(path, sizeof path, "/sys/devices/system/cpu/cpu");
    n += CopyString(path + n, sizeof path - n, num);
    size_t base = n;
    CopyString(path + n, sizeof path - n, "/topology/core_id");
    if (ReadSmallFile(path, buf, sizeof buf) <= 0) continue;
    uint64_t core = ParseLeadingU64(buf);
    CopyString(path + base, sizeof path - base, "/topology/physical_package_id");
    uint64_t pkg = ReadSmallFile(path, buf, sizeof buf) > 0 ? ParseLeadingU64(buf) : 0;
    uint64_t key = (pkg << 32) | core;
    bool dup = false;
    for (int i = 0; i < nseen; ++i) dup |= seen[i] == key;
    if (!dup && nseen < kMax) seen[nseen++] = key;
  }
  return nseen ? static_cast<uint32_t>(nseen) : logical;
}

// GPUs from the NVIDIA driver's proc files; directory read with getdents64
// (opendir would allocate).
void EncodeGpus(Encoder* e) {
  int dfd = open("/proc/driver/nvidia/gpus", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  alignas(8) char dents[4096];
  bool first = true;
  for (;;) {
    long n = syscall(SYS_getdents64, dfd, dents, sizeof dents);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(dents + off);
      off += d->d_reclen;
      if (d->d_name[0] == '.') continue;
      char path[256], buf[2048];
      size_t len = CopyString(path, sizeof path, "/proc/driver/nvidia/gpus/");
      len += CopyString(path + len, sizeof path - len, d->d_name);
      CopyString(path + len, sizeof path - len, "/information");
      if (ReadSmallFile(path, buf, sizeof buf) > 0) {
        const char* m = strstr(buf, "Model:");
        if (m) {
          m += 6;
          while (*m == ' ' || *m == '\t') ++m;
          e->StringN(fields::host::kGpuNames, m, strcspn(m, "\n"));
        }
      }
      if (first) {
        first = false;
        char pci[256], lbuf[64];
        size_t pl = CopyString(pci, sizeof pci, "/sys/bus/pci/devices/");
        pl += CopyString(pci + pl, sizeof pci - pl, d->d_name);
        // The driver's name is 0000:3b:00.0; sysfs is lower case.
        for (size_t i = 21; i < pl; ++i)
          if (pci[i] >= 'A' && pci[i] <= 'F') pci[i] = static_cast<char>(pci[i] - 'A' + 'a');
        CopyString(pci + pl, sizeof pci - pl, "/current_link_speed");
        if (ReadSmallFile(pci, lbuf, sizeof lbuf) > 0) {
          // "32.0 GT/s PCIe"
          uint64_t whole = ParseLeadingU64(lbuf);
          const char* dot = strchr(lbuf, '.');
          uint64_t frac = dot ? static_cast<uint64_t>(dot[1] >= '0' && dot[1] <= '9' ? dot[1] - '0' : 0) : 0;
          e->Varint(fields::host::kPcieSpeed, whole * 10 + frac);
        }
        CopyString(pci + pl, sizeof pci - pl, "/current_link_width");
        if (ReadSmallFile(pci, lbuf, sizeof lbuf) > 0)
          e->Varint(fields::host::kPcieWidth, ParseLeadingU64(lbuf));
      }
    }
  }
  close(dfd);
}

}  // namespace

long ReadSmallFile(const char* path, char* buf, size_t cap) {
  if (cap == 0) return -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    buf[0] = '\0';
    return -1;
  }
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  close(fd);
  buf[n] = '\0';
  return static_cast<long>(n);
}

bool ShmSpace(uint64_t* capacity, uint64_t* free_bytes) {
  struct statvfs sv;
  if (statvfs("/dev/shm", &sv) != 0) return false;
  *capacity = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
  *free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
  return true;
}

void EncodeHostFacts(Encoder* e) {
  namespace h = fields::host;
  long logical = sysconf(_SC_NPROCESSORS_ONLN);
  if (logical < 1) logical = 1;
  e->Varint(h::kLogical, static_cast<uint64_t>(logical));
  e->Varint(h::kPhysical, PhysicalCores(static_cast<uint32_t>(logical)));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    e->Varint(h::kAffinity, static_cast<uint64_t>(CPU_COUNT(&set)));
  e->Varint(h::kCgroupQuota, CgroupCpuMillicores());
  e->Varint(h::kRam, MeminfoBytes("MemTotal:"));
  e->Varint(h::kCgroupMem, CgroupMemoryLimit());
  uint64_t cap = 0, avail = 0;
  if (ShmSpace(&cap, &avail)) {
    e->Varint(h::kShmCapacity, cap);
    e->Varint(h::kShmFree, avail);
  }
  EncodeGpus(e);
  struct utsname u;
  if (uname(&u) == 0) e->String(h::kKernel, u.release);
  e->String(h::kLibc, gnu_get_libc_version());
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    e->Varint(h::kMemlock, rl.rlim_cur);
}

}  // namespace pinscope::shim
