// End-to-end tests of the shim's CUPTI side: libpinscope.so preloaded into
// the jobs in this folder, with the CUDA runtime and CUPTI test doubles.
// Each test runs a job, then reads its trace files with the generated
// protobuf parser and checks exact packet counts and ids, the job's stdout
// and exit status, and pinscope's stderr.
#include <algorithm>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/trace_bytes.h"
#include "trace.pb.h"

namespace {

namespace t = pinscope::trace;

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
  Env& Set(const std::string& k, const std::string& v) {
    vars.emplace_back(k, v);
    return *this;
  }
};

struct ProcessTrace {
  t::ProcessHeader header;
  std::vector<t::TracePacket> packets;
  std::vector<const t::TracePacket*> Of(t::TracePacket::DataCase c) const {
    std::vector<const t::TracePacket*> out;
    for (const t::TracePacket& p : packets)
      if (p.data_case() == c) out.push_back(&p);
    return out;
  }
  int Notices(const std::string& code) const {
    int n = 0;
    for (const t::TracePacket* p : Of(t::TracePacket::kNotice)) n += p->notice().code() == code;
    return n;
  }
  std::string NoticeText(const std::string& code) const {
    for (const t::TracePacket* p : Of(t::TracePacket::kNotice))
      if (p->notice().code() == code) return p->notice().text();
    return "";
  }
};

