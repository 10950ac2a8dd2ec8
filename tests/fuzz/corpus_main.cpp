// A main for the fuzz targets in builds without libFuzzer (the g++ build): runs the target
// on every file of the directories (or files) given, so that the seed corpus and every
// input a fuzzing run once crashed on stay regression tests under ctest.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int runFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (::stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      inputs += runFile(argv[i]);
      continue;
    }
    DIR* d = ::opendir(argv[i]);
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') inputs += runFile(std::string(argv[i]) + "/" + e->d_name);
    ::closedir(d);
  }
  std::printf("%d inputs ran\n", inputs);
  return inputs > 0 ? 0 : 1;
}
