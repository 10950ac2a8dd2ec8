// A vendor library opened with dlopen, and its symbols resolved by name. Every failure
// names the library and, for a symbol, the symbol.
#pragma once

#include <string>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::shim::native {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // Opens `path` (RTLD_NOW | RTLD_LOCAL); the Status carries dlerror()'s text.
  Status open(const std::string& path);
  bool isOpen() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }

  // Resolves `name` into `fn`; a missing symbol is remembered (see missing()).
  template <typename Fn>
  void bind(const char* name, Fn*& fn) {
    fn = reinterpret_cast<Fn*>(lookup(name, /*required=*/true));
  }
  // Resolves `name` if the library has it; nullptr otherwise, not an error.
  template <typename Fn>
  void bindOptional(const char* name, Fn*& fn) {
    fn = reinterpret_cast<Fn*>(lookup(name, /*required=*/false));
  }
  const std::vector<std::string>& missing() const { return missing_; }
  // Ok if every required symbol was found; otherwise an InitFailed naming the library and
  // the missing symbols.
  Status complete() const;

 private:
  void* lookup(const char* name, bool required);

  void* handle_ = nullptr;
  std::string path_;
  std::vector<std::string> missing_;
};

}  // namespace cardsim::shim::native