struct Result {
  int status = -1;
  std::string out, err;
  std::map<std::string, std::string> diag;
  std::vector<ProcessTrace> processes;  // root first
  const ProcessTrace& root() const { return processes.at(0); }
  long Diag(const std::string& key) const {
    auto it = diag.find(key);
    return it == diag.end() ? -1 : std::stol(it->second);
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// Runs `exe` with a clean pinscope environment plus `env`; preloads the shim
// unless told not to.
Result RunJob(const char* exe, std::vector<std::string> args, const Env& env, bool preload = true) {
  char tmpl[] = "/tmp/pinscope-cupti-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string run = dir + "/run", out = dir + "/out", err = dir + "/err", diag = dir + "/diag";
  pid_t pid = fork();
  if (pid == 0) {
    for (const char* v : {"LD_PRELOAD", "PINSCOPE_CUPTI", "PINSCOPE_CUPTI_PATH", "PINSCOPE_OUT",
                          "PINSCOPE_RUN_ID", "PINSCOPE_ROOT_PID", "PINSCOPE_DISABLE",
                          "PINSCOPE_FLUSH_MS", "PINSCOPE_PIN", "CUDA_INJECTION64_PATH",
                          "PINSCOPE_CUPTI_KERNELS", "PINSCOPE_CUPTI_KERNEL_RATE",
                          "PINSCOPE_CUPTI_RUNTIME", "PINSCOPE_NVML", "PINSCOPE_NVML_PATH",
                          "PINSCOPE_CUPTI_WINDOW_MS", "PINSCOPE_CUPTI_PERIOD_S",
                          "FAKECUPTI_MODE", "FAKECUPTI_BYTES", "FAKECUDA_DEVICES", "FAKENVML_MODE",
                          "FAKENVML_PERCENT", "FAKENVML_DEVICES"})
      unsetenv(v);
    setenv("PINSCOPE_OUT", run.c_str(), 1);
    setenv("JOB_DIAG", diag.c_str(), 1);
    if (preload) setenv("LD_PRELOAD", PINSCOPE_SHIM, 1);
    for (const auto& [k, v] : env.vars) setenv(k.c_str(), v.c_str(), 1);
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv{const_cast<char*>(exe)};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe, argv.data());
    _exit(127);
  }
  Result r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  std::istringstream d(ReadFile(diag));
  for (std::string line; std::getline(d, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) r.diag[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (DIR* dp = opendir(run.c_str())) {
    while (dirent* de = readdir(dp)) {
      std::string name = de->d_name;
      if (name.size() < 8 || name.substr(name.size() - 8) != ".pstrace") continue;
      t::Trace trace;
      EXPECT_TRUE(
          trace.ParseFromString(pinscope::testing::TracePackets(ReadFile(run + "/" + name))))
          << name;
      ProcessTrace pt;
      for (const t::TracePacket& p : trace.packet()) {
        if (p.has_header()) pt.header = p.header();
        pt.packets.push_back(p);
      }
      r.processes.push_back(std::move(pt));
    }
    closedir(dp);
  }
  std::sort(r.processes.begin(), r.processes.end(), [](const ProcessTrace& a, const ProcessTrace& b) {
    return (a.header.origin() == t::ORIGIN_ROOT) > (b.header.origin() == t::ORIGIN_ROOT);
  });
  std::string cmd = "rm -rf '" + dir + "'";
  if (system(cmd.c_str()) != 0) ADD_FAILURE() << cmd;
  return r;
}

// The double with everything CUPTI can record switched on: runtime records
// (exact correlations) and kernels in auto mode. The defaults, which leave
// both off (issue 16), have their own test (DefaultsRecordCopiesWithout...).
Env WithFake(const char* mode = "ok") {
  Env e;
  e.Set("PINSCOPE_CUPTI_PATH", FAKE_CUPTI).Set("FAKECUPTI_MODE", mode);
  e.Set("PINSCOPE_CUPTI_RUNTIME", "1").Set("PINSCOPE_CUPTI_KERNELS", "auto");
  e.Set("PINSCOPE_CUPTI_WINDOW_MS", "0");  // attached throughout (windows: CuptiWindows.*)
  return e;
}

Env WithFakeDefaults() {
  Env e;
  e.Set("PINSCOPE_CUPTI_PATH", FAKE_CUPTI).Set("FAKECUPTI_MODE", "ok");
  return e;
}

constexpr char kStderrLine[] = "device activity (CUPTI) is not recorded";

// --- CUPTI works ----------------------------------------------------------------

TEST(CuptiE2E, DeviceRecordsJoinToTheirHostCalls) {
  Result r = RunJob(CUPTI_JOB, {}, WithFake());
  ASSERT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(r.processes.size(), 1u);
  const ProcessTrace& p = r.root();
  EXPECT_EQ(r.Diag("cupti_loaded_before"), 0);
  EXPECT_EQ(r.Diag("fake_pushes"), 5);
  EXPECT_EQ(r.Diag("fake_pops"), 5);
  // Runtime API records (needed for the correlations) only for the hooked
  // calls: every other runtime callback id is switched off.
  EXPECT_GE(r.Diag("fake_runtime_off"), 400);
  EXPECT_EQ(CountLines(r.err, "CUPTI"), 0) << r.err;
  EXPECT_EQ(p.Notices("cupti_started"), 1);
  EXPECT_NE(p.NoticeText("cupti_started").find(FAKE_CUPTI), std::string::npos);
  EXPECT_EQ(p.Notices("cupti_unavailable"), 0);

  // Host calls: 3 copies (ids 1-3) and 2 syncs (4-5), with their times.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> host;  // call id -> [enter, exit]
  for (const t::TracePacket* q : p.Of(t::TracePacket::kCopy))
    host[q->copy().call_id()] = {q->timestamp_ns(), q->copy().end_ns()};
  for (const t::TracePacket* q : p.Of(t::TracePacket::kSync))
    host[q->sync().call_id()] = {q->timestamp_ns(), q->sync().end_ns()};
  ASSERT_EQ(host.size(), 5u);
  EXPECT_EQ(host.begin()->first, 1u);
  EXPECT_EQ(host.rbegin()->first, 5u);

  // One ExternalCorrelation per call, joining a CUPTI correlation id to it.
  std::map<uint32_t, uint64_t> call_of;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kCorrelation))
    call_of[q->correlation().correlation_id()] = q->correlation().call_id();
  ASSERT_EQ(call_of.size(), 5u);
  std::set<uint64_t> calls;
  for (const auto& [corr, call] : call_of) calls.insert(call);
  EXPECT_EQ(calls, (std::set<uint64_t>{1, 2, 3, 4, 5}));

  // Each call made one memcpy and one kernel record in the double.
  std::map<uint64_t, std::string> names;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kInternedString))
    names[q->interned_string().id()] = q->interned_string().str();
  EXPECT_EQ(names.size(), 2u);  // fake_kernel_a, fake_kernel_b: each once
  int memcpys = 0, kernels = 0;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice)) {
    const t::DeviceActivity& d = q->device();
    ASSERT_TRUE(call_of.count(d.correlation_id())) << d.correlation_id();
    uint64_t call = call_of[d.correlation_id()];
    // CUPTI's clock (a wall clock in the double) was converted to the
    // host timeline: the device interval lies inside its host call (1 ms
    // allowed for the offset measurement).
    const uint64_t slack = 1000000;
    EXPECT_GE(d.start_ns() + slack, host[call].first) << "call " << call;
    EXPECT_LE(d.end_ns(), host[call].second + slack) << "call " << call;
    EXPECT_LE(d.start_ns(), d.end_ns());
    EXPECT_EQ(q->timestamp_ns(), d.start_ns());
    if (d.kind() == t::ACT_MEMCPY) {
      ++memcpys;
      EXPECT_EQ(d.bytes(), 4096u);
      EXPECT_EQ(d.direction(), t::H2D);
      EXPECT_EQ(d.src_kind(), t::PAGEABLE);
      EXPECT_EQ(d.dst_kind(), t::DEVICE);
      EXPECT_EQ(d.stream_id(), 7u);
    } else if (d.kind() == t::ACT_KERNEL) {
      ++kernels;
      ASSERT_TRUE(names.count(d.name_id()));
      EXPECT_EQ(names[d.name_id()].substr(0, 12), "fake_kernel_");
    } else {
      ADD_FAILURE() << "unexpected kind " << d.kind();
    }
  }
  EXPECT_EQ(memcpys, 5);
  EXPECT_EQ(kernels, 5);
  // Device records are written before the process's exit packet.
  ASSERT_FALSE(p.packets.empty());
  EXPECT_TRUE(p.packets.back().has_exit());
}

TEST(CuptiE2E, FlushesPeriodicallyFromTheFlusherThread) {
  Env e = WithFake();
  e.Set("PINSCOPE_FLUSH_MS", "50");
  Result r = RunJob(CUPTI_JOB, {"sleep"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_GE(r.Diag("fake_flushes"), 2);  // during the 300 ms sleep, before exit
  EXPECT_EQ(r.root().Of(t::TracePacket::kCorrelation).size(), 5u);
}

// --- Kernel recording: auto (sampled windows), all, off -------------------------

struct KernelCount {
  int kernels = 0, memcpys = 0;
  std::vector<const t::TracePacket*> recordings;
};
KernelCount CountKernels(const ProcessTrace& p) {
  KernelCount k;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice)) {
    k.kernels += q->device().kind() == t::ACT_KERNEL;
    k.memcpys += q->device().kind() == t::ACT_MEMCPY;
  }
  k.recordings = p.Of(t::TracePacket::kRecording);
  return k;
}

