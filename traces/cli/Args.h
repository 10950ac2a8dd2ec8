// Command-line arguments of one subcommand: `--name value`, `--name=value`, repeatable
// flags and switches. Unknown flags and missing values are errors that name the flag.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cardsim::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FlagSpec {
  std::string name;        // "preset" for --preset
  bool takes_value = true;
  bool repeatable = false;
  std::string help;
};

class Args {
 public:
  Args(const std::string& command, const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;
  // Integer and size ("64M": powers of two K/M/G/T) values; errors name the flag and value.
  long long integer(const std::string& name, long long fallback) const;
  double size(const std::string& name, double fallback) const;
  double number(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // `operands`: what follows the command besides its options ("PATH"), and what it is.
  static std::string usage(const std::string& command, const std::vector<FlagSpec>& specs,
                           const std::string& operands = "", const std::string& operands_help = "");

 private:
  std::string command_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// "1K" = 1024, "64M" = 64 MiB, "1G"; a plain integer is bytes. Throws std::invalid_argument.
double parseSize(const std::string& text);

}  // namespace cardsim::cli
