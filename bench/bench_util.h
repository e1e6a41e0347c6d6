// Small pieces every benchmark program uses: comma lists from flags, medians of repeats.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace ls::bench {

// "1,4,16" -> {1, 4, 16}.
inline std::vector<int> parse_list(const std::string& text) {
  std::vector<int> values;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) values.push_back(std::atoi(item.c_str()));
  return values;
}

// The median (mean of the two middle values for an even count; 0 for none).
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

// A "--name value" flag of a benchmark program and what its value sets.
struct Flag {
  const char* name;
  std::function<void(const std::string& value)> set;
};
inline std::function<void(const std::string&)> text_flag(std::string& out) {
  return [&out](const std::string& value) { out = value; };
}
// An integer, raised to `least` when below it.
inline std::function<void(const std::string&)> int_flag(int& out, int least = INT_MIN) {
  return [&out, least](const std::string& value) { out = std::max(least, std::atoi(value.c_str())); };
}
inline std::function<void(const std::string&)> list_flag(std::vector<int>& out) {
  return [&out](const std::string& value) { out = parse_list(value); };
}
// "1" sets true, anything else false.
inline std::function<void(const std::string&)> switch_flag(bool& out) {
  return [&out](const std::string& value) { out = value == "1"; };
}

// Reads argv as "--name value" pairs into `flags`; false (after saying which) at a name none of them has.
inline bool read_flags(int argc, char** argv, std::initializer_list<Flag> flags) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const auto flag = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return name == f.name; });
    if (flag == flags.end()) {
      std::fprintf(stderr, "unknown flag %s\n", name.c_str());
      return false;
    }
    flag->set(argv[i + 1]);
  }
  return true;
}

}  // namespace ls::bench
