// Names and printing for Status.
#include "base/status.h"

namespace ls {

std::string_view error_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::Ok: return "Ok";
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::IoError: return "IoError";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::Internal: return "Internal";
    case ErrorCode::Cancelled: return "Cancelled";
    case ErrorCode::UnsupportedArchitecture: return "UnsupportedArchitecture";
    case ErrorCode::BadModelConfig: return "BadModelConfig";
    case ErrorCode::BadSafetensors: return "BadSafetensors";
    case ErrorCode::BadTokenizer: return "BadTokenizer";
    case ErrorCode::UnsupportedChatTemplate: return "UnsupportedChatTemplate";
    case ErrorCode::UnsupportedDraftShape: return "UnsupportedDraftShape";
    case ErrorCode::BadDraftConfig: return "BadDraftConfig";
    case ErrorCode::UnsupportedDraftActivation: return "UnsupportedDraftActivation";
    case ErrorCode::UnsupportedDraftBits: return "UnsupportedDraftBits";
    case ErrorCode::DraftTargetMismatch: return "DraftTargetMismatch";
    case ErrorCode::DrafterNeedsWideVerify: return "DrafterNeedsWideVerify";
    case ErrorCode::DraftNonfinite: return "DraftNonfinite";
    case ErrorCode::DeviceUnavailable: return "DeviceUnavailable";
    case ErrorCode::DeviceError: return "DeviceError";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  std::string out(error_name(code_));
  out += ": ";
  out += message_;
  return out;
}

}  // namespace ls
