// lanespark serve: the OpenAI-compatible HTTP server (chat and text completions, streaming or not) over the lanes.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "base/clock.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "cli/options.h"
#include "io/model_config.h"
#include "lanes/lanes.h"
#include "server/api_request.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/served_model.h"

namespace ls::cli {
namespace {

int fail(const Status& status) {
  std::fprintf(stderr, "lanespark serve: %s\n", status.to_string().c_str());
  return 1;
}

// The default model id: the model directory's name ("target" for models/nano/target).
std::string default_model_name(const std::string& model_dir) {
  std::filesystem::path path(model_dir);
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

}  // namespace

int run_serve(int argc, char** argv) {
  Options opts(argc, argv);
  ModelSetup setup;
  setup.model_dir = opts.require_string("--model", "model directory (config.json, safetensors, tokenizer.json)");
  setup.drafter_dir = opts.get_string("--drafter", "", "DSpark drafter directory (speculative decoding)");
  const std::string device_name = opts.get_string("--device", "cpu", "cpu (default) or cuda");
  const std::string host = opts.get_string("--host", "127.0.0.1", "address to listen on");
  const int64_t port = opts.get_int("--port", 8080, "port to listen on (0: any free port, printed at start)");
  const int64_t threads = opts.get_int("--threads", 1, "CPU threads");
  const int64_t max_streams =
      opts.get_int("--max-streams", 64, "requests decoded together (live in the lanes); more wait in the queue");
  const std::string served_name =
      opts.get_string("--served-model-name", "", "the model id clients send (default: the model directory's name)");
  const int64_t drafter_bits =
      opts.get_int("--drafter-bits", -1,
                   "drafter weights: 0 = bf16 as stored, 8 = int8 per row (proposals only), -1 = auto (int8 on a "
                   "CPU drafter with AVX-512 VNNI, else bf16)");
  const int64_t max_draft = opts.get_int("--max-draft", 16, "engine-wide cap on drafts per stream per round");
  const int64_t context = opts.get_int("--context", 0, "most prompt + reply tokens (0: the model's max positions)");
  const int64_t kv_pages = opts.get_int("--kv-pages", 0, "CUDA: the KV pool in pages of 32 positions (0: room for "
                                                        "256 streams of 4096, at most a quarter of free memory)");
  const int64_t max_connections = opts.get_int("--max-connections", 256, "open HTTP connections at most");
  const std::string api_key =
      opts.get_string("--api-key", "", "when set, /v1/* requests need 'Authorization: Bearer KEY' (else 401)");
  const bool draft_always = opts.flag("--draft-always",
                                      "testing: draft the full depth every round whatever pricing says (same tokens)");
  if (std::optional<int> code = opts.conclude("lanespark serve", "lanespark serve: an OpenAI-compatible server"))
    return *code;
  // SIGINT / SIGTERM go to one watcher thread: blocked here, before any thread starts (the target's CPU pool too),
  // so every thread inherits the mask and none is killed by them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Result<Device> device = parse_device(device_name);
  if (!device.ok()) return fail(device.status());
  if (threads < 1 || max_streams < 1 || max_draft < 0 || context < 0 || port < 0 || port > 65535 ||
      max_connections < 1 || kv_pages < 0 || kv_pages > (int64_t{1} << 30))
    return fail(Status(ErrorCode::InvalidArgument, "--threads, --max-streams and --max-connections must be >= 1, "
                                                   "--max-draft, --context and --kv-pages >= 0, --port in [0, 65535]"));
  if (kv_pages > 0 && *device != Device::Cuda)
    return fail(Status(ErrorCode::InvalidArgument, "--kv-pages sizes the CUDA target's KV pool; the CPU cache grows "
                                                   "as needed (drop it or add --device cuda)"));
  setup.device = *device;
  setup.threads = static_cast<int>(threads);
  setup.drafter_bits = static_cast<int>(drafter_bits);
  setup.max_streams = static_cast<int>(max_streams);
  setup.kv_pages = static_cast<int>(kv_pages);

  // Refusals before any weight: config, tokenizer, chat template, the port.
  Result<io::ModelConfig> config = io::read_model_config(setup.model_dir);
  if (!config.ok()) return fail(config.status());
  Result<std::optional<text::Tokenizer>> tokenizer = load_tokenizer_if_present(setup.model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  if (!tokenizer->has_value())
    return fail(Status(ErrorCode::NotFound, "the server needs " + setup.model_dir + "/tokenizer.json"));
  server::ServedModel model;
  model.name = served_name.empty() ? default_model_name(setup.model_dir) : served_name;
  model.api_key = api_key;
  model.tokenizer = &**tokenizer;
  Result<text::ChatTemplate> chat_template = text::ChatTemplate::from_tokenizer(**tokenizer);
  if (chat_template.ok()) model.chat_template = std::move(chat_template).value();
  else model.chat_template_error = chat_template.status().to_string();
  model.context_length = context > 0 ? std::min<int64_t>(context, config->max_position) : config->max_position;
  setup.max_rows = static_cast<int>(std::min<int64_t>(model.context_length, 8192));

  server::HttpServerOptions http_options;
  http_options.host = host;
  http_options.port = static_cast<int>(port);
  http_options.max_connections = static_cast<int>(max_connections);
  Result<std::unique_ptr<server::HttpServer>> http =
      server::HttpServer::listen(http_options, [](int status, std::string_view message) {
        return server::error_body(server::ApiError{status, std::string(message),
                                                   status >= 500 ? "server_error" : "invalid_request_error", "", ""});
      });
  if (!http.ok()) return fail(http.status());
  server::HttpServer& server = **http;

  Result<LoadedModels> models = load_models(setup);
  if (!models.ok()) return fail(models.status());
  model.eos_ids = reply_eos_ids(*models->target, model.tokenizer);
  model.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();

  WallClock clock;
  LanesOptions lanes_options;
  lanes_options.max_streams = static_cast<int>(max_streams);
  lanes_options.max_live_streams = static_cast<int>(max_streams);
  lanes_options.max_draft = static_cast<int>(max_draft);
  lanes_options.pricing.always_draft = draft_always;
  Result<std::unique_ptr<Lanes>> lanes = Lanes::create(*models->target, models->drafter.get(), lanes_options, clock);
  if (!lanes.ok()) return fail(lanes.status());
  // A fixed KV pool (CUDA) bounds one request's prompt + reply; the lanes admit requests as their pages free up.
  const KvBudget kv = (*lanes)->kv_budget();
  if (kv.pages > 0 && model.context_length > kv.most_positions()) {
    if (context > 0)
      return fail(Status(ErrorCode::OutOfMemory, "--context " + std::to_string(context) + " does not fit the KV pool (" +
                                                     std::to_string(kv.pages) + " pages of " +
                                                     std::to_string(kv.page_size) + " positions holds one request of " +
                                                     std::to_string(kv.most_positions()) + " at most)"));
    std::fprintf(stderr, "lanespark serve: context limited to %lld tokens by the KV pool (%lld pages of %d)\n",
                 static_cast<long long>(kv.most_positions()), static_cast<long long>(kv.pages), kv.page_size);
    model.context_length = kv.most_positions();
  }

  server::Engine engine(**lanes);
  server::OpenAiRoutes routes(model, engine);

  std::thread watcher([&server, signals] {
    int received = 0;
    sigwait(&signals, &received);
    std::fprintf(stderr, "lanespark serve: %s, stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  const std::string drafter_note = models->drafter ? ", drafter " + setup.drafter_dir : "";
  std::fprintf(stderr, "lanespark serve: model '%s' (%s%s), listening on http://%s:%d\n", model.name.c_str(),
               setup.model_dir.c_str(), drafter_note.c_str(), host.c_str(), server.port());
  std::fflush(stderr);
  server.serve([&routes](const server::HttpRequest& request, server::HttpResponder& responder) {
    routes.handle(request, responder);
  });
  watcher.join();
  std::fprintf(stderr, "lanespark serve: stopped\n");
  return 0;
}

}  // namespace ls::cli
