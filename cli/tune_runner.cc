// One rep of a tune trial; see tune_runner.h.
#include "cli/tune_runner.h"

#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "analyzer/report/report_command.h"
#include "cli/run_setup.h"

namespace pinscope::cli {
namespace {

double Seconds(const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; }

struct Usage {
  double cpu_s = 0;
  uint64_t max_rss = 0;
};

Usage ChildrenUsage() {
  struct rusage u;
  getrusage(RUSAGE_CHILDREN, &u);
  return {Seconds(u.ru_utime) + Seconds(u.ru_stime), static_cast<uint64_t>(u.ru_maxrss) * 1024};
}

}  // namespace

RepResult RunRep(const RepSpec& spec) {
  RepResult r;
  if (mkdir(spec.folder.c_str(), 0700) != 0) {
    r.error = "cannot create " + spec.folder + ": " + strerror(errno);
    return r;
  }
  r.folder_ok = true;
  std::string warning;
  CopyCalibrationInto(spec.folder, &warning);

  const std::string rate_path = spec.folder + "/throughput.jsonl";
  LaunchSpec launch;
  launch.argv = spec.command;
  launch.env.emplace_back("LD_PRELOAD", BuildLdPreload(spec.shim, std::getenv("LD_PRELOAD")));
  launch.env.emplace_back("PINSCOPE_OUT", spec.folder);
  launch.env.emplace_back("PINSCOPE_RUN_ID", NewRunId());
  launch.env.emplace_back("PYTHONPATH", BuildPythonPath(spec.hook_dir, std::getenv("PYTHONPATH")));
  launch.env.emplace_back("PINSCOPE_PYTHON_HOOK", "1");
  launch.env.emplace_back("PINSCOPE_STOP_AFTER", std::to_string(spec.batches));
  launch.env.emplace_back("PINSCOPE_STOP_WARMUP", std::to_string(spec.warmup));
  launch.env.emplace_back("PINSCOPE_THROUGHPUT", rate_path);
  for (const auto& kv : spec.env) launch.env.push_back(kv);
  launch.set_root_pid = true;
  launch.stdout_path = spec.folder + "/job.out";
  launch.stderr_path = spec.folder + "/job.err";
  launch.own_process_group = true;
  launch.timeout_s = spec.timeout_s;

  const Usage before = ChildrenUsage();
  const auto t0 = std::chrono::steady_clock::now();
  r.launch = Launch(launch);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Usage after = ChildrenUsage();
  r.cpu_s = after.cpu_s - before.cpu_s;
  r.max_rss_bytes = after.max_rss;

  std::ifstream in(rate_path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (!last.empty()) {
    const nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
    if (j.is_object()) {
      r.batches = j.value("batches", uint64_t{0});
      r.why = j.value("why", std::string());
      r.samples_per_s = j.value("samples_per_s", 0.0);
      r.batches_per_s = j.value("batches_per_s", 0.0);
      r.rate = r.batches_per_s > 0;
    }
  }
  r.traced = !TraceFileNames(spec.folder).empty();
  return r;
}

std::string RepFailure(const RepResult& r, unsigned timeout_s) {
  if (!r.folder_ok) return r.error;
  if (r.launch.timed_out) return "timed out after " + std::to_string(timeout_s) + " s";
  switch (r.launch.kind) {
    case LaunchResult::Kind::kExecFailed:
      return std::string("cannot execute: ") + strerror(r.launch.error);
    case LaunchResult::Kind::kForkFailed:
      return std::string("cannot start: ") + strerror(r.launch.error);
    case LaunchResult::Kind::kSignaled:
      return "killed by signal " + std::to_string(r.launch.signal) + " (" +
             strsignal(r.launch.signal) + ")";
    case LaunchResult::Kind::kExited:
      if (r.launch.exit_code != 0) return "exit " + std::to_string(r.launch.exit_code);
      break;
  }
  if (!r.rate) {
    return "no rate (the loop took " + std::to_string(r.batches) + " batches)";
  }
  return "";
}

nlohmann::json ReportJson(const std::string& folder, std::string* error) {
  ReportOptions options;
  options.run_dir = folder;
  options.json = true;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  int status = 2;
  try {
    status = RunReport(options, out, err);
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  if (status == 2) {
    *error = err.str();
    while (!error->empty() && error->back() == '\n') error->pop_back();
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(out.str(), nullptr, false);
  if (j.is_discarded()) {
    *error = "the report is not JSON";
    return nullptr;
  }
  return j;
}

std::string TailOf(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  for (size_t i = from; i < all.size(); ++i) out += "    " + all[i] + "\n";
  return out;
}

}  // namespace pinscope::cli
