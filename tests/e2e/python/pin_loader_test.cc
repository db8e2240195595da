// Real DataLoader workers (torch 1.13 on the CPU) under PINSCOPE_PIN=1, the
// CUDA runtime double standing in for CUDA: pin_loader_job.py copies every
// batch to the double's "device" and reads it back. Each test runs the job
// without pinscope and under it: both exit 0, the device received the same
// batches (the job checks each against its definition, and the checksum
// lines of the two runs are equal), a batch held to the end is intact, and
// the double counts the registrations pinscope made. Today every worker
// batch is a new shm segment registered once (ahead or at its copy): N
// registrations for N batches (docs/pinning.md, issue 15's baseline for a
// pool of registered slots).
#include "pin_loader_fixture.h"

namespace pinscope::e2e {
namespace {

// 2 workers, 10 batches of 6 MiB; the first batch held (mapped) to the end
// while nine more arrive, and still intact then.
TEST_F(PinLoaderTest, WorkerBatchesArriveIntactAndEachIsRegisteredOnce) {
  EXPECT_EQ(RunBoth({"--workers", "2", "--batches", "10", "--hold"}, 10), 10);
  EXPECT_EQ(Lines(pinned_.out, "held "), std::vector<std::string>{"held 0 intact"});
}

// Two epochs, workers forked anew for each (persistent_workers=False) and kept
// (True): 10 batches, 10 registrations either way.
TEST_F(PinLoaderTest, EpochsWithFreshWorkers) {
  EXPECT_EQ(RunBoth({"--workers", "2", "--batches", "5", "--epochs", "2", "--hold"}, 10), 10);
}
TEST_F(PinLoaderTest, EpochsWithPersistentWorkers) {
  EXPECT_EQ(RunBoth({"--workers", "2", "--batches", "5", "--epochs", "2", "--persistent"}, 10), 10);
}

// A prefetching wrapper: the DataLoader iterated on a background thread
// into a queue the loop takes from (BackgroundGenerator). The batches are
// the same, and the report (through the Python hook) takes the steps from
// the loop's batch copies, not from the background thread's __next__ calls,
// which make no CUDA call: 30 batches of 6 MiB, one copy each.
TEST_F(PinLoaderTest, ABackgroundThreadIteratingTheLoaderIsNotTheTrainingLoop) {
  extra_env_ = {std::string("PYTHONPATH=") + PINSCOPE_HOOK_DIR};
  RunBoth({"--workers", "2", "--batches", "30", "--background"}, 30);
  const nlohmann::json j = ReportJson();
  const nlohmann::json& p = j["pipeline"];
  ASSERT_TRUE(p["valid"].get<bool>()) << p;
  EXPECT_TRUE(p["loader_thread_apart"].get<bool>());
  EXPECT_FALSE(p["timed_by_hook"].get<bool>());
  EXPECT_TRUE(p["loader"]["hooked"].get<bool>());
  EXPECT_EQ(p["loader"]["num_workers"], 2);
  EXPECT_EQ(p["main"]["batch_bytes"], 6u << 20);
  EXPECT_GE(p["steps"].get<int>(), 20);
  EXPECT_LE(p["steps"].get<int>(), 27);  // an eighth (at least 2) and the last left out
}

// Two DataLoaders at once (zip), 2 workers each: 2 x 5 batches.
TEST_F(PinLoaderTest, TwoLoadersAtOnce) {
  EXPECT_EQ(RunBoth({"--workers", "2", "--batches", "5", "--loaders", "2", "--hold"}, 10), 10);
}

// file_system sharing (torch_shm_manager, segments opened by name): the
// batches arrive the same.
TEST_F(PinLoaderTest, FileSystemSharingStrategy) {
  const long registered =
      RunBoth({"--workers", "2", "--batches", "6", "--strategy", "file_system", "--hold"}, 6);
  EXPECT_EQ(registered, 6);
}

// A worker killed (SIGKILL, by the main process once batch 2 is checked)
// with the batch after it to make: the loader fails with and without
// pinscope, after the same intact batches. (Which error, and whether a
// batch prefetched before the kill still arrives, is a race in torch
// either way: the job prints "loader error" for each.)
TEST_F(PinLoaderTest, KilledWorkerFailsTheLoaderAsWithoutPinscope) {
  ExpectLoaderFailsAlike({"--workers", "2", "--batches", "8", "--kill-after", "2"}, 3);
}

}  // namespace
}  // namespace pinscope::e2e
