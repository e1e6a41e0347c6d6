// Reading tokenizer.json and tokenizer_config.json into a Tokenizer, refusing what it cannot reproduce by name.
#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ls::text {
namespace {

using nlohmann::json;

Status bad(const std::string& message) { return Status(ErrorCode::BadTokenizer, message); }

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status(ErrorCode::NotFound, "cannot open " + path.string());
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

Result<json> parse(std::string_view text, const char* what) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return bad(std::string(what) + " is not valid JSON");
  return parsed;
}

bool is_null_or_empty(const json& value) {
  return value.is_null() || (value.is_string() && value.get<std::string>().empty());
}

Result<BpeSettings> read_model(const json& model, bool byte_level) {
  if (!model.is_object()) return bad("tokenizer.json has no model");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") return bad("model type '" + type + "' is not supported (supported: BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    return bad("BPE dropout is not supported (it makes encoding random)");
  if (model.value("byte_fallback", false)) return bad("BPE byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !is_null_or_empty(model[key])) return bad(std::string("BPE ") + key + " is not supported");
  BpeSettings settings;
  settings.byte_level = byte_level;
  settings.ignore_merges = model.value("ignore_merges", false);
  settings.fuse_unk = model.value("fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) settings.unk_token = model["unk_token"].get<std::string>();
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("BPE model has no vocab object");
  settings.vocab.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return bad("vocab entry '" + token + "' has a non-integer id");
    settings.vocab.emplace_back(token, id.get<int32_t>());
  }
  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) return bad("BPE merges is not a list");
  settings.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& merge = merges[rank];
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        return bad("merge " + std::to_string(rank) + " '" + line + "' is not two tokens separated by one space");
      settings.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      settings.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return bad("merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return settings;
}

Result<AddedToken> read_added_token(const json& entry, int32_t id) {
  if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string())
    return bad("added token " + std::to_string(id) + " has no content");
  AddedToken token;
  token.id = id;
  token.content = entry["content"].get<std::string>();
  token.special = entry.value("special", false);
  token.lstrip = entry.value("lstrip", false);
  token.rstrip = entry.value("rstrip", false);
  token.single_word = entry.value("single_word", false);
  token.normalized = entry.value("normalized", !token.special);
  return token;
}

// The ids TemplateProcessing's single template puts before and after sequence A.
Status read_post_processor(const json& spec, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (spec.is_null()) return ok_status();
  const std::string type = spec.value("type", std::string());
  if (type == "ByteLevel") return ok_status();  // only adjusts offsets
  if (type == "Sequence") {
    for (const auto& inner : spec.value("processors", json::array()))
      LS_RETURN_IF_ERROR(read_post_processor(inner, prefix, suffix));
    return ok_status();
  }
  if (type != "TemplateProcessing")
    return bad("post_processor type '" + type + "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  if (!prefix.empty() || !suffix.empty()) return bad("post_processor has more than one TemplateProcessing");
  const json& special_tokens = spec.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (const auto& item : spec.value("single", json::array())) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", std::string()) != "A")
        return bad("TemplateProcessing single template uses a sequence other than A");
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].value("id", std::string());
      if (!special_tokens.contains(name) || !special_tokens[name].contains("ids"))
        return bad("TemplateProcessing names special token '" + name + "' without ids");
      for (const auto& id : special_tokens[name]["ids"]) (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    } else {
      return bad("TemplateProcessing single template has an item that is neither Sequence nor SpecialToken");
    }
  }
  if (!seen_sequence) return bad("TemplateProcessing single template has no $A");
  return ok_status();
}

Result<bool> read_decoder(const json& spec) {
  if (spec.is_null()) return false;
  const std::string type = spec.value("type", std::string());
  if (type == "ByteLevel") return true;
  if (type == "Sequence") {
    const json& inner = spec.value("decoders", json::array());
    if (inner.size() == 1) return read_decoder(inner[0]);
  }
  return bad("decoder type '" + type + "' is not supported (supported: ByteLevel, a Sequence of one ByteLevel, null)");
}

// A special-token entry of tokenizer_config.json: "text" or {"content": "text", ...}.
std::string config_token(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"].get<std::string>();
  return "";
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& directory) {
  LS_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(directory / "tokenizer.json"));
  std::string config_json;
  if (std::filesystem::exists(directory / "tokenizer_config.json")) {
    LS_ASSIGN_OR_RETURN(config_json, read_file(directory / "tokenizer_config.json"));
  }
  LS_ASSIGN_OR_RETURN(Tokenizer tokenizer, from_json(tokenizer_json, config_json));
  if (std::filesystem::exists(directory / "chat_template.jinja")) {
    LS_ASSIGN_OR_RETURN(tokenizer.chat_template_, read_file(directory / "chat_template.jinja"));
  }
  return tokenizer;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  LS_ASSIGN_OR_RETURN(json spec, parse(tokenizer_json, "tokenizer.json"));
  if (!spec.is_object()) return bad("tokenizer.json is not an object");
  for (const char* key : {"truncation", "padding"})
    if (spec.contains(key) && !spec[key].is_null()) return bad(std::string("tokenizer.json ") + key + " is not supported");
  Tokenizer tokenizer;
  LS_ASSIGN_OR_RETURN(tokenizer.normalizer_, Normalizer::from_json(spec.value("normalizer", json())));
  LS_ASSIGN_OR_RETURN(tokenizer.pre_tokenizer_, PreTokenizer::from_json(spec.value("pre_tokenizer", json())));
  LS_ASSIGN_OR_RETURN(BpeSettings settings, read_model(spec.value("model", json()), tokenizer.pre_tokenizer_.byte_level()));
  LS_ASSIGN_OR_RETURN(BpeModel model, BpeModel::build(settings));
  tokenizer.model_ = std::make_unique<BpeModel>(std::move(model));
  for (const auto& entry : spec.value("added_tokens", json::array())) {
    if (!entry.contains("id") || !entry["id"].is_number_integer()) return bad("an added token has no integer id");
    LS_ASSIGN_OR_RETURN(AddedToken token, read_added_token(entry, entry["id"].get<int32_t>()));
    tokenizer.added_tokens_.push_back(std::move(token));
  }
  LS_RETURN_IF_ERROR(read_post_processor(spec.value("post_processor", json()), tokenizer.prefix_ids_, tokenizer.suffix_ids_));
  LS_ASSIGN_OR_RETURN(bool byte_level_decoder, read_decoder(spec.value("decoder", json())));
  tokenizer.decoder_ = byte_level_decoder ? DecoderKind::ByteLevel : DecoderKind::JoinWithSpace;
  if (!config_json.empty()) LS_RETURN_IF_ERROR(tokenizer.load_config(config_json));
  LS_RETURN_IF_ERROR(tokenizer.finish_setup());
  return tokenizer;
}

