// Python frames for call stacks; see python_frames.h for the two ways and
// why they are safe. The per-version offsets below were read with offsetof()
// from each version's own headers (Py_BUILD_CORE, internal/pycore_frame.h)
// and are checked at run time by the first, careful walk of each process.
#include "shim/stacks/python_frames.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "shim/base/log.h"
#include "shim/stacks/stack_intern.h"

namespace pinscope::shim::python {
namespace {

// PyObject*, PyFrameObject*, PyCodeObject* and PyThreadState* are opaque here.
using Obj = void*;

struct Api {
  int (*is_initialized)();     // Py_IsInitialized
  int (*is_finalizing)();      // Py_IsFinalizing (3.13) / _Py_IsFinalizing; optional
  int (*gil_check)();          // PyGILState_Check
  Obj (*this_thread_state)();  // PyGILState_GetThisThreadState: this thread's, from TSS
  Obj (*current_state)();      // PyThreadState_GetUnchecked (3.13) / _PyThreadState_UncheckedGet
  Obj (*get_frame)();          // PyEval_GetFrame: borrowed
  Obj (*frame_back)(Obj);      // PyFrame_GetBack (3.9+): new reference
  Obj (*frame_code)(Obj);      // PyFrame_GetCode (3.9+): new reference
  int (*frame_line)(Obj);      // PyFrame_GetLineNumber
  int (*addr2line)(Obj, int);  // PyCode_Addr2Line
  Obj (*get_attr)(Obj, const char*);              // PyObject_GetAttrString: new reference
  const char* (*as_utf8)(Obj, ssize_t*);          // PyUnicode_AsUTF8AndSize: borrowed buffer
  void (*incref)(Obj);                            // Py_IncRef
  void (*decref)(Obj);                            // Py_DecRef
  int (*gc_disable)();                            // PyGC_Disable (3.10+): previous state
  int (*gc_enable)();                             // PyGC_Enable
  void (*err_fetch)(Obj*, Obj*, Obj*);            // PyErr_Fetch
  void (*err_restore)(Obj, Obj, Obj);             // PyErr_Restore
  const char* (*version)();                       // Py_GetVersion
  uintptr_t code_type, frame_type, unicode_type;  // &PyCode_Type, &PyFrame_Type, &PyUnicode_Type
};

// Where the frame walk finds things, per minor version (64-bit builds,
// default ABI: no free-threading, no Py_TRACE_REFS).
struct Layout {
  int minor;
  size_t tstate_frame;    // 3.10 frame, 3.11/3.12 cframe, 3.13 current_frame
  size_t cframe_current;  // _PyCFrame.current_frame (3.11/3.12), else kNone
  size_t frame_back;      // 3.10 f_back; 3.11+ previous
  size_t frame_code;      // f_code; 3.13 f_executable
  size_t frame_instr;     // 3.11+ prev_instr; 3.13 instr_ptr
  size_t frame_owner;     // 3.11+ owner (char)
  int owner_cstack;       // FRAME_OWNED_BY_CSTACK (3.12+), -1 before
  size_t code_filename, code_name;
  size_t code_adaptive;             // co_code_adaptive (3.11+)
  size_t code_firsttraceable;       // _co_firsttraceable (int, 3.11+)
  size_t ascii_size, compact_size;  // sizeof PyASCIIObject / PyCompactUnicodeObject
};
constexpr size_t kNone = ~size_t{0};
constexpr int kOwnedByGenerator = 1;
constexpr Layout kLayouts[] = {
    {10, 24, kNone, 24, 32, kNone, kNone, -1, 104, 112, kNone, kNone, 48, 72},
    {11, 56, 8, 48, 32, 56, 69, -1, 112, 120, 184, 168, 48, 72},
    {12, 56, 0, 8, 0, 56, 70, 3, 112, 120, 192, 176, 40, 56},
    {13, 72, kNone, 8, 0, 56, 70, 3, 112, 120, 200, 184, 40, 56},
};
// PyObject header and str fields, the same in 3.10-3.13.
constexpr size_t kObType = 8, kStrLength = 16, kStrHash = 24, kStrState = 32;
// 3.10 PyFrameObject: int f_lasti at 96, int f_lineno at 100 (read as one word).
constexpr size_t kFrame310Lasti = 96;

Api g_api;
bool g_ok = false;
const Layout* g_layout = nullptr;

enum WalkState : int { kUnchecked = 0, kChecking = 1, kChecked = 2, kOff = 3 };
std::atomic<int> g_walk{kOff};
std::atomic<bool> g_said_walk_off{false};

template <typename Fn>
bool Resolve(Fn* out, const char* name, const char* alt = nullptr) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p && alt) p = dlsym(RTLD_DEFAULT, alt);
  *out = reinterpret_cast<Fn>(p);
  return p != nullptr;
}

