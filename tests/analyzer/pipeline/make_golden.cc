// Writes the golden runs of golden_runs.cc into a folder (normally
// tests/data/runs): `pinscope_make_golden tests/data/runs`. Run it after
// changing a scenario, then refresh the expected reports with
// PINSCOPE_UPDATE_GOLDEN=1 ctest -R analyzer.Golden and review the diff.
#include <filesystem>
#include <iostream>

#include "golden_runs.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " RUNS_DIR\n";
    return 2;
  }
  for (const auto& run : pinscope::testing::GoldenRuns()) {
    const std::filesystem::path dir = std::filesystem::path(argv[1]) / run.name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    run.write(dir.string());
    std::cout << "wrote " << dir.string() << '\n';
  }
  return 0;
}
