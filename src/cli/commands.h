// The table of CLI subcommands; each is implemented in src/cli/<name>.cpp.
#pragma once

#include <span>

namespace ls::cli {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);  // argv[0] is the command name
};

std::span<const Command> commands();

int run_generate(int argc, char** argv);
int run_synth(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_serve(int argc, char** argv);

}  // namespace ls::cli
