// Names for a run's native frames: resolving them where the binaries are
// (SymbolizeRun, which `pinscope run` calls when the job ends and `pinscope
// symbolize` after the fact) into RUN/symbols.pb, and the NativeNames the
// report, export and diff hand their replay (OpenRunNames): the stored names
// first, else libdw on the binaries found here.
//
// A module is identified by path and build id. A binary whose build id is not
// the recorded one is never read for names ("changed"); for a module without a
// build id, the file's size and mtime when the names were stored stand in.
// Single-threaded.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/common/status.h"
#include "analyzer/replay/native_names.h"
#include "symbols.pb.h"

namespace pinscope {

class Symbolizer;

// Where the report takes names from.
enum class SymbolSource {
  kAuto,    // RUN/symbols.pb, then the binaries where the report runs
  kStored,  // RUN/symbols.pb only (reports that must not depend on this machine)
  kOff,     // none: module+offset
};

// Stored names, then (when `live`) libdw on the binaries at the modules' paths.
class RunNames : public NativeNames {
 public:
  RunNames(symbols::SymbolFile stored, bool live);
  ~RunNames() override;

  NativeName Name(const trace::Module& module, uint64_t offset) override;

 private:
  using Key = std::pair<std::string, std::string>;  // (path, build id)
  struct Stored {
    const symbols::ModuleSymbols* module = nullptr;
    std::unordered_map<uint64_t, const symbols::FrameSymbol*> frames;
  };
  NativeName Live(const trace::Module& module, uint64_t offset, const Stored* stored);

  symbols::SymbolFile file_;
  std::map<Key, Stored> stored_;
  bool live_;
  std::unique_ptr<Symbolizer> symbolizer_;
};

// The names for a report of `run_dir`; nullptr for kOff. An unreadable
// symbols file is not fatal: *warning gets the reason (empty otherwise) and
// the binaries here are used as if there were none.
std::unique_ptr<NativeNames> OpenRunNames(const std::string& run_dir, SymbolSource source,
                                          std::string* warning);

struct SymbolizeSummary {
  std::string path;                  // the symbols file written
  size_t modules = 0;                // modules with frames in the run's stacks
  size_t frames = 0;                 // distinct (module, offset) frames
  size_t named = 0;                  // of them with a function name
  size_t with_line = 0;              // of them with file:line too
  std::vector<std::string> missing;  // module paths not found here
  std::vector<std::string> changed;  // module paths whose file is another build
};

// Walks every trace file of `run_dir` for the native frames of its stacks
// (libpinscope's own skipped), names each distinct (module, offset) with
// libdw from the binaries at the recorded paths (or debug files by build id)
// and writes RUN/symbols.pb, replacing one already there. Errors: the run
// cannot be listed, or the file cannot be written.
Status SymbolizeRun(const std::string& run_dir, SymbolizeSummary* summary);

}  // namespace pinscope