// Reads memory of this process: directly, or (careful) through
// process_vm_readv, which fails with EFAULT instead of faulting.
class Reader {
 public:
  explicit Reader(bool careful) : careful_(careful) {}
  bool ok() const { return ok_; }
  void Fail() { ok_ = false; }

  bool Read(uintptr_t addr, void* out, size_t n) {
    if (!ok_) return false;
    if (careful_ && addr >= 4096) {
      iovec local{out, n};
      iovec remote{reinterpret_cast<void*>(addr), n};
      ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
      if (got == static_cast<ssize_t>(n)) return true;
      if (got < 0 && (errno == ENOSYS || errno == EPERM)) {
        careful_ = false;  // not allowed here (seccomp): the type checks remain
      } else {
        ok_ = false;
        memset(out, 0, n);
        return false;
      }
    }
    if (addr < 4096) {  // a null pointer plus a field offset
      ok_ = false;
      memset(out, 0, n);
      return false;
    }
    memcpy(out, reinterpret_cast<const void*>(addr), n);
    return true;
  }
  template <typename T>
  T Get(uintptr_t addr) {
    T v{};
    Read(addr, &v, sizeof v);
    return v;
  }
  uintptr_t Ptr(uintptr_t addr) { return Get<uintptr_t>(addr); }

 private:
  bool careful_;
  bool ok_ = true;
};

// UTF-8 of a str object (compact, as code object names always are); 0 if it
// is not an exact str or not compact.
size_t ReadUnicode(Reader& r, uintptr_t s, char* out, size_t cap) {
  if (!s || r.Ptr(s + kObType) != g_api.unicode_type) return 0;
  const int64_t len = r.Get<int64_t>(s + kStrLength);
  const uint32_t state = r.Get<uint32_t>(s + kStrState);
  const bool compact = state & 0x20, ascii = state & 0x40;
  const unsigned kind = (state >> 2) & 7;
  if (!r.ok() || !compact || len < 0) return 0;
  if (ascii) {
    size_t n = std::min<size_t>(static_cast<size_t>(len), cap);
    return r.Read(s + g_layout->ascii_size, out, n) ? n : 0;
  }
  if (kind != 1 && kind != 2 && kind != 4) return 0;
  unsigned char raw[1024];
  size_t chars = std::min<size_t>(static_cast<size_t>(len), sizeof raw / kind);
  if (!r.Read(s + g_layout->compact_size, raw, chars * kind)) return 0;
  size_t n = 0;
  for (size_t i = 0; i < chars; ++i) {
    uint32_t c;
    if (kind == 1) {
      c = raw[i];
    } else if (kind == 2) {
      uint16_t v;
      memcpy(&v, raw + 2 * i, 2);
      c = v;
    } else {
      memcpy(&c, raw + 4 * i, 4);
    }
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = '?';
    unsigned char enc[4];
    size_t k;
    if (c < 0x80) {
      enc[0] = static_cast<unsigned char>(c);
      k = 1;
    } else if (c < 0x800) {
      enc[0] = static_cast<unsigned char>(0xC0 | (c >> 6));
      enc[1] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      k = 2;
    } else if (c < 0x10000) {
      enc[0] = static_cast<unsigned char>(0xE0 | (c >> 12));
      enc[1] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
      enc[2] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      k = 3;
    } else {
      enc[0] = static_cast<unsigned char>(0xF0 | (c >> 18));
      enc[1] = static_cast<unsigned char>(0x80 | ((c >> 12) & 0x3F));
      enc[2] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
      enc[3] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      k = 4;
    }
    if (n + k > cap) break;
    memcpy(out + n, enc, k);
    n += k;
  }
  return n;
}

