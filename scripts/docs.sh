#!/usr/bin/env bash
# Builds the documentation site (scripts/dev.sh docs calls it after building memtwin):
#   scripts/docs.sh [MEMTWIN_BINARY]
# docs/ plus what is generated from the code - the scenario reference (memtwin schema --markdown)
# and the command-line reference (every command's --help) - and CHANGELOG.md are assembled in
# build/docs-src, then MkDocs builds build/site strictly (mkdocs.yml).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
memtwin="${1:-${MEMTWIN_BUILD_DIR:-$root/build}/memtwin}"
src="$root/build/docs-src"
rm -rf "$src"
mkdir -p "$src/reference"
cp -r "$root/docs/." "$src/"
# The changelog sits at the repository's root, beside docs/: its links into docs/ lose that prefix.
sed 's|](docs/|](|g' "$root/CHANGELOG.md" > "$src/changelog.md"
"$memtwin" schema --markdown > "$src/reference/scenario.md"
{
  echo "# Command line"
  echo
  echo "Generated from \`memtwin --help\` and each command's \`--help\`."
  echo
  echo '```'
  "$memtwin" --help
  echo '```'
  for command in $("$memtwin" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}'); do
    echo
    echo "## memtwin $command"
    echo
    echo '```'
    "$memtwin" "$command" --help
    echo '```'
  done
} > "$src/reference/cli.md"
cd "$root"
mkdocs build --quiet
echo "memtwin: documentation site in $root/build/site (open index.html)"
