// `pinscope tune [options] -- CMD ARGS...`: measures DataLoader settings
// instead of guessing them. Records the job as it is (the baseline) under
// libpinscope.so, reads its pipeline model, then runs trials the model's
// predictions choose (analyzer/tune/trial_choice.h), each a few batches long
// and stopped by the Python hook, until the measured gain flattens or the
// budget is spent; never one the guards refuse (analyzer/tune/tune_guards.h).
// Prints the four physical checks before the first trial and, at the end,
// every trial, the best setting and the line that applies it.
//
// Exit status: 0 tuned (the baseline may be the best); 3 nothing to tune
// (no DataLoader the hook could reach, or no rate); the baseline's own
// status when it failed (its signal, re-raised, when killed); 125, 126, 127
// as `pinscope run`. Ctrl-C (SIGINT) stops after the current trial and
// prints what was measured, then pinscope dies of SIGINT; a second one stops
// the trial too. SIGTERM, SIGHUP, SIGQUIT stop the trial at once.
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"
#include "analyzer/tune/host_checks.h"
#include "analyzer/tune/trial_choice.h"
#include "analyzer/tune/tune_guards.h"
#include "analyzer/tune/tune_result.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/env_check.h"
#include "cli/launcher.h"
#include "cli/run_setup.h"
#include "cli/tune_runner.h"

