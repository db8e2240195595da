// The CUDA runtime double's batch copies, cudaMemcpyBatchAsync and
// cudaMemcpy3DBatchAsync (and their _ptsz variants), in the CUDA 12.8 ABI
// (FAKE_CUDART_MAJOR=12: a failIdx argument) or the 13.0 ABI. Each copy of
// a batch is validated like a cudaMemcpyAsync and ordered by its
// cudaMemcpySrcAccessOrder; the whole batch runs as one stream operation.
#include "fake_cudart_internal.h"

#include <cstdint>
#include <utility>

namespace fakecuda {
namespace {

// One copy of a batch, after validation.
struct BatchItem {
  Region r;
  std::shared_ptr<std::vector<char>> staging;  // srcAccessOrderDuringApiCall
};

// Validates one batch copy and decides how it is ordered:
//   Stream: like cudaMemcpyAsync (waits when a host side is pageable);
//   DuringApiCall: the source is read (staged) before the call returns, the
//     destination is written in stream order (waits if it is pageable);
//   Any: the source may be read after the call returns; waits only for a
//     pageable destination.
cudaError_t batch_item(Region r, cudaMemcpySrcAccessOrder order,
                       unsigned flags, std::vector<BatchItem>* items,
                       bool* must_wait) {
  if (order != cudaMemcpySrcAccessOrderStream &&
      order != cudaMemcpySrcAccessOrderDuringApiCall &&
      order != cudaMemcpySrcAccessOrderAny)
    return cudaErrorInvalidValue;
  if (flags & ~static_cast<unsigned>(cudaMemcpyFlagPreferOverlapWithCompute))
    return cudaErrorInvalidValue;
  if (r.empty()) return cudaErrorInvalidValue;
  CopyCheck cc;
  cudaError_t e = check_copy(r, cudaMemcpyDefault, &cc);
  if (e != cudaSuccess) return e;
  BatchItem it;
  if (order == cudaMemcpySrcAccessOrderDuringApiCall) {
    it.staging = std::make_shared<std::vector<char>>(r.width * r.height * r.depth);
    Region stage = r;
    stage.dst = it.staging->data();
    stage.dpitch = r.width;
    stage.dslice = r.width * r.height;
    stage.run();
    r.src = it.staging->data();
    r.spitch = stage.dpitch;
    r.sslice = stage.dslice;
    if (cc.dst_pageable) *must_wait = true;
  } else if (order == cudaMemcpySrcAccessOrderAny) {
    if (cc.dst_pageable) *must_wait = true;
  } else if (cc.pageable()) {
    *must_wait = true;
  }
  it.r = r;
  items->push_back(std::move(it));
  return cudaSuccess;
}

cudaError_t run_batch(std::vector<BatchItem> items, const StreamP& st,
                      bool must_wait) {
  auto shared = std::make_shared<std::vector<BatchItem>>(std::move(items));
  uint64_t seq = enqueue(st, [shared] {
    for (const BatchItem& it : *shared) it.r.run();
  });
  if (must_wait) wait_done(st, seq);
  return cudaSuccess;
}

cudaError_t batch_stream(cudaStream_t h, bool ptsz, StreamP* st) {
  // "Must not be legacy NULL stream" (0 means the per-thread stream in the
  // _ptsz entry point).
  if (!ptsz && (h == nullptr || h == cudaStreamLegacy)) return cudaErrorInvalidValue;
  *st = resolve_stream(h);
  return *st ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t copy_batch(void* const* dsts, const void* const* srcs,
                       const size_t* sizes, size_t count,
                       cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                       size_t numAttrs, size_t* failIdx, cudaStream_t h,
                       bool ptsz) {
  count_memcpy();
  if (failIdx) *failIdx = SIZE_MAX;
  CHECK_DEVICE();
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attrsIdxs ||
      numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0)
    return cudaErrorInvalidValue;
  for (size_t k = 1; k < numAttrs; ++k)
    if (attrsIdxs[k] <= attrsIdxs[k - 1] || attrsIdxs[k] >= count)
      return cudaErrorInvalidValue;
  StreamP st;
  cudaError_t e = batch_stream(h, ptsz, &st);
  if (e != cudaSuccess) return e;
  std::vector<BatchItem> items;
  items.reserve(count);
  bool must_wait = false;
  size_t a = 0;
  for (size_t i = 0; i < count; ++i) {
    while (a + 1 < numAttrs && attrsIdxs[a + 1] <= i) ++a;
    e = batch_item(Region::linear(dsts[i], srcs[i], sizes[i]),
                   attrs[a].srcAccessOrder, attrs[a].flags, &items, &must_wait);
    if (e != cudaSuccess) {
      if (failIdx) *failIdx = i;
      return e;
    }
  }
  return run_batch(std::move(items), st, must_wait);
}

cudaError_t copy_3d_batch(size_t numOps, cudaMemcpy3DBatchOp* ops,
                          size_t* failIdx, unsigned long long flags,
                          cudaStream_t h, bool ptsz) {
  count_memcpy();
  if (failIdx) *failIdx = SIZE_MAX;
  CHECK_DEVICE();
  if (numOps == 0 || ops == nullptr || flags != 0) return cudaErrorInvalidValue;
  StreamP st;
  cudaError_t e = batch_stream(h, ptsz, &st);
  if (e != cudaSuccess) return e;
  std::vector<BatchItem> items;
  bool must_wait = false;
  for (size_t i = 0; i < numOps; ++i) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    e = cudaSuccess;
    if (op.src.type != cudaMemcpyOperandTypePointer ||
        op.dst.type != cudaMemcpyOperandTypePointer) {
      e = cudaErrorInvalidValue;  // CUDA arrays are not emulated
    } else {
      // Pointer operands: rowLength/layerHeight in elements of 1 byte,
      // 0 meaning tightly packed.
      Region r;
      r.width = op.extent.width;
      r.height = op.extent.height;
      r.depth = op.extent.depth;
      r.src = static_cast<const char*>(op.src.op.ptr.ptr);
      r.dst = static_cast<char*>(op.dst.op.ptr.ptr);
      r.spitch = op.src.op.ptr.rowLength ? op.src.op.ptr.rowLength : r.width;
      r.dpitch = op.dst.op.ptr.rowLength ? op.dst.op.ptr.rowLength : r.width;
      size_t sh = op.src.op.ptr.layerHeight ? op.src.op.ptr.layerHeight : r.height;
      size_t dh = op.dst.op.ptr.layerHeight ? op.dst.op.ptr.layerHeight : r.height;
      r.sslice = r.spitch * sh;
      r.dslice = r.dpitch * dh;
      if (r.spitch < r.width || r.dpitch < r.width || sh < r.height || dh < r.height)
        e = cudaErrorInvalidValue;
      else
        e = batch_item(r, op.srcAccessOrder, op.flags, &items, &must_wait);
    }
    if (e != cudaSuccess) {
      if (failIdx) *failIdx = i;
      return e;
    }
  }
  return run_batch(std::move(items), st, must_wait);
}

}  // namespace
}  // namespace fakecuda