TEST(CuptiKernels, AutoRecordsKernelsInWindowsWhenTheRateIsHigh) {
  Env e = WithFake();
  e.Set("PINSCOPE_FLUSH_MS", "100").Set("PINSCOPE_CUPTI_KERNEL_RATE", "100");
  Result r = RunJob(CUPTI_JOB, {"storm"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(r.Diag("storm_calls"), 1500);
  EXPECT_EQ(CountLines(r.err, "pinscope"), 0) << r.err;
  KernelCount k = CountKernels(r.root());
  // Copies are always recorded: 5 host calls + 1500 simulated ones.
  EXPECT_EQ(k.memcpys, 1505);
  // ~1000 launches/s against a limit of 100/s: kernels off most of the time.
  ASSERT_GE(k.recordings.size(), 2u);
  EXPECT_GT(k.kernels, 50);
  EXPECT_LT(k.kernels, 1000);
  // Switches alternate off, on, off, ...; each "off" carries the measured
  // rate and the planned blind time (1 to 30 flush periods).
  std::vector<std::pair<uint64_t, uint64_t>> blind;  // [off, on)
  for (size_t i = 0; i < k.recordings.size(); ++i) {
    const t::DeviceRecording& d = k.recordings[i]->recording();
    EXPECT_EQ(d.kernels(), i % 2 == 1) << i;
    EXPECT_FALSE(d.no_correlations()) << i;  // PINSCOPE_CUPTI_RUNTIME=1: correlations come
    if (!d.kernels()) {
      EXPECT_EQ(d.reason(), "sampling");
      EXPECT_GT(d.kernel_rate(), 100.0);
      EXPECT_LT(d.kernel_rate(), 1100.0);
      EXPECT_GE(d.planned_ns(), 100000000u);
      EXPECT_LE(d.planned_ns(), 3000000000u);
      blind.push_back({k.recordings[i]->timestamp_ns(), UINT64_MAX});
    } else {
      EXPECT_EQ(d.reason(), "window");
      EXPECT_EQ(d.planned_ns(), 100000000u);
      blind.back().second = k.recordings[i]->timestamp_ns();
    }
  }
  // No kernel record starts inside a blind interval (1 ms for the clock
  // conversion): the kind really was off.
  for (const t::TracePacket* q : r.root().Of(t::TracePacket::kDevice)) {
    if (q->device().kind() != t::ACT_KERNEL) continue;
    for (auto [off, on] : blind)
      EXPECT_FALSE(q->device().start_ns() > off + 1000000 && q->device().start_ns() + 1000000 < on)
          << q->device().start_ns() << " in [" << off << ", " << on << ")";
  }
}

TEST(CuptiKernels, AllRecordsEveryKernel) {
  Env e = WithFake();
  e.Set("PINSCOPE_FLUSH_MS", "100").Set("PINSCOPE_CUPTI_KERNEL_RATE", "100");
  e.Set("PINSCOPE_CUPTI_KERNELS", "all");
  Result r = RunJob(CUPTI_JOB, {"storm"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  KernelCount k = CountKernels(r.root());
  EXPECT_EQ(k.kernels, 1505);
  EXPECT_EQ(k.memcpys, 1505);
  EXPECT_TRUE(k.recordings.empty());
}

TEST(CuptiKernels, OffRecordsCopiesOnly) {
  Env e = WithFake();
  e.Set("PINSCOPE_CUPTI_KERNELS", "off");
  Result r = RunJob(CUPTI_JOB, {}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  KernelCount k = CountKernels(r.root());
  EXPECT_EQ(k.kernels, 0);
  EXPECT_EQ(k.memcpys, 5);
  ASSERT_EQ(k.recordings.size(), 1u);
  EXPECT_FALSE(k.recordings[0]->recording().kernels());
  EXPECT_EQ(k.recordings[0]->recording().reason(), "disabled");
  EXPECT_EQ(r.root().Of(t::TracePacket::kCorrelation).size(), 5u);
}

// Issue 16: by default neither CUPTI's RUNTIME kind (13-20% of a
// launch-bound step on the H200) nor its kernel kind (15-20%, and it stays
// after a disable) is enabled: copies and syncs are still recorded by the
// device, joined to their host calls by order in the analyzer.
TEST(CuptiKernels, DefaultsRecordCopiesWithoutRuntimeOrKernelRecords) {
  // The first window at the first CUDA call (PINSCOPE_CUPTI_START=first; the
  // default waits for the loop: CuptiWindows.TheFirstWindowWaitsForTheLoop).
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_CUPTI_START", "first");
  Result r = RunJob(CUPTI_JOB, {}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  KernelCount k = CountKernels(r.root());
  EXPECT_EQ(k.kernels, 0);
  EXPECT_EQ(k.memcpys, 5);
  // Kernels off, and the first device-record window begins (100 ms and 32
  // calls by default: the job's 5 calls end inside it).
  ASSERT_EQ(k.recordings.size(), 2u);
  EXPECT_EQ(k.recordings[0]->recording().reason(), "disabled");
  EXPECT_EQ(k.recordings[1]->recording().reason(), "attached");
  EXPECT_EQ(k.recordings[1]->recording().planned_ns(), 100000000u);
  // Without the RUNTIME kind no correlation can come: every switch says so.
  for (const t::TracePacket* q : k.recordings) EXPECT_TRUE(q->recording().no_correlations());
  EXPECT_EQ(r.Diag("fake_finalizes"), 0);
  EXPECT_EQ(r.root().Of(t::TracePacket::kCorrelation).size(), 0u);
  EXPECT_EQ(r.Diag("fake_runtime_off"), 0);  // the RUNTIME kind was never restricted: never on
  EXPECT_NE(r.root().NoticeText("cupti_started").find("runtime records off"), std::string::npos);
}

// --- Device-record windows (issue 16) ---------------------------------------------

// The paced job ran to its end, as without pinscope, and pinscope said
// nothing on stderr.
void ExpectPaced(const Result& r) {
  ASSERT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(r.Diag("paced_copies"), 130);
  EXPECT_EQ(CountLines(r.err, "pinscope"), 0) << r.err;
}

// The window switches (DeviceRecording) with their times, after the
// "disabled" of the kernel kind (off by default).
std::vector<std::pair<uint64_t, const t::DeviceRecording*>> Switches(const ProcessTrace& p) {
  std::vector<std::pair<uint64_t, const t::DeviceRecording*>> sw;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kRecording))
    if (q->recording().reason() != "disabled") sw.push_back({q->timestamp_ns(), &q->recording()});
  return sw;
}

// CUPTI attached for PINSCOPE_CUPTI_WINDOW_MS, then detached with cuptiFinalize
// (the only way found to take its cost off every kernel launch on the H200),
// attached again PINSCOPE_CUPTI_PERIOD_S after the window began. Device records
// exist exactly for the host calls made inside windows; between them pinscope
// makes no CUPTI call at all (each would attach the real CUPTI again).
TEST(CuptiWindows, DeviceRecordsOnlyInWindowsAndNoCuptiCallBetween) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_FLUSH_MS", "20").Set("PINSCOPE_CUPTI_WINDOW_MS", "100");
  e.Set("PINSCOPE_CUPTI_PERIOD_S", "1").Set("PINSCOPE_CUPTI_START", "first");
  e.Set("PINSCOPE_CUPTI_WINDOW_CALLS", "0");  // 100 ms, however few calls
  Result r = RunJob(CUPTI_JOB, {"paced"}, e);
  ASSERT_NO_FATAL_FAILURE(ExpectPaced(r));
  const ProcessTrace& p = r.root();
  const auto sw = Switches(p);
  // 1.3 s of copies after start: windows at 0 and 1 s, each detached ~100 ms in.
  ASSERT_GE(sw.size(), 4u);
  ASSERT_LE(sw.size(), 4u + 1u);
  std::vector<std::pair<uint64_t, uint64_t>> windows;  // [attached, detached)
  for (size_t i = 0; i < sw.size(); ++i) {
    const t::DeviceRecording& d = *sw[i].second;
    EXPECT_EQ(d.reason(), i % 2 == 0 ? "attached" : "detached") << i;
    EXPECT_EQ(d.detached(), i % 2 == 1) << i;
    EXPECT_FALSE(d.kernels());
    if (i % 2 == 0) {
      EXPECT_EQ(d.planned_ns(), 100000000u);
      windows.push_back({sw[i].first, UINT64_MAX});
    } else {
      windows.back().second = sw[i].first;
      // The rest of the period: 1 s from the window's start.
      EXPECT_GT(d.planned_ns(), 700000000u);
      EXPECT_LE(d.planned_ns(), 900000000u);
    }
  }
  ASSERT_GE(windows.size(), 2u);
  for (const auto& [a, d] : windows) {
    if (d == UINT64_MAX) continue;
    // Done at the first copy past 100 ms (or asked at the flush tick).
    EXPECT_GE(d - a, 100000000u);
    EXPECT_LT(d - a, 100000000u + 2 * 20000000u + 40000000u);
  }
  EXPECT_GE(windows[1].first - windows[0].first, 1000000000u);
  EXPECT_LT(windows[1].first - windows[0].first, 1000000000u + 80000000u);
  // A device record for every host call inside a window, none for the others
  // (the double makes one per call while pinscope pushes its id).
  auto inside = [&](uint64_t ts) {
    for (const auto& [a, d] : windows)
      if (ts > a && ts < d) return true;
    return false;
  };
  int host_in = 0, host_out = 0;
  for (auto kind : {t::TracePacket::kCopy, t::TracePacket::kSync})
    for (const t::TracePacket* q : p.Of(kind)) (inside(q->timestamp_ns()) ? host_in : host_out)++;
  KernelCount k = CountKernels(p);
  EXPECT_EQ(host_in + host_out, 135);
  EXPECT_EQ(k.memcpys, host_in);
  EXPECT_GT(host_out, 80);  // 0.9 s of the 1.3 s between windows
  // The windows, for a failure's message.
  std::string spans;
  for (const auto& [a, d] : windows)
    spans += " [" + std::to_string(a) + ", " + std::to_string(d) + ")";
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice))
    EXPECT_TRUE(inside(q->device().start_ns()))
        << q->device().start_ns() << " (call " << q->device().correlation_id() << ") not in"
        << spans;
  // One registration and one finalize per window begun and ended; no CUPTI
  // call while detached.
  const long detaches = static_cast<long>(sw.size() / 2);
  EXPECT_EQ(r.Diag("fake_registrations"), static_cast<long>(windows.size()));
  EXPECT_EQ(r.Diag("fake_finalizes"), detaches);
  EXPECT_EQ(r.Diag("fake_calls_while_finalized"), 0);
}

// The default (PINSCOPE_CUPTI_START=loop): CUPTI is attached at the first
// CUDA call, as a check, and detached as soon as that call returns; the
// first window waits until hooked calls came in three flush periods - on
// the H100 the first 2 s window at the first CUDA
// call recorded a model's weight copies and no copy of its loop. The window
// then lasts PINSCOPE_CUPTI_WINDOW_MS (100) and at least
// PINSCOPE_CUPTI_WINDOW_CALLS (32) hooked calls. Here: the job's 5 calls at
// start (one flush period), then 130 copies 10 ms apart; flushes every 20 ms.
TEST(CuptiWindows, TheFirstWindowWaitsForTheLoop) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_FLUSH_MS", "20");
  Result r = RunJob(CUPTI_JOB, {"paced"}, e);
  ASSERT_NO_FATAL_FAILURE(ExpectPaced(r));
  const ProcessTrace& p = r.root();
  const auto sw = Switches(p);
  // The check at the first CUDA call (attached, detached when that call
  // returned), awaiting the loop, one window, detached (the next is 120 s
  // away).
  ASSERT_EQ(sw.size(), 4u);
  EXPECT_EQ(sw[0].second->reason(), "check");
  EXPECT_FALSE(sw[0].second->detached());
  EXPECT_EQ(sw[1].second->reason(), "awaiting_loop");
  EXPECT_TRUE(sw[1].second->detached());
  EXPECT_EQ(sw[2].second->reason(), "attached");
  EXPECT_FALSE(sw[2].second->detached());
  EXPECT_EQ(sw[2].second->planned_ns(), 100000000u);
  EXPECT_EQ(sw[3].second->reason(), "detached");
  const uint64_t attach = sw[2].first, detach = sw[3].first;
  // Host calls by place: before the window, in it, after it.
  std::vector<uint64_t> calls;
  for (auto kind : {t::TracePacket::kCopy, t::TracePacket::kSync})
    for (const t::TracePacket* q : p.Of(kind)) calls.push_back(q->timestamp_ns());
  std::sort(calls.begin(), calls.end());
  ASSERT_EQ(calls.size(), 135u);
  const uint64_t loop_start = calls[5];  // the first paced copy
  const auto before =
      std::count_if(calls.begin(), calls.end(), [&](uint64_t t) { return t < attach; });
  const auto inside = std::count_if(calls.begin(), calls.end(),
                                    [&](uint64_t t) { return t > attach && t < detach; });
  // Not at the start: after the loop began, once three flush periods saw
  // calls (the start's and two of the loop's): 2 to 6 paced copies in, more
  // on a loaded machine, and enough left for the window.
  EXPECT_GT(attach, loop_start);
  EXPECT_GE(before, 5 + 2);
  EXPECT_LE(before, 5 + 60);
  // At least 100 ms and 32 calls: the 32nd call ends it (320 ms of copies
  // 10 ms apart), well before the 2 s cap.
  EXPECT_GE(detach - attach, 100000000u);
  EXPECT_GE(inside, 31);
  EXPECT_LE(inside, 33);
  // Device records for the calls inside the window, and for the first
  // call (the check's); none for the other start-up calls.
  // (The check ends at the first call's return, or at the next call's when
  // the flusher held CUPTI's lock just then: one or two records.)
  KernelCount k = CountKernels(p);
  int outside = 0;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice))
    outside += q->device().start_ns() < attach || q->device().start_ns() > detach;
  EXPECT_GE(outside, 1);
  EXPECT_LE(outside, 2);
  EXPECT_EQ(k.memcpys, inside + outside);
  EXPECT_LT(sw[1].first, calls[outside]);  // detached before the next call
  // Registered at the check and at the window; finalized after each; no
  // CUPTI call while finalized.
  EXPECT_EQ(r.Diag("fake_registrations"), 2);
  EXPECT_EQ(r.Diag("fake_finalizes"), 2);
  EXPECT_EQ(r.Diag("fake_calls_while_finalized"), 0);
  EXPECT_NE(p.NoticeText("cupti_started").find("PINSCOPE_CUPTI_START=loop"), std::string::npos);
  // Each switch timed on the job's thread (own_cost.h): the start (with the
  // check's attach), the check's detach, the window's attach and detach.
  const auto counters = p.Of(t::TracePacket::kCounters);
  ASSERT_FALSE(counters.empty());
  const t::Counters& c = counters.back()->counters();
  EXPECT_EQ(c.cupti_switches(), 4u);
  EXPECT_GT(c.cupti_switch_ns(), 0u);
  EXPECT_LE(c.cupti_switch_ns(), c.hook_ns());
}

