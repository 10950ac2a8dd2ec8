#include "traces/cli/Args.h"

#include <cctype>
#include <cmath>
#include <sstream>

namespace cardsim::cli {

Args::Args(const std::string& command, const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv)
    : command_(command) {
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const FlagSpec& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h" && find("help")) {   // the usual short form
      values_["help"].push_back("");
      continue;
    }
    if (a.size() > 1 && a[0] == '-' && a[1] != '-' && std::isalpha(static_cast<unsigned char>(a[1]))) {
      std::string valid;
      for (const FlagSpec& s : specs) valid += (valid.empty() ? "--" : ", --") + s.name;
      throw UsageError("cardsim " + command + ": unknown option " + a + " (valid: " + valid + ")");
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find(name);
    if (!spec) {
      std::string valid;
      for (const FlagSpec& s : specs) valid += (valid.empty() ? "--" : ", --") + s.name;
      throw UsageError("cardsim " + command + ": unknown option --" + name + " (valid: " + valid + ")");
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= argv.size()) throw UsageError("cardsim " + command + ": --" + name + " needs a value");
      value = argv[++i];
    } else if (!spec->takes_value && inline_value) {
      throw UsageError("cardsim " + command + ": --" + name + " takes no value");
    }
    auto& slot = values_[name];
    if (!slot.empty() && !spec->repeatable)
      throw UsageError("cardsim " + command + ": --" + name + " given twice");
    slot.push_back(value);
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

long long Args::integer(const std::string& name, long long fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  size_t used = 0;
  long long out = 0;
  try {
    out = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    throw UsageError("cardsim " + command_ + ": --" + name + " wants an integer, got '" + v + "'");
  return out;
}

double Args::number(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !std::isfinite(out))
    throw UsageError("cardsim " + command_ + ": --" + name + " wants a number, got '" + v + "'");
  return out;
}

double Args::size(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  try {
    return parseSize(get(name));
  } catch (const std::invalid_argument& e) {
    throw UsageError("cardsim " + command_ + ": --" + name + ": " + e.what());
  }
}

double parseSize(const std::string& text) {
  std::string digits = text, unit;
  while (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) {
    unit.insert(unit.begin(), static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back()))));
    digits.pop_back();
  }
  if (unit == "B") unit.clear();
  if (unit.size() == 3 && unit.compare(1, 2, "IB") == 0) unit.resize(1);   // "64MiB" reads as 64M
  if (unit.size() == 2 && unit[1] == 'B') unit.pop_back();   // "64MB" reads as 64M (nccl-tests' powers of two)
  double scale = 1;
  if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) throw std::invalid_argument("size '" + text + "': unit must be K, M, G or T (powers of two)");
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // Decimal only (stod also reads "0x10" as hexadecimal).
  const bool decimal = digits.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (digits.empty() || !decimal || used != digits.size() || !(v >= 0) || !std::isfinite(v * scale))
    throw std::invalid_argument("size '" + text + "' is not a non-negative number with an optional K/M/G/T suffix");
  if (v * scale != std::floor(v * scale))
    throw std::invalid_argument("size '" + text + "' is not a whole number of bytes");
  return v * scale;
}

std::string Args::usage(const std::string& command, const std::vector<FlagSpec>& specs, const std::string& operands,
                        const std::string& operands_help) {
  std::ostringstream o;
  o << "usage: cardsim " << command << (operands.empty() ? "" : " " + operands) << " [options]";
  if (!operands_help.empty()) o << "   (" << operands_help << ")";
  o << "\n";
  for (const FlagSpec& s : specs) {
    std::string flag = "--" + s.name + (s.takes_value ? " V" : "");
    o << "  " << flag;
    for (size_t i = flag.size(); i < 22; ++i) o << ' ';
    o << s.help << (s.repeatable ? " (repeatable)" : "") << "\n";
  }
  return o.str();
}

}  // namespace cardsim::cli
