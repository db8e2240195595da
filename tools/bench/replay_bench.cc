// Replay speed benchmark (docs/benchmarks.md "replay speed"): writes a
// synthetic run of N events on disk (a DataLoader-shaped job: a root process
// copying batches that 4 forked workers build in shm, with the allocations
// and frees around them), streamed out process by process, then times
// `pinscope report`'s replay of it in a fresh process: events per second of
// CPU time on one core, and peak RSS (getrusage ru_maxrss).
//
//   replay_bench [--events N,N,...] [--dir DIR] [--keep] [--no-shm | --copies | --dense | --hooked]
//                                                         generate + replay each N
//   replay_bench [--no-shm | --copies | --dense | --hooked] generate DIR N   write the run only
//   replay_bench replay DIR                               replay one run, print numbers
//
// Not a test: numbers depend on the machine. Packets are framed as the shim
// frames them (0x0A, a padded 4-byte length); nested messages are encoded by
// libprotobuf with minimal lengths.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "analyzer/read/calibration.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report.h"
#include "trace.pb.h"

namespace {

using pinscope::trace::TracePacket;
namespace trace = pinscope::trace;

constexpr uint64_t kT0 = 1000ull * 1000 * 1000 * 1000;  // 1000 s
constexpr uint64_t kMs = 1000 * 1000;
constexpr int kWorkers = 4;
constexpr uint32_t kRootPid = 100;
constexpr uint64_t kBatchBytes = 8ull << 20;
// Per batch: each worker allocates and frees g_sample_allocs decode buffers.
int g_sample_allocs = 384;
// Per step: the main process allocates and frees g_host_allocs host tensors.
int g_host_allocs = 40;
// --dense: the same mix with 8 sample buffers per batch and 2 host tensors
// per step: a step every 34 events instead of 864, so what the report keeps
// per step (or per shm segment) shows at a few million events
// (tests/analyzer/export/memory_flat_test.py).
// --no-shm: batches reach the main process without shm (the segment events
// are left out), to show the replay's own memory without the per-segment
// records the report keeps (see docs/benchmarks.md).
bool g_shm = true;
// --copies: the root process only, each step an H2D copy, a sync, a D2H
// copy and a sync (half the events are copies): what grows with the number
// of copies (docs/benchmarks.md, "Report memory against copies").
bool g_copies = false;
// --hooked: a job with pinscope's Python hook, a step every 5 events: per
// step the root's __next__ span with the batch's receive inside it, an H2D
// copy and a sync; each worker's fetch span per batch it makes; the root's
// threads sampled every 100 steps. What the step model keeps per hooked
// step shows (docs/benchmarks.md, "Report memory against hooked steps").
bool g_hooked = false;
constexpr uint64_t kLoaderId = 0x7f00aa00;

// Streams one process file: the shim's framing, a reused buffer.
class FileWriter {
 public:
  FileWriter(const std::string& path) : file_(std::fopen(path.c_str(), "wb")) {
    if (file_ == nullptr) {
      std::perror(path.c_str());
      std::exit(2);
    }
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  }
  ~FileWriter() { std::fclose(file_); }

  void Write(const TracePacket& packet) {
    packet.SerializeToString(&body_);
    uint8_t head[5] = {0x0A};
    uint64_t length = body_.size();
    for (int i = 0; i < 4; ++i) {  // padded to 4 bytes, as shim/record/wire.h writes lengths
      head[1 + i] = static_cast<uint8_t>((length & 0x7F) | (i < 3 ? 0x80 : 0));
      length >>= 7;
    }
    std::fwrite(head, 1, sizeof(head), file_);
    std::fwrite(body_.data(), 1, body_.size(), file_);
    ++events_;
  }
  uint64_t events() const { return events_; }

