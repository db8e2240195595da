// Test helpers for the stacks tests (tests/shim/stacks, tests/e2e/stacks):
// reads one trace file with the generated protobuf classes, indexes its
// interned data, symbolizes its stacks with analyzer/symbolizer, and checks
// that the file is self-contained.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/symbolize/symbolizer.h"
#include "trace.pb.h"
#include "trace_bytes.h"

namespace pinscope::stacks_test {

struct TraceFile {
  std::string path;
  trace::ProcessHeader header;
  std::vector<trace::TracePacket> packets;
  std::map<uint64_t, trace::Stack> stacks;
  std::map<uint64_t, trace::PythonFrame> frames;
  std::map<uint64_t, std::string> strings;
  ModuleTable modules;
  std::vector<trace::CopyEvent> copies;
  std::vector<trace::HostAlloc> allocs;
  std::vector<trace::ShmEvent> shm;
  // How many times each interned id was defined (must be once per file).
  std::map<std::string, int> definitions;
};

// Parses a whole file (it is also one `Trace` message).
inline TraceFile ReadTraceFile(const std::string& path) {
  TraceFile t;
  t.path = path;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  trace::Trace whole;
  EXPECT_TRUE(whole.ParseFromString(::pinscope::testing::TracePackets(ss.str()))) << path;
  for (const trace::TracePacket& p : whole.packet()) {
    t.packets.push_back(p);
    switch (p.data_case()) {
      case trace::TracePacket::kHeader:
        t.header = p.header();
        break;
      case trace::TracePacket::kStack:
        t.stacks[p.stack().id()] = p.stack();
        ++t.definitions["stack " + std::to_string(p.stack().id())];
        break;
      case trace::TracePacket::kPythonFrame:
        t.frames[p.python_frame().id()] = p.python_frame();
        ++t.definitions["frame " + std::to_string(p.python_frame().id())];
        break;
      case trace::TracePacket::kInternedString:
        t.strings[p.interned_string().id()] = p.interned_string().str();
        ++t.definitions["string " + std::to_string(p.interned_string().id())];
        break;
      case trace::TracePacket::kModule:
        t.modules.Add(p.module());
        ++t.definitions["module " + p.module().path() + "@" +
                        std::to_string(p.module().load_address())];
        break;
      case trace::TracePacket::kCopy:
        t.copies.push_back(p.copy());
        break;
      case trace::TracePacket::kAlloc:
        t.allocs.push_back(p.alloc());
        break;
      case trace::TracePacket::kShm:
        t.shm.push_back(p.shm());
        break;
      default:
        break;
    }
  }
  return t;
}

// The *.pstrace files of a run folder, sorted by name.
inline std::vector<std::string> TraceFiles(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 8 && name.substr(name.size() - 8) == ".pstrace")
        out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every id an event or a stack refers to is defined in the same file, once;
// every native pc lies in a Module of the file.
inline void ExpectSelfContained(const TraceFile& t) {
  for (const auto& [what, n] : t.definitions) EXPECT_EQ(n, 1) << t.path << ": " << what;
  std::vector<uint64_t> used;
  for (const trace::CopyEvent& c : t.copies) used.push_back(c.stack_id());
  for (const trace::HostAlloc& a : t.allocs) used.push_back(a.stack_id());
  for (const trace::ShmEvent& e : t.shm) used.push_back(e.stack_id());
  for (uint64_t id : used) {
    if (id != 0) {
      EXPECT_TRUE(t.stacks.count(id)) << t.path << " stack " << id;
    }
  }
  for (const auto& [id, s] : t.stacks) {
    for (uint64_t pc : s.native_pcs()) {
      EXPECT_NE(t.modules.Find(pc - 1), nullptr) << t.path << " stack " << id << " pc " << pc;
    }
    for (uint64_t f : s.python_frames()) {
      auto it = t.frames.find(f);
      ASSERT_NE(it, t.frames.end()) << t.path << " frame " << f;
      EXPECT_TRUE(t.strings.count(it->second.filename_id())) << t.path;
      EXPECT_TRUE(t.strings.count(it->second.function_id())) << t.path;
    }
  }
}

// Symbolized native frames of a stack, innermost first.
inline std::vector<SymbolizedFrame> NativeFrames(Symbolizer& sym, const TraceFile& t, uint64_t id) {
  std::vector<SymbolizedFrame> out;
  auto it = t.stacks.find(id);
  if (it == t.stacks.end()) return out;
  for (uint64_t pc : it->second.native_pcs())
    out.push_back(sym.SymbolizeReturnAddress(t.modules, pc));
  return out;
}

struct PyFrame {
  std::string file, function;
  uint32_t line;
  bool operator==(const PyFrame& o) const {
    return file == o.file && function == o.function && line == o.line;
  }
};
inline std::ostream& operator<<(std::ostream& os, const PyFrame& f) {
  return os << f.file << ":" << f.line << " " << f.function;
}

inline std::vector<PyFrame> PythonFrames(const TraceFile& t, uint64_t id) {
  std::vector<PyFrame> out;
  auto it = t.stacks.find(id);
  if (it == t.stacks.end()) return out;
  for (uint64_t f : it->second.python_frames()) {
    const trace::PythonFrame& pf = t.frames.at(f);
    out.push_back({t.strings.at(pf.filename_id()), t.strings.at(pf.function_id()), pf.line()});
  }
  return out;
}

// 1-based line of the source line holding `marker` (e.g. "// @inner") as a
// whole word ("// @fork" does not match "// @fork-loop").
inline int MarkerLine(const std::string& source, const std::string& marker) {
  std::ifstream in(source);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    size_t end = at + marker.size();
    if (end == line.size() || line[end] == ' ') return n;
  }
  ADD_FAILURE() << marker << " not found in " << source;
  return -1;
}

inline std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace pinscope::stacks_test
