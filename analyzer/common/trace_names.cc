// Names of trace enums for the text and JSON reports. The JSON spellings are
// part of the report schema (docs/report.md): change them only with a
// schema_version bump.
#include "analyzer/common/trace_names.h"

namespace pinscope {

const char* DirectionName(trace::Direction direction) {
  switch (direction) {
    case trace::H2H:
      return "H2H";
    case trace::H2D:
      return "H2D";
    case trace::D2H:
      return "D2H";
    case trace::D2D:
      return "D2D";
    case trace::PEER:
      return "peer";
    default:
      return "unknown";
  }
}

const char* MemoryKindName(trace::MemoryKind kind) {
  switch (kind) {
    case trace::PAGEABLE:
      return "pageable";
    case trace::PINNED:
      return "pinned";
    case trace::DEVICE:
      return "device";
    case trace::MANAGED:
      return "managed";
    case trace::SYMBOL:
      return "symbol";
    default:
      return "unknown";
  }
}

const char* AllocApiName(trace::AllocApi api) {
  switch (api) {
    case trace::MALLOC:
      return "malloc";
    case trace::CALLOC:
      return "calloc";
    case trace::REALLOC:
      return "realloc";
    case trace::REALLOCARRAY:
      return "reallocarray";
    case trace::POSIX_MEMALIGN:
      return "posix_memalign";
    case trace::ALIGNED_ALLOC:
      return "aligned_alloc";
    case trace::MEMALIGN:
      return "memalign";
    case trace::VALLOC:
      return "valloc";
    case trace::PVALLOC:
      return "pvalloc";
    case trace::CUDA_HOST_ALLOC:
      return "cudaHostAlloc";
    default:
      return "unknown";
  }
}

const char* CopyApiName(trace::CopyApi api) {
  switch (api) {
    case trace::MEMCPY:
      return "cudaMemcpy";
    case trace::MEMCPY_ASYNC:
      return "cudaMemcpyAsync";
    case trace::MEMCPY_2D:
      return "cudaMemcpy2D";
    case trace::MEMCPY_2D_ASYNC:
      return "cudaMemcpy2DAsync";
    case trace::MEMCPY_3D:
      return "cudaMemcpy3D";
    case trace::MEMCPY_3D_ASYNC:
      return "cudaMemcpy3DAsync";
    case trace::MEMCPY_PEER:
      return "cudaMemcpyPeer";
    case trace::MEMCPY_PEER_ASYNC:
      return "cudaMemcpyPeerAsync";
    case trace::MEMCPY_TO_SYMBOL:
      return "cudaMemcpyToSymbol";
    case trace::MEMCPY_TO_SYMBOL_ASYNC:
      return "cudaMemcpyToSymbolAsync";
    case trace::MEMCPY_FROM_SYMBOL:
      return "cudaMemcpyFromSymbol";
    case trace::MEMCPY_FROM_SYMBOL_ASYNC:
      return "cudaMemcpyFromSymbolAsync";
    case trace::MEMCPY_BATCH_ASYNC:
      return "cudaMemcpyBatchAsync";
    default:
      return "unknown";
  }
}

const char* SyncApiName(trace::SyncApi api) {
  switch (api) {
    case trace::STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case trace::DEVICE_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    case trace::EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case trace::STREAM_QUERY:
      return "cudaStreamQuery";
    default:
      return "unknown";
  }
}

const char* OriginName(trace::ProcessOrigin origin) {
  switch (origin) {
    case trace::ORIGIN_ROOT:
      return "root";
    case trace::ORIGIN_FORK:
      return "fork";
    case trace::ORIGIN_EXEC:
      return "exec";
    default:
      return "unknown";
  }
}

const char* ProcessRoleName(trace::ProcessOrigin origin, bool helper) {
  if (helper) return "helper";
  switch (origin) {
    case trace::ORIGIN_ROOT:
      return "root";
    case trace::ORIGIN_FORK:
      return "worker";
    case trace::ORIGIN_EXEC:
      return "exec";
    default:
      return "process";
  }
}

const char* HookKindName(trace::HookKind kind) {
  switch (kind) {
    case trace::HOOK_COPY:
      return "copy";
    case trace::HOOK_SYNC:
      return "sync";
    case trace::HOOK_ALLOC:
      return "alloc";
    case trace::HOOK_SHM:
      return "shm";
    case trace::HOOK_LOADER:
      return "loader";
    default:
      return "unknown";
  }
}

const char* ShmOpName(trace::ShmOp op) {
  switch (op) {
    case trace::SHM_OPEN:
      return "open";
    case trace::SHM_CREATE:
      return "create";
    case trace::SHM_UNLINK:
      return "unlink";
    case trace::MEMFD_CREATE:
      return "memfd_create";
    case trace::SHM_TRUNCATE:
      return "truncate";
    case trace::SHM_FALLOCATE:
      return "fallocate";
    case trace::SHM_MAP:
      return "map";
    case trace::SHM_UNMAP:
      return "unmap";
    case trace::SHM_CLOSE:
      return "close";
    case trace::SHM_SIGBUS:
      return "sigbus";
    default:
      return "unknown";
  }
}

const char* ExitHowName(trace::ProcessExit::How how) {
  switch (how) {
    case trace::ProcessExit::EXIT:
      return "exit";
    case trace::ProcessExit::UNDERSCORE_EXIT:
      return "_exit";
    case trace::ProcessExit::EXEC:
      return "exec";
    case trace::ProcessExit::SIGNAL:
      return "signal";
    default:
      return "unknown";
  }
}

const char* NoticeSeverityName(trace::Notice::Severity severity) {
  switch (severity) {
    case trace::Notice::WARNING:
      return "warning";
    case trace::Notice::ERROR:
      return "error";
    default:
      return "info";
  }
}

trace::MemoryKind HostKind(const trace::CopyEvent& copy) {
  switch (copy.direction()) {
    case trace::H2D:
    case trace::H2H:
      return copy.src_kind();
    case trace::D2H:
      return copy.dst_kind();
    default:
      return trace::MEM_UNKNOWN;
  }
}

uint64_t HostAddress(const trace::CopyEvent& copy) {
  switch (copy.direction()) {
    case trace::H2D:
    case trace::H2H:
      return copy.src_address();
    case trace::D2H:
      return copy.dst_address();
    default:
      return 0;
  }
}

bool IsPageableHostCopy(const trace::CopyEvent& copy) {
  return (copy.direction() == trace::H2D || copy.direction() == trace::D2H) &&
         HostKind(copy) == trace::PAGEABLE;
}

}  // namespace pinscope