// Recording paused from inside the program (pinscope_recording_pause, for
// tools/bench/turns.py's paired sides) while a device-record window is
// open: the pause ends the window at once, so that no window spans it; what
// runs while paused is neither recorded nor seen by CUPTI, and no window
// begins until recording goes on.
TEST(CuptiWindows, PausingRecordingEndsTheOpenWindow) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_FLUSH_MS", "20").Set("PINSCOPE_CUPTI_START", "first");
  e.Set("PINSCOPE_CUPTI_WINDOW_MS", "60000").Set("PINSCOPE_CUPTI_PERIOD_S", "120");
  Result r = RunJob(CUPTI_JOB, {"pause"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.Diag("pause_rc"), 0);
  EXPECT_EQ(r.Diag("resume_rc"), 0);
  const ProcessTrace& p = r.root();
  const auto sw = Switches(p);
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].second->reason(), "attached");
  EXPECT_EQ(sw[1].second->reason(), "detached");
  // The copies: the job's three, then the one after the pause; none of the
  // five made while paused.
  std::vector<uint64_t> bytes;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kCopy)) bytes.push_back(q->copy().bytes());
  EXPECT_EQ(bytes, (std::vector<uint64_t>{1000, 2000, 3000, 128}));
  // The window ended before the first paused copy: device records for the
  // job's five calls, all before the switch; the copy after the pause made
  // none (detached until the next period).
  const uint64_t detached = sw[1].first;
  const auto copies = p.Of(t::TracePacket::kCopy);
  EXPECT_LT(detached, copies.back()->timestamp_ns());
  EXPECT_GT(detached, copies[2]->timestamp_ns());
  KernelCount k = CountKernels(p);
  EXPECT_EQ(k.memcpys, 5);
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice))
    EXPECT_LT(q->device().start_ns(), detached);
  EXPECT_EQ(r.Diag("fake_registrations"), 1);
  EXPECT_EQ(r.Diag("fake_finalizes"), 1);
  EXPECT_EQ(r.Diag("fake_calls_while_finalized"), 0);
  // The detach is a switch of the job's thread; the paused copies are no hooks.
  const t::Counters& c = p.Of(t::TracePacket::kCounters).back()->counters();
  EXPECT_EQ(c.hook_calls(), 6u);      // 4 copies, 2 waits
  EXPECT_EQ(c.cupti_switches(), 2u);  // the start's attach, the pause's detach
}

