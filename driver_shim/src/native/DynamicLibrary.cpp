#include "native/DynamicLibrary.h"

#include <dlfcn.h>

namespace cardsim::shim::native {

DynamicLibrary::~DynamicLibrary() {
  // A vendor runtime may keep threads that run its code until exit: never unload it.
  handle_ = nullptr;
}

Status DynamicLibrary::open(const std::string& path) {
  path_ = path;
  missing_.clear();
  dlerror();
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    return Status(Code::InitFailed, "cannot load " + path + ": " + (err ? err : "unknown dlopen error"));
  }
  return Status::Ok();
}

void* DynamicLibrary::lookup(const char* name, bool required) {
  if (!handle_) return nullptr;
  dlerror();
  void* sym = dlsym(handle_, name);
  if (!sym && required) missing_.push_back(name);
  return sym;
}

Status DynamicLibrary::complete() const {
  if (missing_.empty()) return Status::Ok();
  std::string names;
  for (const std::string& m : missing_) names += (names.empty() ? "" : ", ") + m;
  return Status(Code::InitFailed, path_ + " lacks the symbol" + (missing_.size() > 1 ? "s " : " ") + names +
                                      " that cardsim's native backend needs (an older or incomplete runtime?)");
}

}  // namespace cardsim::shim::native
