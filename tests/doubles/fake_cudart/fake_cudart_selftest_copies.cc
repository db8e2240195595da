// fake_cudart_selftest, copies: the asynchrony hazard (pinscope facts,
// section 6), 2D/3D/peer/symbol copies and memset, batch copies. Helpers and
// the fixture: fake_cudart_selftest.h.
#include "fake_cudart_selftest.h"

namespace fake_cudart_test {
namespace {

// ---- The asynchrony hazard (facts section 6) --------------------------------

struct HazardBufs {
  void* dev = nullptr;
  cudaStream_t s = nullptr;
  HazardBufs() {
    EXPECT_EQ(cudaMalloc(&dev, kN), cudaSuccess);
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  }
  ~HazardBufs() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    cudaFree(dev);
  }
};

TEST_F(Fake, H2DFromPinnedIsEnqueuedAndSeesLaterWrite) {
  HazardBufs b;
  char* h = nullptr;
  ASSERT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&h), kN, 0));
  std::memset(h, 'A', kN);
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync(b.dev, h, kN, cudaMemcpyHostToDevice, b.s));
  EXPECT_LT(ms_since(t0), 10.0);
  EXPECT_EQ(cudaStreamQuery(b.s), cudaErrorNotReady);
  std::memset(h, 'B', kN);  // the program reuses its buffer at once
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  EXPECT_TRUE(all_equal(read_device(b.dev, kN), 'B')) << "device got the later write";
  ASSERT_CUDA(cudaFreeHost(h));
}

TEST_F(Fake, H2DFromRegisteredIsEnqueuedToo) {
  HazardBufs b;
  std::vector<char> h(kN, 'A');
  ASSERT_CUDA(cudaHostRegister(h.data(), kN, 0));
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync_ptsz(b.dev, h.data(), kN, cudaMemcpyHostToDevice, b.s));
  EXPECT_LT(ms_since(t0), 10.0);
  std::memset(h.data(), 'B', kN);
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  EXPECT_TRUE(all_equal(read_device(b.dev, kN), 'B'));
  ASSERT_CUDA(cudaHostUnregister(h.data()));
}

TEST_F(Fake, H2DFromPageableWaitsAndStagesOriginal) {
  HazardBufs b;
  std::vector<char> h(kN, 'A');
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync(b.dev, h.data(), kN, cudaMemcpyHostToDevice, b.s));
  EXPECT_GE(ms_since(t0), 45.0);
  std::memset(h.data(), 'B', kN);
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  EXPECT_TRUE(all_equal(read_device(b.dev, kN), 'A')) << "device got the original data";
}

TEST_F(Fake, D2HToPinnedReturnsBeforeDataArrives) {
  HazardBufs b;
  std::vector<char> a(kN, 'A');
  ASSERT_CUDA(cudaMemcpy(b.dev, a.data(), kN, cudaMemcpyHostToDevice));
  char* h = nullptr;
  ASSERT_CUDA(cudaMallocHost(reinterpret_cast<void**>(&h), kN));
  std::memset(h, 'X', kN);
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync(h, b.dev, kN, cudaMemcpyDeviceToHost, b.s));
  EXPECT_LT(ms_since(t0), 10.0);
  EXPECT_TRUE(all_equal(h, kN, 'X')) << "host reads stale data";
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  EXPECT_TRUE(all_equal(h, kN, 'A'));
  ASSERT_CUDA(cudaFreeHost(h));
}

TEST_F(Fake, D2HToPageableWaitsForData) {
  HazardBufs b;
  std::vector<char> a(kN, 'A');
  ASSERT_CUDA(cudaMemcpy(b.dev, a.data(), kN, cudaMemcpyHostToDevice));
  std::vector<char> h(kN, 'X');
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync(h.data(), b.dev, kN, cudaMemcpyDefault, b.s));
  EXPECT_GE(ms_since(t0), 45.0);
  EXPECT_TRUE(all_equal(h, 'A')) << "host reads the final data at once";
}

