// Names of native frames for the replay's consumers: an interface the
// engine's owner may supply (analyzer/symbols: the run's stored symbols
// file, else libdw on the spot), and the one spelling of a native frame that
// every report, export and diff prints. Without names a frame is
// "libfoo.so+0x1234"; the trace alone never needs any file to be read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace.pb.h"

namespace pinscope {

class ProcessState;

// What is known about one code address of a module.
struct NativeName {
  enum class Status {
    kUnknown,  // no name: binary absent here, stripped, or no symbol covers it
    kNamed,    // `function` (and `file`:`line` where debug info has them)
    kChanged,  // the file at the module's path is not the one that ran: not named
  };
  Status status = Status::kUnknown;
  std::string function;  // demangled
  std::string file;      // source file as the line table names it; empty without one
  uint32_t line = 0;
};

// Supplies names by (module, offset): offset is the code address minus the
// module's load address (an ELF virtual address). Implementations cache;
// single-threaded, like the replay.
class NativeNames {
 public:
  virtual ~NativeNames() = default;
  virtual NativeName Name(const trace::Module& module, uint64_t offset) = 0;
};

// The one spelling of a native frame at code address `address` in `module`
// (nullptr: outside every recorded module):
//   "function at file.cc:42 (libfoo.so+0x1234)"   named, with a line
//   "function (libfoo.so+0x1234)"                 named, no line table
//   "libfoo.so+0x1234 (binary differs from the run's)"
//   "libfoo.so+0x1234"                            no name
//   "0x7f0012345678"                              outside every module
std::string SpellNativeFrame(const trace::Module* module, uint64_t address, NativeNames* names);

// libpinscope's own frames (the unwinder and the hook) sit innermost in every
// native stack; they name no site and are skipped.
bool IsShimModule(const std::string& path);

// The module whose executable extent holds `address`; a later module covering
// it wins (dlclose + dlopen reuse). nullptr: none.
const trace::Module* FindModule(const std::vector<trace::Module>& modules, uint64_t address);

// Up to `depth` native frames of an interned stack of `process`, innermost
// first, shim frames skipped, each spelled as above (the return address
// minus one: the call instruction). Empty for an unknown stack.
std::vector<std::string> DescribeNativeStack(const ProcessState& process, uint64_t stack_id,
                                             int depth);

}  // namespace pinscope
