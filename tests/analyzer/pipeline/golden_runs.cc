// Scenario definitions of the golden runs. Numbers are chosen so the report
// can be checked by hand: 64x3x224x224 fp32 batches (38,535,168 bytes) copied
// at 6.0 GB/s pageable, weights of 100 MiB at 6.0 GB/s, 1 s of main process.
#include "golden_runs.h"

#include <vector>

#include "trace_builder.h"

namespace pinscope::testing {

namespace {

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;  // CLOCK_MONOTONIC 1000 s
constexpr uint64_t kBatchBytes = 64ull * 3 * 224 * 224 * 4;
constexpr uint64_t kWeightsBytes = 100 * kMiBytes;
const char* const kRunId = "20261129-100000-4100";

// Host-blocked time of a copy of `bytes` at `gbps` (bytes per ns).
uint64_t At(uint64_t bytes, double gbps) { return static_cast<uint64_t>(bytes / gbps); }

void WriteDataLoader(const std::string& dir) {
  constexpr uint32_t kMain = 4100;
  TraceBuilder main(kMain, kRunId, kT0);
  main.header().clear_cmdline();
  for (const char* arg : {"python", "train.py", "--workers", "2", "--batch-size", "64"}) {
    main.header().add_cmdline(arg);
  }
  SetHostFacts(&main.header(), 256 * kMiBytes, 250 * kMiBytes);
  main.header().mutable_config()->set_trace_min_bytes(kMiBytes);
  main.Thread(kT0 + 1 * kMs, kMain, "python");
  trace::TracePacket& cuda = main.Add(kT0 + 5 * kMs);
  cuda.mutable_cuda()->set_runtime_path("/opt/venv/nvidia/cu13/lib/libcudart.so.13");
  cuda.mutable_cuda()->set_runtime_version(13000);
  cuda.mutable_cuda()->set_driver_version(13000);
  cuda.mutable_cuda()->set_device_count(1);
  cuda.mutable_cuda()->add_device_names("NVIDIA H200");
  // The CUDA driver's own segment: recorded, never counted.
  main.Shm(kT0 + 6 * kMs, trace::SHM_OPEN, "/cuda_injection_path_shm", 3, 0, 0, 900)
      .mutable_shm()
      ->set_driver_internal(true);
  main.Shm(kT0 + 6 * kMs + 10000, trace::SHM_MAP, "", 3, 4096, 0x7f9000000000, 900)
      .mutable_shm()
      ->set_driver_internal(true);
  // Call sites, interned once: stack 1 loads the weights, stack 2 copies a
  // batch, stack 3 has native frames only.
  uint64_t next_id = 0;
  for (const char* text : {"train.py", "main", "train_step", "<module>"}) {
    trace::InternedString* interned = main.Add(kT0 + 2 * kMs).mutable_interned_string();
    interned->set_id(++next_id);
    interned->set_str(text);
  }
  const uint64_t frames[][3] = {{1, 2, 31}, {1, 3, 44}, {1, 2, 60}, {1, 4, 72}};  // file, fn, line
  for (uint64_t i = 0; i < 4; ++i) {
    trace::PythonFrame* frame = main.Add(kT0 + 2 * kMs).mutable_python_frame();
    frame->set_id(i + 1);
    frame->set_filename_id(frames[i][0]);
    frame->set_function_id(frames[i][1]);
    frame->set_line(static_cast<uint32_t>(frames[i][2]));
  }
  const std::vector<std::vector<uint64_t>> python_stacks = {{1, 4}, {2, 3, 4}, {}};
  for (uint64_t i = 0; i < python_stacks.size(); ++i) {
    trace::Stack* stack = main.Add(kT0 + 2 * kMs).mutable_stack();
    stack->set_id(i + 1);
    for (uint64_t frame : python_stacks[i]) stack->add_python_frames(frame);
    stack->add_native_pcs(0x7f8a10021234 + i);
    stack->add_native_pcs(0x55d0c0a05678);
  }
  main.Notice(kT0 + 7 * kMs, trace::Notice::INFO, "cupti_unavailable",
              "CUPTI is held by another subscriber: device activity is not recorded");

  // Model weights: posix_memalign, copied pageable at 6.0 GB/s.
  const uint64_t weights = 0x7f0000000000;
  main.Alloc(kT0 + 20 * kMs, trace::POSIX_MEMALIGN, weights, kWeightsBytes);
  main.Copy(kT0 + 30 * kMs, At(kWeightsBytes, 6.0), trace::H2D, trace::PAGEABLE, kWeightsBytes,
            weights)
      .mutable_copy()
      ->set_stack_id(1);
  // A pinned staging block the program made itself, used once, async.
  const uint64_t pinned = 0x7f1000000000;
  main.Alloc(kT0 + 60 * kMs, trace::CUDA_HOST_ALLOC, pinned, 64 * kMiBytes);
  main.Copy(kT0 + 70 * kMs, 20000, trace::H2D, trace::PINNED, 64 * kMiBytes, pinned);

  // Two workers, three batches each, every batch one shm segment.
  std::vector<TraceBuilder> workers;
  for (uint32_t w = 0; w < 2; ++w) {
    const uint32_t pid = 4101 + w;
    TraceBuilder worker(pid, kRunId, kT0 + (50 + w) * kMs, trace::ORIGIN_FORK, kMain);
    SetHostFacts(&worker.header(), 256 * kMiBytes, 250 * kMiBytes);
    *worker.header().mutable_cmdline() = main.header().cmdline();  // fork keeps argv
    for (uint64_t k = 0; k < 3; ++k) {
      const uint64_t created = kT0 + (100 + 100 * k + 10 * w) * kMs;
      const std::string name = "/torch_" + std::to_string(pid) + "_" + std::to_string(k);
      const uint64_t inode = 5000 + 10 * w + k;
      const int32_t fd = static_cast<int32_t>(20 + k);
      const uint64_t address = 0x7f5000000000 + (w * 8 + k) * 0x10000000ull;
      // Image decode scratch (numpy): malloc'd and freed, never copied.
      worker.Alloc(created - 5 * kMs, trace::MALLOC, 0x7f3000000000 + k * 0x1000000, 2 * kMiBytes);
      worker.Free(created - 1 * kMs, 0x7f3000000000 + k * 0x1000000);
      worker.Shm(created, trace::SHM_CREATE, name, fd, 0, 0, inode);
      worker.Shm(created + 100000, trace::SHM_TRUNCATE, name, fd, kBatchBytes, 0, inode);
      worker.Shm(created + 200000, trace::SHM_FALLOCATE, name, fd, kBatchBytes, 0, inode);
      worker.Shm(created + 300000, trace::SHM_MAP, name, fd, kBatchBytes, address, inode);
      worker.Shm(created + 400000, trace::SHM_UNLINK, name, -1, 0, 0, inode);
      worker.Shm(created + 50 * kMs, trace::SHM_UNMAP, "", -1, kBatchBytes, address, 0);
      worker.Shm(created + 50 * kMs + 1000, trace::SHM_CLOSE, "", fd, 0, 0, 0);

      // The main process maps the batch from the fd it received, copies it
      // to the GPU (pageable, 6.0 GB/s) and unmaps it 250 ms later.
      const uint64_t mapped = created + 40 * kMs;
      const uint64_t main_address = 0x7f6000000000 + (w * 8 + k) * 0x10000000ull;
      main.Shm(mapped, trace::SHM_MAP, "", static_cast<int32_t>(40 + 3 * w + k), kBatchBytes,
               main_address, inode);
      main.Copy(mapped + 1 * kMs, At(kBatchBytes, 6.0), trace::H2D, trace::PAGEABLE, kBatchBytes,
                main_address)
          .mutable_copy()
          ->set_stack_id(2);
      main.Shm(created + 250 * kMs, trace::SHM_UNMAP, "", -1, kBatchBytes, main_address, 0);
    }
    worker.Exit(kT0 + 800 * kMs);
    workers.push_back(std::move(worker));
  }

  // Loss values back to the host: 4 bytes into a stack variable (no buffer),
  // and an 8 MiB prediction buffer (malloc) at 10.5 GB/s.
  for (int i = 0; i < 3; ++i) {
    main.Copy(kT0 + (600 + 10 * i) * kMs, 30000, trace::D2H, trace::PAGEABLE, 4, 0x7ffc00001000, 0,
              trace::MEMCPY);
  }
  const uint64_t predictions = 0x7f2000000000;
  main.Alloc(kT0 + 690 * kMs, trace::MALLOC, predictions, 8 * kMiBytes);
  main.Copy(kT0 + 700 * kMs, At(8 * kMiBytes, 10.5), trace::D2H, trace::PAGEABLE, 8 * kMiBytes,
            predictions)
      .mutable_copy()
      ->set_stack_id(3);
  main.Free(kT0 + 710 * kMs, predictions);
  main.Copy(kT0 + 720 * kMs, 15000, trace::D2D, trace::DEVICE, 16 * kMiBytes, 0);
  main.Exit(kT0 + 1000 * kMs);

  // torch_shm_manager: exec'd, a helper, does nothing the report shows.
  TraceBuilder helper(4103, kRunId, kT0 + 52 * kMs, trace::ORIGIN_EXEC, kMain);
  helper.header().clear_cmdline();
  helper.header().add_cmdline("/opt/venv/lib/python3.12/site-packages/torch/bin/torch_shm_manager");
  helper.header().set_exe("/opt/venv/lib/python3.12/site-packages/torch/bin/torch_shm_manager");
  helper.header().set_helper(true);
  helper.Exit(kT0 + 60 * kMs);

  main.SortByTime();
  main.Write(dir);
  for (const TraceBuilder& worker : workers) worker.Write(dir);
  helper.Write(dir);
}

void WriteNoCuda(const std::string& dir) {
  TraceBuilder main(7000, "20261129-110000-7000", kT0);
  main.header().clear_cmdline();
  for (const char* arg : {"python", "preprocess.py"}) main.header().add_cmdline(arg);
  SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  main.Alloc(kT0 + 10 * kMs, trace::MALLOC, 0x7f0000000000, 4 * kMiBytes);
  main.Free(kT0 + 20 * kMs, 0x7f0000000000);
  main.Exit(kT0 + 250 * kMs);
  main.Write(dir);
}

}  // namespace

const std::vector<GoldenRun>& GoldenRuns() {
  static const std::vector<GoldenRun> runs = {
      {"dataloader", &WriteDataLoader},
      {"no_cuda", &WriteNoCuda},
  };
  return runs;
}

}  // namespace pinscope::testing
