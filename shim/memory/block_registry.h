// Live recorded host blocks (malloc family, at or above PINSCOPE_TRACE_MIN)
// and live shared-memory mappings of this process, for the free/munmap hooks,
// for linking copies to the buffer that holds their host pointer, and for the
// pinning module (flags + payload). Storage is mmap'd (never the hooked
// allocator); one mutex guards it and is never held while calling the real
// allocator, CUDA, or the recorder. Fork: the child keeps the entries (its
// memory is a copy) and marks them inherited by bumping the epoch.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

// HostBlock::flags / ShmMapping::flags.
enum RegistryFlags : uint32_t {
  // Free for the pinning module to mark a range it registered (it keeps its
  // own table today; the hooks call PinOnFree/PinOnUnmap for every recorded
  // block or mapping that goes away, whatever its flags).
  kFlagPinned = 1u << 0,
  // A mapping of the CUDA driver's own segment (/cuda*): not job data.
  kFlagDriverInternal = 1u << 1,
  // A mapping of a memfd (not a /dev/shm object).
  kFlagMemfd = 1u << 2,
  // Bits 16..31 are free for the pinning module.
  kFlagUserShift = 16,
};

struct HostBlock {
  uint64_t address = 0;
  uint64_t size = 0;         // bytes requested by the program
  uint64_t alignment = 0;    // requested alignment, 0 = allocator default
  uint32_t api = 0;          // fields::AllocApi
  uint32_t flags = 0;        // RegistryFlags
  uint32_t epoch = 0;        // BlockRegistry::epoch() of the process that recorded it
  uint64_t payload[2] = {};  // owned by the pinning module
};

struct ShmMapping {
  static constexpr size_t kNameCap = 96;
  uint64_t address = 0;  // start of the mapped range (page aligned)
  uint64_t size = 0;     // bytes mapped
  uint64_t offset = 0;   // offset into the object of `address`
  uint64_t device = 0;   // st_dev / st_ino of the object
  uint64_t inode = 0;
  uint32_t flags = 0;  // RegistryFlags
  uint32_t epoch = 0;
  int32_t prot = 0;       // mmap PROT_* bits
  int32_t map_flags = 0;  // mmap MAP_* bits (MAP_SHARED: fork does not copy it)
  uint64_t payload[2] = {};
  char name[kNameCap] = {};  // shm_open name ("/torch_..."), memfd label, or ""
};

// One piece removed by RemoveMappings: the mapping as it was, and the part
// of it that went away.
struct RemovedPiece {
  ShmMapping mapping;    // before the removal
  uint64_t address = 0;  // start of the overlap
  uint64_t size = 0;     // bytes of the overlap
  bool whole = false;    // the mapping is gone entirely
};

// Thread-safe. No method allocates through malloc or calls a hooked
// function other than mmap (which passes straight through for anonymous
// memory). Methods marked "signal-safe" take no lock and may run in a
// signal handler that interrupted any other method.
class BlockRegistry {
 public:
  static constexpr size_t kMaxMappings = 4096;

  // Constant-initialized: the registry works before any constructor ran
  // (malloc is called from ld.so and other libraries' initializers).
  constexpr BlockRegistry() = default;
  BlockRegistry(const BlockRegistry&) = delete;
  BlockRegistry& operator=(const BlockRegistry&) = delete;

  // --- host blocks ---------------------------------------------------------
  // Adds (or replaces) the block at b.address; b.epoch is set to epoch().
  // Returns false if no memory could be mapped for it (the caller then does
  // not record the block, so the trace stays consistent).
  bool AddBlock(const HostBlock& b);
  bool FindBlock(uint64_t address, HostBlock* out) const;
  // The block with address <= ptr < address + max(size, 1).
  bool FindBlockContaining(uint64_t ptr, HostBlock* out) const;
  bool RemoveBlock(uint64_t address, HostBlock* out);
  // flags = (flags & ~clear) | set; payload replaced when non-null.
  bool UpdateBlock(uint64_t address, uint32_t set, uint32_t clear, const uint64_t* payload);
  // Copies up to `cap` blocks whose flags have any bit of `any_flags`
  // (all blocks when 0); returns how many matched (may exceed cap).
  size_t CollectBlocks(uint32_t any_flags, HostBlock* out, size_t cap) const;
  // Clears `flags` on every block and mapping (pinning: the forked child
  // owns no registration).
  void ClearFlagsEverywhere(uint32_t flags);
  // Cheap, lock-free: blocks currently registered.
  size_t live_blocks() const { return live_blocks_.load(std::memory_order_relaxed); }

