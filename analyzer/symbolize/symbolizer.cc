// libdw-based symbolization of recorded pcs; see symbolizer.h.
// Each ELF file is reported to its own offline Dwfl at bias 0, so a lookup
// takes the file's virtual address (pc - load bias), whatever address the
// traced process had loaded it at; the same Dwfl then serves every process.
#include "analyzer/symbolize/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

namespace pinscope {
namespace {

std::string Demangle(const char* raw) {
  // Symbol tables of versioned libraries say "name@@VERSION": drop the version.
  std::string name = raw;
  if (size_t at = name.find('@'); at != std::string::npos && at > 0) name.resize(at);
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string s(out);
  std::free(out);
  return s;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Hex(const unsigned char* bits, int n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += kHex[bits[i] >> 4];
    s += kHex[bits[i] & 15];
  }
  return s;
}

char* g_debuginfo_path = nullptr;  // libdw's default search path
const Dwfl_Callbacks kCallbacks = {
    dwfl_build_id_find_elf,
    dwfl_standard_find_debuginfo,
    dwfl_offline_section_address,
    &g_debuginfo_path,
};

std::string HexOffset(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

struct Symbolizer::File {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;
  bool mismatch = false;
  ~File() {
    if (dwfl) dwfl_end(dwfl);
  }
  // Reports `path` at bias 0; returns its build id (hex) or "" if it has none.
  bool Report(const std::string& path, std::string* build_id) {
    if (dwfl) dwfl_end(dwfl);
    module = nullptr;
    dwfl = dwfl_begin(&kCallbacks);
    if (!dwfl) return false;
    dwfl_report_begin(dwfl);
    module = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), -1, 0, false);
    dwfl_report_end(dwfl, nullptr, nullptr);
    if (!module) return false;
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    int n = dwfl_module_build_id(module, &bits, &vaddr);
    *build_id = n > 0 ? Hex(bits, n) : "";
    return true;
  }
};

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

std::string SymbolizedFrame::ToString() const {
  if (module.empty()) return HexOffset(address);
  std::string where =
      file.empty() ? module + "+" + HexOffset(module_offset) : file + ":" + std::to_string(line);
  if (function.empty()) return where;
  return function + " (" + where + ")";
}

void ModuleTable::Add(const trace::Module& module) { modules_.push_back(module); }

const trace::Module* ModuleTable::Find(uint64_t address) const {
  for (auto it = modules_.rbegin(); it != modules_.rend(); ++it) {
    if (address >= it->start() && address < it->end()) return &*it;
  }
  return nullptr;
}

Symbolizer::File* Symbolizer::Open(const trace::Module& m) {
  auto key = std::make_pair(m.path(), m.build_id());
  auto it = files_.find(key);
  if (it != files_.end()) return it->second.get();
  auto file = std::make_unique<File>();
  std::string found_id;
  bool ok = IsFile(m.path()) && file->Report(m.path(), &found_id);
  if (ok && !m.build_id().empty() && found_id != m.build_id()) {
    ok = false;  // rebuilt since the run: its symbols would lie
    file->mismatch = true;
  }
  // Not on disk (symbolizing elsewhere) or replaced: a separate debug file
  // named by build id holds the symbols and line table of the same code.
  if (!ok && m.build_id().size() > 2) {
    for (const std::string& dir : debug_dirs_) {
      std::string path =
          dir + "/.build-id/" + m.build_id().substr(0, 2) + "/" + m.build_id().substr(2) + ".debug";
      if (IsFile(path) && file->Report(path, &found_id) && found_id == m.build_id()) {
        ok = true;
        file->mismatch = false;
        break;
      }
    }
  }
  if (!ok && file->dwfl) {
    dwfl_end(file->dwfl);
    file->dwfl = nullptr;
    file->module = nullptr;
  }
  File* raw = file.get();
  files_.emplace(std::move(key), std::move(file));
  return raw;
}

SymbolizedFrame Symbolizer::SymbolizeReturnAddress(const ModuleTable& modules, uint64_t pc) {
  const uint64_t address = pc ? pc - 1 : 0;
  return Symbolize(modules.Find(address), address);
}

SymbolizedFrame Symbolizer::Symbolize(const trace::Module* m, uint64_t address) {
  SymbolizedFrame f;
  f.address = address;
  if (!m) return f;
  auto key = std::make_tuple(m->path(), m->build_id(), address - m->load_address());
  if (auto it = cache_.find(key); it != cache_.end()) {
    SymbolizedFrame cached = it->second;
    cached.address = address;
    return cached;
  }
  f.module = m->path();
  f.module_offset = address - m->load_address();
  File* file = Open(*m);
  f.build_id_mismatch = file->mismatch;
  if (file->module) {
    GElf_Off offset = 0;
    GElf_Sym sym{};
    GElf_Word shndx = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name =
        dwfl_module_addrinfo(file->module, f.module_offset, &offset, &sym, &shndx, &elf, &bias);
    // Only a sized symbol that really covers the address: in a stripped
    // binary the nearest remaining (dynamic) symbol below is someone else.
    if (name && sym.st_size > 0 && offset < sym.st_size) f.function = Demangle(name);
    if (Dwfl_Line* line = dwfl_module_getsrc(file->module, f.module_offset)) {
      int lineno = 0;
      const char* src = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
      if (src) {
        f.file = src;
        f.line = lineno;
      }
    }
  }
  cache_.emplace(std::move(key), f);
  return f;
}

}  // namespace pinscope
