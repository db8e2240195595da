// Where the docs that messages name are. In the source tree and the build
// tree a message says "docs/pinning.md"; an install (the wheel, the .deb,
// `cmake --install`) carries the docs in share/doc/pinscope, and the CLI
// points there at start (SetInstalledDocDir), so the path a message names
// exists on the machine that prints it.
#pragma once

#include <string>
#include <string_view>

namespace pinscope {

// dir: an existing folder holding the installed docs, or "" for "docs/".
void SetInstalledDocDir(std::string dir);

// "docs/NAME", or "DIR/NAME" when SetInstalledDocDir set DIR.
std::string DocPath(std::string_view name);

}  // namespace pinscope
