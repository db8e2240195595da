// The report's word wrap and human units (analyzer/common/format.h).
#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"

#include <gtest/gtest.h>

namespace pinscope {
namespace {

TEST(WrapWords, BreaksAtTheWidthAndIndentsTheRest) {
  EXPECT_EQ(WrapWords("aaa bbb ccc ddd", 7, 7, "  "), "aaa bbb\n  ccc ddd");
  EXPECT_EQ(WrapWords("aaa bbb ccc", 3, 7, ">"), "aaa\n>bbb ccc");
  // A word longer than the line stays whole, on a line of its own.
  EXPECT_EQ(WrapWords("a abcdefghij b", 4, 4, ""), "a\nabcdefghij\nb");
  EXPECT_EQ(WrapWords("", 10, 10, "  "), "");
  // Runs of spaces and newlines are one break.
  EXPECT_EQ(WrapWords("a  b\nc", 10, 10, ""), "a b c");
}

TEST(WrapWords, KeepsANumberWithItsUnit) {
  // "lasted 11.34 s" at a width that would leave "s" alone on the next line.
  EXPECT_EQ(WrapWords("it lasted 11.34 s", 15, 20, "  "), "it lasted\n  11.34 s");
  EXPECT_EQ(WrapWords("copy 3.0 MiB, at 4.2 GB/s)", 13, 20, ""), "copy 3.0 MiB,\nat 4.2 GB/s)");
  // Only after a number: a word "s" after a word stays breakable.
  EXPECT_EQ(WrapWords("the s", 4, 10, ""), "the\ns");
}

TEST(SanitizeTerminalText, ControlBytesBecomeVisibleAndUtf8Stays) {
  EXPECT_EQ(SanitizeTerminalText("a\x1b]0;title\ab\n", false), "a\\x1b]0;title\\x07b\n");
  EXPECT_EQ(SanitizeTerminalText("\x1b[2J\x1b[31mred\x1b[0m", true),
            "\\x1b[2J\x1b[31mred\x1b[0m");  // colour kept, clear-screen not
  EXPECT_EQ(SanitizeTerminalText("\x1b[31mred", false), "\\x1b[31mred");
  EXPECT_EQ(SanitizeTerminalText("\t\r\x7f", false), "\\x09\\x0d\\x7f");
  // C1 controls, UTF-8 encoded (CSI U+009B) or a lone byte; broken UTF-8.
  EXPECT_EQ(SanitizeTerminalText("\xc2\x9b"
                                 "2J",
                                 false),
            "\\xc2\\x9b2J");
  EXPECT_EQ(SanitizeTerminalText("\x9b\xe2\x82", false), "\\x9b\\xe2\\x82");
  EXPECT_EQ(SanitizeTerminalText("caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x9a\x80 \xc2\xa0", false),
            "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x9a\x80 \xc2\xa0");
}

TEST(Format, HumanUnits) {
  EXPECT_EQ(FormatBytes(3 * 1024 * 1024), "3.0 MiB");
  EXPECT_EQ(FormatPercent(0.312), "31.2%");
  EXPECT_EQ(Truncate("abcdefgh", 5), "ab...");
  EXPECT_EQ(DisplayWidth("\xc2\xb5s"), 2u);
}

// The docs a message names: docs/ in the source and build trees, the
// install's folder once the CLI found one (a trailing slash dropped).
TEST(DocPath, NamesDocsUnlessAnInstallFolderIsSet) {
  EXPECT_EQ(DocPath("pinning.md"), "docs/pinning.md");
  SetInstalledDocDir("/opt/venv/share/doc/pinscope/");
  EXPECT_EQ(DocPath("pinning.md"), "/opt/venv/share/doc/pinscope/pinning.md");
  SetInstalledDocDir("");
  EXPECT_EQ(DocPath("cli.md"), "docs/cli.md");
}

}  // namespace
}  // namespace pinscope