// PINSCOPE_CUPTI_WINDOW_MS=0: attached throughout, as before windows.
TEST(CuptiWindows, ZeroKeepsCuptiAttached) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_FLUSH_MS", "20").Set("PINSCOPE_CUPTI_WINDOW_MS", "0");
  Result r = RunJob(CUPTI_JOB, {"paced"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  KernelCount k = CountKernels(r.root());
  EXPECT_EQ(k.memcpys, 135);
  ASSERT_EQ(k.recordings.size(), 1u);
  EXPECT_EQ(k.recordings[0]->recording().reason(), "disabled");
  EXPECT_EQ(r.Diag("fake_finalizes"), 0);
}

// --- NVML utilization samples (issue 16) ----------------------------------------

TEST(CuptiNvml, UtilizationSamplesCoverTheJobWithoutKernelRecords) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_NVML_PATH", FAKE_NVML).Set("PINSCOPE_FLUSH_MS", "50");
  e.Set("FAKENVML_PERCENT", "37").Set("FAKECUDA_DEVICES", "2").Set("FAKENVML_DEVICES", "2");
  Result r = RunJob(CUPTI_JOB, {"sleep"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  const ProcessTrace& p = r.root();
  EXPECT_EQ(p.Notices("nvml_unavailable"), 0);
  std::map<int, std::vector<uint64_t>> times;  // CUDA device -> sample times
  std::map<int, std::string> pci;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kUtilization)) {
    const t::GpuUtilization& u = q->utilization();
    ASSERT_EQ(u.sample_ns_size(), u.percent_size());
    if (!u.pci_bus_id().empty()) {
      EXPECT_EQ(pci.count(u.cuda_device()), 0u) << "the bus id once per device";
      pci[u.cuda_device()] = u.pci_bus_id();
    }
    for (int i = 0; i < u.sample_ns_size(); ++i) {
      EXPECT_EQ(u.percent(i), 37u);
      times[u.cuda_device()].push_back(u.sample_ns(i));
    }
  }
  // Both devices, matched to their CUDA ordinals by PCI bus id.
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(pci[0], "0000:17:00.0");
  EXPECT_EQ(pci[1], "0000:18:00.0");
  const uint64_t start = p.header.start_mono_ns();
  for (const auto& [dev, v] : times) {
    // One sample every 10 ms over the 300 ms sleep at least, in time order,
    // never repeated, converted to CLOCK_MONOTONIC: inside the job's life
    // (one flush period before the first CUDA call at the earliest).
    EXPECT_GE(v.size(), 28u) << dev;
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
    EXPECT_EQ(std::adjacent_find(v.begin(), v.end()), v.end());
    EXPECT_GE(v.front() + 60'000'000, start) << dev;
    EXPECT_LE(v.back(), p.packets.back().timestamp_ns() + 20'000'000) << dev;
  }
}

