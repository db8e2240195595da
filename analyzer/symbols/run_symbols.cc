// Resolving and looking up the names of a run's native frames; see
// run_symbols.h. The walk reads each trace file once for its Module and Stack
// packets only; libdw opens each ELF file once (Symbolizer).
#include "analyzer/symbols/run_symbols.h"

#include <unistd.h>

#include <chrono>
#include <set>

#include "analyzer/read/run_loader.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/symbolize/symbolizer.h"
#include "analyzer/symbols/symbols_file.h"

namespace pinscope {
namespace {

NativeName FromSymbolized(const SymbolizedFrame& frame) {
  NativeName name;
  if (frame.build_id_mismatch) {
    name.status = NativeName::Status::kChanged;
  } else if (!frame.function.empty()) {
    name.status = NativeName::Status::kNamed;
    name.function = frame.function;
    name.file = frame.file;
    name.line = static_cast<uint32_t>(frame.line);
  }
  return name;
}

// A module without a build id, named from a file that is no longer the same.
bool IdentityChanged(const symbols::ModuleSymbols& stored) {
  if (!stored.build_id().empty() || stored.file_size() == 0) return false;
  const FileIdentity now = IdentityOf(stored.path());
  return now.exists && (now.size != stored.file_size() || now.mtime_ns != stored.file_mtime_ns());
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return std::string();
  return name;
}

}  // namespace

RunNames::RunNames(symbols::SymbolFile stored, bool live) : file_(std::move(stored)), live_(live) {
  for (const symbols::ModuleSymbols& module : file_.modules()) {
    Stored& entry = stored_[{module.path(), module.build_id()}];
    entry.module = &module;
    for (const symbols::FrameSymbol& frame : module.frames()) entry.frames[frame.offset()] = &frame;
  }
}

RunNames::~RunNames() = default;

NativeName RunNames::Name(const trace::Module& module, uint64_t offset) {
  auto it = stored_.find({module.path(), module.build_id()});
  const Stored* stored = it == stored_.end() ? nullptr : &it->second;
  if (stored != nullptr && stored->module->status() == symbols::MODULE_CHANGED) {
    NativeName name;
    name.status = NativeName::Status::kChanged;
    return name;
  }
  if (stored != nullptr && stored->module->status() == symbols::MODULE_READ) {
    NativeName name;
    auto frame = stored->frames.find(offset);
    if (frame == stored->frames.end()) return name;  // read, and no symbol covers it
    name.status = NativeName::Status::kNamed;
    name.function = frame->second->function();
    name.file = frame->second->file();
    name.line = frame->second->line();
    return name;
  }
  // Not stored, or the binary was missing where they were stored: perhaps
  // it is here (or its debug file is).
  return live_ ? Live(module, offset, stored) : NativeName();
}

NativeName RunNames::Live(const trace::Module& module, uint64_t offset, const Stored* stored) {
  if (stored != nullptr && IdentityChanged(*stored->module)) {
    NativeName name;
    name.status = NativeName::Status::kChanged;
    return name;
  }
  if (!symbolizer_) symbolizer_ = std::make_unique<Symbolizer>();
  return FromSymbolized(symbolizer_->Symbolize(&module, module.load_address() + offset));
}

std::unique_ptr<NativeNames> OpenRunNames(const std::string& run_dir, SymbolSource source,
                                          std::string* warning) {
  warning->clear();
  if (source == SymbolSource::kOff) return nullptr;
  symbols::SymbolFile file;
  bool exists = false;
  const Status read = ReadSymbolsFile(SymbolsFilePath(run_dir), &file, &exists);
  if (!read.ok()) {
    if (exists) *warning = read.message + "; native frames are named from the binaries here";
    file.Clear();
  }
  return std::make_unique<RunNames>(std::move(file), source == SymbolSource::kAuto);
}

Status SymbolizeRun(const std::string& run_dir, SymbolizeSummary* summary) {
  *summary = SymbolizeSummary();
  RunListing listing;
  const Status scanned = ScanRun(run_dir, &listing);
  if (!scanned.ok()) return scanned;

  // (path, build id) -> the module as recorded (first seen) and its offsets.
  struct Seen {
    trace::Module module;
    std::set<uint64_t> offsets;
  };
  std::map<std::pair<std::string, std::string>, Seen> seen;
  for (const RunFile& run_file : listing.files) {
    TraceReader reader(run_file.path);
    if (!reader.Open()) continue;  // the report lists the file's problem
    std::vector<trace::Module> modules;
    std::set<uint64_t> pcs;
    trace::TracePacket packet;
    while (reader.Next(&packet)) {
      if (packet.has_module()) {
        modules.push_back(packet.module());
      } else if (packet.has_stack()) {
        for (uint64_t pc : packet.stack().native_pcs()) pcs.insert(pc);
      }
    }
    // Resolved against the file's whole module map, as the replay does by
    // the time a stack is used.
    for (uint64_t pc : pcs) {
      const uint64_t address = pc > 0 ? pc - 1 : 0;
      const trace::Module* module = FindModule(modules, address);
      if (module == nullptr || IsShimModule(module->path())) continue;
      Seen& entry = seen[{module->path(), module->build_id()}];
      if (entry.module.path().empty()) entry.module = *module;
      entry.offsets.insert(address - module->load_address());
    }
  }

  symbols::SymbolFile file;
  file.set_format_version(kSymbolsFormatVersion);
  file.set_writer(std::string("pinscope ") + PINSCOPE_VERSION);
  file.set_hostname(Hostname());
  file.set_written_unix_ns(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count()));
  Symbolizer symbolizer;
  for (const auto& [key, entry] : seen) {
    symbols::ModuleSymbols* out = file.add_modules();
    out->set_path(key.first);
    out->set_build_id(key.second);
    const FileIdentity identity = IdentityOf(key.first);
    out->set_file_size(identity.size);
    out->set_file_mtime_ns(identity.mtime_ns);
    out->set_frames_seen(entry.offsets.size());
    bool changed = false, read_any = false;
    for (uint64_t offset : entry.offsets) {
      const SymbolizedFrame frame =
          symbolizer.Symbolize(&entry.module, entry.module.load_address() + offset);
      changed = changed || frame.build_id_mismatch;
      if (frame.build_id_mismatch || frame.function.empty()) continue;
      read_any = true;
      symbols::FrameSymbol* symbol = out->add_frames();
      symbol->set_offset(offset);
      symbol->set_function(frame.function);
      symbol->set_file(frame.file);
      symbol->set_line(static_cast<uint32_t>(frame.line));
      ++summary->named;
      if (!frame.file.empty()) ++summary->with_line;
    }
    // A debug file found by build id names frames of a binary absent here.
    if (changed && !read_any) {
      out->set_status(symbols::MODULE_CHANGED);
      summary->changed.push_back(key.first);
    } else if (!identity.exists && !read_any) {
      out->set_status(symbols::MODULE_MISSING);
      summary->missing.push_back(key.first);
    } else {
      out->set_status(symbols::MODULE_READ);
    }
    summary->frames += entry.offsets.size();
  }
  summary->modules = seen.size();
  summary->path = SymbolsFilePath(run_dir);
  return WriteSymbolsFile(summary->path, file);
}

}  // namespace pinscope
