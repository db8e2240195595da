// The HTML report opened in a real headless browser (chromium-headless-shell
// or chromium, found at configure time or named by PINSCOPE_TEST_CHROMIUM):
// the DOM it builds has the verdict, the pipeline chart and the timeline
// laid out with a size and bars drawn, and a screenshot of the page is a
// real picture. The page itself has no script; the test measures a copy of
// it with a small probe script of its own appended, which writes what the
// layout gave into <body data-*> for --dump-dom to show. Skips, saying
// why, where no browser is installed (tools/deps.sh installs one for CI;
// with $CI set a missing browser fails the test).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "html_page.h"

namespace pinscope {
namespace {

const std::string kData = PINSCOPE_TEST_DATA_DIR;

std::string Browser() {
  const char* env = std::getenv("PINSCOPE_TEST_CHROMIUM");
  const std::string path = env != nullptr && env[0] != '\0' ? env : PINSCOPE_TEST_CHROMIUM;
  return !path.empty() && access(path.c_str(), X_OK) == 0 ? path : "";
}

// Runs `command`, returns its stdout; *status gets its exit status.
std::string RunCommand(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int raw = pclose(pipe);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

const char kProbe[] = R"js(<script>
(function () {
  function box(selector) {
    var e = document.querySelector(selector);
    if (!e) return "0x0";
    var r = e.getBoundingClientRect();
    return Math.round(r.width) + "x" + Math.round(r.height);
  }
  function drawn(selector) {
    var n = 0;
    document.querySelectorAll(selector).forEach(function (e) {
      var b = e.getBBox();
      if (b.width > 0 && b.height > 0) ++n;
    });
    return n;
  }
  var d = document.body.dataset;
  d.verdictBox = box(".verdict");
  d.verdictText = (document.querySelector(".verdict") || {}).textContent || "";
  d.pipelineBox = box("#pipeline-chart");
  d.timelineBox = box("#timeline-chart");
  d.stageBars = drawn("#pipeline-chart g.stage rect");
  d.criticalBars = drawn("#pipeline-chart g.stage.critical rect");
  d.timelineSpans = drawn("#timeline-chart rect.span");
  d.workerLanes = document.querySelectorAll("#timeline-chart g.lane.worker").length;
  d.workerSpans = drawn("#timeline-chart g.lane.worker rect.span.fetch");
  d.probed = "yes";
})();
</script>)js";

// <body data-NAME="VALUE"> in the dumped DOM.
std::string Data(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("data-" + name + "=\"([^\"]*)\""))) return "";
  return m[1];
}

std::pair<int, int> Size(const std::string& box) {
  int w = 0, h = 0;
  if (std::sscanf(box.c_str(), "%dx%d", &w, &h) != 2) return {0, 0};
  return {w, h};
}

class HtmlBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    browser_ = Browser();
    // As the Perfetto schema check: missing under CI ($CI set) is a failure.
    const char* ci = std::getenv("CI");
    if (browser_.empty() && ci != nullptr && ci[0] != '\0')
      FAIL() << "$CI is set but no headless chromium is installed (tools/deps.sh installs "
                "chromium-headless-shell)";
    if (browser_.empty())
      GTEST_SKIP() << "no headless chromium installed (chromium-headless-shell or chromium; "
                      "tools/deps.sh installs it, or set PINSCOPE_TEST_CHROMIUM): the HTML "
                      "report was not opened in a browser";
    dir_ = ::testing::TempDir() + "/pinscope_html_browser_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/profile");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string Chromium(const std::string& args, const std::string& file, int* status) {
    // A profile of its own, no sandbox (CI runs as root), no GPU; stderr
    // (D-Bus and font chatter) dropped.
    return RunCommand("timeout 120 '" + browser_ + "' --headless --disable-gpu --no-sandbox " +
                          "--no-first-run --hide-scrollbars --user-data-dir='" + dir_ +
                          "/profile' " + args + " 'file://" + file + "' 2>/dev/null",
                      status);
  }

  std::string browser_, dir_;
};

TEST_F(HtmlBrowser, ImagenetPageLaidOutWithChartsAndScreenshot) {
  const std::string page = test_util::HtmlPage(kData + "/h200/pipeline/imagenet");
  ASSERT_FALSE(page.empty());
  const size_t body_end = page.rfind("</body>");
  ASSERT_NE(body_end, std::string::npos);
  const std::string probed = page.substr(0, body_end) + kProbe + page.substr(body_end);
  const std::string html = dir_ + "/report.html", probe = dir_ + "/probe.html";
  std::ofstream(html) << page;
  std::ofstream(probe) << probed;

  int status = 0;
  const std::string dom = Chromium("--dump-dom", probe, &status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  ASSERT_EQ(Data(dom, "probed"), "yes") << dom.substr(0, 2000);
  EXPECT_NE(Data(dom, "verdict-text").find("input starvation"), std::string::npos)
      << Data(dom, "verdict-text");
  const auto verdict = Size(Data(dom, "verdict-box"));
  EXPECT_GT(verdict.first, 600);
  EXPECT_GT(verdict.second, 20);
  const auto pipeline = Size(Data(dom, "pipeline-box"));
  const auto timeline = Size(Data(dom, "timeline-box"));
  EXPECT_GT(pipeline.first, 600);
  EXPECT_GT(pipeline.second, 150);
  EXPECT_GT(timeline.first, 600);
  EXPECT_GT(timeline.second, 150);
  const std::string stages = Data(dom, "stage-bars");
  EXPECT_EQ(std::atoi(stages.c_str()),
            static_cast<int>(test_util::Count(page, "<g class=\"stage")));
  EXPECT_GE(std::atoi(stages.c_str()), 3);
  EXPECT_EQ(Data(dom, "critical-bars"), "1");
  EXPECT_EQ(Data(dom, "worker-lanes"), "4");
  EXPECT_GE(std::atoi(Data(dom, "worker-spans").c_str()), 4);
  EXPECT_GE(std::atoi(Data(dom, "timeline-spans").c_str()), 20);

  // The page as shipped (no probe): a screenshot at a desktop size.
  const std::string png = dir_ + "/report.png";
  Chromium("--screenshot='" + png + "' --window-size=1280,2000", html, &status);
  ASSERT_EQ(status, 0) << "chromium --screenshot failed";
  ASSERT_TRUE(std::filesystem::exists(png));
  std::ifstream in(png, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
  };
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(16), 1280u);
  EXPECT_EQ(be32(20), 2000u);
  // A blank 1280x2000 page compresses to a few kB; text and charts do not.
  EXPECT_GT(bytes.size(), 60u * 1024) << "the screenshot looks empty";
  if (const char* keep = std::getenv("PINSCOPE_HTML_SCREENSHOT"); keep != nullptr && keep[0])
    std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
}

}  // namespace
}  // namespace pinscope
