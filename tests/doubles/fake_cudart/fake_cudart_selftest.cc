// Self-test of pinscope's CUDA runtime TEST DOUBLE (tests/doubles/fake_cudart).
// It checks the emulation itself: pointer kinds, error codes, the sticky
// last error, and above all that the double reproduces the real runtime's
// host synchronisation (pinscope facts, section 6). Timing thresholds check
// the emulation (a 50 ms fake kernel), not performance.
//
// One executable in three files, in the order the tests run: this one
// (versions, exports, pointer kinds, registration, the sticky last error),
// fake_cudart_selftest_copies.cc, fake_cudart_selftest_streams.cc.
// fake_cudart_selftest.h holds the helpers and the fixture they share.
#include "fake_cudart_selftest.h"

namespace fake_cudart_test {
namespace {

// Two fake devices unless the caller chose (read lazily by the library, on
// the first CUDA call, which comes after static initialisation; this file's
// initialiser serves the tests of all three files).
const int kSetDevices = [] { return setenv("FAKECUDA_DEVICES", "2", 0); }();

TEST_F(Fake, VersionsAndDevice) {
  int v = 0;
  ASSERT_CUDA(cudaRuntimeGetVersion(&v));
  EXPECT_EQ(v, 13000);
  ASSERT_CUDA(cudaDriverGetVersion(&v));
  EXPECT_EQ(v, 13000);
  int n = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, std::atoi(std::getenv("FAKECUDA_DEVICES")));
  cudaDeviceProp prop;
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, 0));
  EXPECT_STREQ(prop.name, "pinscope fake CUDA device (test double)");
  EXPECT_EQ(prop.totalGlobalMem, size_t{1} << 34);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, n), cudaErrorInvalidDevice);
  int a = 0;
  ASSERT_CUDA(cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, 0));
  EXPECT_EQ(a, 9);
  ASSERT_CUDA(cudaDeviceGetAttribute(&a, cudaDevAttrUnifiedAddressing, 0));
  EXPECT_EQ(a, 1);
  EXPECT_EQ(cudaSetDevice(n), cudaErrorInvalidDevice);
  ASSERT_CUDA(cudaInitDevice(0, 0, 0));
  ASSERT_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  cudaGetLastError();
}

TEST_F(Fake, ExportsAreVersioned) {
  EXPECT_NE(dlvsym(RTLD_DEFAULT, "cudaMemcpyAsync_ptsz", "libcudart.so.13"), nullptr);
  EXPECT_NE(dlvsym(RTLD_DEFAULT, "cudaMemcpyBatchAsync", "libcudart.so.13"), nullptr);
  EXPECT_NE(dlvsym(RTLD_DEFAULT, "fakecuda_sleep_on_stream", "libcudart.so.13"), nullptr);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "cudaGetDeviceProperties_v2"), nullptr);
}