TEST(CuptiNvml, WithoutNvmlANoticeAndNothingElse) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_NVML_PATH", FAKE_NVML).Set("FAKENVML_MODE", "noinit");
  Result r = RunJob(CUPTI_JOB, {}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.root().Notices("nvml_unavailable"), 1);
  EXPECT_EQ(r.root().Of(t::TracePacket::kUtilization).size(), 0u);
  EXPECT_EQ(CountLines(r.err, "NVML"), 0) << r.err;  // a notice in the trace, not stderr
  Env off = WithFakeDefaults();
  off.Set("PINSCOPE_NVML_PATH", FAKE_NVML).Set("PINSCOPE_NVML", "0");
  Result q = RunJob(CUPTI_JOB, {}, off);
  EXPECT_EQ(q.root().Notices("nvml_unavailable"), 0);
  EXPECT_EQ(q.root().Of(t::TracePacket::kUtilization).size(), 0u);
}

TEST(CuptiNvml, ForkedChildNeverSamples) {
  Env e = WithFakeDefaults();
  e.Set("PINSCOPE_NVML_PATH", FAKE_NVML).Set("PINSCOPE_FLUSH_MS", "20");
  Result r = RunJob(CUPTI_JOB, {"fork", "sleep"}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_GT(r.root().Of(t::TracePacket::kUtilization).size(), 0u);
  EXPECT_EQ(r.processes[1].Of(t::TracePacket::kUtilization).size(), 0u);
  EXPECT_EQ(r.processes[1].Notices("nvml_unavailable"), 0);
}

TEST(CuptiKernels, BadValuesAreNamedAndTheDefaultIsUsed) {
  Env e = WithFake();
  e.Set("PINSCOPE_CUPTI_KERNELS", "sometimes").Set("PINSCOPE_CUPTI_KERNEL_RATE", "lots");
  Result r = RunJob(CUPTI_JOB, {}, e);
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(CountLines(r.err, "PINSCOPE_CUPTI_KERNELS=\"sometimes\" is not auto, all or off"), 1)
      << r.err;
  EXPECT_EQ(CountLines(r.err, "PINSCOPE_CUPTI_KERNEL_RATE=\"lots\""), 1) << r.err;
  EXPECT_EQ(CountKernels(r.root()).kernels, 0);  // the default: off
}

TEST(CuptiE2E, ForkedChildNeverTouchesCupti) {
  Result r = RunJob(CUPTI_JOB, {"fork"}, WithFake());
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.Diag("child_status"), 0);
  EXPECT_EQ(r.Diag("child_pushes_delta"), 0);
  ASSERT_EQ(r.processes.size(), 2u);
  const ProcessTrace& child = r.processes[1];
  EXPECT_EQ(child.header.origin(), t::ORIGIN_FORK);
  EXPECT_EQ(child.Of(t::TracePacket::kCopy).size(), 1u);
  EXPECT_EQ(child.Of(t::TracePacket::kDevice).size(), 0u);
  EXPECT_EQ(child.Of(t::TracePacket::kCorrelation).size(), 0u);
  EXPECT_EQ(child.Notices("cupti_unavailable") + child.Notices("cupti_started"), 0);
  EXPECT_EQ(r.root().Of(t::TracePacket::kCorrelation).size(), 5u);
  // pinscope's own cost starts again in the child: its one copy hook, not
  // the parent's calls as well.
  const auto child_counters = child.Of(t::TracePacket::kCounters);
  const auto root_counters = r.root().Of(t::TracePacket::kCounters);
  ASSERT_FALSE(child_counters.empty());
  ASSERT_FALSE(root_counters.empty());
  EXPECT_EQ(child_counters.back()->counters().hook_calls(), 1u);
  EXPECT_EQ(root_counters.back()->counters().hook_calls(),
            r.root().Of(t::TracePacket::kCopy).size() + r.root().Of(t::TracePacket::kSync).size());
}

