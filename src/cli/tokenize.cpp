// lanespark tokenize: encode / decode / render chat templates with a checkpoint's tokenizer (also the parity
// tests' bridge to the C++ tokenizer: --batch and --chat read JSON lines and answer one JSON line each).
#include <cstdio>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace ls::cli {
namespace {

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (char byte : bytes) {
    hex.push_back(digits[static_cast<unsigned char>(byte) >> 4]);
    hex.push_back(digits[static_cast<unsigned char>(byte) & 15]);
  }
  return hex;
}

std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (size_t position = 0; position + 1 < hex.size(); position += 2)
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(position, 2)), nullptr, 16)));
  return bytes;
}

std::string streamed(const text::Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  text::Detokenizer detokenizer(tokenizer, skip_special);
  std::string out;
  for (int32_t id : ids) out += detokenizer.push(id);
  return out + detokenizer.flush();
}

// One --batch line {"hex": "...", "add_special_tokens": true, "ids": [...]?} -> ids and every decode, hex-encoded.
nlohmann::json answer_batch_line(const text::Tokenizer& tokenizer, const nlohmann::json& request) {
  std::vector<int32_t> ids;
  nlohmann::json answer;
  if (request.contains("ids")) {
    ids = request["ids"].get<std::vector<int32_t>>();
  } else {
    auto encoded = tokenizer.encode(from_hex(request.value("hex", std::string())), request.value("add_special_tokens", true));
    if (!encoded.ok()) return {{"error", encoded.status().to_string()}};
    ids = *encoded;
    answer["ids"] = ids;
  }
  answer["decoded"] = to_hex(tokenizer.decode(ids, false));
  answer["decoded_skip"] = to_hex(tokenizer.decode(ids, true));
  answer["streamed"] = to_hex(streamed(tokenizer, ids, false));
  answer["streamed_skip"] = to_hex(streamed(tokenizer, ids, true));
  return answer;
}

// One --chat line {"messages": [...], "tools": [...]?, "add_generation_prompt": bool, "extra": {...}?,
// "template": "..."?} (a template given in the line replaces the tokenizer's).
nlohmann::json answer_chat_line(const text::ChatTemplate& tokenizer_chat, const text::Tokenizer& tokenizer,
                                const nlohmann::ordered_json& request) {
  std::optional<text::ChatTemplate> own;
  if (request.contains("template")) {
    auto compiled = text::ChatTemplate::compile(request["template"].get<std::string>(),
                                                {tokenizer.bos_token(), tokenizer.eos_token(), tokenizer.pad_token(),
                                                 tokenizer.unk_token()});
    if (!compiled.ok())
      return {{"error", compiled.status().to_string()}, {"code", std::string(error_name(compiled.status().code()))}};
    own.emplace(std::move(*compiled));
  }
  const text::ChatTemplate& chat = own ? *own : tokenizer_chat;
  text::ChatRequest chat_request;
  chat_request.messages = request.value("messages", nlohmann::ordered_json::array());
  chat_request.tools = request.value("tools", nlohmann::ordered_json());
  chat_request.add_generation_prompt = request.value("add_generation_prompt", false);
  chat_request.extra = request.value("extra", nlohmann::ordered_json::object());
  auto rendered = chat.render(chat_request);
  if (!rendered.ok()) return {{"error", rendered.status().to_string()}, {"code", std::string(error_name(rendered.status().code()))}};
  return {{"hex", to_hex(*rendered)}};
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  Options options(argc, argv);
  const std::string directory = options.require_string("--tokenizer", "directory with tokenizer.json (+ tokenizer_config.json)");
  const std::string text = options.get_string("--text", "", "text to encode");
  const std::string file = options.get_string("--file", "", "file whose bytes to encode");
  const std::string batch = options.get_string("--batch", "", "JSON lines {hex, add_special_tokens} or {ids}: answer ids and decodes");
  const std::string chat = options.get_string("--chat", "", "JSON lines {messages, tools, add_generation_prompt}: answer the rendered template");
  const bool no_special = options.flag("--no-special", "do not add BOS (add_special_tokens=false)");
  if (std::optional<int> code = options.conclude("lanespark tokenize", "lanespark tokenize: encode text, decode ids, render chat templates"))
    return *code;
  auto tokenizer = text::Tokenizer::load(directory);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().to_string().c_str());
    return 1;
  }
  if (!batch.empty() || !chat.empty()) {
    std::ifstream input(batch.empty() ? chat : batch, std::ios::binary);
    if (!input) {
      std::fprintf(stderr, "cannot open %s\n", (batch.empty() ? chat : batch).c_str());
      return 1;
    }
    std::optional<text::ChatTemplate> chat_template;
    if (!chat.empty()) {
      auto compiled = text::ChatTemplate::from_tokenizer(*tokenizer);
      if (!compiled.ok()) {
        std::fprintf(stderr, "%s\n", compiled.status().to_string().c_str());
        return 1;
      }
      chat_template.emplace(std::move(*compiled));
    }
    std::string line;
    while (std::getline(input, line)) {
      if (line.empty()) continue;
      const auto request = nlohmann::ordered_json::parse(line, nullptr, false);
      if (request.is_discarded()) {
        std::fprintf(stderr, "not JSON: %s\n", line.c_str());
        return 1;
      }
      const nlohmann::json answer = chat_template ? answer_chat_line(*chat_template, *tokenizer, request)
                                                  : answer_batch_line(*tokenizer, nlohmann::json::parse(line));
      std::cout << answer.dump() << '\n';
    }
    return 0;
  }
  std::string input = text;
  if (!file.empty()) {
    std::ifstream stream(file, std::ios::binary);
    std::ostringstream contents;
    contents << stream.rdbuf();
    input = contents.str();
  }
  auto ids = tokenizer->encode(input, !no_special);
  if (!ids.ok()) {
    std::fprintf(stderr, "%s\n", ids.status().to_string().c_str());
    return 1;
  }
  std::cout << nlohmann::json(*ids).dump() << '\n';
  return 0;
}

}  // namespace ls::cli
