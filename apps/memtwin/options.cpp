#include "apps/memtwin/options.h"

#include <iostream>

namespace po = boost::program_options;

namespace memtwin::cli {

std::optional<po::variables_map> parse_args(const Args& args, const po::options_description& options,
                                            const po::positional_options_description& positional,
                                            const std::string& usage) {
  po::options_description all(options);
  all.add_options()("help,h", "show this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << all << "\n";
    return std::nullopt;
  }
  po::notify(vm);
  return vm;
}

}  // namespace memtwin::cli
