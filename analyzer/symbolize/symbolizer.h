// Symbolization of recorded native pcs, after the run, with elfutils' libdw:
// demangled function, file:line where debug info exists, module+offset where
// it does not (stripped binaries, JIT code). The shim records only pcs and
// the module map (Module packets); all the work happens here.
//
// Not thread-safe: use one Symbolizer per thread. One Symbolizer serves every
// process of a run (each ELF file is opened once, keyed by path and build id).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "trace.pb.h"

namespace pinscope {

struct SymbolizedFrame {
  // The code address looked up (a recorded return address minus one).
  uint64_t address = 0;
  // Module holding it; empty when no Module packet covers the address.
  std::string module;
  // address - module load address: the ELF virtual address, what
  // `addr2line -e MODULE` takes. 0 without a module.
  uint64_t module_offset = 0;
  // Demangled function name; empty when unknown (no symbol covers it).
  std::string function;
  // Source position from the DWARF line table; empty / 0 without one.
  std::string file;
  int line = 0;
  // The file at `module` now has another build id than the one that ran (it
  // was rebuilt or replaced): symbols were not read from it.
  bool build_id_mismatch = false;

  // "function (file:line)", "function (module+0x1a2b)", "module+0x1a2b" or
  // "0x7f00..." for an address outside every module.
  std::string ToString() const;
};

// One process's module map: the Module packets of its trace file, in file
// order. A later module covering an address wins (dlclose + dlopen reuse).
class ModuleTable {
 public:
  void Add(const trace::Module& module);
  // The module whose executable extent [start, end) holds address; nullptr
  // if none.
  const trace::Module* Find(uint64_t address) const;
  size_t size() const { return modules_.size(); }

 private:
  std::vector<trace::Module> modules_;
};

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // For a recorded native pc (a return address, Stack.native_pcs): looks up
  // pc - 1, which lies in the call instruction.
  SymbolizedFrame SymbolizeReturnAddress(const ModuleTable& modules, uint64_t pc);
  // For an exact code address in `module` (nullptr: outside every module).
  SymbolizedFrame Symbolize(const trace::Module* module, uint64_t address);

  // Where separate debug files are looked for by build id, in order
  // (default: /usr/lib/debug). Each holds .build-id/xx/rest.debug files.
  void set_debug_dirs(std::vector<std::string> dirs) { debug_dirs_ = std::move(dirs); }

 private:
  struct File;
  File* Open(const trace::Module& module);

  std::vector<std::string> debug_dirs_{"/usr/lib/debug"};
  std::map<std::pair<std::string, std::string>, std::unique_ptr<File>> files_;
  std::map<std::tuple<std::string, std::string, uint64_t>, SymbolizedFrame> cache_;
};

}  // namespace pinscope
