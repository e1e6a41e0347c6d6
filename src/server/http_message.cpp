// HTTP/1.1 request-head parsing and response framing.
#include "server/http_message.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

namespace ls::server {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool is_token_char(char c) {
  constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";  // RFC 9110 tchar besides letters and digits
  return std::isalnum(static_cast<unsigned char>(c)) || kSymbols.find(c) != std::string_view::npos;
}

Status malformed(std::string message) { return Status(ErrorCode::InvalidArgument, std::move(message)); }

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return std::string_view(value);
  return std::nullopt;
}

bool HttpRequest::keep_alive() const {
  const std::string connection = lower(header("connection").value_or(""));
  if (minor_version == 0) return connection == "keep-alive";
  return connection != "close";
}

Result<HttpRequest> parse_request_head(std::string_view head) {
  HttpRequest request;
  size_t line_end = head.find("\r\n");
  const std::string_view request_line = head.substr(0, line_end);
  // "METHOD SP TARGET SP HTTP/1.x"
  const size_t first_space = request_line.find(' ');
  const size_t last_space = request_line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space)
    return malformed("request line '" + std::string(request_line.substr(0, 80)) + "' is not 'METHOD PATH VERSION'");
  request.method = request_line.substr(0, first_space);
  if (request.method.empty() || !std::all_of(request.method.begin(), request.method.end(), is_token_char))
    return malformed("bad method '" + request.method + "'");
  std::string_view target = request_line.substr(first_space + 1, last_space - first_space - 1);
  const std::string_view version = request_line.substr(last_space + 1);
  if (version == "HTTP/1.1") request.minor_version = 1;
  else if (version == "HTTP/1.0") request.minor_version = 0;
  else return malformed("unsupported protocol version '" + std::string(version.substr(0, 20)) + "'");
  if (target.empty() || target.front() != '/') return malformed("request target must start with '/'");
  request.path = target.substr(0, target.find('?'));

  while (line_end != std::string_view::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, line_end == std::string_view::npos ? head.npos : line_end - start);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos)
      return malformed("header line '" + std::string(line.substr(0, 80)) + "' has no name");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char))
      return malformed("bad header name '" + std::string(name.substr(0, 80)) + "'");
    request.headers.emplace_back(lower(name), std::string(trim(line.substr(colon + 1))));
  }
  return request;
}

Result<size_t> request_body_length(const HttpRequest& request) {
  if (std::optional<std::string_view> encoding = request.header("transfer-encoding"))
    return malformed("request bodies with Transfer-Encoding '" + std::string(*encoding) +
                     "' are not supported; send Content-Length");
  const std::optional<std::string_view> length = request.header("content-length");
  if (!length) return size_t{0};
  size_t value = 0;
  const auto [end, error] = std::from_chars(length->data(), length->data() + length->size(), value);
  if (error != std::errc() || end != length->data() + length->size() || length->empty())
    return malformed("Content-Length '" + std::string(*length) + "' is not a number");
  return value;
}

std::string_view status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}

std::string response_head(int status, std::string_view content_type, long long body_length, bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_reason(status)) + "\r\n";
  head += "Content-Type: " + std::string(content_type) + "\r\n";
  if (body_length >= 0) {
    head += "Content-Length: " + std::to_string(body_length) + "\r\n";
  } else {
    head += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
  }
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

std::string chunk_frame(std::string_view data) {
  if (data.empty()) return "";
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string frame(size);
  frame.append(data);
  frame += "\r\n";
  return frame;
}

}  // namespace ls::server
