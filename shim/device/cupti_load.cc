// Finding and loading libcupti at run time, and resolving its functions into
// Cupti().api with dlsym: the shim never links libcupti. Runs once, from
// CuptiStart on a program thread inside a CUDA hook (mu held, guard set).
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/cuda/real_runtime.h"
#include "shim/device/cupti_state.h"

namespace pinscope::shim::cupti_internal {

namespace {

int FindLoadedCupti(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  const char* base = name ? strrchr(name, '/') : nullptr;
  if (base && !strncmp(base + 1, "libcupti.so", 11)) {
    CopyString(static_cast<char*>(out), 4096, name);
    return 1;
  }
  return 0;
}

// Appends "; path" to the list of places tried (for the message).
void NoteTried(char* tried, size_t cap, const char* path) {
  size_t n = strlen(tried);
  if (n + 4 >= cap) return;
  if (n) n += CopyString(tried + n, cap - n, ", ");
  CopyString(tried + n, cap - n, path);
}

void* TryOpen(const char* path, char* tried, size_t cap) {
  NoteTried(tried, cap, path);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CuptiState& s = Cupti();
  if (h) CopyString(s.lib_path, sizeof s.lib_path, path);
  return h;
}

template <typename Fn>
bool Resolve(Fn* out, const char* name, bool required, const char** missing) {
  *out = reinterpret_cast<Fn>(dlsym(Cupti().handle, name));
  if (!*out && required && !*missing) *missing = name;
  return *out != nullptr;
}

}  // namespace

// The libcupti that belongs to the loaded runtime: one already in the
// process (torch links it; a second copy would fight the first), else
// PINSCOPE_CUPTI_PATH, else next to libcudart (pip wheels: nvidia/cu13/lib;
// CUDA 12 wheels keep it in the sibling package cuda_cupti), else the
// toolkit's extras/CUPTI/lib64, else the loader's search path.
void* LoadCupti(int major, char* tried, size_t cap) {
  char path[4096] = {};
  dl_iterate_phdr(FindLoadedCupti, path);
  if (path[0]) {
    NoteTried(tried, cap, path);
    void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      CuptiState& s = Cupti();
      CopyString(s.lib_path, sizeof s.lib_path, path);
      return h;
    }
  }
  const char* explicit_path = GetConfig().cupti_path;
  if (explicit_path[0]) return TryOpen(explicit_path, tried, cap);

  char so[32];
  size_t sn = CopyString(so, sizeof so, "libcupti.so.");
  FormatU64(so + sn, sizeof so - sn, static_cast<uint64_t>(major));

  char dir[4096] = {};
  Dl_info info;
  if (void* fn = ResolveCuda("cudaMemcpy"); fn && dladdr(fn, &info) && info.dli_fname) {
    CopyString(dir, sizeof dir, info.dli_fname);
    if (char* slash = strrchr(dir, '/')) {
      *slash = '\0';
    } else {
      dir[0] = '\0';
    }
  }
  if (dir[0]) {
    static const char* const kRelative[] = {
        "/", "/../extras/CUPTI/lib64/", "/../../../extras/CUPTI/lib64/", "/../../cuda_cupti/lib/"};
    for (const char* rel : kRelative) {
      size_t n = CopyString(path, sizeof path, dir);
      n += CopyString(path + n, sizeof path - n, rel);
      CopyString(path + n, sizeof path - n, so);
      if (access(path, R_OK) != 0) continue;
      if (void* h = TryOpen(path, tried, cap)) return h;
    }
  }
  return TryOpen(so, tried, cap);
}

const char* ResolveApi() {
  Api& api = Cupti().api;
  const char* missing = nullptr;
  Resolve(&api.GetVersion, "cuptiGetVersion", true, &missing);
  Resolve(&api.GetResultString, "cuptiGetResultString", false, &missing);
  Resolve(&api.Enable, "cuptiActivityEnable", true, &missing);
  Resolve(&api.Disable, "cuptiActivityDisable", true, &missing);
  Resolve(&api.RegisterCallbacks, "cuptiActivityRegisterCallbacks", true, &missing);
  Resolve(&api.FlushAll, "cuptiActivityFlushAll", true, &missing);
  Resolve(&api.GetNextRecord, "cuptiActivityGetNextRecord", true, &missing);
  Resolve(&api.GetNumDropped, "cuptiActivityGetNumDroppedRecords", false, &missing);
  Resolve(&api.Push, "cuptiActivityPushExternalCorrelationId", true, &missing);
  Resolve(&api.Pop, "cuptiActivityPopExternalCorrelationId", true, &missing);
  Resolve(&api.GetTimestamp, "cuptiGetTimestamp", true, &missing);
  Resolve(&api.EnableRuntimeApi, "cuptiActivityEnableRuntimeApi", false, &missing);
  Resolve(&api.Finalize, "cuptiFinalize", false, &missing);
  return missing;
}

// CUPTI API version -> CUDA major: v19..v28 are CUDA 12.x, then xxyyzz.
int CuptiMajor(uint32_t v) {
  if (v >= 100000) return static_cast<int>(v / 10000);
  if (v >= 19) return 12;
  return 11;
}

}  // namespace pinscope::shim::cupti_internal
