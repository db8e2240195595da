// CreatePrivateFile: open(2) with mode 0600 and fchmod for a file that was
// there already (open's mode applies only to a file it creates).
#include "analyzer/common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pinscope {

bool CreatePrivateFile(const std::string& path, std::string* error) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (error != nullptr) *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  // Only a regular file of ours changes mode: /dev/stdout or a FIFO given as
  // the output is written as it is.
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) != 0600 &&
      fchmod(fd, 0600) != 0) {
    if (error != nullptr) *error = "cannot make " + path + " private: " + std::strerror(errno);
    close(fd);
    return false;
  }
  close(fd);
  return true;
}

}  // namespace pinscope