uint64_t InternRead(Reader& r, uintptr_t s) {
  char buf[intern::kMaxStringBytes];
  size_t n = ReadUnicode(r, s, buf, sizeof buf);
  return n ? intern::InternString(buf, n) : intern::InternString("?", 1);
}

inline uint64_t Mix(uint64_t a, uint64_t b) {
  __uint128_t m = static_cast<__uint128_t>(a ^ 0xa0761d6478bd642full) * (b ^ 0xe7037ed1a0b428dbull);
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

// A code object's name fingerprint: the addresses of its file and function
// name strings and their hashes. No reference is taken (the thread may not
// hold the GIL), so a cache entry of a freed code object could meet a new one
// at the same address: it matches only if that one also has the same name
// string objects (hence the same names). Odd, so never 0 (the GIL-held tag).
uint64_t CodeTag(Reader& r, uintptr_t code, uintptr_t* file, uintptr_t* name) {
  *file = r.Ptr(code + g_layout->code_filename);
  *name = r.Ptr(code + g_layout->code_name);
  return Mix(*file ^ (*name << 1),
             r.Get<uint64_t>(*file + kStrHash) ^ (r.Get<uint64_t>(*name + kStrHash) << 1)) |
         1;
}

// File and function name ids of a code object met in a frame walk.
void CodeNames(Reader& r, uintptr_t code, uint64_t tag, uintptr_t file, uintptr_t name,
               uint64_t* filename_id, uint64_t* function_id) {
  if (intern::LookupCode(reinterpret_cast<void*>(code), tag, filename_id, function_id)) return;
  *filename_id = InternRead(r, file);
  *function_id = InternRead(r, name);
  intern::InsertCode(reinterpret_cast<void*>(code), tag, *filename_id, *function_id);
}

// Calls fn(code, frame, where) for each of the calling thread's Python
// frames, innermost first, at most `max` of them (*truncated if more were
// left out), until fn returns false; `where` is what the frame's line
// depends on: the instruction (and 3.10's f_lineno). Stops early, with
// r.ok() false, where something did not look like the layout says.
// kCodeFields false (the stack cache's key, CaptureKey): on 3.11+ only what
// each frame holds, none of its code object's fields (its type, its first
// traceable instruction), so neither a frame being set up nor, on 3.13, one
// without a code object is left out, and `where` is the instruction's
// address less the code object's.
template <bool kCodeFields = true, typename Fn>
void ForEachFrame(Reader& r, size_t max, bool* truncated, Fn&& fn) {
  const Layout& L = *g_layout;
  const uintptr_t tstate = reinterpret_cast<uintptr_t>(g_api.this_thread_state());
  if (!tstate) return;
  uintptr_t frame = r.Ptr(tstate + L.tstate_frame);
  if (frame && L.cframe_current != kNone) frame = r.Ptr(frame + L.cframe_current);
  size_t n = 0;
  for (int guard = 0; frame && r.ok(); ++guard) {
    if (guard > 100000) {  // a cycle: not a frame chain
      r.Fail();
      break;
    }
    uintptr_t code, next;
    uint64_t where;
    if (L.minor == 10) {
      if (r.Ptr(frame + kObType) != g_api.frame_type) {
        r.Fail();
        break;
      }
      code = r.Ptr(frame + L.frame_code);
      next = r.Ptr(frame + L.frame_back);
      if (r.Ptr(code + kObType) != g_api.code_type) {
        r.Fail();
        break;
      }
      where = r.Get<uint64_t>(frame + kFrame310Lasti);  // f_lasti and f_lineno
    } else {
      const int owner = r.Get<unsigned char>(frame + L.frame_owner);
      next = r.Ptr(frame + L.frame_back);
      code = r.Ptr(frame + L.frame_code);
      if (!r.ok()) break;
      if (owner == L.owner_cstack) {  // the C stack's entry frame: not Python
        frame = next;
        continue;
      }
      if constexpr (!kCodeFields) {
        where = r.Ptr(frame + L.frame_instr) - code;
      } else {
        if (r.Ptr(code + kObType) != g_api.code_type) {
          if (L.minor >= 13 && r.ok()) {  // f_executable may be None
            frame = next;
            continue;
          }
          r.Fail();
          break;
        }
        const uintptr_t instr = r.Ptr(frame + L.frame_instr);
        const uintptr_t start = code + L.code_adaptive;
        const int first = r.Get<int>(code + L.code_firsttraceable);
        if (!r.ok()) break;
        // Incomplete (being set up): the C API skips these frames too.
        if (owner != kOwnedByGenerator && instr < start + 2 * static_cast<uintptr_t>(first)) {
          frame = next;
          continue;
        }
        where = instr - start;
      }
    }
    if (n == max) {
      *truncated = true;
      break;
    }
    if (!fn(code, frame, where)) break;
    ++n;
    frame = next;
  }
}

// Reads the calling thread's frame chain (see python_frames.h). Returns the
// number of ids written; r.ok() false if something did not look like the
// layout says (then the ids so far are still good).
size_t Walk(Reader& r, uint64_t* ids, size_t max, bool* truncated, uint64_t* where_hash) {
  size_t n = 0;
  ForEachFrame(r, max, truncated, [&](uintptr_t code, uintptr_t frame, uint64_t where) {
    uintptr_t file, name;
    const uint64_t tag = CodeTag(r, code, &file, &name);
    if (!r.ok()) return false;
    const uint64_t site = Mix(tag, where) | 1;
    *where_hash = Mix(*where_hash, site);
    uint64_t id = intern::LookupSite(reinterpret_cast<void*>(code), site);
    if (id == 0) {
      uint64_t filename_id = 0, function_id = 0;
      CodeNames(r, code, tag, file, name, &filename_id, &function_id);
      if (!r.ok()) return false;
      const int line = g_layout->minor == 10
                           ? g_api.frame_line(reinterpret_cast<Obj>(frame))  // 3.10: reads only
                           : g_api.addr2line(reinterpret_cast<Obj>(code), static_cast<int>(where));
      id = intern::InternFrame(filename_id, function_id, line > 0 ? line : 0);
      intern::InsertSite(reinterpret_cast<void*>(code), site, id);
    }
    if (id == 0) {  // a table is full: say the Python stack is cut here
      *truncated = true;
      return false;
    }
    ids[n++] = id;
    return true;
  });
  return n;
}

// --- the C API path (GIL held, other versions) ---------------------------

// True only when this thread holds the GIL. PyGILState_Check alone answers 1
// when its check is disabled (sub-interpreters on <= 3.11), so also compare
// the thread state that holds the GIL (<= 3.11: the global current one; 3.12+:
// this thread's attached one) with this thread's own.
bool HoldsGil() {
  if (g_api.gil_check() != 1) return false;
  Obj current = g_api.current_state();
  return current != nullptr && current == g_api.this_thread_state();
}

uint64_t InternUnicode(Obj s) {
  if (!s) return 0;
  ssize_t n = 0;
  const char* p = g_api.as_utf8(s, &n);  // NULL (error set) for lone surrogates
  if (!p || n <= 0) return intern::InternString("?", 1);
  return intern::InternString(p, static_cast<size_t>(n));
}

// First sight of a code object: read its file and function names and cache
// them under its address, keeping a reference so the address stays its own.
void ResolveCode(Obj code, uint64_t* filename_id, uint64_t* function_id) {
  Obj file = g_api.get_attr(code, "co_filename");
  Obj name = g_api.get_attr(code, "co_name");
  *filename_id = InternUnicode(file);
  *function_id = InternUnicode(name);
  if (file) g_api.decref(file);
  if (name) g_api.decref(name);
  if (intern::InsertCode(code, 0, *filename_id, *function_id)) g_api.incref(code);
}

size_t ApiWalk(uint64_t* ids, size_t max, bool* truncated) {
  // Our calls may set an error (allocation failure, undecodable name): keep
  // the thread's pending exception, if any, and drop ours.
  Obj et = nullptr, ev = nullptr, etb = nullptr;
  g_api.err_fetch(&et, &ev, &etb);
  // Materializing frame objects allocates GC-tracked objects; on <= 3.11 that
  // can start a collection right here, running finalizers (user code) inside
  // the program's malloc or cudaMemcpy. Hold the collector off meanwhile.
  const int gc_was_enabled = g_api.gc_disable();
  size_t n = 0;
  Obj frame = g_api.get_frame();  // borrowed
  bool owned = false;
  while (frame) {
    if (n == max) {
      *truncated = true;
      break;
    }
    uint64_t filename_id = 0, function_id = 0;
    if (Obj code = g_api.frame_code(frame)) {
      if (!intern::LookupCode(code, 0, &filename_id, &function_id))
        ResolveCode(code, &filename_id, &function_id);
      g_api.decref(code);
    }
    int line = g_api.frame_line(frame);
    uint64_t id = intern::InternFrame(filename_id, function_id, line > 0 ? line : 0);
    if (id == 0) {
      *truncated = true;
      break;
    }
    ids[n++] = id;
    Obj back = g_api.frame_back(frame);
    if (owned) g_api.decref(frame);
    frame = back;
    owned = true;
  }
  if (frame && owned) g_api.decref(frame);
  if (gc_was_enabled) g_api.gc_enable();
  g_api.err_restore(et, ev, etb);
  return n;
}

}  // namespace