 private:
  std::FILE* file_;
  std::string body_;
  uint64_t events_ = 0;
};

void WriteHeader(FileWriter& out, uint32_t pid, bool root) {
  TracePacket packet;
  packet.set_timestamp_ns(kT0 + (root ? 0 : pid));
  packet.set_tid(pid);
  trace::ProcessHeader* header = packet.mutable_header();
  header->set_format_version(1);
  header->set_run_id("bench-run");
  header->set_pid(pid);
  header->set_ppid(root ? 1 : kRootPid);
  header->set_parent_pid(root ? 0 : kRootPid);
  header->set_origin(root ? trace::ORIGIN_ROOT : trace::ORIGIN_FORK);
  header->add_cmdline("python");
  header->add_cmdline("train.py");
  header->set_exe("/usr/bin/python3");
  header->set_start_mono_ns(kT0 + (root ? 0 : pid));
  header->set_start_wall_ns(1795946400ull * 1000000000ull);
  header->mutable_host()->set_logical_cores(16);
  header->mutable_host()->set_shm_capacity_bytes(64ull << 30);
  header->mutable_host()->set_shm_free_bytes(64ull << 30);
  out.Write(packet);
}

uint64_t Inode(int worker, uint64_t batch) {
  return (static_cast<uint64_t>(worker + 1) << 40) | batch;
}

// Worker `w` builds batches w, w + 4, ...: sample allocations, then the shm
// segment the batch is collated into (create, truncate, map, unlink, unmap,
// close).
uint64_t WriteWorker(const std::string& dir, int w, uint64_t batches, uint64_t step_ns) {
  const uint32_t pid = kRootPid + 1 + static_cast<uint32_t>(w);
  FileWriter out(dir + "/" + std::to_string(pid) + ".pstrace");
  WriteHeader(out, pid, false);
  TracePacket alloc, free_packet, shm;
  const uint64_t cycle_ns = step_ns * kWorkers;
  for (uint64_t k = 0; k < batches; ++k) {
    const uint64_t batch = k * kWorkers + static_cast<uint64_t>(w);
    const uint64_t start = kT0 + kMs + k * cycle_ns;
    if (g_hooked) {
      // The batch's fetch, most of the worker's cycle (written when it ends).
      TracePacket fetch;
      fetch.set_timestamp_ns(start);
      fetch.set_tid(pid);
      trace::LoaderEvent* l = fetch.mutable_loader();
      l->set_kind(trace::LOADER_FETCH);
      l->set_index(batch);
      l->set_worker_id(w);
      l->set_end_ns(start + cycle_ns - kMs - (batch % 7) * 1000);
      l->mutable_usage_begin()->set_cpu_ns(k * (cycle_ns - kMs));
      l->mutable_usage_end()->set_cpu_ns(k * (cycle_ns - kMs) + cycle_ns - 2 * kMs);
      out.Write(fetch);
      continue;
    }
    const uint64_t tick = cycle_ns / (2 * g_sample_allocs + 16);
    uint64_t t = start;
    for (int i = 0; i < g_sample_allocs; ++i) {
      const uint64_t address = 0x200000000ull + static_cast<uint64_t>(i % 8) * 0x200000;
      alloc.Clear();
      alloc.set_timestamp_ns(t += tick);
      alloc.set_tid(pid);
      alloc.mutable_alloc()->set_api(trace::MALLOC);
      alloc.mutable_alloc()->set_address(address);
      alloc.mutable_alloc()->set_size(1ull << 20);
      out.Write(alloc);
      free_packet.Clear();
      free_packet.set_timestamp_ns(t += tick);
      free_packet.set_tid(pid);
      free_packet.mutable_free()->set_address(address);
      out.Write(free_packet);
    }
    const uint64_t map_address = 0x7f0000000000ull + (batch % 16) * kBatchBytes;
    const auto shm_event = [&](trace::ShmOp op, int32_t fd, uint64_t size, uint64_t address) {
      shm.Clear();
      shm.set_timestamp_ns(t += tick);
      shm.set_tid(pid);
      trace::ShmEvent* event = shm.mutable_shm();
      event->set_op(op);
      if (op == trace::SHM_CREATE || op == trace::SHM_UNLINK) {
        event->set_name("/torch_" + std::to_string(pid) + "_" + std::to_string(batch));
      }
      event->set_fd(fd);
      event->set_size(size);
      event->set_address(address);
      event->set_device(0x1a);
      event->set_inode(Inode(w, batch));
      event->set_end_ns(t + 1000);
      out.Write(shm);
    };
    if (!g_shm) continue;
    shm_event(trace::SHM_CREATE, 20, 0, 0);
    shm_event(trace::SHM_TRUNCATE, 20, kBatchBytes, 0);
    shm_event(trace::SHM_MAP, 20, kBatchBytes, map_address);
    shm_event(trace::SHM_UNLINK, -1, 0, 0);
    shm_event(trace::SHM_UNMAP, -1, kBatchBytes, map_address);
    shm_event(trace::SHM_CLOSE, 20, 0, 0);
  }
  TracePacket exit;
  exit.set_timestamp_ns(kT0 + kMs + batches * cycle_ns + kMs);
  exit.set_tid(pid);
  exit.mutable_exit()->set_how(trace::ProcessExit::EXIT);
  out.Write(exit);
  return out.events();
}

// The main loop: per step, map the next batch's segment (received fd), copy
// it to the device, sync, unmap; a pageable target tensor copied H2D; the
// loss read back (D2H + sync); host tensors allocated and freed.
uint64_t WriteRoot(const std::string& dir, uint64_t steps, uint64_t step_ns) {
  FileWriter out(dir + "/" + std::to_string(kRootPid) + ".pstrace");
  WriteHeader(out, kRootPid, true);
  TracePacket copy, sync, shm, alloc, free_packet;
  uint64_t call_id = 0;
  if (g_hooked) {
    TracePacket iter;
    iter.set_timestamp_ns(kT0 + kMs / 2);
    iter.set_tid(kRootPid);
    trace::LoaderEvent* l = iter.mutable_loader();
    l->set_kind(trace::LOADER_ITER);
    l->set_loader_id(kLoaderId);
    l->set_num_workers(kWorkers);
    l->set_prefetch_factor(2);
    l->set_batch_size(64);
    l->set_site("train.py:40");
    out.Write(iter);
  }
  for (uint64_t k = 0; k < steps; ++k) {
    // The batch is ready one worker cycle after its worker started it.
    const uint64_t start = kT0 + kMs + (k + kWorkers) * step_ns;
    const uint64_t tick = step_ns / (2 * g_host_allocs + 16);
    uint64_t t = start;
    const int w = static_cast<int>(k % kWorkers);
    const uint64_t map_address = 0x7e0000000000ull + (k % 4) * kBatchBytes;
    const auto shm_event = [&](trace::ShmOp op, int32_t fd, uint64_t size, uint64_t address) {
      shm.Clear();
      shm.set_timestamp_ns(t += tick);
      shm.set_tid(kRootPid);
      trace::ShmEvent* event = shm.mutable_shm();
      event->set_op(op);
      event->set_fd(fd);
      event->set_size(size);
      event->set_address(address);
      event->set_device(0x1a);
      event->set_inode(op == trace::SHM_MAP ? Inode(w, k) : 0);
      event->set_end_ns(t + 1000);
      out.Write(shm);
    };
    const auto copy_event = [&](trace::Direction direction, uint64_t bytes, uint64_t host,
                                uint64_t blocked) {
      copy.Clear();
      copy.set_timestamp_ns(t += tick);
      copy.set_tid(kRootPid);
      trace::CopyEvent* event = copy.mutable_copy();
      event->set_api(trace::MEMCPY_ASYNC);
      event->set_direction(direction);
      event->set_requested_kind(direction == trace::H2D ? 1 : 2);
      event->set_bytes(bytes);
      event->set_src_kind(direction == trace::H2D ? trace::PAGEABLE : trace::DEVICE);
      event->set_dst_kind(direction == trace::H2D ? trace::DEVICE : trace::PAGEABLE);
      event->set_src_address(direction == trace::H2D ? host : 0x7d0000000000ull);
      event->set_dst_address(direction == trace::H2D ? 0x7d0000000000ull : host);
      event->set_src_device(direction == trace::H2D ? -1 : 0);
      event->set_dst_device(direction == trace::H2D ? 0 : -1);
      event->set_stream(7);
      event->set_end_ns(t + blocked);
      event->set_call_id(++call_id);
      out.Write(copy);
      t += blocked;
    };
    const auto sync_event = [&]() {
      sync.Clear();
      sync.set_timestamp_ns(t += tick);
      sync.set_tid(kRootPid);
      sync.mutable_sync()->set_api(trace::STREAM_SYNCHRONIZE);
      sync.mutable_sync()->set_stream(7);
      sync.mutable_sync()->set_end_ns(t + 2000);
      sync.mutable_sync()->set_call_id(++call_id);
      out.Write(sync);
    };
    if (g_hooked) {
      // Written as they end: the receive, the __next__ around it; then the
      // batch's copy and a sync.
      const uint64_t cpu = k * 4 * kMs;
      TracePacket loader;
      const auto span = [&](trace::LoaderEventKind kind, uint64_t from, uint64_t to,
                            uint64_t cpu_from, uint64_t cpu_to) {
        loader.Clear();
        loader.set_timestamp_ns(from);
        loader.set_tid(kRootPid);
        trace::LoaderEvent* l = loader.mutable_loader();
        l->set_kind(kind);
        l->set_loader_id(kLoaderId);
        l->set_index(k);
        l->set_end_ns(to);
        l->mutable_usage_begin()->set_cpu_ns(cpu_from);
        l->mutable_usage_end()->set_cpu_ns(cpu_to);
        out.Write(loader);
      };
      span(trace::LOADER_RECV, start + kMs / 2, start + 2 * kMs, cpu + kMs / 4, cpu + kMs);
      span(trace::LOADER_NEXT, start, start + 3 * kMs, cpu, cpu + 2 * kMs);
      t = start + 3 * kMs;
      copy_event(trace::H2D, kBatchBytes, map_address, kMs);
      sync_event();
      if (k % 100 == 0) {
        TracePacket sample;
        sample.set_timestamp_ns(t + tick);
        sample.set_tid(kRootPid + 1000);
        for (uint32_t i = 0; i < 4; ++i) {
          trace::ThreadSample::Entry* e = sample.mutable_thread_sample()->add_threads();
          e->set_tid(i == 0 ? kRootPid : kRootPid + 1000 + i);
          e->set_cpu_ns(i == 0 ? cpu : k * (i + 1) * kMs / 10);
        }
        out.Write(sample);
      }
      continue;
    }
    if (g_copies) {
      copy_event(trace::H2D, kBatchBytes, map_address, kMs);
      sync_event();
      copy_event(trace::D2H, 4, 0x600000000ull, 20000);
      sync_event();
      continue;
    }
    if (g_shm) shm_event(trace::SHM_MAP, 30, kBatchBytes, map_address);
    copy_event(trace::H2D, kBatchBytes, map_address, kMs);
    sync_event();
    if (g_shm) shm_event(trace::SHM_UNMAP, -1, kBatchBytes, map_address);
    if (g_shm) shm_event(trace::SHM_CLOSE, 30, 0, 0);
    for (int i = 0; i < g_host_allocs; ++i) {
      const uint64_t address = 0x300000000ull + static_cast<uint64_t>(i % 16) * 0x400000;
      alloc.Clear();
      alloc.set_timestamp_ns(t += tick);
      alloc.set_tid(kRootPid);
      alloc.mutable_alloc()->set_api(trace::POSIX_MEMALIGN);
      alloc.mutable_alloc()->set_address(address);
      alloc.mutable_alloc()->set_size(2ull << 20);
      alloc.mutable_alloc()->set_alignment(64);
      out.Write(alloc);
      if (i == 0) copy_event(trace::H2D, 2ull << 20, address, 300000);
      free_packet.Clear();
      free_packet.set_timestamp_ns(t += tick);
      free_packet.set_tid(kRootPid);
      free_packet.mutable_free()->set_address(address);
      out.Write(free_packet);
    }
    copy_event(trace::D2H, 4, 0x600000000ull, 20000);
    sync_event();
  }
  TracePacket exit;
  exit.set_timestamp_ns(kT0 + kMs + (steps + kWorkers + 1) * step_ns);
  exit.set_tid(kRootPid);
  exit.mutable_exit()->set_how(trace::ProcessExit::EXIT);
  out.Write(exit);
  return out.events();
}

uint64_t Generate(const std::string& dir, uint64_t events) {
  // Events per step: root (5 + 2 * g_host_allocs + 1 + 2) plus a quarter of a
  // worker batch's events (4 workers, one batch per step between them).
  const uint64_t root_per_step = 5 + 2 * g_host_allocs + 1 + 2;
  const uint64_t worker_per_batch = 2 * g_sample_allocs + 6;
  const uint64_t per_step_mix = root_per_step + worker_per_batch;
  std::filesystem::create_directories(dir);
  // --hooked: the root's 4 and a quarter of a worker's (one batch a step
  // between 4 workers), and a sample every 100 steps.
  const uint64_t per_step = g_copies ? 4 : g_hooked ? 5 : per_step_mix - (g_shm ? 0 : 9);
  const uint64_t steps = (events + per_step - 1) / per_step;
  const uint64_t step_ns = 10 * kMs;
  uint64_t written = WriteRoot(dir, steps, step_ns);
  if (g_copies) return written;
  for (int w = 0; w < kWorkers; ++w) {
    const uint64_t batches = (steps + kWorkers - 1 - static_cast<uint64_t>(w)) / kWorkers;
    written += WriteWorker(dir, w, batches, step_ns);
  }
  return written;
}

double CpuSeconds(const rusage& usage) {
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

// `pinscope report`'s work: listing, replay with the report's analyses, the
// rules and the text report (to a null stream).
int Replay(const std::string& dir) {
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto wall_start = std::chrono::steady_clock::now();
  pinscope::RunListing listing;
  if (!pinscope::ScanRun(dir, &listing).ok()) return 2;
  pinscope::ReportOptions options;
  options.run_dir = dir;
  pinscope::Report report(pinscope::DefaultCalibration(), options);
  pinscope::ReplayEngine engine(std::move(listing));
  report.Attach(&engine);
  engine.Run();
  report.Evaluate(engine.info());
  NullBuffer null_buffer;
  std::ostream null(&null_buffer);
  pinscope::WriteTextReport(report, false, null);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  const double cpu = CpuSeconds(after) - CpuSeconds(before);
  // Events = every packet of every file, headers included.
  const uint64_t events = engine.info().packets + engine.info().processes.size();
  // Resident memory now, split into heap/anonymous and file-backed (code).
  long rss_anon = 0, rss_file = 0;
  if (std::FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), status) != nullptr) {
      std::sscanf(line, "RssAnon: %ld", &rss_anon);
      std::sscanf(line, "RssFile: %ld", &rss_file);
    }
    std::fclose(status);
  }
  const struct mallinfo2 heap = mallinfo2();
  std::printf("events=%" PRIu64
              " cpu_s=%.2f wall_s=%.2f events_per_cpu_s=%.0f maxrss_kib=%ld "
              "rss_anon_kib=%ld rss_file_kib=%ld heap_in_use_kib=%zu heap_arena_kib=%zu "
              "copies=%" PRIu64 " steps=%" PRIu64 " step_ms=%.3f hooked=%d verdict=%s\n",
              events, cpu, wall, events / cpu, after.ru_maxrss, rss_anon, rss_file,
              heap.uordblks / 1024, (heap.arena + heap.hblkhd) / 1024,
              report.copies().total().count, report.model_inputs().main.steps,
              report.model_inputs().main.step_ns / 1e6, report.model_inputs().main.timed_by_hook,
              report.verdict().id.c_str());
  return 0;
}