TEST_F(Fake, D2DIsAsync) {
  HazardBufs b;
  void* d2 = nullptr;
  ASSERT_CUDA(cudaMalloc(&d2, kN));
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyAsync(d2, b.dev, kN, cudaMemcpyDeviceToDevice, b.s));
  EXPECT_LT(ms_since(t0), 10.0);
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  ASSERT_CUDA(cudaFree(d2));
}

TEST_F(Fake, BlockingCopyWaitsForLegacyAndBlockingStreams) {
  HazardBufs b;
  char* h = nullptr;
  ASSERT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&h), kN, 0));
  // Prior work on the legacy stream.
  ASSERT_CUDA(fakecuda_sleep_on_stream(nullptr, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpy(b.dev, h, kN, cudaMemcpyHostToDevice));
  EXPECT_GE(ms_since(t0), 45.0);
  // Prior work on a blocking stream: the legacy stream waits for it.
  ASSERT_CUDA(fakecuda_sleep_on_stream(b.s, 50));
  t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpy(b.dev, h, kN, cudaMemcpyHostToDevice));
  EXPECT_GE(ms_since(t0), 45.0);
  // A non-blocking stream is not waited for.
  cudaStream_t nb;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  ASSERT_CUDA(fakecuda_sleep_on_stream(nb, 300));
  t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpy(b.dev, h, kN, cudaMemcpyHostToDevice));
  EXPECT_LT(ms_since(t0), 150.0);
  // Work on a blocking stream waits for the legacy stream.
  ASSERT_CUDA(fakecuda_sleep_on_stream(cudaStreamLegacy, 50));
  ASSERT_CUDA(cudaMemcpyAsync(b.dev, h, kN, cudaMemcpyHostToDevice, b.s));
  t0 = Clock::now();
  ASSERT_CUDA(cudaStreamSynchronize(b.s));
  EXPECT_GE(ms_since(t0), 40.0);
  ASSERT_CUDA(cudaStreamDestroy(nb));
  ASSERT_CUDA(cudaFreeHost(h));
}

TEST_F(Fake, CopyValidation) {
  std::vector<char> h(64), h2(64);
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 64));
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64, static_cast<cudaMemcpyKind>(7)),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(h2.data(), h.data(), 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h2.data(), h.data(), 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(d, h.data(), 64, cudaMemcpyHostToDevice,
                            reinterpret_cast<cudaStream_t>(0x1234)),
            cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaMemcpy(d, h.data(), 0, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(h2.data(), h.data(), 64, cudaMemcpyDefault));
  ASSERT_CUDA(cudaMemcpy_ptds(d, h.data(), 64, cudaMemcpyDefault));
  ASSERT_CUDA(cudaFree(d));
  cudaGetLastError();
}

// ---- 2D / 3D / peer / symbols / memset -------------------------------------

