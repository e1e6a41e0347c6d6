// Tests for the CLI pieces io owns: the shared option parser, and `synth` / `inspect` run in-process (exit codes).
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "io_test_util.h"

namespace ls::cli {
namespace {

// Options over {"cmd", args...}.
struct Parsed {
  explicit Parsed(std::vector<std::string> args) : storage(std::move(args)) {
    storage.insert(storage.begin(), "cmd");
    for (std::string& arg : storage) pointers.push_back(arg.data());
  }
  Options options() { return Options(static_cast<int>(pointers.size()), pointers.data()); }
  std::vector<std::string> storage;
  std::vector<char*> pointers;
};

TEST(Options, ConcludeEndsWithZeroOnHelpTwoOnABadFlagAndNothingOtherwise) {
  Parsed help({"--help"});
  Options help_opts = help.options();
  help_opts.get_int("--threads", 1, "threads");
  EXPECT_EQ(help_opts.conclude("cmd", "cmd: does things"), 0);
  Parsed unknown({"--thread", "2"});
  Options unknown_opts = unknown.options();
  unknown_opts.get_int("--threads", 1, "threads");
  EXPECT_EQ(unknown_opts.conclude("cmd", "cmd: does things"), 2);
  Parsed fine({"--threads", "2"});
  Options fine_opts = fine.options();
  EXPECT_EQ(fine_opts.get_int("--threads", 1, "threads"), 2);
  EXPECT_EQ(fine_opts.conclude("cmd", "cmd: does things"), std::nullopt);
}

TEST(Options, BothValueFormsBooleansAndPositionalsAreRead) {
  Parsed parsed({"--model", "dir/a", "--seed=-7", "--temperature", "0.5", "--verbose", "input.txt"});
  Options opts = parsed.options();
  EXPECT_EQ(opts.get_string("--model", "none"), "dir/a");
  EXPECT_EQ(opts.get_int("--seed", 0), -7);
  EXPECT_EQ(opts.get_double("--temperature", 1.0), 0.5);
  EXPECT_TRUE(opts.flag("--verbose"));
  EXPECT_FALSE(opts.flag("--quiet"));
  EXPECT_EQ(opts.get_int("--threads", 4), 4);
  EXPECT_EQ(opts.positional(0, "FILE"), "input.txt");
  EXPECT_FALSE(opts.help_requested());
  EXPECT_TRUE(opts.finish().ok()) << opts.finish().to_string();
}

TEST(Options, AnUnknownFlagIsRefusedByName) {
  Parsed parsed({"--model", "m", "--modle=x"});
  Options opts = parsed.options();
  opts.get_string("--model", "");
  Status status = opts.finish();
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(status.message(), "unknown flag --modle");
}

TEST(Options, AnUnexpectedPositionalIsRefused) {
  Parsed parsed({"a", "b"});
  Options opts = parsed.options();
  EXPECT_EQ(opts.positional(0, "DIR"), "a");
  EXPECT_EQ(opts.finish().message(), "unexpected argument 'b'");
}

TEST(Options, MalformedValuesAreRefusedNamingFlagAndText) {
  Parsed parsed({"--seed", "12x", "--top-p", "nan", "--model", "--verbose"});
  Options opts = parsed.options();
  EXPECT_EQ(opts.get_int("--seed", 3), 3);
  EXPECT_EQ(opts.finish().message(), "flag --seed wants an integer, got '12x'");
  Parsed doubles({"--top-p", "nan"});
  Options double_opts = doubles.options();
  EXPECT_EQ(double_opts.get_double("--top-p", 1.0), 1.0);
  EXPECT_EQ(double_opts.finish().message(), "flag --top-p wants a finite number, got 'nan'");
  Parsed missing({"--model", "--verbose"});
  Options missing_opts = missing.options();
  missing_opts.get_string("--model", "");
  missing_opts.flag("--verbose");
  EXPECT_EQ(missing_opts.finish().message(), "flag --model needs a value");
}

TEST(Options, RequiredFlagsDuplicatesAndValuedBooleansAreRefused) {
  Parsed none({});
  Options required = none.options();
  required.require_string("--out");
  EXPECT_EQ(required.finish().message(), "missing required flag --out");
  Parsed twice({"--seed", "1", "--seed=2"});
  Options duplicate = twice.options();
  duplicate.get_int("--seed", 0);
  EXPECT_EQ(duplicate.finish().message(), "flag --seed given twice");
  Parsed valued({"--verbose=yes"});
  Options boolean = valued.options();
  EXPECT_FALSE(boolean.flag("--verbose"));
  EXPECT_EQ(boolean.finish().message(), "flag --verbose takes no value, got '--verbose=yes'");
  Parsed absent({});
  Options positional = absent.options();
  positional.positional(0, "DIR");
  EXPECT_EQ(positional.finish().message(), "missing argument DIR");
}

TEST(Options, HelpIsDetectedAndUsageListsEveryFlagAskedFor) {
  Parsed parsed({"--help"});
  Options opts = parsed.options();
  opts.get_string("--model", "", "checkpoint directory");
  opts.flag("--verbose", "print more");
  opts.positional(0, "DIR", "where", /*required=*/false);
  EXPECT_TRUE(opts.help_requested());
  const std::string usage = opts.usage("does things");
  EXPECT_NE(usage.find("usage: lanespark cmd [options] DIR"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--model VALUE"), std::string::npos) << usage;
  EXPECT_NE(usage.find("checkpoint directory"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--verbose"), std::string::npos) << usage;
  EXPECT_TRUE(opts.finish().ok());
}

// Runs a subcommand on {name, args...}, swallowing its stdout and stderr.
int run_command(int (*command)(int, char**), const std::string& name, std::vector<std::string> args) {
  Parsed parsed(std::move(args));
  parsed.storage[0] = name;
  parsed.pointers[0] = parsed.storage[0].data();
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = command(static_cast<int>(parsed.pointers.size()), parsed.pointers.data());
  ::testing::internal::GetCapturedStdout();
  ::testing::internal::GetCapturedStderr();
  return code;
}

TEST(SynthCommand, WritesACheckpointThatInspectAcceptsAndRefusesBadArguments) {
  io::testing::TempDir dir;
  const std::string out = dir.file("m");
  EXPECT_EQ(run_command(run_synth, "synth", {"--shape", "lfm2-350m", "--seed", "9", "--out", out, "--layers", "1",
                                             "--vocab", "64", "--max-shard-mib", "10"}), 0);
  EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors.index.json"));
  // 35 MiB: embedding + in_proj + out_proj (8.1 MiB), then w1, w3, w2 (9 MiB each) alone: four shards of <= 10 MiB.
  EXPECT_TRUE(std::filesystem::exists(out + "/model-00004-of-00004.safetensors"));
  EXPECT_EQ(run_command(run_inspect, "inspect", {out}), 0);
  EXPECT_EQ(run_command(run_synth, "synth", {"--help"}), 0);
  EXPECT_EQ(run_command(run_synth, "synth", {"--shape", "lfm2-9000b", "--out", out}), 2);
  EXPECT_EQ(run_command(run_synth, "synth", {"--shape", "lfm2-350m", "--out", out, "--dtype", "fp8"}), 2);
  EXPECT_EQ(run_command(run_synth, "synth", {"--shape", "lfm2-350m", "--out", out, "--layers", "99"}), 2);
  EXPECT_EQ(run_command(run_synth, "synth", {"--shape", "lfm2-350m"}), 2);  // no --out
}

TEST(InspectCommand, ExitsOneOnARefusalAndTwoOnBadArguments) {
  io::testing::TempDir dir;
  EXPECT_EQ(run_command(run_inspect, "inspect", {dir.path()}), 1);  // no config.json, no weights
  EXPECT_EQ(run_command(run_inspect, "inspect", {}), 2);
  EXPECT_EQ(run_command(run_inspect, "inspect", {dir.path(), "--bogus"}), 2);
}

}  // namespace
}  // namespace ls::cli