// --- CUPTI unavailable: the job is unchanged, pinscope says so once ----------------

struct Degraded {
  const char* name;
  Env env;
  const char* reason;  // in the notice text
};

class CuptiUnavailable : public ::testing::TestWithParam<int> {};

std::vector<Degraded> DegradedCases() {
  Env missing;
  missing.Set("PINSCOPE_CUPTI_PATH", "/nonexistent/libcupti.so.13");
  Env injected = WithFake();
  injected.Set("CUDA_INJECTION64_PATH", "/opt/nsight-systems/libToolsInjection64.so");
  return {
      {"taken", WithFake("taken"), "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
      {"fail_enable", WithFake("fail_enable"), "CUPTI_ERROR_NOT_INITIALIZED"},
      {"old_version", WithFake("old_version"), "CUPTI API version 18"},
      {"missing", missing, "could not be loaded"},
      {"injected", injected, "CUDA_INJECTION64_PATH"},
  };
}

TEST_P(CuptiUnavailable, JobUnchangedOneNoticeOneLine) {
  Degraded c = DegradedCases()[GetParam()];
  SCOPED_TRACE(c.name);
  Result base = RunJob(CUPTI_JOB, {}, c.env, /*preload=*/false);
  Result r = RunJob(CUPTI_JOB, {}, c.env);
  EXPECT_EQ(base.status, 3);
  EXPECT_EQ(r.status, base.status);
  EXPECT_EQ(r.out, base.out);
  EXPECT_EQ(base.err, "");
  EXPECT_EQ(CountLines(r.err, kStderrLine), 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "pinscope:"), 1) << r.err;
  ASSERT_EQ(r.processes.size(), 1u);
  const ProcessTrace& p = r.root();
  EXPECT_EQ(p.Notices("cupti_unavailable"), 1);
  EXPECT_NE(p.NoticeText("cupti_unavailable").find(c.reason), std::string::npos)
      << p.NoticeText("cupti_unavailable");
  EXPECT_EQ(p.Notices("cupti_started"), 0);
  EXPECT_EQ(p.Of(t::TracePacket::kDevice).size(), 0u);
  EXPECT_EQ(p.Of(t::TracePacket::kCorrelation).size(), 0u);
  EXPECT_EQ(p.Of(t::TracePacket::kCopy).size(), 3u);  // host tracing goes on
  EXPECT_EQ(p.Of(t::TracePacket::kSync).size(), 2u);
  EXPECT_LE(r.Diag("fake_pushes"), 0);  // -1: the double was never loaded
}

INSTANTIATE_TEST_SUITE_P(Modes, CuptiUnavailable, ::testing::Range(0, 5),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(DegradedCases()[i.param].name);
                         });