TEST_F(Fake, Copy2DWithPitches) {
  const size_t w = 10, hgt = 4, spitch = 16, hpitch2 = 13;
  std::vector<char> src(spitch * hgt);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i);
  void* d = nullptr;
  size_t dpitch = 0;
  ASSERT_CUDA(cudaMallocPitch(&d, &dpitch, w, hgt));
  EXPECT_GE(dpitch, w);
  ASSERT_CUDA(cudaMemset(d, 0x7f, dpitch * hgt));
  ASSERT_CUDA(cudaMemcpy2D(d, dpitch, src.data(), spitch, w, hgt, cudaMemcpyHostToDevice));
  std::vector<char> raw = read_device(d, dpitch * hgt);
  for (size_t y = 0; y < hgt; ++y) {
    for (size_t x = 0; x < dpitch; ++x) {
      char want = x < w ? src[y * spitch + x] : 0x7f;
      ASSERT_EQ(raw[y * dpitch + x], want) << y << "," << x;
    }
  }
  std::vector<char> back(hpitch2 * hgt, 'z');
  ASSERT_CUDA(cudaMemcpy2D_ptds(back.data(), hpitch2, d, dpitch, w, hgt, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < hgt; ++y)
    for (size_t x = 0; x < hpitch2; ++x)
      ASSERT_EQ(back[y * hpitch2 + x], x < w ? src[y * spitch + x] : 'z');
  EXPECT_EQ(cudaMemcpy2D(d, dpitch, src.data(), 8, w, hgt, cudaMemcpyHostToDevice),
            cudaErrorInvalidPitchValue);

  // Pinned 2D async is only enqueued.
  char* pin = nullptr;
  ASSERT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&pin), spitch * hgt, 0));
  std::memset(pin, 'A', spitch * hgt);
  cudaStream_t s;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpy2DAsync(d, dpitch, pin, spitch, w, hgt, cudaMemcpyHostToDevice, s));
  EXPECT_LT(ms_since(t0), 10.0);
  std::memset(pin, 'B', spitch * hgt);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  raw = read_device(d, dpitch * hgt);
  EXPECT_EQ(raw[0], 'B');
  EXPECT_EQ(raw[dpitch * (hgt - 1) + w - 1], 'B');
  // Pageable 2D async waits.
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 50));
  t0 = Clock::now();
  ASSERT_CUDA(
      cudaMemcpy2DAsync_ptsz(d, dpitch, src.data(), spitch, w, hgt, cudaMemcpyHostToDevice, s));
  EXPECT_GE(ms_since(t0), 45.0);
  ASSERT_CUDA(cudaStreamDestroy(s));
  ASSERT_CUDA(cudaFreeHost(pin));
  ASSERT_CUDA(cudaFree(d));
  cudaGetLastError();
}

TEST_F(Fake, Copy3DPitched) {
  const size_t W = 8, H = 3, D = 2, pitch = 16;
  std::vector<char> src(pitch * H * D);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i + 1);
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, pitch * H * D));
  ASSERT_CUDA(cudaMemset(d, 0, pitch * H * D));
  cudaMemcpy3DParms p{};
  p.srcPtr = make_cudaPitchedPtr(src.data(), pitch, W, H);
  p.dstPtr = make_cudaPitchedPtr(d, pitch, W, H);
  p.srcPos = make_cudaPos(2, 0, 0);
  p.extent = make_cudaExtent(W - 2, H, D);
  p.kind = cudaMemcpyHostToDevice;
  ASSERT_CUDA(cudaMemcpy3D(&p));
  std::vector<char> raw = read_device(d, pitch * H * D);
  for (size_t z = 0; z < D; ++z)
    for (size_t y = 0; y < H; ++y)
      for (size_t x = 0; x < pitch; ++x) {
        size_t i = z * pitch * H + y * pitch + x;
        ASSERT_EQ(raw[i], x < W - 2 ? src[i + 2] : 0) << z << "," << y << "," << x;
      }
  ASSERT_CUDA(cudaMemcpy3DAsync(&p, nullptr));
  ASSERT_CUDA(cudaMemcpy3D_ptds(&p));
  ASSERT_CUDA(cudaMemcpy3DAsync_ptsz(&p, nullptr));
  p.srcArray = reinterpret_cast<cudaArray_t>(0x10);
  EXPECT_EQ(cudaMemcpy3D(&p), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  ASSERT_CUDA(cudaFree(d));
  cudaGetLastError();
}

