// What trace compression (issue 18) costs and saves, on the shim's own code:
//
//   trace_write_bench hook [--compress 0|1] [--events N] [--rounds R] [--threads 1|2]
//     RecordCopy from this thread with the real flusher loop on another
//     (WaitForFullTraceBuffer/WriteFullTraceBuffer, as shim/process runs
//     it): ns per event on the recording thread (median of R rounds), the
//     flusher's ns per event, file bytes per copy event, inline writes.
//     --threads 2: a second thread on another core records the same at
//     once (the training loop's thread and the DataLoader's pin thread
//     share the process's writer): the first thread's ns per event.
//   trace_write_bench size FILE.pstrace...
//     plain traces (e.g. tests/data/h200, examples/) written again through
//     TraceWriter, compressed, a flush per 1 MiB buffer: bytes per packet and
//     per copy event, plain and compressed.
//
// One line of JSON per measurement. docs/benchmarks.md, "Trace compression".
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/record/trace_writer.h"

namespace ps = pinscope::shim;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_flusher_ns{0};

uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void* Flusher(void*) {
  while (!g_stop.load()) {
    const uint64_t deadline = ps::MonoNs() + 20000000;
    while (ps::WaitForFullTraceBuffer(deadline)) {
      const uint64_t t0 = ThreadCpuNs();
      ps::WriteFullTraceBuffer();
      g_flusher_ns.fetch_add(ThreadCpuNs() - t0);
    }
  }
  return nullptr;
}

void EncodeHeader(ps::Encoder* e) { e->Varint(ps::fields::header::kFormatVersion, 1); }

// Copies as a DataLoader job makes them: a few buffers and streams, times a
// few microseconds apart, the thread's usage growing. One round of `events`.
void RecordRound(int events, uint64_t* t, uint64_t* call) {
  ps::CopyCall c;
  c.api = ps::fields::kMemcpyAsync;
  c.direction = ps::fields::kH2D;
  c.bytes = 4u << 20;
  c.src_kind = ps::fields::kPageable;
  c.dst_kind = ps::fields::kDevice;
  c.dst_device = 0;
  for (int i = 0; i < events; ++i) {
    ++*call;
    *t += 3000 + (*call * 7919) % 2000;
    c.src_address = 0x7f0000000000ull + (*call % 16) * (4u << 20);
    c.dst_address = 0x7e0000000000ull + (*call % 8) * (4u << 20);
    c.stream = 0x5500 + *call % 4;
    c.t_enter = *t;
    c.t_exit = *t + 900 + *call % 300;
    c.call_id = *call;
    c.stack_id = 1 + *call % 5;
    c.batch_index = static_cast<uint32_t>(*call / 4);
    c.usage_enter.cpu_ns = *t / 3;
    c.usage_enter.user_ns = *t / 4;
    c.usage_exit = c.usage_enter;
    c.usage_exit.cpu_ns += 850;
    ps::RecordCopy(c);
  }
}

void PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
}

int Hook(bool compress, int events, int rounds, int threads) {
  char dir[] = "/tmp/pinscope-trace-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  ps::Config* config = ps::MutableConfig();
  ps::CopyString(config->out_dir, sizeof config->out_dir, dir);
  config->out_fd = -1;
  config->compress = compress;
  ps::RecorderCallbacks callbacks;
  callbacks.encode_header = EncodeHeader;
  ps::RecorderStart(ps::fields::kOriginRoot, callbacks);
  pthread_t flusher;
  pthread_create(&flusher, nullptr, Flusher, nullptr);
  std::atomic<bool> other_done{false};
  std::thread other;
  if (threads == 2) {
    other = std::thread([&] {
      PinToCpu(1);
      uint64_t t = ps::MonoNs(), call = uint64_t{1} << 40;
      for (int r = 0; r < rounds + 2; ++r) RecordRound(events, &t, &call);
      other_done.store(true);
    });
    PinToCpu(0);
  }
  std::vector<double> per_event, cpu_per_event;
  uint64_t t = ps::MonoNs();
  uint64_t call = 0;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t t0 = ps::MonoNs(), cpu0 = ThreadCpuNs();
    RecordRound(events, &t, &call);
    per_event.push_back(static_cast<double>(ps::MonoNs() - t0) / events);
    cpu_per_event.push_back(static_cast<double>(ThreadCpuNs() - cpu0) / events);
  }
  const bool overlapped = threads == 1 || !other_done.load();
  if (other.joinable()) other.join();
  g_stop.store(true);
  pthread_join(flusher, nullptr);
  ps::FlushTrace();
  const ps::RecorderCounts counts = ps::Counts();
  std::sort(per_event.begin(), per_event.end());
  std::sort(cpu_per_event.begin(), cpu_per_event.end());
  const double copies = static_cast<double>(events) * rounds;
  std::printf(
      "{\"bench\": \"hook\", \"threads\": %d, \"overlapped\": %s, \"compress\": %d, "
      "\"events\": %.0f, \"record_ns_per_event\": %.1f, "
      "\"record_cpu_ns_per_event\": %.1f, \"flusher_cpu_ns_per_event\": %.1f, "
      "\"inline_writes\": %llu, \"file_bytes\": %llu, \"file_bytes_per_copy\": %.2f}\n",
      threads, overlapped ? "true" : "false", compress ? 1 : 0, copies,
      per_event[per_event.size() / 2], cpu_per_event[cpu_per_event.size() / 2],
      static_cast<double>(g_flusher_ns.load()) / copies,
      static_cast<unsigned long long>(ps::TraceInlineWrites()),
      static_cast<unsigned long long>(counts.bytes_written),
      static_cast<double>(counts.bytes_written) / copies);
  std::string cleanup = std::string("rm -rf ") + dir;
  return std::system(cleanup.c_str()) == 0 ? 0 : 1;
}

