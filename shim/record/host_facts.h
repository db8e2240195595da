// Facts about the host for the process header (cores, cgroup limits, RAM,
// /dev/shm, GPUs, PCIe link), read from /proc and /sys with open/read into
// stack buffers: no allocation, no stdio, safe inside any hook.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/record/wire.h"

namespace pinscope::shim {

// Reads up to cap-1 bytes of a file, NUL-terminates; returns bytes read or -1.
long ReadSmallFile(const char* path, char* buf, size_t cap);

// /dev/shm capacity and free bytes (statvfs); false if it is not mounted.
bool ShmSpace(uint64_t* capacity, uint64_t* free_bytes);

// Value of "Key:" in /proc/meminfo in bytes (e.g. "MemTotal:"), 0 if absent.
uint64_t MeminfoBytes(const char* key);
// cgroup v2 memory.max in bytes, 0 if unlimited or unknown.
uint64_t CgroupMemoryLimit();

// Encodes a HostFacts message body (fields of proto HostFacts).
void EncodeHostFacts(Encoder* e);

}  // namespace pinscope::shim
