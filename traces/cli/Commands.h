// The cardsim CLI's subcommands. Each takes its arguments (after the subcommand name) and
// returns the exit status: 0 done, 2 bad input (the message names it), 1 failed.
#pragma once

#include <string>
#include <vector>

namespace cardsim::cli {

int runCollbench(const std::vector<std::string>& args);
int runDevices(const std::vector<std::string>& argv);
int runExport(const std::vector<std::string>& argv);
int runFabricd(const std::vector<std::string>& args);
int runReplay(const std::vector<std::string>& argv);
int runSweep(const std::vector<std::string>& argv);
int runInfo(const std::vector<std::string>& args);

}  // namespace cardsim::cli
