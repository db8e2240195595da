// Preparation for `pinscope run`: shim lookup, run folder, run id, LD_PRELOAD.
// See run_setup.h. Runs in the launcher before the fork, so it may allocate
// and use stdio freely.
#include "cli/run_setup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "analyzer/read/calibration.h"

#ifndef PINSCOPE_REL_LIBDIR
#define PINSCOPE_REL_LIBDIR "../lib"
#endif
#ifndef PINSCOPE_LIBRARY_ARCHITECTURE
#define PINSCOPE_LIBRARY_ARCHITECTURE ""
#endif

namespace pinscope::cli {
namespace {

constexpr char kShimName[] = "libpinscope.so";

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return std::string();
  return buf;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool UnusableInPreload(const std::string& path) {
  // ld.so splits LD_PRELOAD at spaces and colons (ld.so(8)).
  return path.find_first_of(" :\t\n") != std::string::npos;
}

bool EndsWith(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::string SelfExePath() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::string();
  buf[n] = '\0';
  return buf;
}

std::vector<std::string> ShimCandidates(const std::string& exe_path) {
  std::vector<std::string> out;
  if (exe_path.empty()) return out;
  const std::string bin = Dirname(exe_path);
  auto add = [&](const std::string& rel) {
    std::string p = bin + "/" + rel + "/" + kShimName;
    for (const auto& q : out) {
      if (q == p) return;
    }
    out.push_back(p);
  };
  add(PINSCOPE_REL_LIBDIR);
  add("../lib");
  add("../lib64");
  if (PINSCOPE_LIBRARY_ARCHITECTURE[0]) add(std::string("../lib/") + PINSCOPE_LIBRARY_ARCHITECTURE);
  add("../lib/x86_64-linux-gnu");
  add("../lib/aarch64-linux-gnu");
  return out;
}

bool FindShimLibrary(std::string* path, std::string* error) {
  std::string found;
  if (const char* env = std::getenv("PINSCOPE_LIB"); env && *env) {
    if (!IsRegularFile(env)) {
      *error = std::string("PINSCOPE_LIB=") + env + " is not a file";
      return false;
    }
    found = RealPath(env);
  } else {
    std::string tried;
    for (const auto& candidate : ShimCandidates(SelfExePath())) {
      if (IsRegularFile(candidate)) {
        found = RealPath(candidate);
        break;
      }
      tried += "\n  " + candidate;
    }
    if (found.empty()) {
      *error = std::string("cannot find ") + kShimName +
               " next to this executable; looked at:" + tried + "\nset PINSCOPE_LIB to its path";
      return false;
    }
  }
  if (found.empty()) {
    *error = std::string("cannot resolve the path of ") + kShimName;
    return false;
  }
  if (UnusableInPreload(found)) {
    *error = "the path of the shim holds a space or ':', which LD_PRELOAD cannot carry: " + found +
             "\nset PINSCOPE_LIB to a copy or link under a plain path";
    return false;
  }
  *path = found;
  return true;
}

std::string FindPythonHookDir() {
  auto has_hook = [](const std::string& dir) { return IsRegularFile(dir + "/pinscope_hook.py"); };
  if (const char* env = std::getenv("PINSCOPE_PYTHON_DIR"); env && *env) {
    return has_hook(env) ? RealPath(env) : std::string();
  }
  const std::string exe = SelfExePath();
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string dir = exe.substr(0, slash) + "/../share/pinscope/python";
  return has_hook(dir) ? RealPath(dir) : std::string();
}

std::string FindInstalledDocDir() {
  const std::string exe = SelfExePath();
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string dir = exe.substr(0, slash) + "/../share/doc/pinscope";
  return IsRegularFile(dir + "/cli.md") ? RealPath(dir) : std::string();
}

std::string BuildPythonPath(const std::string& hook_dir, const char* existing) {
  if (!existing || !*existing) return hook_dir;
  return hook_dir + ":" + existing;
}

std::string BuildLdPreload(const std::string& shim, const char* existing) {
  std::string out = shim;
  if (!existing) return out;
  // Keep the user's entries as they are, in order; drop an earlier copy of
  // the same shim (a nested `pinscope run`) so it is loaded once, first.
  std::string word;
  auto flush = [&]() {
    if (!word.empty() && word != shim) out += ":" + word;
    word.clear();
  };
  for (const char* p = existing; *p; ++p) {
    if (*p == ' ' || *p == ':' || *p == '\t' || *p == '\n') {
      flush();
    } else {
      word += *p;
    }
  }
  flush();
  return out;
}

std::string NewRunId() {
  char host[65] = {};
  gethostname(host, sizeof host - 1);
  std::string h;
  for (const char* p = host; *p && h.size() < 40; ++p) {
    char c = *p;
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '.' || c == '_';
    h += plain ? c : '_';
  }
  if (h.empty()) h = "host";
  std::time_t now = std::time(nullptr);
  struct tm tm_now;
  localtime_r(&now, &tm_now);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm_now);
  uint32_t random = 0;
  if (getrandom(&random, sizeof random, GRND_NONBLOCK) != sizeof random) {
    // No entropy yet (early boot): time and pid still make it unique enough.
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    random = static_cast<uint32_t>(ts.tv_nsec) ^ static_cast<uint32_t>(getpid() << 16);
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s-%s-%d-%08x", h.c_str(), stamp, static_cast<int>(getpid()),
                random);
  return buf;
}

std::string DefaultRunDirName(std::time_t now) {
  struct tm tm_now;
  localtime_r(&now, &tm_now);
  char buf[64];
  std::strftime(buf, sizeof buf, "pinscope-%Y%m%d-%H%M%S", &tm_now);
  return buf;
}

bool CreateDefaultRunFolder(std::time_t now, RunFolder* folder, std::string* error) {
  const std::string base = DefaultRunDirName(now);
  for (int n = 1; n < 10000; ++n) {
    std::string name = n == 1 ? base : base + "-" + std::to_string(n);
    if (mkdir(name.c_str(), 0700) == 0) {
      chmod(name.c_str(), 0700);  // exact mode whatever the umask
      folder->path = name;
      folder->absolute = RealPath(name);
      folder->created = true;
      folder->existing_traces.clear();
      if (folder->absolute.empty()) {
        *error = "cannot resolve the run folder " + name + ": " + std::strerror(errno);
        return false;
      }
      return true;
    }
    if (errno != EEXIST) {
      char cwd[PATH_MAX];
      *error = "cannot create the run folder " + name + " in " +
               (getcwd(cwd, sizeof cwd) ? cwd : "the current directory") + ": " +
               std::strerror(errno) + " (use -o DIR)";
      return false;
    }
  }
  *error = "too many run folders named " + base + "-N in the current directory";
  return false;
}

std::vector<std::string> TraceFileNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!EndsWith(name, ".pstrace")) continue;
    struct stat st;
    if (lstat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool PrepareRunFolder(const std::string& dir, bool force, RunFolder* folder, std::string* error) {
  if (dir.empty()) {
    *error = "-o needs a folder name";
    return false;
  }
  folder->path = dir;
  folder->created = false;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    // mkdir -p, each missing component 0700: the trace holds command lines
    // and host facts, so it is private by default.
    std::string leaf = dir;
    while (leaf.size() > 1 && leaf.back() == '/') leaf.pop_back();
    std::vector<std::string> prefixes;
    for (size_t i = 1; i < leaf.size(); ++i) {
      if (leaf[i] == '/' && leaf[i - 1] != '/') prefixes.push_back(leaf.substr(0, i));
    }
    prefixes.push_back(leaf);
    for (size_t i = 0; i < prefixes.size(); ++i) {
      if (mkdir(prefixes[i].c_str(), 0700) == 0) {
        folder->created = i + 1 == prefixes.size();
      } else if (errno != EEXIST) {
        *error = "cannot create the run folder " + prefixes[i] + ": " + std::strerror(errno);
        return false;
      }
    }
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      *error = "cannot create the run folder " + dir + ": " + std::strerror(errno);
      return false;
    }
    if (folder->created) chmod(dir.c_str(), 0700);
  } else if (!S_ISDIR(st.st_mode)) {
    *error = dir + " exists and is not a folder";
    return false;
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    *error = "the run folder " + dir + " is not writable: " + std::strerror(errno);
    return false;
  }
  folder->existing_traces.clear();
  if (!folder->created) folder->existing_traces = TraceFileNames(dir);
  if (!folder->existing_traces.empty() && !force) {
    *error = dir + " already holds " + std::to_string(folder->existing_traces.size()) +
             " trace file(s) of an earlier run; choose a new folder, or pass --force to add "
             "this run's files next to them (nothing is deleted)";
    return false;
  }
  folder->absolute = RealPath(dir);
  if (folder->absolute.empty()) {
    *error = "cannot resolve the run folder " + dir + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string CopyCalibrationInto(const std::string& run_dir, std::string* warning) {
  const std::string source = DefaultCalibrationPath();
  if (source.empty() || !IsRegularFile(source)) return std::string();
  std::string parse_error;
  if (!LoadCalibration(source, &parse_error)) {
    *warning = "ignoring the calibration " + source + ": " + parse_error;
    return std::string();
  }
  std::ifstream in(source, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) {
    *warning = "cannot read the calibration " + source;
    return std::string();
  }
  const std::string target = run_dir + "/calibration.json";
  int fd = open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    // EEXIST: a calibration chosen for this folder already; keep it.
    if (errno != EEXIST) *warning = "cannot write " + target + ": " + std::strerror(errno);
    return std::string();
  }
  const std::string data = bytes.str();
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *warning = "cannot write " + target + ": " + std::strerror(errno);
      close(fd);
      unlink(target.c_str());
      return std::string();
    }
    done += static_cast<size_t>(w);
  }
  close(fd);
  return source;
}

std::string ShellQuote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./+=:,@%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace pinscope::cli
