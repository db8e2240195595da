// The shm hooks' side of the pool of registered slots (shim/pin/pool.h):
// the segment each thread is making (to tell a file_descriptor batch at its
// shm_unlink), the swap's bookkeeping, and sendmsg's fds. Called from the
// hooks' slow paths (shm_fds.cc, shm_map.cc) and the sendmsg hooks; each
// returns after one relaxed load while PINSCOPE_PIN_POOL is off.
#pragma once

#include <sys/socket.h>

#include <cstdint>

namespace pinscope::shim::shm {

// ShmOpen created `name` (O_CREAT|O_EXCL) as fd; ftruncate, mmap and close
// of it on the same thread follow it.
void PoolSegmentCreated(int fd, const char* name, uint64_t device, uint64_t inode);
void PoolSegmentTruncated(int fd, uint64_t size);
void PoolSegmentMapped(int fd, uint64_t addr, uint64_t len, uint64_t offset, int prot, int flags);
void PoolSegmentClosed(int fd);
// Before the real shm_unlink(name): in a worker, the segment just made and
// mapped under that name is swapped for a free slot when the pool has one.
void PoolAtUnlink(const char* name, uint64_t t0);
// sendmsg / sendmmsg: SCM_RIGHTS fds of pool slots (the ancillary data
// walked with CMSG_FIRSTHDR/CMSG_NXTHDR).
void PoolNoteSendmsg(const struct msghdr* msg);

}  // namespace pinscope::shim::shm
