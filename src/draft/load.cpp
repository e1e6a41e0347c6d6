// load_drafter: the one DSpark drafter format behind the Drafter interface.
#include "draft/load.h"

#include "draft/dspark/dspark_drafter.h"

namespace ls {

Result<std::unique_ptr<Drafter>> load_drafter(const std::string& directory, Target& target,
                                              const DrafterOptions& options) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<dspark::DsparkDrafter> drafter,
                      dspark::DsparkDrafter::load(directory, target, options));
  return std::unique_ptr<Drafter>(std::move(drafter));
}

}  // namespace ls
