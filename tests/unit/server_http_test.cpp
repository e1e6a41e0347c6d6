// HTTP framing and the reply bodies: request heads parsed or refused by name, chunked and SSE frames byte for byte.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/api_response.h"
#include "server/http_message.h"

namespace ls::server {
namespace {

TEST(HttpMessage, ARequestHeadGivesMethodPathVersionAndLowerCasedHeaders) {
  Result<HttpRequest> request = parse_request_head(
      "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Type:  application/json \r\n"
      "Content-Length: 12");
  ASSERT_TRUE(request.ok()) << request.status().to_string();
  EXPECT_EQ(request->method, "POST");
  EXPECT_EQ(request->path, "/v1/chat/completions");
  EXPECT_EQ(request->header("content-type"), "application/json");
  EXPECT_TRUE(request->keep_alive());
  EXPECT_EQ(*request_body_length(*request), 12u);
}

TEST(HttpMessage, KeepAliveFollowsTheVersionAndTheConnectionHeader) {
  EXPECT_FALSE(parse_request_head("GET / HTTP/1.1\r\nConnection: Close")->keep_alive());
  EXPECT_FALSE(parse_request_head("GET / HTTP/1.0")->keep_alive());
  EXPECT_TRUE(parse_request_head("GET / HTTP/1.0\r\nConnection: keep-alive")->keep_alive());
}

TEST(HttpMessage, MalformedHeadsAreRefusedByName) {
  for (const char* head : {"GET", "GET /", "GET / HTTP/2.0", "GET x HTTP/1.1", "G(T / HTTP/1.1",
                           "GET / HTTP/1.1\r\nno colon here", "GET / HTTP/1.1\r\n: empty name",
                           "GET / HTTP/1.1\r\nbad name: x"}) {
    Result<HttpRequest> request = parse_request_head(head);
    ASSERT_FALSE(request.ok()) << head;
    EXPECT_EQ(request.status().code(), ErrorCode::InvalidArgument) << head;
  }
}

TEST(HttpMessage, BodyLengthsAreParsedAndChunkedRequestBodiesRefused) {
  EXPECT_EQ(*request_body_length(*parse_request_head("GET / HTTP/1.1")), 0u);
  EXPECT_FALSE(request_body_length(*parse_request_head("POST / HTTP/1.1\r\nContent-Length: 12a")).ok());
  EXPECT_FALSE(request_body_length(*parse_request_head("POST / HTTP/1.1\r\nContent-Length: -1")).ok());
  EXPECT_GT(*request_body_length(*parse_request_head("POST / HTTP/1.1\r\nContent-Length: 999999999999")),
            kMaxBodyBytes);  // the server answers it with a 413
  EXPECT_FALSE(request_body_length(*parse_request_head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked")).ok());
}

TEST(HttpMessage, ResponseHeadsAndChunkFramesAreByteExact) {
  EXPECT_EQ(response_head(200, "application/json", 2, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(response_head(200, "text/event-stream", -1, false),
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(chunk_frame("hello world, 26 bytes long"), "1a\r\nhello world, 26 bytes long\r\n");
  EXPECT_EQ(chunk_frame(""), "");  // an empty chunk would end the body
  EXPECT_EQ(kLastChunk, "0\r\n\r\n");
}

TEST(Sse, EventsAreDataLinesEndedByABlankLine) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ApiResponse, ChatChunksCarryTheRoleFirstThenContentThenTheFinishReason) {
  const ReplyHeader header{"chatcmpl-1", 100, "nano", Endpoint::ChatCompletions};
  const auto first = nlohmann::json::parse(chunk_body(header, true, "", FinishReason::None, false));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const auto piece = nlohmann::json::parse(chunk_body(header, false, "h\xc3\xa9", FinishReason::None, true));
  EXPECT_EQ(piece["choices"][0]["delta"]["content"], "h\xc3\xa9");
  EXPECT_FALSE(piece["choices"][0]["delta"].contains("role"));
  EXPECT_TRUE(piece["usage"].is_null());
  const auto last = nlohmann::json::parse(chunk_body(header, false, "", FinishReason::Length, false));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  const auto usage = nlohmann::json::parse(usage_chunk_body(header, Usage{3, 4}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(ApiResponse, WholeCompletionsCarryTextFinishReasonAndUsage) {
  const ReplyHeader chat{"chatcmpl-2", 100, "nano", Endpoint::ChatCompletions};
  const auto body = nlohmann::json::parse(completion_body(chat, "hi", FinishReason::Stop, Usage{5, 2}));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  const ReplyHeader text{"cmpl-3", 100, "nano", Endpoint::Completions};
  // Invalid UTF-8 never throws: it comes out as U+FFFD.
  const auto completion = nlohmann::json::parse(completion_body(text, "a\xff", FinishReason::Length, Usage{1, 1}));
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["text"], "a\xef\xbf\xbd");
}

}  // namespace
}  // namespace ls::server
