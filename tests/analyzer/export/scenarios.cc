// The export and diff scenarios, built with the analyzer tests' TraceBuilder
// (tests/analyzer/pipeline/trace_builder.h) so they are framed exactly as the shim
// frames its files.
#include "scenarios.h"

#include "trace_builder.h"

namespace pinscope::testing {

namespace {

constexpr uint64_t kUs = 1000;

}  // namespace

void WriteExportScenario(const std::string& dir) {
  const uint64_t t0 = kScenarioT0;
  TraceBuilder main(100, "run-export", t0);
  SetHostFacts(&main.header(), 8ull << 30, 8ull << 30);
  main.Thread(t0 + kMs, 102, "pin_memory");

  // One interned Python stack: train.py:42 train_step <- train.py:80 main.
  trace::TracePacket& s1 = main.Add(t0 + 2 * kMs);
  s1.mutable_interned_string()->set_id(1);
  s1.mutable_interned_string()->set_str("train.py");
  trace::TracePacket& s2 = main.Add(t0 + 2 * kMs);
  s2.mutable_interned_string()->set_id(2);
  s2.mutable_interned_string()->set_str("train_step");
  trace::TracePacket& s3 = main.Add(t0 + 2 * kMs);
  s3.mutable_interned_string()->set_id(3);
  s3.mutable_interned_string()->set_str("main");
  trace::TracePacket& s4 = main.Add(t0 + 2 * kMs);
  s4.mutable_interned_string()->set_id(4);
  s4.mutable_interned_string()->set_str("volta_sgemm_128x64_nn");
  trace::TracePacket& f1 = main.Add(t0 + 2 * kMs);
  f1.mutable_python_frame()->set_id(1);
  f1.mutable_python_frame()->set_filename_id(1);
  f1.mutable_python_frame()->set_function_id(2);
  f1.mutable_python_frame()->set_line(42);
  trace::TracePacket& f2 = main.Add(t0 + 2 * kMs);
  f2.mutable_python_frame()->set_id(2);
  f2.mutable_python_frame()->set_filename_id(1);
  f2.mutable_python_frame()->set_function_id(3);
  f2.mutable_python_frame()->set_line(80);
  trace::TracePacket& stack = main.Add(t0 + 2 * kMs);
  stack.mutable_stack()->set_id(7);
  stack.mutable_stack()->add_python_frames(1);
  stack.mutable_stack()->add_python_frames(2);

  // The batch buffer, then its pageable H2D copy (6.0 GB/s) with the stack.
  main.Alloc(t0 + 9 * kMs, trace::POSIX_MEMALIGN, 0x10000000, kBatchBytes);
  trace::TracePacket& h2d =
      main.Copy(t0 + 10 * kMs, 12845 * kUs, trace::H2D, trace::PAGEABLE, kBatchBytes, 0x10000000);
  h2d.mutable_copy()->set_stream(7);
  h2d.mutable_copy()->set_stack_id(7);
  trace::TracePacket& sync = main.Add(t0 + 23 * kMs);
  sync.mutable_sync()->set_api(trace::STREAM_SYNCHRONIZE);
  sync.mutable_sync()->set_stream(7);
  sync.mutable_sync()->set_end_ns(t0 + 24 * kMs);
  sync.mutable_sync()->set_call_id(10);
  sync.mutable_sync()->set_stack_id(7);
  trace::TracePacket& d2h =
      main.Copy(t0 + 30 * kMs, 100 * kUs, trace::D2H, trace::PINNED, 1 << 20, 0x40000000);
  d2h.mutable_copy()->set_pin(trace::PIN_BY_PROGRAM);
  d2h.mutable_copy()->set_stream(7);

  // pinscope pins a buffer and the pin thread copies from it.
  trace::TracePacket& reg = main.Add(t0 + 39 * kMs, 102);
  reg.mutable_pin()->set_op(trace::REGISTER);
  reg.mutable_pin()->set_address(0x50000000);
  reg.mutable_pin()->set_size(kBatchBytes);
  reg.mutable_pin()->set_duration_ns(3700 * kUs);
  reg.mutable_pin()->set_pinned_bytes(kBatchBytes);
  trace::TracePacket& pinned =
      main.Copy(t0 + 40 * kMs, 1500 * kUs, trace::H2D, trace::PINNED, kBatchBytes, 0x50000000, 102);
  pinned.mutable_copy()->set_pin(trace::PIN_REGISTERED);
  pinned.mutable_copy()->set_stream(7);
  trace::TracePacket& unreg = main.Add(t0 + 50 * kMs, 102);
  unreg.mutable_pin()->set_op(trace::UNREGISTER);
  unreg.mutable_pin()->set_address(0x50000000);
  unreg.mutable_pin()->set_size(kBatchBytes);
  unreg.mutable_pin()->set_pinned_bytes(0);
  unreg.mutable_pin()->set_reason("free");

  // The worker's batch arrives through shm (made by pid 101, inode 500).
  main.Shm(t0 + 9 * kMs, trace::SHM_MAP, "", 9, 1 << 20, 0x30000000, 500);
  main.Shm(t0 + 60 * kMs, trace::SHM_UNMAP, "", -1, 1 << 20, 0x30000000, 0);

  // CUPTI: the H2D transfer and a kernel on device 0, stream 7.
  trace::TracePacket& act = main.Add(t0 + 65 * kMs);
  trace::DeviceActivity* memcpy = act.mutable_device();
  memcpy->set_kind(trace::ACT_MEMCPY);
  memcpy->set_start_ns(t0 + 10 * kMs + 500 * kUs);
  memcpy->set_end_ns(t0 + 22 * kMs + 500 * kUs);
  memcpy->set_bytes(kBatchBytes);
  memcpy->set_direction(trace::H2D);
  memcpy->set_src_kind(trace::PAGEABLE);
  memcpy->set_dst_kind(trace::DEVICE);
  memcpy->set_device_id(0);
  memcpy->set_stream_id(7);
  memcpy->set_correlation_id(11);
  trace::TracePacket& kernel_packet = main.Add(t0 + 65 * kMs);
  trace::DeviceActivity* kernel = kernel_packet.mutable_device();
  kernel->set_kind(trace::ACT_KERNEL);
  kernel->set_start_ns(t0 + 25 * kMs);
  kernel->set_end_ns(t0 + 27 * kMs);
  kernel->set_device_id(0);
  kernel->set_stream_id(7);
  kernel->set_correlation_id(12);
  kernel->set_name_id(4);
  main.Exit(t0 + 80 * kMs);
  main.SortByTime();
  main.Write(dir);

  TraceBuilder worker(101, "run-export", t0 + 3 * kMs, trace::ORIGIN_FORK, 100);
  worker.Shm(t0 + 5 * kMs, trace::SHM_CREATE, "/torch_101_0", 5, 0, 0, 500);
  worker.Shm(t0 + 5 * kMs + kUs, trace::SHM_TRUNCATE, "", 5, 1 << 20, 0, 500);
  worker.Shm(t0 + 5 * kMs + 2 * kUs, trace::SHM_MAP, "", 5, 1 << 20, 0x20000000, 500);
  worker.Shm(t0 + 5 * kMs + 3 * kUs, trace::SHM_UNLINK, "/torch_101_0", -1, 0, 0, 500);
  worker.Shm(t0 + 8 * kMs, trace::SHM_UNMAP, "", -1, 1 << 20, 0x20000000, 0);
  worker.Exit(t0 + 70 * kMs);
  worker.Write(dir);
}

void WriteLoopRun(const std::string& dir, const std::string& run_id, bool pinned, int batches,
                  uint64_t period_ns) {
  const uint64_t t0 = kScenarioT0;
  TraceBuilder main(100, run_id, t0);
  SetHostFacts(&main.header(), 8ull << 30, 8ull << 30);
  main.Alloc(t0 + kMs, trace::POSIX_MEMALIGN, 0x10000000, kBatchBytes);
  const uint64_t copy_ns = pinned ? 1500 * kUs : 12845 * kUs;
  for (int i = 0; i < batches; ++i) {
    const uint64_t at = t0 + 2 * kMs + static_cast<uint64_t>(i) * period_ns;
    main.Copy(at, copy_ns, trace::H2D, pinned ? trace::PINNED : trace::PAGEABLE, kBatchBytes,
              0x10000000);
    main.Copy(at + copy_ns + 100 * kUs, 10 * kUs, trace::D2H, trace::PAGEABLE, 4096, 0x60000000);
  }
  main.Exit(t0 + 2 * kMs + static_cast<uint64_t>(batches) * period_ns);
  main.Write(dir);
}

}  // namespace pinscope::testing
