// Names of trace enums as the report and the JSON print them, and the
// host-side view of a copy that several analyses share.
#pragma once

#include <cstdint>

#include "trace.pb.h"

namespace pinscope {

// Direction names as the report prints them: "H2D", "D2H", ...
const char* DirectionName(trace::Direction direction);
// "pageable", "pinned", "device", ...
const char* MemoryKindName(trace::MemoryKind kind);
// "posix_memalign", "cudaHostAlloc", ...
const char* AllocApiName(trace::AllocApi api);
// "cudaMemcpyAsync", ...
const char* CopyApiName(trace::CopyApi api);
// "cudaStreamSynchronize", "cudaDeviceSynchronize", ..., "unknown".
const char* SyncApiName(trace::SyncApi api);
// "root", "fork", "exec", "unknown".
const char* OriginName(trace::ProcessOrigin origin);
// A process's role in the report: "root", "worker" (forked), "exec",
// "helper" (torch_shm_manager and the like), "process".
const char* ProcessRoleName(trace::ProcessOrigin origin, bool helper);
// "create", "map", "unlink", ...
const char* ShmOpName(trace::ShmOp op);
// "exit", "_exit", "exec", "signal", "unknown".
const char* ExitHowName(trace::ProcessExit::How how);
// "info", "warning", "error".
const char* NoticeSeverityName(trace::Notice::Severity severity);
// "copy", "sync", "alloc", "shm", "loader", "unknown" (Counters.hook_kinds).
const char* HookKindName(trace::HookKind kind);

// The host side of a copy: the memory kind and address the report attributes
// it to (src for H2D and H2H, dst for D2H); kind MEM_UNKNOWN, address 0 for
// device-only copies.
trace::MemoryKind HostKind(const trace::CopyEvent& copy);
uint64_t HostAddress(const trace::CopyEvent& copy);
bool IsPageableHostCopy(const trace::CopyEvent& copy);

}  // namespace pinscope
