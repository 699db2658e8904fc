#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "text/jinja_eval.h"
#include "text/jinja_parse.h"
#include "text/jinja_value.h"

namespace ferry::text {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  try {
    return ChatTemplate(jinja::ParseTemplate(source));
  } catch (const jinja::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", e.message));
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables,
                                                 const ChatTemplateLimits& limits) const {
  if (!variables.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: the variables must be a JSON object, not ",
                                                   variables.type_name()));
  }
  try {
    jinja::Renderer renderer(*program_, jinja::FromJson(variables), limits);
    return renderer.Run();
  } catch (const jinja::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", e.line, ": ", e.message));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while rendering");
  }
}

absl::StatusOr<std::string> ReadChatTemplate(const std::string& model_dir) {
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  if (std::ifstream in(jinja_path, std::ios::binary); in) {
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  const std::string config_path = model_dir + "/tokenizer_config.json";
  std::ifstream in(config_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": no chat template (neither chat_template.jinja nor ",
                                            "tokenizer_config.json is there)"));
  }
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": not JSON: ", e.what()));
  }
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": no chat template (no chat_template.jinja, and ",
                                            config_path, " has no \"chat_template\")"));
  }
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return absl::NotFoundError(absl::StrCat(config_path, ": \"chat_template\" lists no template named \"default\""));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_path, ": \"chat_template\" is ", t.type_name(), ", expected a string or a list"));
}

}  // namespace ferry::text
