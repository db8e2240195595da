// The recorder's own encoders (shim/record/recorder.cc: the process header and every
// Record* function) written to a real trace file in this process and parsed
// with the generated classes: catches a Record* function that writes a value
// under the wrong field constant or forgets one. Needs its own process
// (InitProcess is once per process): ctest runs each test separately.
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shim/process/process.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "tests/common/trace_bytes.h"
#include "trace.pb.h"

namespace {

// {cpu, user, sys, minor, major}, the order of shim::Usage.
void SetUsage(pinscope::trace::ThreadUsage* u, std::initializer_list<uint64_t> v) {
  auto it = v.begin();
  u->set_cpu_ns(*it++);
  u->set_user_ns(*it++);
  u->set_sys_ns(*it++);
  u->set_minor_faults(*it++);
  u->set_major_faults(*it++);
}

namespace pt = pinscope::trace;
namespace f = pinscope::shim::fields;
namespace shim = pinscope::shim;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ExpectSame(const google::protobuf::Message& want, const google::protobuf::Message& got,
                const char* what) {
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  EXPECT_TRUE(d.Compare(want, got)) << what << ":\n" << diff;
  EXPECT_TRUE(got.GetReflection()->GetUnknownFields(got).empty()) << what;
}

TEST(RecorderRoundTrip, HeaderAndEveryRecordFunction) {
  char tmpl[] = "/tmp/pinscope-wire-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string out = std::string(tmpl) + "/run";
  for (const char* v : {"PINSCOPE_ROOT_PID", "PINSCOPE_DISABLE", "PINSCOPE_PIN"}) unsetenv(v);
  setenv("PINSCOPE_OUT", out.c_str(), 1);
  setenv("PINSCOPE_RUN_ID", "wire-run-7", 1);
  setenv("PINSCOPE_TRACE_MIN", "12345", 1);
  setenv("PINSCOPE_FLUSH_MS", "3600000", 1);  // no periodic flush in the middle
  setenv("PINSCOPE_STACKS", "7", 1);
  setenv("PINSCOPE_CUPTI", "0", 1);
  setenv("PINSCOPE_PIN_MIN", "2M", 1);
  setenv("PINSCOPE_PIN_BUDGET", "3G", 1);
  // A rank as torchrun starts one: labels in the header, a bad one left out.
  setenv("RANK", "5", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("GROUP_RANK", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "4x", 1);
  shim::InitProcess();
  ASSERT_TRUE(shim::Recording());

  shim::CopyCall c;
  c.api = f::kMemcpy2DAsync;
  c.per_thread = true;
  c.direction = f::kD2H;
  c.requested_kind = -2;
  c.bytes = 1ull << 40;
  c.src_kind = f::kManaged;
  c.dst_kind = f::kPinned;
  c.src_address = 0x7f0011223344ull;
  c.dst_address = 0x7f0055667788ull;
  c.src_device = 3;
  c.dst_device = -1;
  c.stream = 0x5555deadull;
  c.t_enter = 1000;
  c.t_exit = 2000;
  c.result = 700;
  c.call_id = 41;
  c.stack_id = 42;
  c.pin = f::kPinCached;
  c.batch_index = 5;
  c.height = 64;
  c.usage_enter = {10, 11, 12, 13, 14};
  c.usage_exit = {20, 21, 22, 23, 24};
  shim::RecordCopy(c);

  shim::SyncCall s;
  s.api = f::kEventSynchronize;
  s.stream = 0x77;
  s.t_enter = 3000;
  s.t_exit = 3500;
  s.result = -1;
  s.stack_id = 8;
  s.call_id = 43;
  s.usage_enter = {30, 31, 0, 33, 0};
  s.usage_exit = {0, 41, 42, 0, 44};
  shim::RecordSync(s);

  shim::RecordAlloc(f::kPosixMemalign, 0x7f00aa000000ull, 1ull << 30, 4096, 0x7f00bb000000ull, 9,
                    4000);
  shim::RecordFree(0x7f00aa000000ull, true, 5000);

  shim::ShmRecord m;
  m.op = f::kShmCreate;
  m.name = "/torch_42_1";
  m.fd = 17;
  m.size = 1 << 20;
  m.offset = 8192;
  m.address = 0x7f00cc000000ull;
  m.flags = -3;
  m.prot = 3;
  m.error = 12;
  m.device = 0x2b;
  m.inode = 99887766;
  m.driver_internal = true;
  m.stack_id = 10;
  m.t_enter = 6000;
  m.t_exit = 6100;
  shim::RecordShm(m);

  shim::PinRecord pin;
  pin.op = f::kRegisterFailed;
  pin.address = 0x7f00dd000000ull;
  pin.size = 64 << 20;
  pin.duration_ns = 123456;
  pin.result = 2;
  pin.pinned_bytes = 128 << 20;
  pin.reason = "munmap";
  pin.t = 7000;
  shim::RecordPin(pin);

  shim::LoaderRecord l;
  l.kind = f::kLoaderFetch;
  l.loader_id = 0xfeed;
  l.t_begin = 7500;
  l.t_end = 7900;
  l.index = 3;
  l.has_usage = true;
  l.usage_begin = {9, 1, 2, 3, 4};
  l.usage_end = {19, 5, 6, 7, 8};
  l.num_workers = 4;
  l.pin_memory = true;
  l.prefetch_factor = 2;
  l.persistent_workers = true;
  l.batch_size = 128;
  l.dataset_length = 2560;
  l.iterable = false;
  l.site = "train.py:42";
  l.worker_id = 2;
  l.batch_samples = 128;
  shim::RecordLoader(l);

  shim::RecordNotice(f::kWarning, "pin_budget", "the pinning budget is full");
  // Larger than a packet's stack buffer: dropped and counted, nothing written.
  std::string huge(2 * shim::Packet::kCapacity, 'z');
  shim::RecordNotice(f::kInfo, "huge", huge.c_str());

  // 30 ms of CPU, so the scheduler's per-thread count (schedstat, updated
  // at ticks and switches) has moved by the exit sample.
  for (auto t0 = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(30);) {
  }
  shim::FinishProcess(f::kUnderscoreExit, -4);

  std::string path = out + "/" + std::to_string(getpid()) + ".pstrace";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  pt::Trace t;
  std::string bytes = ReadFile(path);
  ASSERT_TRUE(pinscope::testing::IsCompressedTrace(bytes));  // PINSCOPE_COMPRESS is on by default
  bytes = pinscope::testing::TracePackets(bytes);
  ASSERT_TRUE(t.ParseFromString(bytes));
  ASSERT_EQ(t.packet_size(), 13);

  // Header: values from this process and the environment above.
  const pt::TracePacket& hp = t.packet(0);
  ASSERT_TRUE(hp.has_header());
  EXPECT_EQ(hp.tid(), static_cast<uint32_t>(gettid()));
  const pt::ProcessHeader& h = hp.header();
  EXPECT_EQ(h.format_version(), 1u);
  EXPECT_EQ(h.run_id(), "wire-run-7");
  EXPECT_EQ(h.pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(h.ppid(), static_cast<uint32_t>(getppid()));
  EXPECT_EQ(h.origin(), pt::ORIGIN_ROOT);
  std::string cmdline = ReadFile("/proc/self/cmdline");
  std::vector<std::string> argv;
  for (size_t i = 0; i < cmdline.size(); i += argv.back().size() + 1)
    argv.push_back(std::string(cmdline.c_str() + i));
  ASSERT_EQ(h.cmdline_size(), static_cast<int>(argv.size()));
  for (size_t i = 0; i < argv.size(); ++i) EXPECT_EQ(h.cmdline(static_cast<int>(i)), argv[i]);
  char exe[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  EXPECT_EQ(h.exe(), exe);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(h.hostname(), host);
  EXPECT_GT(h.start_wall_ns(), 1600000000ull * 1000000000ull);
  EXPECT_GT(h.start_mono_ns(), 0u);
  EXPECT_EQ(hp.timestamp_ns(), h.start_mono_ns());
  EXPECT_GT(h.host().logical_cores(), 0u);
  EXPECT_GT(h.host().ram_bytes(), 0u);
  EXPECT_EQ(h.config().trace_min_bytes(), 12345u);
  EXPECT_EQ(h.config().pin_mode(), 0u);
  EXPECT_EQ(h.config().pin_min_bytes(), 2u << 20);
  EXPECT_EQ(h.config().pin_budget_bytes(), 3ull << 30);
  EXPECT_EQ(h.config().stack_depth(), 7u);
  EXPECT_FALSE(h.config().cupti());
  EXPECT_EQ(h.config().flush_period_ms(), 3600000u);
  EXPECT_EQ(h.shim_version(), PINSCOPE_VERSION);
  EXPECT_FALSE(h.helper());
  EXPECT_EQ(h.parent_pid(), 0u);
  ASSERT_TRUE(h.has_rank());
  EXPECT_EQ(h.rank().rank(), 5u);
  EXPECT_EQ(h.rank().local_rank(), 1);
  EXPECT_EQ(h.rank().world_size(), 8);
  EXPECT_EQ(h.rank().group_rank(), 2);
  EXPECT_EQ(h.rank().local_world_size(), -1) << "LOCAL_WORLD_SIZE=4x is not a number";
  EXPECT_TRUE(h.GetReflection()->GetUnknownFields(h).empty());

  // The thread's first event announces it.
  ASSERT_TRUE(t.packet(1).has_thread());
  EXPECT_EQ(t.packet(1).thread().tid(), static_cast<uint32_t>(gettid()));
  char comm[17] = {};
  pthread_getname_np(pthread_self(), comm, sizeof comm);
  EXPECT_EQ(t.packet(1).thread().name(), comm);

  pt::TracePacket want;
  want.set_tid(static_cast<uint32_t>(gettid()));

  want.set_timestamp_ns(1000);
  pt::CopyEvent* wc = want.mutable_copy();
  wc->set_api(pt::MEMCPY_2D_ASYNC);
  wc->set_per_thread(true);
  wc->set_direction(pt::D2H);
  wc->set_requested_kind(-2);
  wc->set_bytes(1ull << 40);
  wc->set_src_kind(pt::MANAGED);
  wc->set_dst_kind(pt::PINNED);
  wc->set_src_address(0x7f0011223344ull);
  wc->set_dst_address(0x7f0055667788ull);
  wc->set_src_device(3);
  wc->set_dst_device(-1);
  wc->set_stream(0x5555deadull);
  wc->set_end_ns(2000);
  wc->set_result(700);
  wc->set_call_id(41);
  wc->set_stack_id(42);
  wc->set_pin(pt::PIN_CACHED);
  wc->set_batch_index(5);
  wc->set_height(64);
  SetUsage(wc->mutable_usage_enter(), {10, 11, 12, 13, 14});
  SetUsage(wc->mutable_usage_exit(), {20, 21, 22, 23, 24});
  ExpectSame(want, t.packet(2), "copy");

  want.set_timestamp_ns(3000);
  pt::SyncEvent* ws = want.mutable_sync();
  ws->set_api(pt::EVENT_SYNCHRONIZE);
  ws->set_stream(0x77);
  ws->set_end_ns(3500);
  ws->set_result(-1);
  ws->set_stack_id(8);
  ws->set_call_id(43);
  SetUsage(ws->mutable_usage_enter(), {30, 31, 0, 33, 0});
  SetUsage(ws->mutable_usage_exit(), {0, 41, 42, 0, 44});
  ExpectSame(want, t.packet(3), "sync");

  want.set_timestamp_ns(4000);
  pt::HostAlloc* wa = want.mutable_alloc();
  wa->set_api(pt::POSIX_MEMALIGN);
  wa->set_address(0x7f00aa000000ull);
  wa->set_size(1ull << 30);
  wa->set_alignment(4096);
  wa->set_old_address(0x7f00bb000000ull);
  wa->set_stack_id(9);
  ExpectSame(want, t.packet(4), "alloc");

  want.set_timestamp_ns(5000);
  want.mutable_free()->set_address(0x7f00aa000000ull);
  want.mutable_free()->set_by_realloc(true);
  ExpectSame(want, t.packet(5), "free");

  want.set_timestamp_ns(6000);
  pt::ShmEvent* wm = want.mutable_shm();
  wm->set_op(pt::SHM_CREATE);
  wm->set_name("/torch_42_1");
  wm->set_fd(17);
  wm->set_size(1 << 20);
  wm->set_offset(8192);
  wm->set_address(0x7f00cc000000ull);
  wm->set_flags(-3);
  wm->set_prot(3);
  wm->set_error(12);
  wm->set_device(0x2b);
  wm->set_inode(99887766);
  wm->set_driver_internal(true);
  wm->set_stack_id(10);
  wm->set_end_ns(6100);
  // A creation carries the thread's own usage, read when it was recorded:
  // this test process has used CPU time and taken page faults by then (a
  // map or an unmap carries none: e2e_alloc_test's SharedMemoryEvents).
  const pt::ThreadUsage& got_usage = t.packet(6).shm().usage();
  EXPECT_GT(got_usage.cpu_ns(), 0u);
  EXPECT_GT(got_usage.minor_faults(), 0u);
  *wm->mutable_usage() = got_usage;
  ExpectSame(want, t.packet(6), "shm");

  want.set_timestamp_ns(7000);
  pt::PinEvent* wp = want.mutable_pin();
  wp->set_op(pt::REGISTER_FAILED);
  wp->set_address(0x7f00dd000000ull);
  wp->set_size(64 << 20);
  wp->set_duration_ns(123456);
  wp->set_result(2);
  wp->set_pinned_bytes(128 << 20);
  wp->set_reason("munmap");
  ExpectSame(want, t.packet(7), "pin");

  want.set_timestamp_ns(7500);
  pt::LoaderEvent* wl = want.mutable_loader();
  wl->set_kind(pt::LOADER_FETCH);
  wl->set_loader_id(0xfeed);
  wl->set_end_ns(7900);
  wl->set_index(3);
  SetUsage(wl->mutable_usage_begin(), {9, 1, 2, 3, 4});
  SetUsage(wl->mutable_usage_end(), {19, 5, 6, 7, 8});
  wl->set_num_workers(4);
  wl->set_pin_memory(true);
  wl->set_prefetch_factor(2);
  wl->set_persistent_workers(true);
  wl->set_batch_size(128);
  wl->set_dataset_length(2560);
  wl->set_site("train.py:42");
  wl->set_worker_id(2);
  wl->set_batch_samples(128);
  ExpectSame(want, t.packet(8), "loader");

  // Notices, counters and the exit carry the time they were written.
  const pt::TracePacket& np = t.packet(9);
  ASSERT_TRUE(np.has_notice());
  EXPECT_EQ(np.notice().severity(), pt::Notice::WARNING);
  EXPECT_EQ(np.notice().code(), "pin_budget");
  EXPECT_EQ(np.notice().text(), "the pinning budget is full");
  EXPECT_GT(np.timestamp_ns(), 0u);

  // At exit every thread's CPU time and faults: this test's thread and the
  // recorder's flusher.
  ASSERT_TRUE(t.packet(10).has_thread_sample());
  const pt::ThreadSample& ts = t.packet(10).thread_sample();
  ASSERT_EQ(ts.threads_size(), 2);
  const pt::ThreadSample::Entry& self =
      ts.threads(0).tid() == static_cast<uint32_t>(gettid()) ? ts.threads(0) : ts.threads(1);
  EXPECT_EQ(self.tid(), static_cast<uint32_t>(gettid()));
  EXPECT_GT(self.cpu_ns(), 0u);
  EXPECT_GT(self.minor_faults(), 0u);

  ASSERT_TRUE(t.packet(11).has_counters());
  const pt::Counters& cnt = t.packet(11).counters();
  EXPECT_EQ(cnt.copies(), 1u);
  EXPECT_EQ(cnt.allocs_recorded(), 1u);
  EXPECT_EQ(cnt.dropped_events(), 1u);
  // Only the header's frame, written when the file was made, before the exit.
  EXPECT_GT(cnt.bytes_written(), 0u);
  EXPECT_LT(cnt.bytes_written(), 4096u);

  ASSERT_TRUE(t.packet(12).has_exit());
  EXPECT_EQ(t.packet(12).exit().how(), pt::ProcessExit::UNDERSCORE_EXIT);
  EXPECT_EQ(t.packet(12).exit().status(), -4);
  EXPECT_EQ(t.packet(12).exit().dropped_events(), 1u);
  EXPECT_GE(t.packet(12).timestamp_ns(), np.timestamp_ns());
  if (!HasFailure()) std::filesystem::remove_all(tmpl);
}

}  // namespace
