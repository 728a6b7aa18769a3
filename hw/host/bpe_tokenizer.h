#pragma once
// Byte-level BPE (GPT-2's scheme) with SmolLM's pre-tokenizer, for the real model's texts
// (hw/host/real_model.h). Its vocabulary and merges are the GGUF file's, as
// scripts/real_model/convert_gguf.py writes them to tokenizer.json. A test holds encode() to
// llama.cpp's tokenizer on the same file over a corpus and non-ASCII texts.
//
// Encoding: the text is split into pieces as llama.cpp's "smollm" pre-tokenizer does — every digit
// on its own, then GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
// \s+(?!\S)|\s+) with Unicode letters, numbers and white space as ICU classifies them; each piece's
// bytes become GPT-2's byte characters, then the merges apply lowest rank first.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memtwin::hw {

class BpeTokenizer {
 public:
  /// Reads a tokenizer.json of convert_gguf.py. Throws ScenarioError naming the file and key.
  static BpeTokenizer load(const std::filesystem::path& file);

  /// The token ids of UTF-8 text (special tokens are not parsed: "<|im_start|>" is plain text).
  [[nodiscard]] std::vector<int> encode(std::string_view text) const;
  [[nodiscard]] int vocabulary_size() const { return static_cast<int>(tokens_.size()); }

 private:
  void encode_piece(std::string_view piece, std::vector<int>& out) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int> id_of_;
  /// (left id, right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<int, int>> merges_;
  int byte_token_[256] = {};  ///< each byte's token (its GPT-2 byte character); -1: none
};

}  // namespace memtwin::hw