namespace pinscope::cli {

constexpr int kTuneExitNothing = 3;
constexpr int kTuneExitLauncher = 125;

const char kTuneUsage[] =
    "Usage: pinscope tune [options] [--] CMD [ARGS...]\n"
    "\n"
    "Runs CMD several times under pinscope, each run stopped after a few batches,\n"
    "with its DataLoader settings changed from outside (num_workers, pin_memory,\n"
    "PINSCOPE_PIN, ...), and reports the setting that measured fastest. The trials\n"
    "are chosen from the baseline's pipeline model, not a grid; none runs that the\n"
    "recorded data says would overflow /dev/shm, exceed the cores, the memory or\n"
    "the pinning budget.\n"
    "\n"
    "Options:\n"
    "  -b, --budget SECONDS  time for everything, baseline included (default 300)\n"
    "  -n, --batches N       batches per run before the hook stops it (default 60)\n"
    "  -w, --warmup N        batches not timed at the start of each run (default 10)\n"
    "  -r, --reps R          runs of the baseline and of the best (default 3)\n"
    "  -e, --explore-reps E  runs of every other trial (default 1)\n"
    "      --round-trials K  trials per round at most (default 4)\n"
    "  -o, --output DIR      where the trial folders go (default\n"
    "                        ./pinscope-tune-YYYYmmdd-HHMMSS); must be new or empty\n"
    "      --json            the result as JSON on stdout (progress stays on stderr)\n"
    "  -h, --help            this help\n"
    "\n"
    "Exit status: 0 tuned; 3 nothing to tune (no DataLoader the hook reaches, or no\n"
    "rate); the baseline's status when it failed; 125 pinscope's own failure; 126/127\n"
    "CMD not executable / not found. Ctrl-C stops after the current trial and prints\n"
    "what was measured (a second Ctrl-C stops the trial too).\n"
    "\n"
    "Examples:\n"
    "  pinscope tune -- python train.py\n"
    "  pinscope tune --budget 120 --batches 40 -o runs/tune -- python train.py\n";

namespace {

using tune::TrialRecord;

struct TuneOptions {
  double budget_s = 300;
  int batches = 60, warmup = 10, reps = 3, explore_reps = 1, round_trials = 4;
  bool json = false;
  std::string output;
  std::vector<std::string> command;
};

int ParseTuneOptions(int argc, char** argv, TuneOptions* o) {
  static const struct option kLong[] = {
      {"budget", required_argument, nullptr, 'b'},
      {"batches", required_argument, nullptr, 'n'},
      {"warmup", required_argument, nullptr, 'w'},
      {"reps", required_argument, nullptr, 'r'},
      {"explore-reps", required_argument, nullptr, 'e'},
      {"round-trials", required_argument, nullptr, 'k'},
      {"output", required_argument, nullptr, 'o'},
      {"json", no_argument, nullptr, 'j'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  ResetGetopt();
  int c;
  long v;
  while ((c = getopt_long(argc, argv, "+:b:n:w:r:e:o:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'b':
        if (!ParseIntOption("tune", "--budget", optarg, 1, 86400, &v)) return kTuneExitLauncher;
        o->budget_s = static_cast<double>(v);
        break;
      case 'n':
        if (!ParseIntOption("tune", "--batches", optarg, 3, 1000000, &v)) return kTuneExitLauncher;
        o->batches = static_cast<int>(v);
        break;
      case 'w':
        if (!ParseIntOption("tune", "--warmup", optarg, 0, 1000000, &v)) return kTuneExitLauncher;
        o->warmup = static_cast<int>(v);
        break;
      case 'r':
        if (!ParseIntOption("tune", "--reps", optarg, 1, 100, &v)) return kTuneExitLauncher;
        o->reps = static_cast<int>(v);
        break;
      case 'e':
        if (!ParseIntOption("tune", "--explore-reps", optarg, 1, 100, &v)) return kTuneExitLauncher;
        o->explore_reps = static_cast<int>(v);
        break;
      case 'k':
        if (!ParseIntOption("tune", "--round-trials", optarg, 1, 64, &v)) return kTuneExitLauncher;
        o->round_trials = static_cast<int>(v);
        break;
      case 'o':
        if (!*optarg) {
          PrintUsageError("tune", "-o needs a folder name");
          return kTuneExitLauncher;
        }
        o->output = optarg;
        break;
      case 'j':
        o->json = true;
        break;
      case 'h':
        std::fputs(kTuneUsage, stdout);
        return 0;
      default:
        PrintGetoptError("tune", c, argv);
        return kTuneExitLauncher;
    }
  }
  for (int i = optind; i < argc; ++i) o->command.push_back(argv[i]);
  if (o->command.empty()) {
    PrintUsageError("tune", "no command given (pinscope tune [options] -- CMD ARGS...)");
    return kTuneExitLauncher;
  }
  if (o->warmup + 2 > o->batches) {
    PrintUsageError("tune",
                    "--batches must be at least --warmup + 2 (the rate needs 2 timed "
                    "batches)");
    return kTuneExitLauncher;
  }
  o->explore_reps = std::min(o->explore_reps, o->reps);
  return -1;
}

// The distributed launcher a command starts ("torchrun", "python -m
// torch.distributed.run"), empty if none: tune times one process's loop,
// and a job of several ranks runs at its slowest rank's pace.
std::string DistributedLauncher(const std::vector<std::string>& command) {
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& arg = command[i];
    const std::string base =
        arg.substr(arg.rfind('/') == std::string::npos ? 0 : arg.rfind('/') + 1);
    if (base == "torchrun") return "torchrun";
    if (arg == "-m" && i + 1 < command.size() &&
        (command[i + 1] == "torch.distributed.run" || command[i + 1] == "torch.distributed.launch"))
      return "python -m " + command[i + 1];
  }
  return "";
}

std::string MultiRankRefusal(const std::string& what) {
  return "pinscope tune: not for a job of several ranks (" + what +
         "): tune times one process's training loop, and a distributed job runs at its slowest "
         "rank's pace. Run it under `pinscope run` instead: the report names the rank that holds "
         "the others back and its fix, and `pinscope diff` measures the fix (" +
         DocPath("report.md") +
         ", \"Ranks\"). Tune one rank's DataLoader as a single-process "
         "job if it can run alone.\n";
}

bool EnvTruthy(const char* name) {
  const char* v = std::getenv(name);
  return v && (!std::strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "async"));
}

// "num_workers=8 pin_memory=False" -> "num_workers=8_pin_memory=False".
std::string Slug(const std::string& label) {
  std::string out;
  for (char ch : label) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '=' || ch == '.' ||
                      ch == '-' || ch == '_';
    out += keep ? ch : '_';
  }
  return out;
}

class Tuner {
 public:
  Tuner(const TuneOptions& options, std::string shim, std::string hook, std::string dir,
        std::string shown)
      : o_(options), shim_(std::move(shim)), hook_(std::move(hook)), dir_(std::move(dir)) {
    start_ = std::chrono::steady_clock::now();
    result_.command = o_.command;
    result_.out_dir = std::move(shown);
    result_.budget_s = o_.budget_s;
    result_.batches = o_.batches;
    result_.warmup = o_.warmup;
    result_.reps = o_.reps;
    result_.explore_reps = o_.explore_reps;
  }

