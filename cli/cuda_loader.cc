// dlopen-based access to the CUDA runtime for `pinscope calibrate`; see
// cuda_loader.h. Not on any hot path: clarity over speed.
#include "cli/cuda_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace pinscope::cli {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Runs a shell command and returns its standard output (stderr discarded).
std::string CommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) lines.push_back(line);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return lines;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr && missing) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
  }
  return *fn != nullptr;
}

}  // namespace

std::string CudaApi::ErrorText(cudaError_t error) const {
  std::string text;
  if (GetErrorName) {
    if (const char* name = GetErrorName(error)) text = name;
  }
  if (GetErrorString) {
    if (const char* what = GetErrorString(error)) {
      text += text.empty() ? std::string(what) : " (" + std::string(what) + ")";
    }
  }
  if (text.empty()) text = "CUDA error";
  return text + " [" + std::to_string(static_cast<int>(error)) + "]";
}

std::vector<CudartCandidate> CudartCandidates(const std::string& explicit_path) {
  std::vector<CudartCandidate> out;
  if (!explicit_path.empty()) {
    out.push_back({explicit_path, "--cudart"});
    return out;
  }
  if (const char* env = std::getenv("PINSCOPE_CUDART"); env && *env) {
    out.push_back({env, "$PINSCOPE_CUDART"});
    return out;
  }
  for (const char* soname : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    out.push_back({soname, "loader search path"});
  }
  // PyTorch's wheels carry the runtime in site-packages/nvidia/...; `nvidia`
  // is a namespace package, so ask the interpreter for its paths.
  const std::string paths = CommandOutput(
      "python3 -c 'import nvidia, sys; sys.stdout.write(\"\\n\".join(nvidia.__path__))'");
  for (const std::string& dir : Lines(paths)) {
    for (const char* rel : {"/cu13/lib/libcudart.so.13", "/cuda_runtime/lib/libcudart.so.12"}) {
      std::string path = dir + rel;
      if (FileExists(path)) out.push_back({path, "python3's nvidia wheel"});
    }
  }
  for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    std::string path = std::string("/usr/local/cuda/lib64/") + name;
    if (FileExists(path)) out.push_back({path, "/usr/local/cuda"});
  }
  return out;
}

bool LoadCudaRuntime(const std::vector<CudartCandidate>& candidates, CudaApi* api,
                     std::string* error) {
  std::string tried;
  for (const auto& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      tried += "\n  " + candidate.path + " (" + candidate.where +
               "): " + (why ? why : "cannot be loaded");
      continue;
    }
    CudaApi a;
    a.handle = handle;
    std::string missing;
    Resolve(handle, "cudaGetDeviceCount", &a.GetDeviceCount, &missing);
    Resolve(handle, "cudaSetDevice", &a.SetDevice, &missing);
    Resolve(handle, "cudaRuntimeGetVersion", &a.RuntimeGetVersion, &missing);
    Resolve(handle, "cudaDriverGetVersion", &a.DriverGetVersion, &missing);
    Resolve(handle, "cudaGetErrorString", &a.GetErrorString, &missing);
    Resolve(handle, "cudaMalloc", &a.Malloc, &missing);
    Resolve(handle, "cudaFree", &a.Free, &missing);
    Resolve(handle, "cudaHostAlloc", &a.HostAlloc, &missing);
    Resolve(handle, "cudaFreeHost", &a.FreeHost, &missing);
    Resolve(handle, "cudaMemcpyAsync", &a.MemcpyAsync, &missing);
    Resolve(handle, "cudaStreamCreate", &a.StreamCreate, &missing);
    Resolve(handle, "cudaStreamDestroy", &a.StreamDestroy, &missing);
    Resolve(handle, "cudaStreamSynchronize", &a.StreamSynchronize, &missing);
    Resolve(handle, "cudaEventCreate", &a.EventCreate, &missing);
    Resolve(handle, "cudaEventRecord", &a.EventRecord, &missing);
    Resolve(handle, "cudaEventSynchronize", &a.EventSynchronize, &missing);
    Resolve(handle, "cudaEventElapsedTime", &a.EventElapsedTime, &missing);
    Resolve(handle, "cudaEventDestroy", &a.EventDestroy, &missing);
    Resolve(handle, "cudaGetErrorName", &a.GetErrorName, nullptr);
    Resolve(handle, "cudaHostRegister", &a.HostRegister, nullptr);
    Resolve(handle, "cudaHostUnregister", &a.HostUnregister, nullptr);
    Resolve(handle, "cudaDeviceGetPCIBusId", &a.DeviceGetPCIBusId, nullptr);
    if (!missing.empty()) {
      tried += "\n  " + candidate.path + " (" + candidate.where + "): lacks " + missing;
      dlclose(handle);
      continue;
    }
    struct link_map* map = nullptr;
    a.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name
                 ? map->l_name
                 : candidate.path;
    *api = a;
    return true;
  }
  if (candidates.empty()) tried = "\n  (no candidate)";
  *error = "no usable libcudart; tried:" + tried;
  return false;
}

std::string GpuName(const CudaApi& api, int device) {
  if (api.DeviceGetPCIBusId) {
    char bus[64] = {};
    if (api.DeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess && bus[0]) {
      // The driver names its /proc entries 0000:3b:00.0 (lower case, a
      // 4-digit domain); the runtime may spell the domain with 8 digits.
      std::string id = bus;
      for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (size_t colon = id.find(':'); colon != std::string::npos && colon > 4) {
        id = id.substr(colon - 4);
      }
      std::ifstream info("/proc/driver/nvidia/gpus/" + id + "/information");
      std::string line;
      while (std::getline(info, line)) {
        if (line.rfind("Model:", 0) == 0) {
          std::string model = Trim(line.substr(6));
          if (!model.empty()) return model;
        }
      }
    }
  }
  // "GPU 0: NVIDIA H200 (UUID: GPU-...)". nvidia-smi numbers GPUs in PCI
  // order, as the runtime does unless CUDA_VISIBLE_DEVICES reorders them.
  if (!std::getenv("CUDA_VISIBLE_DEVICES")) {
    for (const std::string& line : Lines(CommandOutput("nvidia-smi -L"))) {
      std::string prefix = "GPU " + std::to_string(device) + ": ";
      if (line.rfind(prefix, 0) == 0) {
        std::string name = line.substr(prefix.size());
        if (size_t paren = name.find(" (UUID"); paren != std::string::npos) name.resize(paren);
        name = Trim(name);
        if (!name.empty()) return name;
      }
    }
  }
  return "GPU " + std::to_string(device);
}

}  // namespace pinscope::cli
