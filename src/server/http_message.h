// HTTP/1.1 messages as plain data: parsing a request head, writing response heads and chunked-body frames.
//
// Just what the OpenAI routes need (no vendored HTTP library: the Debian cpp-httplib is a shared library with
// OpenSSL and Brotli behind it, which the GPU machines' images lack): request bodies by Content-Length, responses
// by Content-Length or chunked (SSE), keep-alive.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ls::server {

inline constexpr size_t kMaxHeadBytes = 64 * 1024;         // request line + headers
inline constexpr size_t kMaxBodyBytes = 32 * 1024 * 1024;  // a request body

struct HttpRequest {
  std::string method;   // "GET", "POST"
  std::string path;     // "/v1/models" (the query string is cut off)
  int minor_version = 1;  // HTTP/1.x
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;

  // The first header named `name` (lower case), if any.
  std::optional<std::string_view> header(std::string_view name) const;
  // Whether the connection stays open after the reply (HTTP/1.1 unless "close"; HTTP/1.0 only with "keep-alive").
  bool keep_alive() const;
};

// Parses `head` (everything before the blank line, without it). InvalidArgument names what is malformed.
Result<HttpRequest> parse_request_head(std::string_view head);

// The body length a request head announces: 0 without Content-Length; InvalidArgument for chunked request bodies
// or a malformed length (the server answers lengths over kMaxBodyBytes with a 413).
Result<size_t> request_body_length(const HttpRequest& request);

// "HTTP/1.1 200 OK\r\n..." through the blank line. `body_length` < 0: a chunked body follows.
std::string response_head(int status, std::string_view content_type, long long body_length, bool keep_alive);

// One chunk of a chunked body ("" gives nothing: an empty chunk would end the body), and the end of the body.
std::string chunk_frame(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The reason phrase of a status code ("Not Found").
std::string_view status_reason(int status);

}  // namespace ls::server