using fakecuda::api;
using fakecuda::copy_3d_batch;
using fakecuda::copy_batch;

// Names without a prototype in the 13.0 header.
extern "C" {
#if FAKE_CUDART_MAJOR == 12
// CUDA 12.8 ABI (the 13.0 header has the 13 one).
cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                 size_t numAttrs, size_t* failIdx, cudaStream_t stream);
cudaError_t cudaMemcpyBatchAsync_ptsz(void** dsts, void** srcs, size_t* sizes, size_t count,
                                      cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, size_t* failIdx, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* opList, size_t* failIdx,
                                   unsigned long long flags, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* opList,
                                        size_t* failIdx, unsigned long long flags,
                                        cudaStream_t stream);
#else
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs,
                                      const size_t* sizes, size_t count,
                                      cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* opList,
                                        unsigned long long flags, cudaStream_t stream);
#endif
}  // extern "C"

#if FAKE_CUDART_MAJOR == 12
FAKE_API cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                          cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                          size_t numAttrs, size_t* failIdx,
                                          cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, st, false);
  });
}
FAKE_API cudaError_t cudaMemcpyBatchAsync_ptsz(void** dsts, void** srcs, size_t* sizes,
                                               size_t count, cudaMemcpyAttributes* attrs,
                                               size_t* attrsIdxs, size_t numAttrs,
                                               size_t* failIdx, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, st, true);
  });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                            size_t* failIdx, unsigned long long flags,
                                            cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, failIdx, flags, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                                 size_t* failIdx, unsigned long long flags,
                                                 cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, failIdx, flags, st, true); });
}
#else
FAKE_API cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs,
                                          const size_t* sizes, size_t count,
                                          cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                          size_t numAttrs, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, st, false);
  });
}
FAKE_API cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs,
                                               const size_t* sizes, size_t count,
                                               cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                               size_t numAttrs, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, st, true);
  });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                            unsigned long long flags, cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, nullptr, flags, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                                 unsigned long long flags, cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, nullptr, flags, st, true); });
}
#endif
