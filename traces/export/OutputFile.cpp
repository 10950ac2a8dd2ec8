#include "traces/export/OutputFile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace cardsim::timeline {

void writeOutputFile(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
    write(f);
    f.flush();
    if (!f) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": cannot write: " + std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot write: " + std::strerror(err));
  }
}

}  // namespace cardsim::timeline
