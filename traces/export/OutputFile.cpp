#include "traces/export/OutputFile.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace cardsim::timeline {

namespace {

[[noreturn]] void cannotWrite(const std::string& path, int err) {
  throw std::runtime_error(path + ": cannot write: " + std::strerror(err));
}

// Writes into `f` (opened on `path` or its temporary), flushes and closes it; throws naming `path`.
void writeAndClose(std::ofstream& f, const std::string& path, const std::function<void(std::ostream&)>& write) {
  errno = 0;
  write(f);
  f.flush();
  if (f) f.close();
  if (!f) cannotWrite(path, errno ? errno : EIO);
}

}  // namespace

void writeOutputFile(const std::string& path, const std::function<void(std::ostream&)>& write) {
  // Something that is not a plain file (a terminal, a pipe, /dev/stdout, /dev/null) is
  // written in place: renaming a file over it would replace it.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": cannot write: it is a directory");
    std::ofstream f(path, std::ios::binary);
    if (!f) cannotWrite(path, errno);
    writeAndClose(f, path, write);
    return;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) cannotWrite(path, errno);
    try {
      writeAndClose(f, path, write);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    cannotWrite(path, err);
  }
}

}  // namespace cardsim::timeline
