#pragma once
// Command-line parsing shared by the subcommands (Boost.Program_options).
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "apps/memtwin/commands.h"

namespace memtwin::cli {

/// Parses `args` against `options` (+ positional), handling --help: returns nullopt after printing
/// the help text, which starts with `usage`.
std::optional<boost::program_options::variables_map> parse_args(
    const Args& args, const boost::program_options::options_description& options,
    const boost::program_options::positional_options_description& positional, const std::string& usage);

}  // namespace memtwin::cli