  int Run();

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // A rep's expected wall time: the median of those so far.
  double RepEstimate() const {
    std::vector<double> walls;
    for (const TrialRecord& t : result_.trials)
      walls.insert(walls.end(), t.wall_s.begin(), t.wall_s.end());
    return tune::Median(walls);
  }
  // `reps` more reps fit in the budget with `reserve` reps kept for the end.
  bool Fits(int reps, int reserve) const {
    return Elapsed() + (reps + reserve) * RepEstimate() <= o_.budget_s;
  }
  unsigned Timeout() const {
    double longest = 0;
    for (const TrialRecord& t : result_.trials)
      for (double w : t.wall_s) longest = std::max(longest, w);
    return static_cast<unsigned>(std::max(30.0, std::ceil(3 * longest)));
  }
  bool Stopped() const { return StopSignal() != 0; }
  static std::string StopText() {
    const int sig = StopSignal();
    return std::string("interrupted by SIG") +
           (sig == SIGINT    ? "INT"
            : sig == SIGTERM ? "TERM"
            : sig == SIGHUP  ? "HUP"
                             : "QUIT") +
           (sig == SIGINT && StopCount() < 2 ? " after the run it was in" : "");
  }

  // One more rep of trial `t`; false when the command cannot be executed.
  bool Rep(TrialRecord* t, unsigned timeout_s);
  // The explore reps of a new trial (after the guards).
  void Explore(tune::Candidate c, int round);
  int Baseline();
  void Rounds();
  void Confirm();
  int Finish();
  void Say(const std::string& text) const {
    std::fprintf(stderr, "pinscope tune: %s\n", text.c_str());
  }
  std::string RateText(const TrialRecord& t) const;