Status Tokenizer::load_config(std::string_view config_json) {
  LS_ASSIGN_OR_RETURN(json config, parse(config_json, "tokenizer_config.json"));
  if (!config.is_object()) return bad("tokenizer_config.json is not an object");
  // added_tokens_decoder entries the tokenizer.json lacks are added, as transformers does.
  const json added_tokens_decoder = config.value("added_tokens_decoder", json::object());
  for (const auto& [key, entry] : added_tokens_decoder.items()) {
    int32_t id = -1;
    const auto parsed = std::from_chars(key.data(), key.data() + key.size(), id);
    if (parsed.ec != std::errc() || parsed.ptr != key.data() + key.size())
      return bad("added_tokens_decoder key '" + key + "' is not an id");
    bool present = false;
    for (const AddedToken& token : added_tokens_) present |= token.id == id;
    if (present) continue;
    LS_ASSIGN_OR_RETURN(AddedToken token, read_added_token(entry, id));
    added_tokens_.push_back(std::move(token));
  }
  bos_token_ = config_token(config, "bos_token");
  eos_token_ = config_token(config, "eos_token");
  pad_token_ = config_token(config, "pad_token");
  unk_token_ = config_token(config, "unk_token");
  if (config.contains("chat_template")) {
    const json& chat_template = config["chat_template"];
    if (chat_template.is_string()) {
      chat_template_ = chat_template.get<std::string>();
    } else if (chat_template.is_array()) {
      for (const auto& named : chat_template)
        if (named.value("name", std::string()) == "default") chat_template_ = named.value("template", std::string());
      if (chat_template_.empty()) return bad("chat_template list has no template named 'default'");
    }
  }
  return ok_status();
}

Status Tokenizer::finish_setup() {
  int32_t limit = model_->id_limit();
  for (const AddedToken& token : added_tokens_) {
    if (token.id < 0) return bad("added token '" + token.content + "' has negative id " + std::to_string(token.id));
    limit = std::max(limit, token.id + 1);
  }
  decoded_.assign(limit, std::string());
  special_.assign(limit, 0);
  known_.assign(limit, 0);
  for (int32_t id = 0; id < model_->id_limit(); ++id) {
    const std::string* token = model_->id_to_token(id);
    if (!token) continue;
    known_[id] = 1;
    decoded_[id] = *token;
  }
  for (const AddedToken& token : added_tokens_) {
    added_ids_.emplace(token.content, token.id);
    known_[token.id] = 1;
    decoded_[token.id] = token.content;
    special_[token.id] = token.special;
  }
  // tokenizers skips by content: any id whose text is a special token's text counts as special.
  std::unordered_set<std::string> special_texts;
  for (const AddedToken& token : added_tokens_)
    if (token.special) special_texts.insert(token.content);
  for (int32_t id = 0; id < limit; ++id)
    if (known_[id] && special_texts.count(decoded_[id])) special_[id] = 1;
  if (decoder_ == DecoderKind::ByteLevel) {
    // A token whose every character is in the byte alphabet becomes those bytes; any other stays as its UTF-8.
    for (std::string& text : decoded_) {
      std::string raw;
      bool all_mapped = true;
      for (size_t position = 0; position < text.size() && all_mapped;) {
        const CodePoint point = decode_code_point(text, position);
        const int byte = unicode_to_byte(point.value);
        all_mapped = byte >= 0;
        raw.push_back(static_cast<char>(byte));
        position += point.length;
      }
      if (all_mapped) text = std::move(raw);
    }
  }
  std::vector<AddedToken> raw_tokens, normalized_tokens;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& token : added_tokens_) {
    if (token.normalized) {
      LS_ASSIGN_OR_RETURN(std::string pattern, normalizer_.apply(token.content));
      normalized_tokens.push_back(token);
      normalized_patterns.push_back(std::move(pattern));
    } else {
      raw_tokens.push_back(token);
      raw_patterns.push_back(token.content);
    }
  }
  raw_matcher_.build(raw_tokens, raw_patterns);
  normalized_matcher_.build(normalized_tokens, normalized_patterns);
  if (!bos_token_.empty()) bos_id_ = token_to_id(bos_token_);
  if (!eos_token_.empty()) eos_id_ = token_to_id(eos_token_);
  if (!pad_token_.empty()) pad_id_ = token_to_id(pad_token_);
  return ok_status();
}

}  // namespace ls::text