// Runs `self replay DIR` in a fresh process (its own ru_maxrss).
int ReplayChild(const std::string& self, const std::string& dir) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    execl(self.c_str(), self.c_str(), "replay", dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--no-shm") == 0 ||
                    std::strcmp(argv[1], "--copies") == 0 || std::strcmp(argv[1], "--dense") == 0 ||
                    std::strcmp(argv[1], "--hooked") == 0)) {  // also before generate
    if (std::strcmp(argv[1], "--copies") == 0) {
      g_copies = true;
    } else if (std::strcmp(argv[1], "--hooked") == 0) {
      g_hooked = true;
    } else if (std::strcmp(argv[1], "--dense") == 0) {
      g_sample_allocs = 8;
      g_host_allocs = 2;
    } else {
      g_shm = false;
    }
    argv[1] = argv[0];
    ++argv;
    --argc;
  }
  if (argc == 4 && std::strcmp(argv[1], "generate") == 0) {
    const uint64_t written = Generate(argv[2], std::strtoull(argv[3], nullptr, 10));
    std::printf("wrote %" PRIu64 " events to %s\n", written, argv[2]);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "replay") == 0) return Replay(argv[2]);

  std::vector<uint64_t> sizes = {5000000, 50000000};
  std::string base;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
      sizes.clear();
      for (char* part = std::strtok(argv[++i], ","); part; part = std::strtok(nullptr, ",")) {
        sizes.push_back(std::strtoull(part, nullptr, 10));
      }
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      base = argv[++i];
    } else if (std::strcmp(argv[i], "--keep") == 0) {
      keep = true;
    } else if (std::strcmp(argv[i], "--no-shm") == 0) {
      g_shm = false;
    } else if (std::strcmp(argv[i], "--copies") == 0) {
      g_copies = true;
    } else if (std::strcmp(argv[i], "--hooked") == 0) {
      g_hooked = true;
    } else if (std::strcmp(argv[i], "--dense") == 0) {
      g_sample_allocs = 8;
      g_host_allocs = 2;
    } else {
      std::fprintf(stderr,
                   "usage: replay_bench [--events N,N,...] [--dir DIR] [--keep] [--no-shm | "
                   "--copies | --dense | --hooked]\n"
                   "       replay_bench generate DIR N | replay_bench replay DIR\n");
      return 2;
    }
  }
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = std::string(tmp != nullptr ? tmp : "/tmp") + "/pinscope_replay_bench_" +
           std::to_string(getpid());
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (uint64_t events : sizes) {
    const std::string dir = base + "/run_" + std::to_string(events);
    std::filesystem::remove_all(dir);
    const auto start = std::chrono::steady_clock::now();
    const uint64_t written = Generate(dir, events);
    uintmax_t bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) bytes += entry.file_size();
    std::printf("generated %" PRIu64 " events (%.2f GiB) in %.1f s: %s\n", written,
                bytes / double(1ull << 30),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                dir.c_str());
    const int status = ReplayChild(self, dir);
    if (!keep) std::filesystem::remove_all(dir);
    if (status != 0) return status;
  }
  if (!keep) std::filesystem::remove_all(base);
  return 0;
}
