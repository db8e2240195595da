// libFuzzer target: arbitrary bytes as the files of one run folder, through
// the whole analyzer: run listing, trace reader, replay engine, the report
// model (text and JSON), the Perfetto export and the diff writers. It must
// never crash, hang or leak; problems become messages; and the export must
// always be a valid Perfetto trace (tests/analyzer/export/perfetto_dump.h).
//
// The hand decoder of the hot packet kinds (analyzer/read/packet_decoder.h)
// is checked against libprotobuf on the way: each framed packet of the
// input's files, and each file's first bytes as one packet, go through both, and a
// packet the decoder takes must be libprotobuf's.
//
// Input: up to kMaxFiles process files separated by kSeparator (the seed
// corpus joins the checked-in runs this way; reader_fuzzer.dict lets the
// mutator add and remove separators). Files are written to a private temp
// folder for each input, since the reader streams files by path.
#include <fcntl.h>
#include <google/protobuf/stubs/logging.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>

#include "analyzer/diff/diff.h"
#include "analyzer/export/perfetto_export.h"
#include "analyzer/read/calibration.h"
#include "analyzer/read/packet_decoder.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report.h"
#include "perfetto_dump.h"

namespace {

constexpr std::string_view kSeparator = "\n--pinscope-file--\n";
constexpr int kMaxFiles = 8;

// A stream that discards what it is given (the outputs are not checked,
// only produced).
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

const std::string& RunDir() {
  static const std::string dir = [] {
    const char* base = getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/pinscope_fuzz_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) abort();
    return pattern;
  }();
  return dir;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) abort();
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// Aborts where the hand decoder takes `bytes` as a packet and gives other
// than libprotobuf's parse.
void CheckHotDecoder(const uint8_t* bytes, size_t size) {
  pinscope::trace::TracePacket hand;
  if (!pinscope::DecodeHotPacket(bytes, size, &hand)) return;
  pinscope::trace::TracePacket reference;
  if (!reference.ParseFromArray(bytes, static_cast<int>(size))) {
    fprintf(stderr, "hand decoder took a %zu-byte packet libprotobuf refuses\n", size);
    abort();
  }
  if (hand.SerializeAsString() != reference.SerializeAsString()) {
    fprintf(stderr, "hand decoder: %s\nlibprotobuf: %s\n", hand.ShortDebugString().c_str(),
            reference.ShortDebugString().c_str());
    abort();
  }
}

// Each framed packet of a plain file (0x0A, varint length, packet) up to the
// first that is not one, and the first 4 KiB as one packet.
void CheckHotDecoderOnFrames(std::string_view input) {
  const auto* data = reinterpret_cast<const uint8_t*>(input.data());
  const size_t size = input.size();
  CheckHotDecoder(data, std::min<size_t>(size, 4096));
  size_t at = 0;
  while (at < size && data[at] == 0x0A) {
    uint64_t length = 0;
    const int n = pinscope::DecodeVarint(data + at + 1, size - at - 1, &length);
    if (n <= 0 || length > size - at - 1 - static_cast<size_t>(n)) break;
    CheckHotDecoder(data + at + 1 + n, static_cast<size_t>(length));
    at += 1 + static_cast<size_t>(n) + static_cast<size_t>(length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // libprotobuf logs every invalid UTF-8 string it rejects; the reader turns
  // the failed parse into a problem already, so the log is only noise here.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string& dir = RunDir();
  for (int i = 1; i <= kMaxFiles; ++i) unlink((dir + "/" + std::to_string(i) + ".pstrace").c_str());

  std::string_view input(reinterpret_cast<const char*>(data), size);
  int files = 0;
  while (files < kMaxFiles) {
    const size_t cut = files + 1 < kMaxFiles ? input.find(kSeparator) : std::string_view::npos;
    CheckHotDecoderOnFrames(input.substr(0, cut));
    WriteFile(dir + "/" + std::to_string(++files) + ".pstrace", input.substr(0, cut));
    if (cut == std::string_view::npos) break;
    input.remove_prefix(cut + kSeparator.size());
  }

  pinscope::RunListing listing;
  if (!pinscope::ScanRun(dir, &listing).ok() || listing.files.empty()) return 0;

  pinscope::ReportOptions options;
  options.run_dir = dir;
  options.color = pinscope::ColorMode::kNever;
  pinscope::Report report(pinscope::DefaultCalibration(), options);
  NullBuffer null_buffer;
  std::ostream null(&null_buffer);
  std::ostringstream perfetto;
  pinscope::PerfettoExport exporter(&perfetto);
  pinscope::MainLoopAnalysis main_loop;
  // Small read chunks: faster per input, and packets cross chunk ends often.
  pinscope::ReplayOptions replay_options;
  replay_options.chunk_bytes = 4096;
  replay_options.closed_segments_kept = 16;
  pinscope::ReplayEngine engine(std::move(listing), replay_options);
  report.Attach(&engine);
  engine.AddAnalysis(&exporter);
  engine.AddAnalysis(&main_loop);
  engine.Run();
  report.Evaluate(engine.info());

  // Whatever the input, the export must be a valid Perfetto trace (the
  // rules perfetto_dump.cc checks, those trace_processor applies).
  const pinscope::testing::PerfettoDump dump = pinscope::testing::DumpPerfetto(perfetto.str());
  if (!dump.errors.empty()) {
    fprintf(stderr, "invalid Perfetto export: %s\n", dump.errors.front().c_str());
    abort();
  }

  pinscope::WriteTextReport(report, /*color=*/true, null);
  null << pinscope::JsonReport(report).dump(2);
  pinscope::DiffSide side{&report, main_loop.rate()};
  pinscope::WriteTextDiff(side, side, /*color=*/true, null);
  null << pinscope::JsonDiff(side, side).dump(2);
  return 0;
}