TEST_F(Fake, PointerKinds) {
  cudaPointerAttributes at;
  void *d = nullptr, *m = nullptr, *h = nullptr, *mh = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 1000));
  ASSERT_CUDA(cudaMallocManaged(&m, 1000, cudaMemAttachGlobal));
  ASSERT_CUDA(cudaHostAlloc(&h, 1000, cudaHostAllocDefault));
  ASSERT_CUDA(cudaMallocHost(&mh, 1000));
  std::vector<char> reg(4096), plain(64);
  ASSERT_CUDA(cudaHostRegister(reg.data(), reg.size(), cudaHostRegisterDefault));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);

  ASSERT_CUDA(cudaPointerGetAttributes(&at, d));
  EXPECT_EQ(at.type, cudaMemoryTypeDevice);
  EXPECT_EQ(at.device, 0);
  EXPECT_EQ(at.devicePointer, d);
  ASSERT_CUDA(cudaPointerGetAttributes(&at, static_cast<char*>(d) + 999));  // interior
  EXPECT_EQ(at.type, cudaMemoryTypeDevice);
  EXPECT_EQ(at.devicePointer, static_cast<char*>(d) + 999);
  ASSERT_CUDA(cudaPointerGetAttributes(&at, m));
  EXPECT_EQ(at.type, cudaMemoryTypeManaged);
  EXPECT_EQ(at.hostPointer, m);
  for (void* p : {h, mh, static_cast<void*>(reg.data() + 100)}) {
    ASSERT_CUDA(cudaPointerGetAttributes(&at, p));
    EXPECT_EQ(at.type, cudaMemoryTypeHost);
    EXPECT_EQ(at.hostPointer, p);
    EXPECT_EQ(at.device, 0);
  }
  ASSERT_CUDA(cudaPointerGetAttributes(&at, plain.data()));
  EXPECT_EQ(at.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(at.devicePointer, nullptr);
  EXPECT_EQ(cudaPointerGetAttributes(&at, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);

  // cudaHostAlloc memory is a shared mapping, like the real one.
  static_cast<char*>(h)[0] = 'p';
  pid_t pid = fork();
  if (pid == 0) {
    static_cast<char*>(h)[0] = 'c';
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(static_cast<char*>(h)[0], 'c');

  // Device 1 allocations carry their ordinal.
  if (device_count() > 1) {
    ASSERT_CUDA(cudaSetDevice(1));
    void* d1 = nullptr;
    ASSERT_CUDA(cudaMalloc(&d1, 64));
    ASSERT_CUDA(cudaPointerGetAttributes(&at, d1));
    EXPECT_EQ(at.device, 1);
    ASSERT_CUDA(cudaFree(d1));
    ASSERT_CUDA(cudaSetDevice(0));
  }

  ASSERT_CUDA(cudaFree(d));
  ASSERT_CUDA(cudaFree(m));
  ASSERT_CUDA(cudaFreeHost(h));
  ASSERT_CUDA(cudaFreeHost(mh));
  ASSERT_CUDA(cudaHostUnregister(reg.data()));
  ASSERT_CUDA(cudaPointerGetAttributes(&at, d));  // freed: no longer tracked
  EXPECT_EQ(at.type, cudaMemoryTypeUnregistered);
  ASSERT_CUDA(cudaFree(nullptr));
  EXPECT_EQ(cudaFree(plain.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(plain.data()), cudaErrorInvalidValue);
  cudaGetLastError();
}

// FAKE_CUDART_FAIL_REGISTER / _UNREGISTER (fake_cudart.h): read at every
// call; a failed register registers nothing, a failed unregister leaves the
// range registered; a malformed spec fails nothing.
TEST_F(Fake, InjectedRegisterAndUnregisterFailures) {
  std::vector<char> buf(8192);
  char* p = buf.data();
  ASSERT_EQ(setenv("FAKE_CUDART_FAIL_REGISTER", "all", 1), 0);
  EXPECT_EQ(cudaHostRegister(p, 4096, 0), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaHostRegister(p, 4096, 0), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(fakecuda_is_registered(p), 0);
  ASSERT_EQ(setenv("FAKE_CUDART_FAIL_REGISTER", "x7", 1), 0);
  ASSERT_CUDA(cudaHostRegister(p, 4096, 0));
  ASSERT_EQ(unsetenv("FAKE_CUDART_FAIL_REGISTER"), 0);
  ASSERT_EQ(setenv("FAKE_CUDART_FAIL_UNREGISTER", "all", 1), 0);
  EXPECT_EQ(cudaHostUnregister(p), cudaErrorUnknown);
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  EXPECT_EQ(fakecuda_is_registered(p), 1);
  EXPECT_EQ(cudaHostRegister(p, 4096, 0), cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(unsetenv("FAKE_CUDART_FAIL_UNREGISTER"), 0);
  ASSERT_CUDA(cudaHostUnregister(p));
  EXPECT_EQ(fakecuda_is_registered(p), 0);
  cudaGetLastError();
}

TEST_F(Fake, HostRegisterErrorsAndStats) {
  fakecuda_reset_stats();
  fakecuda_stats st0;
  fakecuda_get_stats(&st0);
  const unsigned long base_bytes = st0.registered_bytes;
  std::vector<char> buf(8192);
  char* p = buf.data();
  ASSERT_CUDA(cudaHostRegister(p, 4096, cudaHostRegisterDefault));
  EXPECT_EQ(fakecuda_is_registered(p), 1);
  EXPECT_EQ(fakecuda_is_registered(p + 4095), 1);
  EXPECT_EQ(fakecuda_is_registered(p + 4096), 0);
  // Overlap (same start, interior start, straddling) -> 712.
  EXPECT_EQ(cudaHostRegister(p, 4096, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostRegister(p + 100, 16, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostRegister(p + 4000, 1000, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(static_cast<int>(cudaErrorHostMemoryAlreadyRegistered), 712);
  // Adjacent is fine; unaligned pointers are accepted.
  ASSERT_CUDA(cudaHostRegister(p + 4096 + 3, 100, 0));
  // cudaHostAlloc memory cannot be registered (measured: invalid value).
  void* h = nullptr;
  ASSERT_CUDA(cudaHostAlloc(&h, 4096, 0));
  EXPECT_EQ(cudaHostRegister(h, 64, 0), cudaErrorInvalidValue);
  EXPECT_EQ(fakecuda_is_registered(h), 0);
  // Unregister: interior -> invalid value; unknown -> 713.
  EXPECT_EQ(cudaHostUnregister(p + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostUnregister(p + 6000), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(static_cast<int>(cudaErrorHostMemoryNotRegistered), 713);
  EXPECT_EQ(cudaHostRegister(nullptr, 64, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(p + 5000, 0, 0), cudaErrorInvalidValue);

  fakecuda_stats st;
  fakecuda_get_stats(&st);
  EXPECT_EQ(st.registered_bytes, base_bytes + 4096 + 100);
  ASSERT_CUDA(cudaHostUnregister(p));
  EXPECT_EQ(cudaHostUnregister(p), cudaErrorHostMemoryNotRegistered);
  ASSERT_CUDA(cudaHostUnregister(p + 4096 + 3));
  EXPECT_EQ(fakecuda_is_registered(p), 0);
  ASSERT_CUDA(cudaFreeHost(h));
  cudaPointerAttributes at;
  ASSERT_CUDA(cudaPointerGetAttributes(&at, p));
  ASSERT_CUDA(cudaMemcpy(p, p + 10, 10, cudaMemcpyHostToHost));

  fakecuda_get_stats(&st);
  EXPECT_EQ(st.host_register_calls, 8u);
  EXPECT_EQ(st.host_unregister_calls, 5u);
  EXPECT_EQ(st.host_alloc_calls, 1u);
  EXPECT_EQ(st.free_host_calls, 1u);
  EXPECT_EQ(st.pointer_attribute_calls, 1u);
  EXPECT_EQ(st.memcpy_calls, 1u);
  EXPECT_EQ(st.registered_bytes, base_bytes);
  fakecuda_reset_stats();
  fakecuda_get_stats(&st);
  EXPECT_EQ(st.host_register_calls, 0u);
  cudaGetLastError();
}

TEST_F(Fake, StickyPerThreadLastError) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int x;
  EXPECT_EQ(cudaHostUnregister(&x), cudaErrorHostMemoryNotRegistered);
  int n = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&n));  // success does not clear it
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorHostMemoryNotRegistered);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaPeekAtLastError(); }).join();
  EXPECT_EQ(other, cudaSuccess);  // per thread
  EXPECT_EQ(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // cleared
  EXPECT_STREQ(cudaGetErrorName(cudaErrorHostMemoryAlreadyRegistered),
               "cudaErrorHostMemoryAlreadyRegistered");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  // A not-ready status is not an error.
  cudaStream_t s;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 30));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
}

}  // namespace
}  // namespace fake_cudart_test