bool Init() {
  if (g_ok) return true;
  Api a{};
  bool ok =
      Resolve(&a.is_initialized, "Py_IsInitialized") && Resolve(&a.gil_check, "PyGILState_Check") &&
      Resolve(&a.this_thread_state, "PyGILState_GetThisThreadState") &&
      Resolve(&a.current_state, "PyThreadState_GetUnchecked", "_PyThreadState_UncheckedGet") &&
      Resolve(&a.get_frame, "PyEval_GetFrame") && Resolve(&a.frame_back, "PyFrame_GetBack") &&
      Resolve(&a.frame_code, "PyFrame_GetCode") &&
      Resolve(&a.frame_line, "PyFrame_GetLineNumber") &&
      Resolve(&a.get_attr, "PyObject_GetAttrString") &&
      Resolve(&a.as_utf8, "PyUnicode_AsUTF8AndSize") && Resolve(&a.incref, "Py_IncRef") &&
      Resolve(&a.decref, "Py_DecRef") && Resolve(&a.gc_disable, "PyGC_Disable") &&
      Resolve(&a.gc_enable, "PyGC_Enable") && Resolve(&a.err_fetch, "PyErr_Fetch") &&
      Resolve(&a.err_restore, "PyErr_Restore");
  if (!ok) return false;  // no Python, or older than 3.10 (no PyGC_Disable)
  Resolve(&a.is_finalizing, "Py_IsFinalizing", "_Py_IsFinalizing");
  Resolve(&a.addr2line, "PyCode_Addr2Line");
  Resolve(&a.version, "Py_GetVersion");
  void* code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
  void* frame_type = dlsym(RTLD_DEFAULT, "PyFrame_Type");
  void* unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  a.code_type = reinterpret_cast<uintptr_t>(code_type);
  a.frame_type = reinterpret_cast<uintptr_t>(frame_type);
  a.unicode_type = reinterpret_cast<uintptr_t>(unicode_type);
  g_api = a;
  g_ok = true;

  // The frame walk: for a known version of the default build only.
  const char* walk = getenv("PINSCOPE_PY_WALK");  // "0": C API path only (tests, escape hatch)
  const char* v = a.version ? a.version() : "";
  int major = 0, minor = 0;
  if (sscanf(v, "%d.%d", &major, &minor) == 2 && major == 3 && !strstr(v, "free-threading") &&
      a.addr2line && code_type && frame_type && unicode_type && !(walk && !strcmp(walk, "0"))) {
    for (const Layout& l : kLayouts) {
      if (l.minor == minor) g_layout = &l;
    }
  }
  g_walk.store(g_layout ? kUnchecked : kOff);
  return true;
}

