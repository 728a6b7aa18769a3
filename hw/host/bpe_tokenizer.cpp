#include "hw/host/bpe_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "models/scenario/scenario_error.h"

namespace memtwin::hw {

namespace {

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& key, const std::string& message) {
  throw ScenarioError({file.string(), 0, 0}, key, message);
}

// GPT-2's printable stand-in for each byte, UTF-8 encoded: the printable Latin-1 bytes stand for
// themselves, the others for U+0100 onwards in byte order.
std::string byte_character(int byte) {
  auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
  int code = byte;
  if (!printable(byte)) {
    code = 256;
    for (int b = 0; b < byte; ++b) code += printable(b) ? 0 : 1;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
  return out;
}

std::uint64_t pair_key(int left, int right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

struct CodePoint {
  std::int32_t value;  ///< negative: a byte that is not valid UTF-8 (it stands alone)
  std::size_t begin, end;
  bool letter, number, space;
};

std::vector<CodePoint> code_points(std::string_view text) {
  std::vector<CodePoint> out;
  const auto* s = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto length = static_cast<std::int32_t>(text.size());
  for (std::int32_t i = 0; i < length;) {
    const std::int32_t begin = i;
    UChar32 c;
    U8_NEXT(s, i, length, c);
    CodePoint p{c, static_cast<std::size_t>(begin), static_cast<std::size_t>(i), false, false, false};
    if (c >= 0) {
      const auto type = static_cast<UCharCategory>(u_charType(c));
      p.letter = type == U_UPPERCASE_LETTER || type == U_LOWERCASE_LETTER || type == U_TITLECASE_LETTER ||
                 type == U_MODIFIER_LETTER || type == U_OTHER_LETTER;
      p.number = type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
      p.space = u_isUWhiteSpace(c);
    }
    out.push_back(p);
  }
  return out;
}

// GPT-2's pattern over cps[first, last), calling emit(begin, end) with code-point indices.
template <typename Emit>
void gpt2_pieces(const std::vector<CodePoint>& cps, std::size_t first, std::size_t last, Emit emit) {
  auto other = [&](std::size_t i) { return !cps[i].space && !cps[i].letter && !cps[i].number; };
  for (std::size_t pos = first; pos < last;) {
    const std::int32_t c = cps[pos].value;
    if (c == '\'' && pos + 1 < last) {  // 's 't 're 've 'm 'll 'd
      const std::int32_t n1 = cps[pos + 1].value;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        emit(pos, pos + 2);
        pos += 2;
        continue;
      }
      if (pos + 2 < last) {
        const std::int32_t n2 = cps[pos + 2].value;
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
          emit(pos, pos + 3);
          pos += 3;
          continue;
        }
      }
    }
    const std::size_t k = pos + (c == ' ' ? 1 : 0);  // ' ?' takes an ASCII space only
    if (k < last) {
      auto run = [&](auto same) {
        std::size_t j = k;
        while (j < last && same(j)) ++j;
        emit(pos, j);
        pos = j;
      };
      if (cps[k].letter) {
        run([&](std::size_t i) { return cps[i].letter; });
        continue;
      }
      if (cps[k].number) {
        run([&](std::size_t i) { return cps[i].number; });
        continue;
      }
      if (other(k)) {
        run(other);
        continue;
      }
    }
    // \s+(?!\S) then \s+: a run of white space, less its last character when a non-space follows.
    std::size_t j = pos;
    while (j < last && cps[j].space) ++j;
    if (j == pos) j = pos + 1;  // (unreachable for valid classes; never stall)
    else if (j < last && j - pos > 1) --j;
    emit(pos, j);
    pos = j;
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) refuse(file, "tokenizer", "cannot be read; scripts/real-model.sh writes it");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past a double's range
    refuse(file, "tokenizer", std::string("is not JSON memtwin can read: ") + e.what());
  }
  if (!j.is_object()) refuse(file, "tokenizer", "must be a JSON object");
  if (!j.contains("model") || j["model"] != "gpt2") refuse(file, "model", "must be 'gpt2' (byte-level BPE)");
  if (!j.contains("pre") || j["pre"] != "smollm") {
    refuse(file, "pre", "must be 'smollm': the only pre-tokenizer memtwin implements (digits split, then GPT-2's pattern)");
  }
  for (const char* key : {"tokens", "merges"}) {
    if (!j.contains(key) || !j[key].is_array() || j[key].empty()) refuse(file, key, "must be a non-empty list of strings");
  }
  BpeTokenizer t;
  const auto& tokens = j["tokens"];
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) refuse(file, "tokens", "too many");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].is_string()) refuse(file, "tokens[" + std::to_string(i) + "]", "must be a string");
    t.tokens_.push_back(tokens[i].get<std::string>());
    t.id_of_.emplace(t.tokens_.back(), static_cast<int>(i));  // the first of duplicates wins
  }
  // A vocabulary may lack the tokens of bytes it never saw (SmolLM2's lacks 21, 11 of them bytes
  // UTF-8 never uses): such a byte stays a symbol no merge involves, and is dropped from the
  // output, as llama.cpp does.
  for (int b = 0; b < 256; ++b) {
    const auto found = t.id_of_.find(byte_character(b));
    t.byte_token_[b] = found == t.id_of_.end() ? -1 : found->second;
  }
  const auto& merges = j["merges"];
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const std::string key = "merges[" + std::to_string(r) + "]";
    if (!merges[r].is_string()) refuse(file, key, "must be a string");
    const std::string merge = merges[r].get<std::string>();
    const auto space = merge.find(' ', 1);
    if (space == std::string::npos) refuse(file, key, "must be two tokens separated by a space: '" + merge + "'");
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    const auto l = t.id_of_.find(left), r2 = t.id_of_.find(right), m = t.id_of_.find(left + right);
    if (l == t.id_of_.end() || r2 == t.id_of_.end() || m == t.id_of_.end()) {
      refuse(file, key, "'" + merge + "' names a token the vocabulary lacks");
    }
    t.merges_.emplace(pair_key(l->second, r2->second), std::make_pair(static_cast<int>(r), m->second));
  }
  return t;
}

std::vector<int> BpeTokenizer::encode(std::string_view text) const {
  const std::vector<CodePoint> cps = code_points(text);
  std::vector<int> out;
  auto emit = [&](std::size_t begin, std::size_t end) {
    encode_piece(text.substr(cps[begin].begin, cps[end - 1].end - cps[begin].begin), out);
  };
  // llama.cpp's "smollm" pre-tokenizer: first every number character on its own, then GPT-2's
  // pattern inside the text between them.
  std::size_t segment = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (!cps[i].number) continue;
    if (segment < i) gpt2_pieces(cps, segment, i, emit);
    emit(i, i + 1);
    segment = i + 1;
  }
  if (segment < cps.size()) gpt2_pieces(cps, segment, cps.size(), emit);
  return out;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int>& out) const {
  std::vector<int> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) symbols.push_back(byte_token_[static_cast<std::uint8_t>(c)]);
  // Merge the adjacent pair of lowest rank until none is a merge (pieces are short: quadratic is fine).
  while (symbols.size() > 1) {
    int best_rank = std::numeric_limits<int>::max(), best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto found = merges_.find(pair_key(symbols[i], symbols[i + 1]));
      if (found != merges_.end() && found->second.first < best_rank) {
        best_rank = found->second.first;
        best_id = found->second.second;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    symbols[best_at] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  for (int id : symbols)
    if (id >= 0) out.push_back(id);
}

}  // namespace memtwin::hw
