// The per-thread default stream entry points (_ptds / _ptsz), reached the
// way a program built with `nvcc --default-stream per-thread` reaches them:
// ptsz_calls.cc is compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM.
#pragma once

#include "program_util.h"

// Makes one call through each per-thread entry point pinscope hooks, in the
// order the checker expects (see e2e_copies_test.cc, PerThreadEntryPoints).
void PerThreadCalls(Bufs& b, const void* symbol);
