// TraceWriter::Open (shim/record/trace_writer.cc) never follows a symlink and never
// overwrites an existing file: a name that is taken, by anything, moves it
// to <pid>.<n>.pstrace. Driven directly (the pid of a preloaded job cannot be
// predicted, so a planted <pid>.pstrace is tested here).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "shim/record/trace_writer.h"
#include "tests/common/trace_bytes.h"
#include "trace_harness.h"

namespace {

using pinscope::shim::TraceWriter;

void WriteFile(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
}

void AppendAndFlush(TraceWriter* w, const std::string& text) {
  ASSERT_TRUE(w->Append(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  ASSERT_TRUE(w->Flush());
}

TEST(TraceWriterOpen, SymlinkAtThePidNameIsNotFollowed) {
  e2e::TempDir dir;
  std::string victim = dir.path() + "/victim";
  WriteFile(victim, "precious");
  std::string link = dir.path() + "/4242.pstrace";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  auto w = std::make_unique<TraceWriter>();
  ASSERT_EQ(w->Open(-1, dir.path().c_str(), 4242), 0);
  EXPECT_EQ(std::string(w->path()), dir.path() + "/4242.1.pstrace");
  AppendAndFlush(w.get(), "trace bytes");
  w->CloseFile();
  EXPECT_EQ(e2e::ReadWholeFile(victim), "precious");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(lstat(w->path(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(::pinscope::testing::TracePackets(e2e::ReadWholeFile(dir.path() + "/4242.1.pstrace")),
            "trace bytes");
}

// A dangling symlink would let O_CREAT create its target: O_EXCL refuses.
TEST(TraceWriterOpen, DanglingSymlinkTargetIsNotCreated) {
  e2e::TempDir dir;
  std::string target = dir.path() + "/created-through-link";
  ASSERT_EQ(symlink(target.c_str(), (dir.path() + "/77.pstrace").c_str()), 0);
  auto w = std::make_unique<TraceWriter>();
  ASSERT_EQ(w->Open(-1, dir.path().c_str(), 77), 0);
  EXPECT_EQ(std::string(w->path()), dir.path() + "/77.1.pstrace");
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0);
  w->CloseFile();
}

// Another run's files (a pid reused in one folder) are never overwritten.
TEST(TraceWriterOpen, ExistingFilesAreNotOverwritten) {
  e2e::TempDir dir;
  WriteFile(dir.path() + "/555.pstrace", "first");
  WriteFile(dir.path() + "/555.1.pstrace", "second");
  auto w = std::make_unique<TraceWriter>();
  ASSERT_EQ(w->Open(-1, dir.path().c_str(), 555), 0);
  EXPECT_EQ(std::string(w->path()), dir.path() + "/555.2.pstrace");
  AppendAndFlush(w.get(), "third");
  w->CloseFile();
  EXPECT_EQ(e2e::ReadWholeFile(dir.path() + "/555.pstrace"), "first");
  EXPECT_EQ(e2e::ReadWholeFile(dir.path() + "/555.1.pstrace"), "second");
  EXPECT_EQ(::pinscope::testing::TracePackets(e2e::ReadWholeFile(dir.path() + "/555.2.pstrace")),
            "third");
}

TEST(TraceWriterOpen, MissingFolderIsAnError) {
  e2e::TempDir dir;
  auto w = std::make_unique<TraceWriter>();
  EXPECT_EQ(w->Open(-1, (dir.path() + "/absent").c_str(), 1), ENOENT);
  EXPECT_FALSE(w->is_open());
}

}  // namespace