TEST_F(Fake, PeerCopies) {
  if (device_count() < 2) GTEST_SKIP() << "needs FAKECUDA_DEVICES >= 2";
  void *d0 = nullptr, *d1 = nullptr;
  std::vector<char> a(256, 'P');
  ASSERT_CUDA(cudaMalloc(&d0, 256));
  ASSERT_CUDA(cudaMemcpy(d0, a.data(), 256, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaMalloc(&d1, 256));
  ASSERT_CUDA(cudaMemcpyPeer(d1, 1, d0, 0, 256));
  EXPECT_TRUE(all_equal(read_device(d1, 256), 'P'));
  ASSERT_CUDA(cudaMemcpyPeerAsync(d0, 0, d1, 1, 128, nullptr));
  EXPECT_EQ(cudaMemcpyPeer(d1, 7, d0, 0, 256), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaMemcpyPeer(d1, 1, a.data(), 0, 256), cudaErrorInvalidValue);
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = make_cudaPitchedPtr(d0, 16, 16, 16);
  p.dstPtr = make_cudaPitchedPtr(d1, 16, 16, 16);
  p.srcDevice = 0;
  p.dstDevice = 1;
  p.extent = make_cudaExtent(16, 16, 1);
  ASSERT_CUDA(cudaMemcpy3DPeer(&p));
  ASSERT_CUDA(cudaMemcpy3DPeerAsync(&p, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaFree(d1));
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaFree(d0));
  cudaGetLastError();
}

char g_symbol[64];

TEST_F(Fake, SymbolCopies) {
  ASSERT_CUDA(fakecuda_register_symbol(g_symbol, sizeof(g_symbol)));
  EXPECT_EQ(fakecuda_register_symbol(g_symbol + 8, 4), cudaErrorInvalidValue);
  cudaPointerAttributes at;
  ASSERT_CUDA(cudaPointerGetAttributes(&at, g_symbol + 3));
  EXPECT_EQ(at.type, cudaMemoryTypeDevice);
  std::vector<char> src(16, 'S'), dst(16, 0);
  ASSERT_CUDA(cudaMemcpyToSymbol(g_symbol, src.data(), 16, 8, cudaMemcpyHostToDevice));
  EXPECT_TRUE(all_equal(g_symbol + 8, 16, 'S'));
  EXPECT_EQ(g_symbol[7], 0);
  ASSERT_CUDA(cudaMemcpyFromSymbol(dst.data(), g_symbol, 16, 8, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(all_equal(dst, 'S'));
  ASSERT_CUDA(
      cudaMemcpyToSymbolAsync(g_symbol, src.data(), 16, 0, cudaMemcpyHostToDevice, nullptr));
  ASSERT_CUDA(
      cudaMemcpyFromSymbolAsync(dst.data(), g_symbol, 16, 0, cudaMemcpyDeviceToHost, nullptr));
  ASSERT_CUDA(cudaMemcpyToSymbol_ptds(g_symbol, src.data(), 1, 0, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpyFromSymbol_ptds(dst.data(), g_symbol, 1, 0, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpyToSymbolAsync_ptsz(g_symbol, src.data(), 1, 0, cudaMemcpyDefault, nullptr));
  ASSERT_CUDA(
      cudaMemcpyFromSymbolAsync_ptsz(dst.data(), g_symbol, 1, 0, cudaMemcpyDefault, nullptr));
  EXPECT_EQ(cudaMemcpyToSymbol(g_symbol, src.data(), 16, 60, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyToSymbol(src.data(), src.data(), 16, 0, cudaMemcpyHostToDevice),
            cudaErrorInvalidSymbol);
  EXPECT_EQ(cudaMemcpyToSymbol(g_symbol, src.data(), 16, 0, cudaMemcpyDeviceToHost),
            cudaErrorInvalidMemcpyDirection);
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  ASSERT_CUDA(fakecuda_unregister_symbol(g_symbol));
  cudaGetLastError();
}

TEST_F(Fake, Memset) {
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 300));
  ASSERT_CUDA(cudaMemset(d, 0x5a, 300));
  EXPECT_TRUE(all_equal(read_device(d, 300), 0x5a));
  cudaStream_t s;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaMemsetAsync(d, 0x11, 100, s));
  ASSERT_CUDA(cudaStreamSynchronize(s));
  std::vector<char> r = read_device(d, 300);
  EXPECT_EQ(r[99], 0x11);
  EXPECT_EQ(r[100], 0x5a);
  std::vector<char> h(10);
  EXPECT_EQ(cudaMemset(h.data(), 0, 10), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(d, 0, 301), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaStreamDestroy(s));
  ASSERT_CUDA(cudaFree(d));
  cudaGetLastError();
}

// ---- Batch copies -------------------------------------------------------------

TEST_F(Fake, BatchCopies) {
  cudaStream_t s;
  ASSERT_CUDA(cudaStreamCreate(&s));
  void *d0 = nullptr, *d1 = nullptr, *d2 = nullptr;
  ASSERT_CUDA(cudaMalloc(&d0, 64));
  ASSERT_CUDA(cudaMalloc(&d1, 64));
  ASSERT_CUDA(cudaMalloc(&d2, 64));
  char* pin = nullptr;
  ASSERT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&pin), 192, 0));
  std::memset(pin, 'a', 64);
  std::memset(pin + 64, 'b', 64);
  std::memset(pin + 128, 'c', 64);
  void* dsts[3] = {d0, d1, d2};
  const void* srcs[3] = {pin, pin + 64, pin + 128};
  size_t sizes[3] = {64, 64, 32};
  cudaMemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx[2] = {0, 1};
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 50));
  auto t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, s));
  EXPECT_LT(ms_since(t0), 10.0);  // all pinned: enqueued only
  std::memset(pin, 'z', 64);      // hazard: the batch reads it later
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_TRUE(all_equal(read_device(d0, 64), 'z'));
  EXPECT_TRUE(all_equal(read_device(d1, 64), 'b'));
  std::vector<char> r2 = read_device(d2, 64);
  EXPECT_TRUE(all_equal(r2.data(), 32, 'c'));

  // A pageable source in stream order makes the call wait.
  std::vector<char> pg(64, 'q');
  srcs[2] = pg.data();
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 50));
  t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 3, attrs, idx, 2, s));
  EXPECT_GE(ms_since(t0), 45.0);
  std::memset(pg.data(), 'Q', 64);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_TRUE(all_equal(read_device(d2, 32), 'q'));

  // srcAccessOrderDuringApiCall: source read during the call, no wait.
  attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  ASSERT_CUDA(fakecuda_sleep_on_stream(s, 50));
  t0 = Clock::now();
  ASSERT_CUDA(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, s));
  EXPECT_LT(ms_since(t0), 10.0);
  std::memset(pg.data(), 'R', 64);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_TRUE(all_equal(read_device(d2, 32), 'Q'));

  // Errors.
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, nullptr),
            cudaErrorInvalidValue);  // legacy stream
  size_t bad_idx[2] = {1, 2};
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, bad_idx, 2, s),
            cudaErrorInvalidValue);
  attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, attrs, idx, 2, s), cudaErrorInvalidValue);

  // 3D batch with pointer operands.
  cudaMemcpy3DBatchOp op{};
  op.src.type = cudaMemcpyOperandTypePointer;
  op.src.op.ptr.ptr = pin;
  op.dst.type = cudaMemcpyOperandTypePointer;
  op.dst.op.ptr.ptr = d0;
  op.extent = make_cudaExtent(8, 2, 1);
  op.src.op.ptr.rowLength = 64;  // rows 64 bytes apart in the source
  op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::memset(pin, '1', 64);
  std::memset(pin + 64, '2', 64);
  ASSERT_CUDA(cudaMemcpy3DBatchAsync(1, &op, 0, s));
  ASSERT_CUDA(cudaStreamSynchronize(s));
  std::vector<char> r0 = read_device(d0, 16);
  EXPECT_TRUE(all_equal(r0.data(), 8, '1'));
  EXPECT_TRUE(all_equal(r0.data() + 8, 8, '2'));
  op.src.type = cudaMemcpyOperandTypeArray;
  EXPECT_EQ(cudaMemcpy3DBatchAsync_ptsz(1, &op, 0, s), cudaErrorInvalidValue);

  ASSERT_CUDA(cudaStreamDestroy(s));
  ASSERT_CUDA(cudaFreeHost(pin));
  ASSERT_CUDA(cudaFree(d0));
  ASSERT_CUDA(cudaFree(d1));
  ASSERT_CUDA(cudaFree(d2));
  cudaGetLastError();
}

}  // namespace
}  // namespace fake_cudart_test