// The top-level field of a TracePacket that is its `data` case (the first
// length-delimited field above tid), 0 if none.
uint32_t DataField(const uint8_t* p, size_t n) {
  size_t at = 0;
  while (at < n) {
    uint64_t key = 0;
    for (int shift = 0; at < n; shift += 7) {
      key |= uint64_t{p[at] & 0x7Fu} << shift;
      if (!(p[at++] & 0x80)) break;
    }
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    uint64_t v = 0;
    if (wire == 0 || wire == 2) {
      for (int shift = 0; at < n; shift += 7) {
        v |= uint64_t{p[at] & 0x7Fu} << shift;
        if (!(p[at++] & 0x80)) break;
      }
    }
    if (wire == 2) {
      if (field >= ps::fields::packet::kHeader) return field;
      at += v;
    } else if (wire == 1) {
      at += 8;
    } else if (wire == 5) {
      at += 4;
    }
  }
  return 0;
}

int Size(int argc, char** argv) {
  char dir[] = "/tmp/pinscope-trace-size-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  for (int a = 0; a < argc; ++a) {
    std::ifstream in(argv[a], std::ios::binary);
    const std::string raw{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ps::TraceWriter writer;
    if (writer.Open(-1, dir, static_cast<uint32_t>(a + 1), /*compress=*/true) != 0) return 1;
    const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
    size_t at = 0, packets = 0, copies = 0;
    while (at + 2 <= raw.size() && p[at] == 0x0A) {
      uint64_t len = 0;
      size_t q = at + 1;
      for (int shift = 0; q < raw.size(); shift += 7) {
        len |= uint64_t{p[q] & 0x7Fu} << shift;
        if (!(p[q++] & 0x80)) break;
      }
      if (q + len > raw.size()) break;
      if (DataField(p + q, len) == ps::fields::packet::kCopy) ++copies;
      ++packets;
      writer.Append(p + at, q + len - at);
      // Drain as the flusher would: the buffer that filled, frame by frame.
      if (writer.WaitForFullBuffer(0)) writer.WriteFullBuffer();
      at = q + len;
    }
    writer.CloseFile();
    struct stat st;
    stat(writer.path(), &st);
    unlink(writer.path());
    std::printf(
        "{\"bench\": \"size\", \"file\": \"%s\", \"packets\": %zu, \"copies\": %zu, "
        "\"plain_bytes\": %zu, \"compressed_bytes\": %lld, \"ratio\": %.2f, "
        "\"plain_bytes_per_packet\": %.1f, \"compressed_bytes_per_packet\": %.1f, "
        "\"copies_share_of_packets\": %.3f}\n",
        argv[a], packets, copies, at, static_cast<long long>(st.st_size),
        static_cast<double>(at) / static_cast<double>(std::max<off_t>(st.st_size, 1)),
        static_cast<double>(at) / std::max<size_t>(packets, 1),
        static_cast<double>(st.st_size) / std::max<size_t>(packets, 1),
        static_cast<double>(copies) / std::max<size_t>(packets, 1));
  }
  rmdir(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "hook")) {
    int compress = 1, events = 200000, rounds = 9, threads = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--compress")) compress = std::atoi(argv[i + 1]);
      if (!std::strcmp(argv[i], "--events")) events = std::atoi(argv[i + 1]);
      if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
      if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    if (events <= 0 || rounds <= 0) {
      std::fprintf(stderr, "trace_write_bench: --events and --rounds must be positive\n");
      return 2;
    }
    if (threads != 1 && threads != 2) {
      std::fprintf(stderr, "trace_write_bench: --threads must be 1 or 2\n");
      return 2;
    }
    return Hook(compress != 0, events, rounds, threads);
  }
  if (argc >= 3 && !std::strcmp(argv[1], "size")) return Size(argc - 2, argv + 2);
  std::fprintf(stderr,
               "usage: trace_write_bench hook [--compress 0|1] [--events N] [--rounds R] "
               "[--threads 1|2]\n"
               "       trace_write_bench size FILE.pstrace...\n");
  return 2;
}