TEST(CuptiE2E, RealCuptiWithoutGpuFailsCleanly) {
  if (!*REAL_CUPTI) GTEST_SKIP() << "no libcupti.so.13 in the CUDA toolkit";
  if (access("/dev/nvidiactl", F_OK) == 0) GTEST_SKIP() << "a GPU driver is present";
  Env e;
  e.Set("PINSCOPE_CUPTI_PATH", REAL_CUPTI);
  Result base = RunJob(CUPTI_JOB, {}, e, /*preload=*/false);
  Result r = RunJob(CUPTI_JOB, {}, e);
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, base.out);
  EXPECT_EQ(CountLines(r.err, kStderrLine), 1) << r.err;
  EXPECT_EQ(r.root().Notices("cupti_unavailable"), 1);
  EXPECT_EQ(r.root().Of(t::TracePacket::kCopy).size(), 3u);
}

TEST(CuptiE2E, OffMeansNotEvenLoaded) {
  Env e = WithFake();
  e.Set("PINSCOPE_CUPTI", "0");
  Result r = RunJob(CUPTI_JOB, {}, e);
  ASSERT_EQ(r.status, 3);
  EXPECT_EQ(r.Diag("cupti_loaded_after"), 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.root().Notices("cupti_unavailable") + r.root().Notices("cupti_started"), 0);
  EXPECT_EQ(r.root().Of(t::TracePacket::kCopy).size(), 3u);
}

TEST(CuptiE2E, NoGpuMeansNotLoaded) {
  Env e = WithFake();
  e.Set("FAKECUDA_DEVICES", "0");
  Result r = RunJob(CUPTI_JOB, {}, e);
  EXPECT_EQ(r.Diag("cupti_loaded_after"), 0);
  EXPECT_EQ(CountLines(r.err, kStderrLine), 0) << r.err;
}

TEST(CuptiE2E, LoadedOnlyAtTheFirstCudaCall) {
  Result r = RunJob(CUPTI_JOB, {}, WithFake());
  EXPECT_EQ(r.Diag("cupti_loaded_before"), 0);  // not by the constructor
  EXPECT_EQ(r.Diag("cupti_loaded_after"), 1);
}

// --- another CUPTI client takes over -----------------------------------------------

class CuptiProfiler : public ::testing::TestWithParam<bool> {};

// Like torch.profiler: registers its buffers (and, in TSC mode, its clock
// first); pinscope must step aside at the first of those calls.
TEST_P(CuptiProfiler, StepsAsideWhenTheProgramTakesCupti) {
  bool tsc = GetParam();
  std::vector<std::string> args;
  if (tsc) args.push_back("tsc");
  Result base = RunJob(CUPTI_PROFILER_JOB, args, Env(), /*preload=*/false);
  // Everything on (runtime and kernel kinds), so there is most to undo.
  Env all;
  all.Set("PINSCOPE_CUPTI_RUNTIME", "1").Set("PINSCOPE_CUPTI_KERNELS", "auto");
  all.Set("PINSCOPE_CUPTI_START", "first");          // recording when the program takes CUPTI
  Result r = RunJob(CUPTI_PROFILER_JOB, args, all);  // finds the linked double itself
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, base.out);
  // The program's profiling is intact: its own kinds, all its records, none
  // of pinscope's correlation ids.
  for (const char* k : {"register_rc", "memcpy_still_enabled", "runtime_still_enabled",
                        "runtime_calls_off", "program_memcpy", "program_kernel",
                        "program_custom0", "program_custom2", "program_other_corr"})
    EXPECT_EQ(r.Diag(k), base.Diag(k)) << k;
  EXPECT_EQ(r.Diag("register_rc"), 0);
  EXPECT_EQ(r.Diag("memcpy_still_enabled"), 1);  // enabled by the program before registering
  EXPECT_EQ(r.Diag("runtime_still_enabled"), 1);
  EXPECT_EQ(r.Diag("runtime_calls_off"), 0);  // pinscope's per-call restriction undone
  EXPECT_EQ(r.Diag("pinscope_kernels_disabled"), 1);  // pinscope's own kind was undone
  EXPECT_EQ(r.Diag("program_memcpy"), 3);
  EXPECT_EQ(r.Diag("program_custom0"), 3);
  EXPECT_EQ(r.Diag("program_custom2"), 0);
  // pinscope recorded the two copies before, and pushed nothing after.
  EXPECT_EQ(r.Diag("fake_pushes_custom2"), 2);
  EXPECT_EQ(r.Diag("fake_pops_custom2"), 2);
  const ProcessTrace& p = r.root();
  EXPECT_EQ(p.Notices("cupti_started"), 1);
  EXPECT_EQ(p.Notices("cupti_unavailable"), 1);
  EXPECT_NE(p.NoticeText("cupti_unavailable")
                .find(tsc ? "cuptiActivityRegisterTimestampCallback" : "cuptiActivityRegisterCallbacks"),
            std::string::npos)
      << p.NoticeText("cupti_unavailable");
  EXPECT_EQ(CountLines(r.err, kStderrLine), 1) << r.err;
  EXPECT_EQ(p.Of(t::TracePacket::kCopy).size(), 6u);
  std::set<uint64_t> calls;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kCorrelation))
    calls.insert(q->correlation().call_id());
  EXPECT_EQ(calls, (std::set<uint64_t>{1, 2}));
  int memcpys = 0;
  for (const t::TracePacket* q : p.Of(t::TracePacket::kDevice))
    memcpys += q->device().kind() == t::ACT_MEMCPY;
  EXPECT_EQ(memcpys, 2);
}

INSTANTIATE_TEST_SUITE_P(Clock, CuptiProfiler, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "KinetoTsc" : "Default");
                         });

}  // namespace
