// lanespark: the command-line entry point; each subcommand lives in its own file.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {
void print_usage() {
  std::printf(
      "usage: lanespark <command> [options]\n"
      "commands:\n"
      "  serve      the OpenAI-compatible server (chat and text completions, streaming; --drafter drafts)\n"
      "  generate   run a model on a prompt and print the reply (with --drafter: speculative decoding)\n"
      "  synth      write a random-weight checkpoint of a real model shape\n"
      "  inspect    print a checkpoint's config and tensors\n"
      "  tokenize   encode text (or a chat) with a model's tokenizer and print the ids\n"
      "run 'lanespark <command> --help' for its options\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  for (const auto& entry : ls::cli::commands())
    if (command == entry.name) return entry.run(argc - 1, argv + 1);
  std::fprintf(stderr, "lanespark: unknown command '%s'\n", command.c_str());
  print_usage();
  return 2;
}
