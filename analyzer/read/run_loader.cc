// Run folder listing: reads only the first packet of each *.pstrace file,
// picks the run (majority run_id), and reports every file it leaves out with
// the reason, so the report can say what it did not include.
#include "analyzer/read/run_loader.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <system_error>
#include <tuple>

#include "analyzer/read/trace_reader.h"

namespace pinscope {

namespace {

// Natural order for "<pid>[.<n>].pstrace": numeric pid, then n, then name.
bool FileNameLess(const std::string& a, const std::string& b) {
  const auto key = [](const std::string& path) {
    const std::string name = std::filesystem::path(path).filename().string();
    uint64_t pid = 0;
    uint64_t n = 0;
    size_t i = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
      pid = pid * 10 + static_cast<uint64_t>(name[i++] - '0');
    }
    if (i < name.size() && name[i] == '.') {
      ++i;
      while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
        n = n * 10 + static_cast<uint64_t>(name[i++] - '0');
      }
    }
    return std::make_tuple(pid, n, name);
  };
  return key(a) < key(b);
}

}  // namespace

bool IsTraceFileName(const std::string& name) {
  static const std::string kSuffix = ".pstrace";
  return name.size() > kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

Status ScanRun(const std::string& run_dir, RunListing* listing) {
  namespace fs = std::filesystem;
  listing->run_dir = run_dir;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    return Status::Error(Status::Code::kNoRun,
                         "run folder " + run_dir + " does not exist or is not a folder");
  }
  std::vector<std::string> paths;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsTraceFileName(name) && !it->is_directory(ec)) paths.push_back(it->path().string());
  }
  if (ec) {
    return Status::Error(Status::Code::kNoRun,
                         "run folder " + run_dir + ": cannot list: " + ec.message());
  }
  listing->trace_files_found = paths.size();
  if (paths.empty()) {
    return Status::Error(Status::Code::kNoRun,
                         "run folder " + run_dir + " holds no *.pstrace trace file");
  }
  std::sort(paths.begin(), paths.end(), FileNameLess);

  // Problems are collected per file and emitted in file order at the end.
  std::map<std::string, Problem> problem_by_path;
  std::vector<RunFile> readable;
  for (const std::string& path : paths) {
    TraceReader reader(path, 4096);
    RunFile file;
    file.path = path;
    if (!reader.Open() || !reader.ReadHeader(&file.header, &file.header_timestamp_ns)) {
      problem_by_path[path] = ProblemFrom(path, reader.status());
      continue;
    }
    file.bytes = reader.file_bytes();
    file.start_ns =
        file.header.start_mono_ns() != 0 ? file.header.start_mono_ns() : file.header_timestamp_ns;
    readable.push_back(std::move(file));
  }

  // The run reported is the run_id most files carry; ties go to the run with
  // a root process, then to the smaller id, so the choice is deterministic.
  std::map<std::string, std::pair<size_t, bool>> runs;
  for (const RunFile& file : readable) {
    auto& [count, has_root] = runs[file.header.run_id()];
    ++count;
    has_root = has_root || file.header.origin() == trace::ORIGIN_ROOT;
  }
  std::string chosen;
  std::pair<size_t, bool> best{0, false};
  for (const auto& [run_id, score] : runs) {  // ascending ids: ties keep the smaller
    if (score > best) {
      chosen = run_id;
      best = score;
    }
  }
  listing->run_id = chosen;

  std::vector<RunFile> accepted;
  for (RunFile& file : readable) {
    if (file.header.run_id() != chosen) {
      problem_by_path[file.path] = Problem{
          file.path, Severity::kError,
          "file " + file.path + ": belongs to run '" + file.header.run_id() + "', not to run '" +
              chosen + "' reported here (" + std::to_string(best.first) + " of " +
              std::to_string(readable.size()) + " readable files): left out"};
      continue;
    }
    // A copied file: same pid and same start instant as one already taken.
    const auto same = std::find_if(accepted.begin(), accepted.end(), [&](const RunFile& other) {
      return other.header.pid() == file.header.pid() &&
             other.header.start_mono_ns() == file.header.start_mono_ns() &&
             other.header.start_wall_ns() == file.header.start_wall_ns();
    });
    if (same != accepted.end()) {
      problem_by_path[file.path] =
          Problem{file.path, Severity::kError,
                  "file " + file.path + ": duplicates " + same->path + " (same pid " +
                      std::to_string(file.header.pid()) + " and start time): left out"};
      continue;
    }
    accepted.push_back(std::move(file));
  }
  std::stable_sort(accepted.begin(), accepted.end(), [](const RunFile& a, const RunFile& b) {
    return std::make_tuple(a.start_ns, a.header.pid()) <
           std::make_tuple(b.start_ns, b.header.pid());
  });
  listing->files = std::move(accepted);
  for (const std::string& path : paths) {
    auto it = problem_by_path.find(path);
    if (it != problem_by_path.end()) listing->problems.push_back(std::move(it->second));
  }
  return Status::Ok();
}

}  // namespace pinscope
