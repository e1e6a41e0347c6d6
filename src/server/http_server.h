// A small HTTP/1.1 server over POSIX sockets: one thread per connection, keep-alive, chunked streaming replies.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "base/status.h"
#include "server/http_message.h"

namespace ls::server {

// The reply side of one exchange, handed to the route handler. Each write says whether the client is still there.
class HttpResponder {
 public:
  HttpResponder(int socket, bool keep_alive) : socket_(socket), keep_alive_(keep_alive) {}

  // A whole response with a Content-Length body.
  bool send(int status, std::string_view content_type, std::string_view body);
  // A chunked response: its head now, then write_chunk() as often as needed, then end_stream().
  bool begin_stream(int status, std::string_view content_type);
  bool write_chunk(std::string_view data);
  bool end_stream();
  // True when the client has closed its side or the socket failed (checked without blocking).
  bool client_gone() const;

  bool replied() const { return replied_; }
  // Whether the connection can carry another request afterwards.
  bool keep_alive() const { return keep_alive_ && !broken_ && !streaming_; }

 private:
  bool write_all(std::string_view bytes);

  int socket_;
  bool keep_alive_;
  bool replied_ = false;
  bool streaming_ = false;  // a chunked body was begun and not ended
  bool broken_ = false;     // a write failed
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;
// The body (JSON) of an error the server itself answers: malformed HTTP, too many connections.
using HttpErrorBody = std::function<std::string(int status, std::string_view message)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (port() says which)
  int max_connections = 256;       // more are answered 503 and closed
  int idle_timeout_ms = 60'000;    // a keep-alive connection with no request for this long is closed
};

class HttpServer {
 public:
  // Binds and listens now, so a taken port is an error before the model loads (IoError naming host and port);
  // connections wait in the backlog until serve().
  static Result<std::unique_ptr<HttpServer>> listen(const HttpServerOptions& options, HttpErrorBody error_body);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Accepts connections and answers each request with `handler` until stop(); then closes every connection and
  // joins its thread.
  void serve(HttpHandler handler);
  // Makes serve() return soon; callable from any thread.
  void stop() { stopping_ = true; }

 private:
  struct Connection {
    int socket = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  HttpServer(const HttpServerOptions& options, int listener, int port, HttpErrorBody error_body);
  void serve_connection(Connection& connection);
  // Reads until `buffer` holds `bytes` bytes; false on close, error, timeout or stop.
  bool read_at_least(int socket, std::string& buffer, size_t bytes, bool idle);
  // Reads until `buffer` holds a blank line; its position, or npos.
  size_t read_head(int socket, std::string& buffer, bool& too_large);
  void reply_error(int socket, int status, std::string_view message);
  void join_finished(bool all);

  HttpServerOptions options_;
  int listener_ = -1;
  int port_ = 0;
  HttpHandler handler_;  // set by serve()
  HttpErrorBody error_body_;
  std::atomic<bool> stopping_{false};
  std::mutex connections_mutex_;
  std::list<Connection> connections_;
};

}  // namespace ls::server