  const TuneOptions& o_;
  std::string shim_, hook_, dir_;
  std::chrono::steady_clock::time_point start_;
  tune::TuneResult result_;
  std::vector<tune::RunModel> models_;  // per trial: its first rep's report
  tune::Limits limits_;
  uint64_t pin_budget_ = 0;
  tune::HostFacts host_;
  int exec_status_ = 0;  // 126/127 when CMD could not be executed
  RepResult last_;       // the last rep run
};

std::string Tuner::RateText(const TrialRecord& t) const {
  const double base = result_.trials.empty() ? 0 : result_.trials.front().Rate();
  std::string text = t.Rate() > 0 ? StringPrintf("%.1f %s", t.Rate(),
                                                 t.RateIsSamples() ? "samples/s" : "batches/s")
                                  : "no rate (" + t.failure + ")";
  if (t.index > 0 && base > 0 && t.Rate() > 0) text += StringPrintf(", %.2fx", t.Rate() / base);
  return text;
}

bool Tuner::Rep(TrialRecord* t, unsigned timeout_s) {
  const int rep = static_cast<int>(t->folders.size()) + 1;
  RepSpec spec;
  spec.command = o_.command;
  spec.folder = dir_ + "/" + StringPrintf("%02d", t->index) + "-" + Slug(t->label) + "-r" +
                std::to_string(rep);
  spec.env = tune::TrialEnv(result_.baseline, t->settings);
  if (t->index == 0) spec.env.clear();
  spec.shim = shim_;
  spec.hook_dir = hook_;
  const tune::RunLength length =
      tune::TrialRunLength(t->index == 0 ? result_.baseline : t->settings, o_.warmup, o_.batches);
  spec.batches = length.batches;
  spec.warmup = length.warmup;
  spec.timeout_s = timeout_s;
  const RepResult r = RunRep(spec);
  last_ = r;
  if (!r.folder_ok) {
    t->failed_reps++;
    t->failure = r.error;
    Say(r.error);
    return true;
  }
  t->folders.push_back(spec.folder);
  if (r.launch.kind == LaunchResult::Kind::kExecFailed) {
    const bool not_found = r.launch.error == ENOENT || r.launch.error == ENOTDIR;
    if (not_found && o_.command[0].find('/') == std::string::npos) {
      std::fprintf(stderr, "pinscope tune: %s: command not found\n", o_.command[0].c_str());
    } else {
      std::fprintf(stderr, "pinscope tune: cannot execute %s: %s\n", o_.command[0].c_str(),
                   std::strerror(r.launch.error));
    }
    exec_status_ = not_found ? 127 : 126;
    return false;
  }
  t->wall_s.push_back(r.wall_s);
  const std::string failure = RepFailure(r, timeout_s);
  if (failure.empty()) {
    if (r.samples_per_s > 0) t->samples_per_s.push_back(r.samples_per_s);
    t->batches_per_s.push_back(r.batches_per_s);
    if (r.wall_s > 0) t->cpu_cores.push_back(r.cpu_s / r.wall_s);
  } else {
    t->failed_reps++;
    t->failure = failure;
  }
  if (t->index == 0 && rep == 1) limits_.main_bytes = r.max_rss_bytes;
  if (rep == 1) {
    std::string error;
    const nlohmann::json report = r.traced ? ReportJson(spec.folder, &error) : nullptr;
    tune::RunModel model = tune::ParseRunModel(
        report, t->index == 0 ? EnvTruthy("PINSCOPE_PIN") : t->settings.pinscope_pin);
    t->verdict_id = model.verdict_id;
    t->verdict_text = model.verdict_text;
    t->shm_peak_bytes = model.shm_peak_bytes;
    if (static_cast<int>(models_.size()) <= t->index) models_.resize(t->index + 1);
    models_[t->index] = std::move(model);
  }
  Say(StringPrintf("[%d] %s, run %d: ", t->index, t->label.c_str(), rep) +
      (failure.empty() ? StringPrintf("%.1f %s in %.1f s",
                                      r.samples_per_s > 0 ? r.samples_per_s : r.batches_per_s,
                                      r.samples_per_s > 0 ? "samples/s" : "batches/s", r.wall_s)
                       : failure));
  return true;
}

int Tuner::Baseline() {
  TrialRecord base;
  base.index = 0;
  base.round = 0;
  base.label = "baseline";
  base.why = "the job as it is";
  result_.trials.push_back(base);
  TrialRecord& t = result_.trials.front();
  // The first run has no estimate to limit it: the budget does.
  if (!Rep(&t, static_cast<unsigned>(std::max(1.0, o_.budget_s)))) return exec_status_;
  if (t.folders.empty()) return kTuneExitLauncher;  // no trial folder (said)
  const tune::RunModel& m = models_[0];
  result_.baseline = m.settings;
  result_.site = m.site;
  result_.user_site = m.user_site;
  result_.framework = m.framework;
  result_.batch_size = m.batch_size;
  t.settings = m.settings;
  const std::string folder = t.folders.front();
  const LaunchResult& job = last_.launch;
  if (job.kind == LaunchResult::Kind::kSignaled && !job.timed_out) {
    std::fprintf(stderr, "pinscope tune: the baseline was killed by signal %d (%s)%s\n", job.signal,
                 strsignal(job.signal), Stopped() ? "" : "; its output is in its folder");
    std::fprintf(stderr, "%s", TailOf(folder + "/job.err", 8).c_str());
    DieOfSignal(job.signal);
  }
  if (job.kind == LaunchResult::Kind::kExited && job.exit_code != 0) {
    std::fprintf(
        stderr,
        "pinscope tune: the baseline run failed (exit %d); its last lines (%s/job.err):\n%s",
        job.exit_code, folder.c_str(), TailOf(folder + "/job.err", 8).c_str());
    return job.exit_code;
  }
  if (m.ranks > 0) {  // a launcher tune did not know by name (DistributedLauncher)
    std::fprintf(
        stderr, "%s",
        MultiRankRefusal(std::to_string(m.ranks) + " ranks in " + ShellQuote(folder)).c_str());
    return kTuneExitNothing;
  }
  const bool no_loader = !m.loader_present || !m.loader_hooked;
  if (no_loader) {
    std::fprintf(stderr,
                 "pinscope tune: no DataLoader to tune: %s (the baseline's report has no loader "
                 "events: pinscope report %s). Tune changes the settings of a "
                 "torch.utils.data.DataLoader through pinscope's Python hook; a job without one, "
                 "or whose loader the hook cannot reach (%s), has nothing to "
                 "tune.\n",
                 !last_.traced      ? "the job left no trace (no CUDA call, no DataLoader)"
                 : m.loader_present ? "a loader was inferred from workers' shared memory, but "
                                      "the Python hook never saw it iterate"
                                    : "the Python hook saw no DataLoader iterate",
                 ShellQuote(folder).c_str(), DocPath("python-hook.md").c_str());
    return kTuneExitNothing;
  }
  if (t.Rate() <= 0) {
    std::fprintf(stderr,
                 "pinscope tune: the baseline gave no rate (%s): its loop needs at least --warmup "
                 "+ 2 = %d batches (see %s/job.err)\n",
                 t.failure.c_str(), o_.warmup + 2, folder.c_str());
    return kTuneExitNothing;
  }
  return -1;
}

void Tuner::Explore(tune::Candidate c, int round) {
  TrialRecord t;
  t.index = static_cast<int>(result_.trials.size());
  t.round = round;
  t.settings = c.settings;
  t.label = tune::Label(result_.baseline, c.settings);
  t.why = c.why;
  t.skipped = tune::Guard(limits_, c.settings);
  if (!t.skipped.empty()) {
    Say("not running " + t.label + ": " + t.skipped);
    result_.trials.push_back(t);
    return;
  }
  result_.trials.push_back(t);
  TrialRecord& added = result_.trials.back();
  Say(StringPrintf("[%d] %s: %s", added.index, added.label.c_str(), added.why.c_str()));
  for (int rep = 0; rep < o_.explore_reps && !Stopped(); ++rep) {
    if (!Rep(&added, Timeout())) return;
  }
}

void Tuner::Rounds() {
  const int reserve = (o_.reps - 1) + (o_.reps - o_.explore_reps);
  for (int round = 1;; ++round) {
    std::vector<tune::Measured> measured;
    std::vector<tune::Settings> refused;
    for (const TrialRecord& t : result_.trials) {
      if (t.skipped.empty()) {
        measured.push_back({t.settings, t.Rate()});
      } else {
        refused.push_back(t.settings);
      }
    }
    const int best = tune::BestMeasured(measured);
    tune::ChoiceInput in;
    in.baseline = &models_[0];
    // measured[i] and trials[] are in the same order, skipped ones aside.
    int best_trial = -1;
    for (size_t i = 0, m = 0; i < result_.trials.size(); ++i) {
      if (!result_.trials[i].skipped.empty()) continue;
      if (static_cast<int>(m++) == best) best_trial = static_cast<int>(i);
    }
    in.best_model = best_trial >= 0 && best_trial < static_cast<int>(models_.size())
                        ? &models_[best_trial]
                        : nullptr;
    in.measured = measured;
    in.refused = refused;
    in.round = round;
    in.max_workers = static_cast<int>(limits_.cores);
    in.max_trials = static_cast<size_t>(o_.round_trials);
    const std::vector<tune::Candidate> next = tune::ChooseTrials(in);
    if (next.empty()) {
      result_.stop_reason = round == 1 ? "the model predicts no gain from a setting pinscope can "
                                         "change"
                                       : "no trial left to choose around the best";
      return;
    }
    const double before = best >= 0 ? measured[best].rate : 0;
    const size_t trials_before = result_.trials.size();
    for (const tune::Candidate& c : next) {
      if (Stopped()) {
        result_.interrupted = true;
        result_.stop_reason = StopText();
        return;
      }
      if (!Fits(o_.explore_reps, reserve)) {
        result_.stop_reason = "the budget is spent";
        return;
      }
      Explore(c, round);
      if (exec_status_) return;
    }
    bool ran = false;
    for (size_t i = trials_before; i < result_.trials.size(); ++i)
      ran |= result_.trials[i].skipped.empty();
    if (!ran) {
      result_.stop_reason =
          StringPrintf("every trial of round %d was refused by a guard (see Not run)", round);
      return;
    }
    double after = 0;
    for (const TrialRecord& t : result_.trials) after = std::max(after, t.Rate());
    if (tune::Flattened(before, after)) {
      result_.stop_reason = StringPrintf(
          "the gain flattened: round %d did not beat the best so far by more than 3%%", round);
      return;
    }
  }
}

void Tuner::Confirm() {
  // The best explored trial, and any within 3% of it, get the baseline's
  // reps, interleaved with the baseline's own (drift hits both alike).
  const int best = tune::PickBest(result_.trials);
  std::vector<int> finalists;
  if (best > 0) {
    finalists.push_back(best);
    for (const TrialRecord& t : result_.trials)
      if (t.index != best && t.index > 0 && t.Rate() >= result_.trials[best].Rate() / 1.03 &&
          finalists.size() < 3)
        finalists.push_back(t.index);
  }
  finalists.insert(finalists.begin(), 0);  // the baseline first in each round of reps
  for (int rep = 2; rep <= o_.reps; ++rep) {
    for (int index : finalists) {
      TrialRecord& t = result_.trials[index];
      if (static_cast<int>(t.folders.size()) >= rep || Stopped() || !Fits(1, 0)) continue;
      if (!Rep(&t, Timeout())) return;
    }
  }
  if (Stopped() && !result_.interrupted) {
    result_.interrupted = true;
    result_.stop_reason = StopText();
  }
}

int Tuner::Finish() {
  result_.best = tune::PickBest(result_.trials);
  result_.elapsed_s = Elapsed();
  nlohmann::ordered_json j = tune::TuneJson(result_);
  if (!models_.empty()) j["checks"] = tune::HostChecksJson(host_, models_[0], pin_budget_);
  {
    std::ofstream out(dir_ + "/tune.json");
    out << j.dump(1) << "\n";
  }
  std::cout.flush();
  if (o_.json) {
    std::cout << j.dump(1) << "\n";
  } else {
    std::cout << "\n";
    tune::WriteTuneText(result_, std::cout);
  }
  std::cout.flush();
  if (result_.interrupted && StopSignal()) DieOfSignal(StopSignal());
  return 0;
}

int Tuner::Run() {
  if (int status = Baseline(); status >= 0) {
    if (Stopped()) DieOfSignal(StopSignal());
    return status;
  }
  const tune::RunModel& base = models_[0];
  host_ = tune::ReadHostFacts("/", "/dev/shm");
  if (base.gpus >= 0) {
    host_.gpus = base.gpus;
    host_.gpus_source = "from the trace";
  } else if (FILE* p = popen("nvidia-smi -L 2>/dev/null", "r")) {
    std::string text;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) text += buf;
    if (pclose(p) == 0) {
      host_.gpus = tune::CountNvidiaSmiGpus(text);
      host_.gpus_source = "nvidia-smi -L";
    }
  }
  uint64_t env_budget = 0;
  if (const char* b = std::getenv("PINSCOPE_PIN_BUDGET"); b && tune::ParseSize(b, &env_budget)) {
    pin_budget_ = env_budget;
  } else {
    const uint64_t ram = host_.mem_total_bytes;
    const uint64_t cg = host_.cgroup_memory_max;
    pin_budget_ = (cg && (cg < ram || !ram) ? cg : ram) / 4;
  }
  limits_.shm_free_bytes = host_.shm_known ? host_.shm_free_bytes : 0;
  limits_.cores = host_.UsableCores();
  limits_.cores_why = host_.CoresWhy();
  limits_.memory_bytes = host_.AvailableMemory();
  limits_.pin_budget_bytes = pin_budget_;
  limits_.batch_bytes = base.batch_bytes;
  limits_.worker_bytes = base.worker_alloc_bytes;

