// Tokenizer speed: MB/s of Tokenizer::encode over a text file (whole file, and line by line), with a cold and a
// warm word cache, plus decode and streaming detokenizer speed. Prints a table; --json writes the numbers.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string flag_value(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int index = 1; index + 1 < argc; ++index)
    if (argv[index] == name) return argv[index + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string directory = flag_value(argc, argv, "--tokenizer", "tests/golden/tokenizer");
  const std::string text_path = flag_value(argc, argv, "--text", "");
  const std::string json_path = flag_value(argc, argv, "--json", "");
  if (text_path.empty()) {
    std::fprintf(stderr, "usage: tokenizer_bench --text FILE [--tokenizer DIR] [--json OUT]\n");
    return 2;
  }
  std::ifstream file(text_path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  const std::string text = contents.str();
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  const double megabytes = static_cast<double>(text.size()) / 1e6;
  nlohmann::json results = {{"bytes", text.size()}, {"lines", lines.size()}, {"tokenizer", directory}};

  std::printf("%-34s %10s %10s %10s\n", "case", "seconds", "MB/s", "tokens");
  auto report = [&](const char* name, double seconds, size_t tokens) {
    std::printf("%-34s %10.3f %10.2f %10zu\n", name, seconds, megabytes / seconds, tokens);
    results[name] = {{"seconds", seconds}, {"mb_per_s", megabytes / seconds}, {"tokens", tokens}};
  };

  auto loaded = ls::text::Tokenizer::load(directory);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const ls::text::Tokenizer& tokenizer = *loaded;
  std::vector<int32_t> ids;
  // The first pass fills the word cache; the second runs with it warm.
  for (const char* name : {"encode whole file (cold cache)", "encode whole file (warm cache)"}) {
    const auto start = std::chrono::steady_clock::now();
    auto encoded = tokenizer.encode(text, false);
    const double seconds = seconds_since(start);
    if (!encoded.ok()) {
      std::fprintf(stderr, "%s\n", encoded.status().to_string().c_str());
      return 1;
    }
    ids = std::move(*encoded);
    report(name, seconds, ids.size());
  }
  size_t line_tokens = 0;
  const auto line_start = std::chrono::steady_clock::now();
  for (const std::string& line : lines) line_tokens += tokenizer.encode(line, false)->size();
  report("encode line by line (warm cache)", seconds_since(line_start), line_tokens);
  const auto decode_start = std::chrono::steady_clock::now();
  const std::string decoded = tokenizer.decode(ids, false);
  report("decode", seconds_since(decode_start), ids.size());
  const auto stream_start = std::chrono::steady_clock::now();
  ls::text::Detokenizer detokenizer(tokenizer, false);
  std::string streamed;
  for (int32_t id : ids) streamed += detokenizer.push(id);
  streamed += detokenizer.flush();
  report("streaming detokenizer", seconds_since(stream_start), ids.size());
  if (streamed != decoded) std::fprintf(stderr, "error: streamed text differs from decode\n");
  if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << '\n';
  return 0;
}
