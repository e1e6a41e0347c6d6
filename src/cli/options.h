// A tiny command-line parser shared by the subcommands: --flag value, --flag=value, boolean flags, positionals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/load.h"

namespace ls::cli {

// Usage, in the order a command reads it:
//   Options opts(argc, argv);                          // argv[0] is the command name
//   std::string model = opts.get_string("--model", "", "checkpoint directory");
//   int64_t seed = opts.get_int("--seed", 0, "random seed");
//   bool verbose = opts.flag("--verbose", "print more");
//   std::string dir = opts.positional(0, "DIR", "checkpoint directory");   // after every flag is asked for
//   if (std::optional<int> code = opts.conclude("lanespark x", "lanespark x: does y")) return *code;
// Getters never fail: a malformed value records the first error (InvalidArgument) and returns the fallback;
// finish() reports it, or the first unknown flag / unexpected positional.
class Options {
 public:
  Options(int argc, char** argv);

  // The value of `--name value` or `--name=value`, else `fallback`.
  std::string get_string(std::string_view name, std::string_view fallback, std::string_view help = "");
  // Like get_string but records "missing required flag --name" when absent.
  std::string require_string(std::string_view name, std::string_view help = "");
  // An integer value (decimal, optional sign); anything else is an error naming the flag and the text.
  int64_t get_int(std::string_view name, int64_t fallback, std::string_view help = "");
  // A finite floating-point value.
  double get_double(std::string_view name, double fallback, std::string_view help = "");
  // True when the boolean flag `--name` is present (`--name=...` is an error).
  bool flag(std::string_view name, std::string_view help = "");
  // True when `--name` was given in either form (does not consume it).
  bool has(std::string_view name) const;
  // The index-th argument that is not a flag or a flag's value; records an error when `required` and absent.
  std::string positional(size_t index, std::string_view label, std::string_view help = "", bool required = true);

  // True when --help or -h was given.
  bool help_requested() const { return help_; }
  // "usage: ..." text listing every flag and positional asked for so far, with their help lines.
  std::string usage(std::string_view summary) const;
  // The first recorded error, else the first argument no getter consumed (InvalidArgument), else OK.
  Status finish() const;
  // Ends flag reading for `command`: the exit code to return now (0 after printing --help, 2 after printing a
  // finish() error), or nothing when the command should run.
  std::optional<int> conclude(std::string_view command, std::string_view summary) const;

 private:
  struct Argument {
    std::string text;
    bool consumed = false;
  };
  struct HelpLine {
    std::string name;
    std::string help;
  };
  // Finds `--name` / `--name=value`; returns the index of the flag token or -1, and records duplicates.
  int find_flag(std::string_view name);
  void record_error(std::string message);
  void add_help(std::string_view name, std::string_view value_hint, std::string_view help);

  std::string command_;
  std::vector<Argument> arguments_;
  std::vector<HelpLine> help_lines_;
  std::vector<std::string> positional_labels_;
  bool help_ = false;
  Status first_error_;
};

// `--device cpu|cuda` as a Device; InvalidArgument naming the flag otherwise.
Result<Device> parse_device(std::string_view text);

}  // namespace ls::cli