bool Available() { return g_ok; }
bool FrameWalk() { return g_ok && g_walk.load(std::memory_order_relaxed) != kOff; }

size_t Capture(uint64_t* ids, size_t max, bool* truncated, uint64_t* where) {
  uint64_t unused = 0;
  if (where == nullptr) where = &unused;
  *where = 0;
  *truncated = false;
  if (!g_ok || max == 0 || !g_api.is_initialized()) return 0;
  if (g_api.is_finalizing && g_api.is_finalizing()) return 0;
  int walk = g_walk.load(std::memory_order_acquire);
  if (walk == kChecked) {
    Reader r(false);
    size_t n = Walk(r, ids, max, truncated, where);
    if (!r.ok()) *truncated = true;  // something unexpected ended the walk early
    return n;
  }
  // The first walk of the process: careful reads and type checks (one thread
  // at a time; the others use the C API meanwhile, or have no frames).
  if (walk == kUnchecked && g_walk.compare_exchange_strong(walk, kChecking)) {
    Reader r(true);
    size_t n = Walk(r, ids, max, truncated, where);
    if (!r.ok()) {
      g_walk.store(kOff);
      LogOnce(&g_said_walk_off,
              "Python %s: its frames do not have the expected layout; Python frames are "
              "recorded only for threads that hold the GIL",
              g_api.version ? g_api.version() : "?");
      *truncated = false;
      n = 0;
    } else {
      g_walk.store(n > 0 ? kChecked : kUnchecked);  // checked once it has read a frame
    }
    if (n > 0) return n;
  }
  *where = 0;  // the C API path gives lines only
  return HoldsGil() ? ApiWalk(ids, max, truncated) : 0;
}