  std::ostringstream checks;
  tune::WriteHostChecks(host_, base, pin_budget_, checks);
  std::ostream& where = o_.json ? std::cerr : std::cout;
  where << checks.str();
  where.flush();
  Say("baseline: " + RateText(result_.trials.front()) + "; verdict " +
      (base.verdict_id.empty() ? std::string("none") : base.verdict_id));

  Rounds();
  if (!exec_status_) Confirm();
  if (exec_status_) return exec_status_;
  if (Stopped() && !result_.interrupted) {
    result_.interrupted = true;
    result_.stop_reason = StopText();
  }
  return Finish();
}

}  // namespace

int TuneCommand(int argc, char** argv) {
  TuneOptions options;
  if (int status = ParseTuneOptions(argc, argv, &options); status >= 0) return status;
  if (const std::string launcher = DistributedLauncher(options.command); !launcher.empty()) {
    std::fprintf(stderr, "%s", MultiRankRefusal("the command runs " + launcher).c_str());
    return kTuneExitNothing;
  }
  // As `pinscope run`: a value the shim would replace by its default makes
  // every trial measure something else than asked. The baseline runs with
  // the environment's PINSCOPE_PIN, so that one is checked too.
  if (const auto bad = CheckShimEnvironment(false); !bad.empty()) {
    for (const std::string& complaint : bad) {
      std::fprintf(stderr, "pinscope tune: %s\n", complaint.c_str());
    }
    std::fprintf(stderr, "pinscope tune: no trial was started (docs/environment.md)\n");
    return kTuneExitLauncher;
  }
  std::string shim, error;
  if (!FindShimLibrary(&shim, &error)) {
    std::fprintf(stderr, "pinscope tune: %s\n", error.c_str());
    return kTuneExitLauncher;
  }
  const std::string hook = FindPythonHookDir();
  if (hook.empty()) {
    std::fprintf(stderr,
                 "pinscope tune: pinscope's Python hook (share/pinscope/python) is not next to "
                 "this executable (or $PINSCOPE_PYTHON_DIR): tune needs it to change the "
                 "DataLoader's settings\n");
    return kTuneExitLauncher;
  }
  if (const char* off = std::getenv("PINSCOPE_PYTHON_HOOK"); off && !std::strcmp(off, "0")) {
    std::fprintf(stderr, "pinscope tune: PINSCOPE_PYTHON_HOOK=0: tune needs the Python hook\n");
    return kTuneExitLauncher;
  }
  std::string dir = options.output;
  if (dir.empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "pinscope-tune-%Y%m%d-%H%M%S", std::localtime(&now));
    dir = stamp;
  }
  RunFolder folder;
  if (!PrepareRunFolder(dir, false, &folder, &error)) {
    std::fprintf(stderr, "pinscope tune: %s\n", error.c_str());
    return kTuneExitLauncher;
  }
  if (!folder.created) {
    struct stat st;
    const std::string probe = folder.absolute + "/00-baseline-r1";
    if (stat(probe.c_str(), &st) == 0) {
      std::fprintf(stderr, "pinscope tune: %s already holds a tune's trials; use a new folder\n",
                   folder.path.c_str());
      return kTuneExitLauncher;
    }
  }
  InstallStopHandlers();
  std::fprintf(stderr, "pinscope tune: trials of %s into %s (budget %.0f s)\n",
               options.command[0].c_str(), folder.path.c_str(), options.budget_s);
  Tuner tuner(options, shim, hook, folder.absolute, folder.path);
  return tuner.Run();
}

}  // namespace pinscope::cli
