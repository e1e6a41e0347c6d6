// The socket side of the HTTP server: listen, accept, read requests, write replies, close.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ls::server {
namespace {

constexpr int kPollMs = 100;  // how often blocked reads look at the stop flag

Status socket_error(const std::string& what) {
  return Status(ErrorCode::IoError, what + ": " + std::strerror(errno));
}

}  // namespace

bool HttpResponder::write_all(std::string_view bytes) {
  while (!broken_ && !bytes.empty()) {
    const ssize_t written = ::send(socket_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      broken_ = true;
      break;
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return !broken_;
}

bool HttpResponder::send(int status, std::string_view content_type, std::string_view body) {
  replied_ = true;
  std::string message = response_head(status, content_type, static_cast<long long>(body.size()), keep_alive_);
  message.append(body);
  return write_all(message);
}

bool HttpResponder::begin_stream(int status, std::string_view content_type) {
  replied_ = true;
  streaming_ = true;
  return write_all(response_head(status, content_type, -1, keep_alive_));
}

bool HttpResponder::write_chunk(std::string_view data) { return write_all(chunk_frame(data)); }

bool HttpResponder::end_stream() {
  const bool ok = write_all(kLastChunk);
  streaming_ = !ok;
  return ok;
}

bool HttpResponder::client_gone() const {
  if (broken_) return true;
  pollfd entry{socket_, POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) < 0) return errno != EINTR;
  return (entry.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

Result<std::unique_ptr<HttpServer>> HttpServer::listen(const HttpServerOptions& options, HttpErrorBody error_body) {
  const std::string where = options.host + ":" + std::to_string(options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(options.port);
  if (const int error = ::getaddrinfo(options.host.c_str(), port_text.c_str(), &hints, &found); error != 0)
    return Status(ErrorCode::InvalidArgument, "cannot resolve host '" + options.host + "': " + gai_strerror(error));
  const int listener = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (listener < 0) {
    ::freeaddrinfo(found);
    return socket_error("socket for " + where);
  }
  const int reuse = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
  const bool bound = ::bind(listener, found->ai_addr, found->ai_addrlen) == 0 && ::listen(listener, 128) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    Status status = socket_error("cannot listen on " + where);
    ::close(listener);
    return status;
  }
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                                 : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return std::unique_ptr<HttpServer>(
      new HttpServer(options, listener, port, std::move(error_body)));
}

HttpServer::HttpServer(const HttpServerOptions& options, int listener, int port, HttpErrorBody error_body)
    : options_(options), listener_(listener), port_(port), error_body_(std::move(error_body)) {}

HttpServer::~HttpServer() {
  stopping_ = true;
  join_finished(/*all=*/true);
  if (listener_ >= 0) ::close(listener_);
}

void HttpServer::serve(HttpHandler handler) {
  handler_ = std::move(handler);
  while (!stopping_) {
    pollfd entry{listener_, POLLIN, 0};
    const int ready = ::poll(&entry, 1, kPollMs);
    join_finished(/*all=*/false);
    if (ready <= 0) continue;
    const int socket = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (socket < 0) continue;
    std::lock_guard<std::mutex> lock(connections_mutex_);
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      reply_error(socket, 503, "too many connections (" + std::to_string(options_.max_connections) + ")");
      ::close(socket);
      continue;
    }
    Connection& connection = connections_.emplace_back();
    connection.socket = socket;
    connection.thread = std::thread([this, &connection] { serve_connection(connection); });
  }
  // Wake handlers waiting on their clients: a shut socket reads as a client gone, which cancels its request.
  {
    std::lock_guard<std::mutex> lock(connections_mutex_);
    for (Connection& connection : connections_) ::shutdown(connection.socket, SHUT_RDWR);
  }
  join_finished(/*all=*/true);
}

void HttpServer::join_finished(bool all) {
  std::list<Connection> finished;
  {
    std::lock_guard<std::mutex> lock(connections_mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (all || it->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
  }
  for (Connection& connection : finished) {
    if (connection.thread.joinable()) connection.thread.join();
    ::close(connection.socket);
  }
}

bool HttpServer::read_at_least(int socket, std::string& buffer, size_t bytes, bool idle) {
  int waited_ms = 0;
  const int limit_ms = idle ? options_.idle_timeout_ms : 30'000;
  char chunk[16 * 1024];
  while (buffer.size() < bytes) {
    if (stopping_ || waited_ms >= limit_ms) return false;
    pollfd entry{socket, POLLIN, 0};
    const int ready = ::poll(&entry, 1, kPollMs);
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) {
      waited_ms += kPollMs;
      continue;
    }
    const ssize_t got = ::recv(socket, chunk, sizeof(chunk), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(got));
    waited_ms = 0;
  }
  return true;
}

size_t HttpServer::read_head(int socket, std::string& buffer, bool& too_large) {
  size_t searched = 0;
  while (true) {
    const size_t end = buffer.find("\r\n\r\n", searched >= 3 ? searched - 3 : 0);
    if (end != std::string::npos) return end;
    if (buffer.size() > kMaxHeadBytes) {
      too_large = true;
      return std::string::npos;
    }
    searched = buffer.size();
    if (!read_at_least(socket, buffer, buffer.size() + 1, /*idle=*/buffer.empty())) return std::string::npos;
  }
}

void HttpServer::reply_error(int socket, int status, std::string_view message) {
  HttpResponder responder(socket, /*keep_alive=*/false);
  responder.send(status, "application/json", error_body_(status, message));
}

void HttpServer::serve_connection(Connection& connection) {
  const int socket = connection.socket;
  std::string buffer;
  while (!stopping_) {
    bool too_large = false;
    const size_t head_end = read_head(socket, buffer, too_large);
    if (head_end == std::string::npos) {
      if (too_large) reply_error(socket, 431, "request head over " + std::to_string(kMaxHeadBytes) + " bytes");
      break;
    }
    Result<HttpRequest> parsed = parse_request_head(std::string_view(buffer).substr(0, head_end));
    buffer.erase(0, head_end + 4);
    if (!parsed.ok()) {
      reply_error(socket, 400, parsed.status().message());
      break;
    }
    HttpRequest& request = *parsed;
    Result<size_t> body_length = request_body_length(request);
    if (!body_length.ok()) {
      reply_error(socket, 400, body_length.status().message());
      break;
    }
    if (*body_length > kMaxBodyBytes) {
      reply_error(socket, 413, "request body of " + std::to_string(*body_length) + " bytes is over the limit of " +
                                   std::to_string(kMaxBodyBytes));
      break;
    }
    if (*body_length > 0 && request.header("expect").value_or("") == "100-continue") {
      const std::string_view proceed = "HTTP/1.1 100 Continue\r\n\r\n";
      ::send(socket, proceed.data(), proceed.size(), MSG_NOSIGNAL);
    }
    if (!read_at_least(socket, buffer, *body_length, /*idle=*/false)) break;
    request.body = buffer.substr(0, *body_length);
    buffer.erase(0, *body_length);

    HttpResponder responder(socket, request.keep_alive());
    handler_(request, responder);
    if (!responder.replied()) responder.send(500, "application/json", error_body_(500, "the handler sent no reply"));
    if (!responder.keep_alive()) break;
  }
  connection.done = true;
}

}  // namespace ls::server
