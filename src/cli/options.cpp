// The shared command-line parser: lazy lookup so each command declares only the flags it knows.
#include "cli/options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ls::cli {

namespace {
bool is_flag_token(std::string_view text) { return text.size() > 2 && text.substr(0, 2) == "--"; }
}  // namespace

Options::Options(int argc, char** argv) {
  command_ = argc > 0 ? argv[0] : "";
  for (int index = 1; index < argc; ++index) {
    std::string text = argv[index];
    if (text == "--help" || text == "-h") {
      help_ = true;
      continue;
    }
    arguments_.push_back({std::move(text), false});
  }
}

void Options::record_error(std::string message) {
  if (first_error_.ok()) first_error_ = Status(ErrorCode::InvalidArgument, std::move(message));
}

void Options::add_help(std::string_view name, std::string_view value_hint, std::string_view help) {
  std::string shown(name);
  if (!value_hint.empty()) shown += " " + std::string(value_hint);
  help_lines_.push_back({std::move(shown), std::string(help)});
}

int Options::find_flag(std::string_view name) {
  int found = -1;
  for (size_t index = 0; index < arguments_.size(); ++index) {
    const std::string& text = arguments_[index].text;
    if (arguments_[index].consumed) continue;
    const bool matches = text == name || (text.size() > name.size() && text.compare(0, name.size(), name) == 0 &&
                                          text[name.size()] == '=');
    if (!matches) continue;
    if (found >= 0) {
      record_error("flag " + std::string(name) + " given twice");
      arguments_[index].consumed = true;
      continue;
    }
    found = static_cast<int>(index);
  }
  return found;
}

bool Options::has(std::string_view name) const {
  for (const Argument& argument : arguments_) {
    const std::string& text = argument.text;
    if (text == name || (text.size() > name.size() && text.compare(0, name.size(), name) == 0 && text[name.size()] == '='))
      return true;
  }
  return false;
}

std::string Options::get_string(std::string_view name, std::string_view fallback, std::string_view help) {
  add_help(name, "VALUE", help);
  const int index = find_flag(name);
  if (index < 0) return std::string(fallback);
  Argument& argument = arguments_[index];
  argument.consumed = true;
  if (argument.text.size() > name.size()) return argument.text.substr(name.size() + 1);
  if (index + 1 >= static_cast<int>(arguments_.size()) || is_flag_token(arguments_[index + 1].text)) {
    record_error("flag " + std::string(name) + " needs a value");
    return std::string(fallback);
  }
  arguments_[index + 1].consumed = true;
  return arguments_[index + 1].text;
}

std::string Options::require_string(std::string_view name, std::string_view help) {
  std::string value = get_string(name, "", std::string(help) + " (required)");
  if (!has(name)) record_error("missing required flag " + std::string(name));
  return value;
}

int64_t Options::get_int(std::string_view name, int64_t fallback, std::string_view help) {
  if (!has(name)) {
    add_help(name, "N", help);
    return fallback;
  }
  const std::string text = get_string(name, "", "");
  help_lines_.back() = {std::string(name) + " N", std::string(help)};
  if (text.empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    record_error("flag " + std::string(name) + " wants an integer, got '" + text + "'");
    return fallback;
  }
  return value;
}

double Options::get_double(std::string_view name, double fallback, std::string_view help) {
  if (!has(name)) {
    add_help(name, "X", help);
    return fallback;
  }
  const std::string text = get_string(name, "", "");
  help_lines_.back() = {std::string(name) + " X", std::string(help)};
  if (text.empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(value)) {
    record_error("flag " + std::string(name) + " wants a finite number, got '" + text + "'");
    return fallback;
  }
  return value;
}

bool Options::flag(std::string_view name, std::string_view help) {
  add_help(name, "", help);
  const int index = find_flag(name);
  if (index < 0) return false;
  arguments_[index].consumed = true;
  if (arguments_[index].text.size() > name.size()) {
    record_error("flag " + std::string(name) + " takes no value, got '" + arguments_[index].text + "'");
    return false;
  }
  return true;
}

std::string Options::positional(size_t index, std::string_view label, std::string_view help, bool required) {
  if (positional_labels_.size() <= index) positional_labels_.resize(index + 1);
  positional_labels_[index] = std::string(label);
  add_help(label, "", help);
  size_t seen = 0;
  for (Argument& argument : arguments_) {
    if (argument.consumed || is_flag_token(argument.text)) continue;
    if (seen++ == index) {
      argument.consumed = true;
      return argument.text;
    }
  }
  if (required) record_error("missing argument " + std::string(label));
  return "";
}

std::string Options::usage(std::string_view summary) const {
  std::string text = "usage: lanespark " + command_ + " [options]";
  for (const std::string& label : positional_labels_)
    if (!label.empty()) text += " " + label;
  text += "\n" + std::string(summary) + "\n";
  for (const HelpLine& line : help_lines_) {
    std::string shown = "  " + line.name;
    if (shown.size() < 24) shown.resize(24, ' ');
    else shown += "  ";
    text += shown + line.help + "\n";
  }
  text += "  --help                show this text\n";
  return text;
}

Status Options::finish() const {
  if (!first_error_.ok()) return first_error_;
  for (const Argument& argument : arguments_) {
    if (argument.consumed) continue;
    if (is_flag_token(argument.text))
      return Status(ErrorCode::InvalidArgument, "unknown flag " + argument.text.substr(0, argument.text.find('=')));
    return Status(ErrorCode::InvalidArgument, "unexpected argument '" + argument.text + "'");
  }
  return ok_status();
}

std::optional<int> Options::conclude(std::string_view command, std::string_view summary) const {
  if (help_requested()) {
    std::fputs(usage(summary).c_str(), stdout);
    return 0;
  }
  if (Status status = finish(); !status.ok()) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(command.size()), command.data(), status.to_string().c_str());
    return 2;
  }
  return std::nullopt;
}

Result<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device::Cpu;
  if (text == "cuda") return Device::Cuda;
  return Status(ErrorCode::InvalidArgument, "--device must be cpu or cuda, got '" + std::string(text) + "'");
}

}  // namespace ls::cli
