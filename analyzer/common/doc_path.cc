// See doc_path.h.
#include "analyzer/common/doc_path.h"

namespace pinscope {
namespace {
std::string& InstalledDir() {
  static std::string dir;
  return dir;
}
}  // namespace

void SetInstalledDocDir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  InstalledDir() = std::move(dir);
}

std::string DocPath(std::string_view name) {
  const std::string& dir = InstalledDir();
  return (dir.empty() ? std::string("docs") : dir) + "/" + std::string(name);
}

}  // namespace pinscope
