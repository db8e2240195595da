// The HTML report (analyzer/html) on the traces recorded on the H200: the
// verdict and the top change the model gives, the pipeline drawn with one
// bar per stage and the critical one marked, a timeline with a lane for each
// of the 4 workers, and nothing the page would fetch. Then the escaping: of
// the escaper itself, and of a run whose command line holds markup.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "analyzer/html/html_escape.h"
#include "analyzer/report/report.h"
#include "html_page.h"
#include "recorded_report.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using test_util::Between;
using test_util::Count;
using test_util::HtmlPage;

const std::string kData = PINSCOPE_TEST_DATA_DIR;

// The stage id of a prediction's limit_next (the model's Timing::Limit names).
std::string StageOfLimit(const std::string& limit) {
  if (limit == "the workers") return "producers";
  if (limit == "the pin thread") return "pin_thread";
  if (limit == "the main thread") return "main";
  if (limit == "the GPU") return "gpu";
  return "";
}

struct Case {
  std::string run;
  std::string verdict;
  std::string top_change;
  std::vector<std::string> worker_pids;
};

class HtmlRecorded : public ::testing::TestWithParam<Case> {};

TEST_P(HtmlRecorded, VerdictPipelineTimelineSelfContained) {
  const Case& c = GetParam();
  const std::string dir = kData + "/h200/pipeline/" + c.run;
  const std::string page = HtmlPage(dir);
  const nlohmann::json j = test_util::RecordedReport(dir);
  ASSERT_FALSE(page.empty());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);

  // The verdict: its id and its sentence, as the JSON report has them.
  ASSERT_EQ(j["verdict"]["id"], c.verdict);
  EXPECT_NE(page.find("data-verdict=\"" + c.verdict + "\""), std::string::npos);
  EXPECT_NE(page.find(html::HtmlEscape(j["verdict"]["text"].get<std::string>())),
            std::string::npos);
  // The top change with its predicted step.
  const nlohmann::json& p = j["pipeline"];
  ASSERT_EQ(p["predictions"][0]["change"], c.top_change);
  EXPECT_NE(page.find("data-change=\"" + c.top_change + "\""), std::string::npos);
  EXPECT_NE(page.find(html::HtmlEscape(p["predictions"][0]["limit_next"].get<std::string>())),
            std::string::npos);
  // Where to make it, where the change is the DataLoader's.
  if (p["predictions"][0]["where"].is_string()) {
    EXPECT_NE(
        page.find("<p class=\"where\">Where: " +
                  html::HtmlEscape(p["predictions"][0]["where"].get<std::string>()) + ".</p>"),
        std::string::npos);
  }

  // The pipeline: one bar per stage, the critical one marked, once.
  const std::string pipeline = Between(page, "<svg id=\"pipeline-chart\"", "</svg>");
  ASSERT_FALSE(pipeline.empty());
  EXPECT_NE(pipeline.find("role=\"img\""), std::string::npos);
  EXPECT_NE(pipeline.find("<title id=\"pipeline-title\">"), std::string::npos);
  ASSERT_EQ(Count(pipeline, "<g class=\"stage"), p["stages"].size());
  for (const auto& stage : p["stages"]) {
    const std::string id = stage["id"];
    EXPECT_NE(pipeline.find("data-stage=\"" + id + "\""), std::string::npos) << id;
  }
  EXPECT_EQ(Count(pipeline, "<g class=\"stage critical"), 1u);
  EXPECT_EQ(p["critical_stage"], "producers");
  const std::string critical = Between(pipeline, "<g class=\"stage critical", ">");
  EXPECT_NE(critical.find("data-stage=\"producers\""), std::string::npos) << critical;
  EXPECT_EQ(Count(pipeline, "<tspan class=\"mark\">&#9664; limits the step</tspan>"), 1u);
  // What limits after the top change: that stage outlined, or the critical one again.
  const std::string next = StageOfLimit(p["predictions"][0]["limit_next"]);
  ASSERT_FALSE(next.empty()) << p["predictions"][0]["limit_next"];
  const std::string next_tag = std::string("<g class=\"stage") +
                               (next == "producers" ? " critical" : "") + " next\" data-stage=\"" +
                               next + "\">";
  EXPECT_EQ(Count(pipeline, next_tag), 1u) << next_tag;
  EXPECT_EQ(Count(pipeline, "<tspan class=\"mark next\">&#9664; limits next</tspan>"), 1u);
  EXPECT_EQ(Count(pipeline, "class=\"predicted-line\""), 1u);

  // The timeline: lanes for the main thread, each worker and the GPU, each
  // with bars drawn.
  const std::string timeline = Between(page, "<svg id=\"timeline-chart\"", "</svg>");
  ASSERT_FALSE(timeline.empty());
  EXPECT_NE(timeline.find("role=\"img\""), std::string::npos);
  EXPECT_EQ(Count(timeline, "<g class=\"lane worker\""), c.worker_pids.size());
  for (const std::string& pid : c.worker_pids) {
    const std::string lane =
        Between(timeline, "<g class=\"lane worker\" data-pid=\"" + pid + "\">", "</g>");
    ASSERT_FALSE(lane.empty()) << pid;
    EXPECT_NE(lane.find("· pid " + pid), std::string::npos);
    EXPECT_GE(Count(lane, "<rect class=\"span fetch\""), 1u) << pid;
  }
  const std::string main_lane = Between(timeline, "<g class=\"lane main\"", "</g>");
  EXPECT_GE(Count(main_lane, "<rect class=\"span next\""), 1u);
  EXPECT_GE(Count(main_lane, "<rect class=\"span copy\""), 1u);
  const std::string gpu_lane = Between(timeline, "<g class=\"lane gpu\"", "</g>");
  EXPECT_GE(Count(gpu_lane, "<rect class=\"span gpu\""), 1u);

  // The evidence and the facts.
  EXPECT_NE(page.find("<caption>Copies by direction and host memory"), std::string::npos);
  EXPECT_NE(page.find("<th scope=\"col\">Direction</th>"), std::string::npos);
  EXPECT_NE(page.find("<th scope=\"row\">H2D</th>"), std::string::npos);
  EXPECT_NE(page.find("<dt>GPU</dt><dd>NVIDIA H200"), std::string::npos);
  EXPECT_NE(page.find("<dt>CUDA</dt><dd>runtime 13.0"), std::string::npos);

  // Self-contained: nothing to fetch, no script.
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  // url() only to the page's own SVG pattern (#blind-hatch).
  EXPECT_EQ(Count(page, "url("), Count(page, "url(#blind-hatch)"));
  EXPECT_EQ(page.find("@import"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    H200, HtmlRecorded,
    ::testing::Values(
        Case{"imagenet", "input_starvation", "num_workers=12", {"2715", "2716", "2717", "2718"}},
        Case{"input_starvation", "input_starvation", "num_workers=15", {"2228", "2229"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.run; });

// A GPU-bound step whose best input change still gains 13% (the H100's
// gpu_bound job: the main thread's own work serialized with the stream by a
// loss.item() each step): the page names the GPU and that change, as the
// text report does, and lists no change of its own.
TEST(HtmlRecordedGpuBound, TheRestOfTheStepIsSaid) {
  const std::string page = HtmlPage(kData + "/h100/pipeline/gpu_bound");
  EXPECT_NE(page.find("data-verdict=\"gpu_bound\""), std::string::npos);
  const std::string changes = Between(page, "id=\"changes-h\"", "id=\"pipeline-h\"");
  EXPECT_NE(changes.find("<p>The GPU sets the pace: faster kernels"), std::string::npos) << changes;
  EXPECT_NE(
      changes.find("takes the step from 72.7 ms to 64.5 ms (1.13x), then the limit is the GPU."),
      std::string::npos)
      << changes;
  EXPECT_EQ(changes.find("Nothing in the input pipeline"), std::string::npos) << changes;
}

TEST(HtmlRecordedExample, ExampleLinkIsTheImagenetRun) {
  // examples/h200-imagenet-resnet18 is a link to the imagenet run: the same page.
  const std::string example =
      std::string(PINSCOPE_TEST_DATA_DIR) + "/../../examples/h200-imagenet-resnet18";
  ASSERT_TRUE(std::filesystem::exists(example));
  EXPECT_EQ(Count(HtmlPage(example), "<g class=\"lane worker\""), 4u);
}

TEST(HtmlEscape, EveryMarkupCharacter) {
  EXPECT_EQ(html::HtmlEscape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;");
  EXPECT_EQ(html::HtmlEscape("plain text 42"), "plain text 42");
  EXPECT_EQ(html::HtmlEscape("&amp;"), "&amp;amp;");
}

TEST(HtmlEscape, Utf8KeptBadBytesReplacedControlsDropped) {
  EXPECT_EQ(html::HtmlEscape("pid · ü → 日本"), "pid · ü → 日本");
  EXPECT_EQ(html::HtmlEscape(std::string("a\xff"
                                         "b")),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(html::HtmlEscape(std::string("a\xC3")), "a\xEF\xBF\xBD");  // cut sequence
  EXPECT_EQ(html::HtmlEscape(std::string("x\x01y\tz\n", 6)), "xy\tz\n");
  EXPECT_EQ(html::HtmlEscape(std::string("\xED\xA0\x80")), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(HtmlEscape, SvgNumbers) {
  EXPECT_EQ(html::SvgNumber(12), "12");
  EXPECT_EQ(html::SvgNumber(12.345), "12.35");
  EXPECT_EQ(html::SvgNumber(0.5), "0.5");
  EXPECT_EQ(html::SvgNumber(-0.001), "0");
}

// A run whose command line and thread name hold markup: the page shows them
// as text and has no element the trace put there.
TEST(HtmlEscapeRun, CommandLineWithMarkupIsText) {
  using testing::kMiBytes;
  using testing::kMs;
  const std::string dir =
      ::testing::TempDir() + "/pinscope_html_escape_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const uint64_t t0 = 1000 * kMs;
  testing::TraceBuilder main(4000, "run-<b>&", t0);
  main.header().clear_cmdline();
  for (const char* arg : {"python3", "train.py", "--tag=<script>alert('pwn')</script>", "a&b"})
    main.header().add_cmdline(arg);
  main.Thread(t0 + 1, 4001, "<img onerror=x>");
  for (int i = 0; i < 20; ++i)
    main.Copy(t0 + (10 + i * 5) * kMs, 2 * kMs, trace::H2D, trace::PAGEABLE, 8 * kMiBytes,
              0x7f0000000000ull + i * 16 * kMiBytes, 4000);
  main.Exit(t0 + 200 * kMs);
  main.Write(dir);

  const std::string page = HtmlPage(dir, kData + "/h200/pipeline/imagenet/calibration.json");
  ASSERT_FALSE(page.empty());
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<b>&"), std::string::npos);
  EXPECT_NE(page.find("--tag=&lt;script&gt;alert(&#39;pwn&#39;)&lt;/script&gt; a&amp;b"),
            std::string::npos);
  EXPECT_NE(page.find("id run-&lt;b&gt;&amp;"), std::string::npos);
  // Every & in the page starts a character reference.
  for (size_t at = page.find('&'); at != std::string::npos; at = page.find('&', at + 1)) {
    size_t end = at + 1;
    if (end < page.size() && page[end] == '#') ++end;
    while (end < page.size() && std::isalnum(static_cast<unsigned char>(page[end]))) ++end;
    ASSERT_TRUE(end > at + 1 && end < page.size() && page[end] == ';') << page.substr(at, 20);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pinscope
