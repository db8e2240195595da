// The CUDA runtime double's copies: cudaMemcpy, 2D, 3D, peer and symbol
// copies with their _ptds/_ptsz variants, validated against the range table
// and ordered by the real runtime's host-synchronisation rules (see
// fake_cudart.cc). The batch copies are in batch_copies.cc.
#include "fake_cudart_internal.h"

#include <cstring>

namespace fakecuda {
namespace {

// Submits a validated-or-not copy. blocking: cudaMemcpy-style (always waits).
// Otherwise cudaMemcpyAsync-style: waits only when a host side is pageable.
cudaError_t submit_copy(const Region& r, cudaMemcpyKind kind, cudaStream_t h,
                        bool blocking) {
  CHECK_DEVICE();
  if (static_cast<unsigned>(kind) > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  StreamP st = resolve_stream(h);
  if (!st) return cudaErrorInvalidResourceHandle;
  if (r.empty()) return cudaSuccess;
  CopyCheck cc;
  cudaError_t e = check_copy(r, kind, &cc);
  if (e != cudaSuccess) return e;
  uint64_t seq = enqueue(st, [r] { r.run(); });
  if (blocking || cc.pageable()) wait_done(st, seq);
  return cudaSuccess;
}

cudaError_t copy1d(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                   cudaStream_t h, bool blocking) {
  count_memcpy();
  return submit_copy(Region::linear(dst, src, n), kind, h, blocking);
}

cudaError_t copy2d(void* dst, size_t dpitch, const void* src, size_t spitch,
                   size_t width, size_t height, cudaMemcpyKind kind,
                   cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (width > dpitch || width > spitch)
    return cudaErrorInvalidPitchValue;
  Region r;
  r.dst = static_cast<char*>(dst);
  r.src = static_cast<const char*>(src);
  r.width = width;
  r.height = height;
  r.dpitch = dpitch;
  r.spitch = spitch;
  return submit_copy(r, kind, h, blocking);
}

// Region of a pitched 3D copy; arrays are not emulated.
cudaError_t region3d(cudaArray_t sa, const cudaPos& sp, const cudaPitchedPtr& s,
                     cudaArray_t da, const cudaPos& dp, const cudaPitchedPtr& d,
                     const cudaExtent& ext, Region* out) {
  if (sa != nullptr || da != nullptr) return cudaErrorInvalidValue;
  Region r;
  r.width = ext.width;
  r.height = ext.height;
  r.depth = ext.depth;
  if (r.empty()) {
    *out = r;
    return cudaSuccess;
  }
  if (s.ptr == nullptr || d.ptr == nullptr) return cudaErrorInvalidValue;
  if (sp.x + ext.width > s.pitch || dp.x + ext.width > d.pitch)
    return cudaErrorInvalidPitchValue;
  if (ext.depth > 1 && (sp.y + ext.height > s.ysize || dp.y + ext.height > d.ysize))
    return cudaErrorInvalidValue;
  r.spitch = s.pitch;
  r.dpitch = d.pitch;
  r.sslice = s.pitch * s.ysize;
  r.dslice = d.pitch * d.ysize;
  r.src = static_cast<const char*>(s.ptr) + sp.z * r.sslice + sp.y * r.spitch + sp.x;
  r.dst = static_cast<char*>(d.ptr) + dp.z * r.dslice + dp.y * r.dpitch + dp.x;
  *out = r;
  return cudaSuccess;
}

cudaError_t copy3d(const cudaMemcpy3DParms* p, cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (p == nullptr) return cudaErrorInvalidValue;
  Region r;
  cudaError_t e = region3d(p->srcArray, p->srcPos, p->srcPtr, p->dstArray,
                           p->dstPos, p->dstPtr, p->extent, &r);
  if (e != cudaSuccess) return e;
  return submit_copy(r, p->kind, h, blocking);
}

cudaError_t copy3d_peer(const cudaMemcpy3DPeerParms* p, cudaStream_t h,
                        bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (p == nullptr) return cudaErrorInvalidValue;
  if (!valid_device(p->srcDevice) || !valid_device(p->dstDevice))
    return cudaErrorInvalidDevice;
  Region r;
  cudaError_t e = region3d(p->srcArray, p->srcPos, p->srcPtr, p->dstArray,
                           p->dstPos, p->dstPtr, p->extent, &r);
  if (e != cudaSuccess) return e;
  return submit_copy(r, cudaMemcpyDeviceToDevice, h, blocking);
}

cudaError_t copy_peer(void* dst, int dd, const void* src, int sd, size_t n,
                      cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (!valid_device(dd) || !valid_device(sd)) return cudaErrorInvalidDevice;
  return submit_copy(Region::linear(dst, src, n), cudaMemcpyDeviceToDevice, h,
                     blocking);
}

// Device address of a fakecuda_register_symbol'ed symbol plus offset.
cudaError_t symbol_address(const void* sym, size_t count, size_t offset,
                           char** out) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = g.ranges.find(reinterpret_cast<uintptr_t>(sym));
  if (sym == nullptr || it == g.ranges.end() || it->second.kind != RK::Symbol)
    return cudaErrorInvalidSymbol;
  if (offset > it->second.size || count > it->second.size - offset)
    return cudaErrorInvalidValue;
  *out = const_cast<char*>(static_cast<const char*>(sym)) + offset;
  return cudaSuccess;
}

cudaError_t copy_to_symbol(const void* sym, const void* src, size_t n,
                           size_t offset, cudaMemcpyKind kind, cudaStream_t h,
                           bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  char* d = nullptr;
  cudaError_t e = symbol_address(sym, n, offset, &d);
  if (e != cudaSuccess) return e;
  return submit_copy(Region::linear(d, src, n), kind, h, blocking);
}

cudaError_t copy_from_symbol(void* dst, const void* sym, size_t n,
                             size_t offset, cudaMemcpyKind kind, cudaStream_t h,
                             bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  char* s = nullptr;
  cudaError_t e = symbol_address(sym, n, offset, &s);
  if (e != cudaSuccess) return e;
  return submit_copy(Region::linear(dst, s, n), kind, h, blocking);
}

}  // namespace

// Validates a copy against the range table, loosely: a side the kind calls
// "device" must be tracked memory (device, managed, symbol or pinned host,
// which the device can address), tracked device memory must contain the
// whole span, and the kind must be a cudaMemcpyKind. Reports which host
// sides are pageable (untracked, or only partly inside a pinned range).
cudaError_t check_copy(const Region& r, cudaMemcpyKind kind, CopyCheck* out) {
  if (static_cast<unsigned>(kind) > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  if (r.dst == nullptr || r.src == nullptr) return cudaErrorInvalidValue;
  Loc s = classify(r.src, r.src_span());
  Loc d = classify(r.dst, r.dst_span());
  for (Loc* l : {&s, &d}) {
    if (l->fits) continue;
    if (l->mem == Mem::Pinned)
      l->mem = Mem::Pageable;
    else
      return cudaErrorInvalidValue;
  }
  bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (src_dev && s.mem == Mem::Pageable) return cudaErrorInvalidValue;
  if (dst_dev && d.mem == Mem::Pageable) return cudaErrorInvalidValue;
  out->src_pageable = s.mem == Mem::Pageable;
  out->dst_pageable = d.mem == Mem::Pageable;
  return cudaSuccess;
}

void count_memcpy() { G().memcpy_calls.fetch_add(1, std::memory_order_relaxed); }

}  // namespace fakecuda

using fakecuda::api;
using fakecuda::copy1d;
using fakecuda::copy2d;
using fakecuda::copy3d;
using fakecuda::copy3d_peer;
using fakecuda::copy_from_symbol;
using fakecuda::copy_peer;
using fakecuda::copy_to_symbol;

// ===========================================================================
// Exported entry points (C ABI). Names without a prototype in the 13.0
// header (the _ptds/_ptsz variants) are declared here.

extern "C" {
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D_ptds(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms*);
cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms*, cudaStream_t);
cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms*);
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms*, cudaStream_t);
cudaError_t cudaMemcpyToSymbol_ptds(const void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyFromSymbol_ptds(void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
}  // extern "C"

// --- Copies -----------------------------------------------------------------

FAKE_API cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  return api([&] { return copy1d(d, s, n, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy_ptds(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  return api([&] { return copy1d(d, s, n, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                     cudaStream_t st) {
  return api([&] { return copy1d(d, s, n, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyAsync_ptsz(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                          cudaStream_t st) {
  return api([&] { return copy1d(d, s, n, k, st, false); });
}

FAKE_API cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                  size_t h, cudaMemcpyKind k) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy2D_ptds(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                       size_t h, cudaMemcpyKind k) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                       size_t h, cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpy2DAsync_ptsz(void* d, size_t dp, const void* s, size_t sp,
                                            size_t w, size_t h, cudaMemcpyKind k,
                                            cudaStream_t st) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, st, false); });
}

FAKE_API cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  return api([&] { return copy3d(p, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms* p) {
  return api([&] { return copy3d(p, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t st) {
  return api([&] { return copy3d(p, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms* p, cudaStream_t st) {
  return api([&] { return copy3d(p, st, false); });
}

FAKE_API cudaError_t cudaMemcpy3DPeer(const cudaMemcpy3DPeerParms* p) {
  return api([&] { return copy3d_peer(p, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms* p) {
  return api([&] { return copy3d_peer(p, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t st) {
  return api([&] { return copy3d_peer(p, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms* p,
                                                cudaStream_t st) {
  return api([&] { return copy3d_peer(p, st, false); });
}

// The real libcudart.so.13 exports no _ptds/_ptsz variant of these two.
FAKE_API cudaError_t cudaMemcpyPeer(void* d, int dd, const void* s, int sd, size_t n) {
  return api([&] { return copy_peer(d, dd, s, sd, n, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyPeerAsync(void* d, int dd, const void* s, int sd, size_t n,
                                         cudaStream_t st) {
  return api([&] { return copy_peer(d, dd, s, sd, n, st, false); });
}

FAKE_API cudaError_t cudaMemcpyToSymbol(const void* sym, const void* s, size_t n, size_t off,
                                        cudaMemcpyKind k) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyToSymbol_ptds(const void* sym, const void* s, size_t n,
                                             size_t off, cudaMemcpyKind k) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyToSymbolAsync(const void* sym, const void* s, size_t n,
                                             size_t off, cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* sym, const void* s, size_t n,
                                                  size_t off, cudaMemcpyKind k,
                                                  cudaStream_t st) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbol(void* d, const void* sym, size_t n, size_t off,
                                          cudaMemcpyKind k) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbol_ptds(void* d, const void* sym, size_t n, size_t off,
                                               cudaMemcpyKind k) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbolAsync(void* d, const void* sym, size_t n, size_t off,
                                               cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* d, const void* sym, size_t n,
                                                    size_t off, cudaMemcpyKind k,
                                                    cudaStream_t st) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, st, false); });
}
