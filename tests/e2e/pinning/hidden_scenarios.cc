// e2e_pinning_prog, section 11: memory pinscope registered is invisible to
// the program's own queries (docs/pinning.md, "What the program sees").
// The program asks every query the runtime and the driver offer about four
// buffers and prints each answer relative to the buffer (an address equal
// to the buffer's prints as 1), so that the checker compares the run under
// PINSCOPE_PIN=1 with a run without pinscope, key by key:
//   a      pageable, copied (pinscope registers it under PINSCOPE_PIN)
//   plain  pageable, never copied (nothing registers it)
//   own    registered by the program itself
//   b      copied (pinscope registers it), then registered by the program
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "pin_program.h"
#include "program_util.h"

namespace pin_program {
namespace {

std::string K(const char* buf, const char* what) { return std::string(buf) + "_" + what; }

// 1 when v names p, 0 for null, 2 for anything else.
unsigned long long Rel(uintptr_t v, const void* p) {
  return v == reinterpret_cast<uintptr_t>(p) ? 1 : v == 0 ? 0 : 2;
}

using GetAttrFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using HostFlagsFn = CUresult (*)(unsigned*, void*);

void Ask(const char* name, char* p, GetAttrFn via_runtime, HostFlagsFn via_proc) {
  CUdeviceptr dp = reinterpret_cast<uintptr_t>(p);
  for (char* at : {p, p + 100}) {  // the start and an interior address
    std::string n = at == p ? name : std::string(name) + "_inner";
    cudaPointerAttributes attr;
    memset(&attr, 0x5a, sizeof attr);
    Put(K(n.c_str(), "attr_rc").c_str(), cudaPointerGetAttributes(&attr, at));
    Put(K(n.c_str(), "attr_type").c_str(), attr.type);
    Put(K(n.c_str(), "attr_device").c_str(), static_cast<unsigned>(attr.device + 10));
    Put(K(n.c_str(), "attr_host").c_str(), Rel(reinterpret_cast<uintptr_t>(attr.hostPointer), at));
    Put(K(n.c_str(), "attr_dev").c_str(), Rel(reinterpret_cast<uintptr_t>(attr.devicePointer), at));
    Put(K(n.c_str(), "last_error").c_str(), cudaGetLastError());
  }
  unsigned flags = 77;
  Put(K(name, "flags_rc").c_str(), cudaHostGetFlags(&flags, p));
  Put(K(name, "flags").c_str(), flags);
  Put(K(name, "flags_last_error").c_str(), cudaGetLastError());
  void* dev = nullptr;
  Put(K(name, "devptr_rc").c_str(), cudaHostGetDevicePointer(&dev, p, 0));
  Put(K(name, "devptr").c_str(), Rel(reinterpret_cast<uintptr_t>(dev), p));
  Put(K(name, "devptr_last_error").c_str(), cudaGetLastError());

  unsigned type = 77;
  Put(K(name, "cu_type_rc").c_str(),
      cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
  Put(K(name, "cu_type").c_str(), type);
  CUdeviceptr cu_dev = 0;
  Put(K(name, "cu_dev_rc").c_str(),
      cuPointerGetAttribute(&cu_dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dp));
  Put(K(name, "cu_dev").c_str(), Rel(cu_dev, p));
  CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned t2 = 77, managed = 77;
  void* host = nullptr;
  void* data[3] = {&t2, &host, &managed};
  Put(K(name, "cu_attrs_rc").c_str(), cuPointerGetAttributes(3, which, data, dp));
  Put(K(name, "cu_attrs_type").c_str(), t2);
  Put(K(name, "cu_attrs_host").c_str(), Rel(reinterpret_cast<uintptr_t>(host), p));
  Put(K(name, "cu_attrs_managed").c_str(), managed);
  unsigned cu_flags = 77;
  Put(K(name, "cu_flags_rc").c_str(), cuMemHostGetFlags(&cu_flags, p));
  Put(K(name, "cu_flags").c_str(), cu_flags);
  CUdeviceptr cu_hdev = 0;
  Put(K(name, "cu_devptr_rc").c_str(), cuMemHostGetDevicePointer(&cu_hdev, p, 0));
  Put(K(name, "cu_devptr").c_str(), Rel(cu_hdev, p));

  // The same questions through entry points handed out at run time.
  unsigned t3 = 77;
  Put(K(name, "ep_type_rc").c_str(), via_runtime(&t3, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
  Put(K(name, "ep_type").c_str(), t3);
  unsigned f3 = 77;
  Put(K(name, "proc_flags_rc").c_str(), via_proc(&f3, p));
  Put(K(name, "proc_flags").c_str(), f3);
}

}  // namespace

void Hidden() {
  const size_t n = 64 * 1024;  // above PINSCOPE_PIN_MIN=4K
  void* dev = DevAlloc(n);
  // Entry points taken before anything is pinned, as a library does at
  // load time: through the runtime, and through cuGetProcAddress itself
  // handed out by the runtime.
  void* ep = nullptr;
  cudaDriverEntryPointQueryResult st;
  CK(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &ep, 13000, 0, &st));
  void* gp = nullptr;
  // Deprecated in CUDA 13, still exported and still used.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CK(cudaGetDriverEntryPoint("cuGetProcAddress", &gp, 0, &st));
#pragma GCC diagnostic pop
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  void* hf = nullptr;
  if (reinterpret_cast<GetProc>(gp)("cuMemHostGetFlags", &hf, 13000, 0, nullptr) != CUDA_SUCCESS)
    Fail("cuGetProcAddress");
  auto via_runtime = reinterpret_cast<GetAttrFn>(ep);
  auto via_proc = reinterpret_cast<HostFlagsFn>(hf);

  char* a = CopiedBlock(dev, n, "a", 'a');
  char* plain = Memalign(n);
  memset(plain, 'p', n);
  char* own = Memalign(n);
  memset(own, 'o', n);
  CK(cudaHostRegister(own, n, cudaHostRegisterPortable));
  char* b = CopiedBlock(dev, n, "b", 'b');
  Put("a_registered", fakecuda_is_registered(a));
  Put("b_registered_before", fakecuda_is_registered(b));
  // The program registers what pinscope registered: it succeeds, and from
  // then on b is the program's own registration.
  Put("b_register_rc", cudaHostRegister(b, n, cudaHostRegisterPortable));

  Ask("a", a, via_runtime, via_proc);
  Ask("plain", plain, via_runtime, via_proc);
  Ask("own", own, via_runtime, via_proc);
  Ask("b", b, via_runtime, via_proc);

  // pinscope's copy path still uses its registration of a.
  memset(a, 'A', n);
  CK(cudaMemcpy(dev, a, n, cudaMemcpyHostToDevice));
  if (!All(DeviceBytes(dev, n), n, 'A')) Fail("hidden: device data");
  Put("a_registered_after", fakecuda_is_registered(a));
  CK(cudaHostUnregister(own));
  CK(cudaHostUnregister(b));
  free(a);
  free(plain);
  free(own);
  free(b);
}

}  // namespace pin_program
