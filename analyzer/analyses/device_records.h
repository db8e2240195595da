// The inputs of the device-activity analyses (device_activity.h): one CUPTI
// record, one intercepted host call, and the enums they share with
// proto/trace.proto. Plain structs; no I/O.
#pragma once

#include <cstdint>

namespace pinscope::device {

// Values mirror proto/trace.proto so trace enums convert with a cast.
enum ActivityKind : uint32_t { kActUnknown = 0, kActMemcpy = 1, kActMemset = 2, kActKernel = 3,
                               kActSync = 4 };
enum Direction : uint32_t { kDirUnknown = 0, kH2H = 1, kH2D = 2, kD2H = 3, kD2D = 4, kPeer = 5 };
enum MemKind : uint32_t { kMemUnknown = 0, kPageable = 1, kPinned = 2, kDevice = 3, kManaged = 4,
                          kSymbol = 5 };
// SyncEvent.api (HostCall::api of a sync).
enum SyncApi : uint32_t {
  kSyncUnknown = 0,
  kStreamSynchronize = 1,
  kDeviceSynchronize = 2,
  kEventSynchronize = 3,
  kStreamQuery = 4
};

constexpr uint64_t kUs = 1000;

constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kSec = 1000 * kMs;

// One DeviceActivity packet (times in CLOCK_MONOTONIC ns, as in the trace).
struct DeviceRecord {
  uint32_t kind = kActUnknown;
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t bytes = 0;
  uint32_t direction = kDirUnknown;
  uint32_t src_kind = kMemUnknown, dst_kind = kMemUnknown;
  uint32_t device_id = 0, stream_id = 0;
  uint32_t correlation_id = 0;
  uint64_t name_id = 0;
  uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// One intercepted host call (CopyEvent or SyncEvent).
struct HostCall {
  enum class Type { kCopy, kSync };
  Type type = Type::kCopy;
  uint64_t call_id = 0;
  uint64_t start_ns = 0, end_ns = 0;  // host entry / return
  uint32_t direction = kDirUnknown;   // copies only
  uint32_t src_kind = kMemUnknown, dst_kind = kMemUnknown;
  uint64_t bytes = 0;
  uint32_t tid = 0;
  // For the join by order (device_order_join.h): the cudaStream_t value
  // (not CUPTI's stream id), the API (trace CopyApi / SyncApi values) and
  // the cudaError_t returned (a failed call makes no device record).
  uint64_t stream = 0;
  uint32_t api = 0;
  int32_t result = 0;
  // The packet's own entry and return times, where start_ns/end_ns are the
  // replay's (raised to keep a file's order: a call appended at its return
  // after packets stamped later would start late). 0: start_ns / end_ns.
  uint64_t entry_ns = 0, return_ns = 0;
  uint64_t host_start() const { return entry_ns ? entry_ns : start_ns; }
  uint64_t host_end() const { return return_ns ? return_ns : end_ns; }
  uint64_t blocked_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

}  // namespace pinscope::device
