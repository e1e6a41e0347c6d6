// The subcommand table: one line per command.
#include "cli/commands.h"

#include <vector>

namespace ls::cli {

std::span<const Command> commands() {
  static const std::vector<Command> table = {
      {"synth", run_synth},
      {"inspect", run_inspect},
      {"tokenize", run_tokenize},
      {"generate", run_generate},
      {"serve", run_serve},
  };
  return table;
}

}  // namespace ls::cli
