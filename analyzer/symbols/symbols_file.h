// The run's symbols file, RUN/symbols.pb (proto/symbols.proto): one
// serialized SymbolFile holding the names of the run's native frames,
// resolved where the binaries were. Reading and writing only; what goes in it
// is run_symbols.h.
#pragma once

#include <cstdint>
#include <string>

#include "analyzer/common/status.h"
#include "symbols.pb.h"

namespace pinscope {

// SymbolFile.format_version written and the newest one read.
inline constexpr uint32_t kSymbolsFormatVersion = 1;
inline constexpr char kSymbolsFileName[] = "symbols.pb";

std::string SymbolsFilePath(const std::string& run_dir);

// Reads `path` into *file. Errors name the file and the problem: kIoError
// (cannot be read; `exists` false when there is no such file), kCorrupt (not
// a SymbolFile), kNewerFormat, kBadHeader (no format version).
Status ReadSymbolsFile(const std::string& path, symbols::SymbolFile* file, bool* exists);

// Writes *file to `path` through a temporary file in the same folder and a
// rename, so a reader never sees half a file; an existing one is replaced.
Status WriteSymbolsFile(const std::string& path, const symbols::SymbolFile& file);

// A file's identity for modules without a build id: size and mtime.
struct FileIdentity {
  bool exists = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
FileIdentity IdentityOf(const std::string& path);

}  // namespace pinscope
