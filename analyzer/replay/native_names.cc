// The spelling of native frames (native_names.h): module basename + offset
// from the trace's module map, with the function and line when the engine's
// owner supplied names.
#include "analyzer/replay/native_names.h"

#include <cstdio>

#include "analyzer/replay/replay.h"

namespace pinscope {
namespace {

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Hex(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

bool IsShimModule(const std::string& path) { return Basename(path).rfind("libpinscope", 0) == 0; }

const trace::Module* FindModule(const std::vector<trace::Module>& modules, uint64_t address) {
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    if (address >= it->start() && address < it->end()) return &*it;
  }
  return nullptr;
}

std::string SpellNativeFrame(const trace::Module* module, uint64_t address, NativeNames* names) {
  if (module == nullptr) return Hex(address);
  const uint64_t offset = address - module->load_address();
  const std::string where = Basename(module->path()) + "+" + Hex(offset);
  if (names == nullptr) return where;
  const NativeName name = names->Name(*module, offset);
  switch (name.status) {
    case NativeName::Status::kNamed:
      if (name.function.empty()) return where;
      if (!name.file.empty()) {
        return name.function + " at " + Basename(name.file) + ":" + std::to_string(name.line) +
               " (" + where + ")";
      }
      return name.function + " (" + where + ")";
    case NativeName::Status::kChanged:
      return where + " (binary differs from the run's)";
    case NativeName::Status::kUnknown:
      break;
  }
  return where;
}

std::vector<std::string> DescribeNativeStack(const ProcessState& process, uint64_t stack_id,
                                             int depth) {
  std::vector<std::string> frames;
  const trace::Stack* stack = stack_id == 0 ? nullptr : process.Stack(stack_id);
  if (stack == nullptr || depth <= 0) return frames;
  for (uint64_t pc : stack->native_pcs()) {
    if (frames.size() == static_cast<size_t>(depth)) break;
    // A return address: the call instruction is just before it.
    const uint64_t address = pc > 0 ? pc - 1 : 0;
    const trace::Module* module = FindModule(process.modules(), address);
    if (module != nullptr && IsShimModule(module->path())) continue;
    frames.push_back(SpellNativeFrame(module, address, process.names()));
  }
  return frames;
}

}  // namespace pinscope