bool CaptureKey(size_t max, size_t* count, bool* truncated, uint64_t* key) {
  *count = 0;
  *truncated = false;
  *key = 0;
  if (!g_ok || max == 0 || !g_api.is_initialized()) return true;
  if (g_api.is_finalizing && g_api.is_finalizing()) return true;
  if (g_walk.load(std::memory_order_acquire) != kChecked) return false;
  Reader r(false);
  uint64_t h = 0;
  size_t n = 0;
  // Only what each frame holds on its own cache line or two on 3.11+: the
  // code object's address and the instruction, none of the code object's
  // fields (ForEachFrame<false>). A cached stack is taken where the loop's
  // step has left those lines out of the caches: on the H100 the walk took
  // 0.8 us of a cached stack's 1.2 us in a Hugging Face loop, and under
  // cachegrind, with a sweep between copies, the code objects' lines were
  // about half of a copy hook's data-cache misses (docs/benchmarks.md,
  // twenty-sixth session). A freed code object's address taken by a new one
  // at the same instruction on the same whole stack gives the old stack's
  // key: the cache's checks see the change (stacks.cc).
  ForEachFrame</*kCodeFields=*/false>(r, max, truncated,
                                      [&](uintptr_t code, uintptr_t, uint64_t where) {
                                        h = Mix(h, Mix(code, where) | 1);
                                        ++n;
                                        return true;
                                      });
  if (!r.ok()) *truncated = true;
  *count = n;
  *key = h;
  return true;
}

}  // namespace pinscope::shim::python