  // --- shared-memory mappings --------------------------------------------
  // m.epoch is set to epoch(). False if the table is full.
  bool AddMapping(const ShmMapping& m);
  bool FindMappingContaining(uint64_t ptr, ShmMapping* out) const;
  // Lock-free filter for munmap: false when [address, address+size) cannot
  // overlap any recorded mapping.
  bool MayOverlapMappings(uint64_t address, uint64_t size) const {
    if (live_mappings_.load(std::memory_order_acquire) == 0) return false;
    uint64_t lo = lo_.load(std::memory_order_acquire), hi = hi_.load(std::memory_order_acquire);
    uint64_t end = address + size < address ? UINT64_MAX : address + size;
    return address < hi && end > lo;
  }
  // Copies (without removing) up to `cap` mappings overlapping the range;
  // returns how many overlap.
  size_t OverlappingMappings(uint64_t address, uint64_t size, ShmMapping* out, size_t cap) const;
  // Removes [address, address+size) from every recorded mapping: whole
  // mappings go, a cut at either end trims, a hole in the middle splits.
  // Reports up to `cap` pieces; returns how many there were.
  size_t RemoveMappings(uint64_t address, uint64_t size, RemovedPiece* out, size_t cap);
  bool UpdateMapping(uint64_t address, uint32_t set, uint32_t clear, const uint64_t* payload);
  size_t live_mappings() const { return live_mappings_.load(std::memory_order_relaxed); }

  // Signal-safe: the mapping containing ptr, read without the lock (a slot
  // being rewritten at that instant is skipped).
  bool FindMappingContainingFromSignal(uint64_t ptr, ShmMapping* out) const;
  // Signal-safe: count and total bytes of live mappings (driver-internal
  // ones left out).
  void SumMappingsFromSignal(uint64_t* count, uint64_t* bytes) const;

  // --- process ---------------------------------------------------------------
  // Generation of the process: 0 in the first traced process, +1 in each
  // forked child. Entries of an older epoch were inherited from the parent.
  uint32_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  // pthread_atfork handlers (registered by InstallRegistryForkHandlers).
  void ForkPrepare();
  void ForkParent();
  void ForkChild();
  // Test helper: forget everything (storage is kept).
  void ResetForTest();

 private:
  struct Slot;   // one mapping, with a seqlock for lock-free readers
  class Blocks;  // ordered map over an mmap'd node pool

  bool EnsureSlotsLocked();
  void RecomputeBoundsLocked();
  static void ReadSlot(const Slot& s, ShmMapping* out);
  static void WriteSlot(Slot* s, const ShmMapping& m);

  // Recursive: between our fork-prepare handler and the parent/child
  // handler the forking thread holds it, and other atfork handlers (run in
  // an order we do not control) may free a recorded block on that thread.
  mutable pthread_mutex_t mu_ = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  Blocks* blocks_ = nullptr;  // created on first AddBlock (mmap'd)
  std::atomic<Slot*> slots_{nullptr};
  std::atomic<size_t> slot_high_{0};  // slots [0, high) may be live
  std::atomic<size_t> live_blocks_{0};
  std::atomic<size_t> live_mappings_{0};
  std::atomic<uint64_t> lo_{UINT64_MAX};  // bounds of all live mappings
  std::atomic<uint64_t> hi_{0};
  std::atomic<uint32_t> epoch_{0};
};

// The process's registry: a constant-initialized global, usable from the
// first malloc (before any constructor ran) and never destroyed.
extern BlockRegistry g_registry;
inline BlockRegistry& Registry() { return g_registry; }

// Registers Registry()'s fork handlers once (pthread_atfork). Called by the
// alloc and shm initializers (library constructors). Their order against the
// recorder's and other libraries' handlers does not matter: no other lock is
// ever taken while the registry lock is held, and the lock is recursive, so a
// handler that frees a recorded block on the forking thread while we hold it
// (prepare ran, parent/child not yet) goes through.
void InstallRegistryForkHandlers();

// The host buffer (malloc block or shared-memory mapping) containing p, as
// known to the host-memory registry.
struct HostBuffer {
  uintptr_t base = 0;
  size_t size = 0;
  bool shm = false;       // a MAP_SHARED mapping (fork does not copy it)
  bool writable = true;   // mapped with PROT_WRITE
};
bool FindHostBuffer(uintptr_t p, HostBuffer* out);

}  // namespace pinscope::shim
