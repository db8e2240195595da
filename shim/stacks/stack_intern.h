// Interning for call stacks: fixed-size, mmap'd, lock-free tables that map
// stacks, Python frames, strings and code objects to small per-process ids,
// plus the "written in this file" marks that make each id's packet appear
// once per trace file (a forked child starts a new file: ResetInChild).
//
// Contract: every function is thread-safe, never calls malloc, never blocks
// on a lock (a thread that finds an entry half-made by another spins a short,
// bounded while and then gives up), and is bounded in memory: a full table
// returns 0 ("no id") instead of growing. Ids are stable for the life of the
// process and inherited by forked children.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim::intern {

// Bounds (entries). Each table reserves twice its entries in slots of 32
// bytes (load factor <= 0.5); memory is MAP_NORESERVE, so only touched pages
// count. Totals: about 21 MiB of address space, see docs/stacks.md.
constexpr size_t kMaxStacks = 64 * 1024;
constexpr size_t kMaxFrames = 64 * 1024;
constexpr size_t kMaxStrings = 32 * 1024;
constexpr size_t kStringArenaBytes = 4u << 20;
constexpr size_t kMaxStringBytes = 1024;  // longer strings are cut (UTF-8 safe)
constexpr size_t kMaxCodeObjects = 32 * 1024;
constexpr size_t kMaxSites = 64 * 1024;

struct Hash128 {
  uint64_t a, b;
};
Hash128 HashWords(const uint64_t* words, size_t n);
Hash128 HashBytes(const void* data, size_t n);

// Maps the tables. Idempotent; false if the memory could not be mapped (the
// caller then turns stacks off).
bool Init();
bool Ready();

// fork(): the child writes a new file, so every id must be written again
// there. O(1): bumps the file epoch that the written-marks compare against.
void ResetInChild();

// --- written-once marks -------------------------------------------------
// A mark is 0 (never written), 2e (being written in file epoch e) or 2e+1
// (written in epoch e).
using Mark = std::atomic<uint32_t>;
// True: the caller must write the packet now and then call FinishWrite.
// False: it is written (or, after a bounded wait, still being written by
// another thread: its packet lands a few packets later in the file).
bool ClaimWrite(Mark* mark);
// ok=false (packet dropped) clears the mark so that a later event retries.
void FinishWrite(Mark* mark, bool ok);

// --- stacks -------------------------------------------------------------
// Id of the stack with this content hash, inserting it if new; 0 when the
// table is full. *mark is the stack's written-mark (the caller writes the
// Stack packet, since only it holds the content).
uint64_t InternStack(Hash128 h, Mark** mark);

// --- strings (InternedString) -------------------------------------------
// Process-wide string ids, shared by everything the shim interns (Python file
// and function names; kernel names later). 0 when full or empty.
uint64_t InternString(const char* s, size_t n);
// Writes the InternedString packet if this file lacks it. False if dropped;
// true for id 0 (no string: nothing to write).
bool EnsureStringWritten(uint64_t id, uint64_t ts);

// --- Python frames (PythonFrame) ----------------------------------------
uint64_t InternFrame(uint64_t filename_id, uint64_t function_id, uint32_t line);
// Writes the frame's strings and its PythonFrame packet if needed.
bool EnsureFrameWritten(uint64_t id, uint64_t ts);

// --- Python code objects -> (filename id, function id) ------------------
// Keys are a code object's address plus a tag. Tag 0: the caller holds the
// GIL and keeps a reference to every cached code object, so the address is
// never reused while cached. Other tags fingerprint the code object's name
// strings (their addresses and hashes), so that an entry left by a freed code
// object cannot match the one that reuses its address (python_frames.cc).
bool LookupCode(const void* code, uint64_t tag, uint64_t* filename_id, uint64_t* function_id);
// False if the cache is full or the key is present (with tag 0 the caller
// then must not keep a reference).
bool InsertCode(const void* code, uint64_t tag, uint64_t filename_id, uint64_t function_id);

// --- Python frame sites -> PythonFrame id --------------------------------
// A frame walk's shortcut: (code object address, a tag made of its name
// fingerprint and the instruction offset) -> the PythonFrame id, so that a
// frame seen before costs one lookup (no line table decoding, no string
// hashing). 0 when absent.
uint64_t LookupSite(const void* code, uint64_t tag);
void InsertSite(const void* code, uint64_t tag, uint64_t frame_id);

struct Stats {
  uint64_t stacks, frames, strings, code_objects;
  uint64_t full_misses;  // lookups that got no id because a table was full
};
Stats GetStats();

}  // namespace pinscope::shim::intern
