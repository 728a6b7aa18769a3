#include "apps/memtwin/requirements.h"

#include <sstream>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"

namespace memtwin::cli {

Requirement parse_requirement(const std::string& text) {
  Requirement r{text, "", "", 0};
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
  };
  // Two-character operators first, so "<=" is not read as "<".
  for (const char* op : {"<=", ">=", "==", "!=", "<", ">"}) {
    const auto at = text.find(op);
    if (at == std::string::npos) continue;
    r.path = trim(text.substr(0, at));
    r.op = op;
    try {
      r.value = std::stod(trim(text.substr(at + std::string(op).size())));
    } catch (const std::exception&) {
      throw UsageError("--require '" + text + "': the right side must be a number");
    }
    return r;
  }
  r.path = trim(text);  // a boolean result field, e.g. memory.gpu.fits
  return r;
}

std::string unmet(const Requirement& r, const nlohmann::json& result) {
  const auto v = number_at(result, r.path);
  if (!v) return r.path + " is not in the result";
  bool ok = true;
  if (r.op.empty()) ok = *v != 0;
  else if (r.op == "<=") ok = *v <= r.value;
  else if (r.op == ">=") ok = *v >= r.value;
  else if (r.op == "<") ok = *v < r.value;
  else if (r.op == ">") ok = *v > r.value;
  else if (r.op == "==") ok = *v == r.value;
  else ok = *v != r.value;
  if (ok) return "";
  std::ostringstream why;
  why << r.text << " fails (" << r.path << " = " << *v << ")";
  return why.str();
}

}  // namespace memtwin::cli
