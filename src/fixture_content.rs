//! What the bundled fixture offers besides its demo tools: everything the official
//! conformance suite's server scenarios exercise (content tools, tools that ask the
//! client, resources and a resource template, prompts, completion, log levels,
//! resource subscriptions), served the 2025-11-25 way. Both transports of the fixture
//! (HTTP and stdio) answer from here, so they offer the same.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::fixture::{Asker, BoxFuture, Broadcast, Tool};
use tasklift_protocol::jsonrpc::{self, RpcError, INVALID_PARAMS};

/// A 1×1 red PNG.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// The resource whose content changes when `test_update_resource` is called.
pub const WATCHED: &str = "test://watched-resource";

/// MCP log levels, least severe first (RFC 5424).
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn level_rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

/// What one client set up on its connection (a legacy HTTP session, or the stdio
/// peer): its log level and resource subscriptions.
#[derive(Default, Debug)]
pub(crate) struct Peer {
    /// Minimum level of `notifications/message` sent (`logging/setLevel`); all if unset.
    pub level: Option<String>,
    /// URIs subscribed to with `resources/subscribe`.
    pub subscriptions: HashSet<String>,
}

impl Peer {
    /// Whether `msg` may be sent to this client: log messages below its level are not.
    pub fn wants(&self, msg: &Value) -> bool {
        if msg.get("method").and_then(Value::as_str) != Some("notifications/message") {
            return true;
        }
        let (Some(min), Some(level)) = (
            self.level.as_deref().and_then(level_rank),
            msg.pointer("/params/level")
                .and_then(Value::as_str)
                .and_then(level_rank),
        ) else {
            return true;
        };
        level >= min
    }
}

/// How a request the content answers is answered.
pub(crate) enum Answer {
    /// At once.
    Now(Result<Value, RpcError>),
    /// After asking the client (on the request's own stream, the legacy way).
    Asking(Box<dyn FnOnce(Asker) -> BoxFuture<Result<Value, RpcError>> + Send>),
}

/// The content: resources, prompts, completion, and the state behind them.
#[derive(Default, Debug)]
pub struct Content {
    /// How many times the watched resource changed.
    watched_version: AtomicU64,
}

/// The server capabilities of a fixture that offers the content (`initialize`).
pub(crate) fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true},
        "prompts": {},
        "logging": {},
        "completions": {},
    })
}

fn not_found(uri: &str) -> RpcError {
    RpcError::new(INVALID_PARAMS, "Resource not found").with_data(json!({"uri": uri}))
}

fn text_message(text: &str) -> Value {
    json!({"role": "user", "content": {"type": "text", "text": text}})
}

fn str_arg<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn required_str<'a>(v: &'a Value, k: &str, what: &str) -> Result<&'a str, RpcError> {
    str_arg(v, k).ok_or_else(|| {
        RpcError::new(
            INVALID_PARAMS,
            format!("{what}: missing required argument {k}"),
        )
    })
}

/// The `id` in `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    uri.strip_prefix("test://template/")?
        .strip_suffix("/data")
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

impl Content {
    /// `resources/list`.
    fn resources(&self) -> Value {
        json!({"resources": [
            {"uri": "test://static-text", "name": "static-text", "title": "Static text",
             "description": "A text resource that never changes.", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "title": "Static binary",
             "description": "A 1x1 PNG image.", "mimeType": "image/png"},
            {"uri": WATCHED, "name": "watched-resource", "title": "Watched resource",
             "description": "Changes on every test_update_resource call; subscribe to hear of it.",
             "mimeType": "text/plain"},
        ]})
    }

    /// `resources/read`.
    fn read(&self, uri: &str) -> Result<Value, RpcError> {
        let one = |c: Value| Ok(json!({"contents": [c]}));
        match uri {
            "test://static-text" => one(json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."})),
            "test://static-binary" => {
                one(json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}))
            }
            WATCHED => one(json!({"uri": uri, "mimeType": "text/plain",
                "text": format!("Watched resource, version {}", self.watched_version.load(Ordering::Relaxed))})),
            _ => match template_id(uri) {
                Some(id) => {
                    let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    one(
                        json!({"uri": uri, "mimeType": "application/json", "text": text.to_string()}),
                    )
                }
                None => Err(not_found(uri)),
            },
        }
    }

    fn exists(&self, uri: &str) -> bool {
        self.read(uri).is_ok()
    }

    /// `prompts/list`.
    fn prompts(&self) -> Value {
        let arg = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
        json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A prompt without arguments."},
            {"name": "test_prompt_with_arguments", "description": "A prompt with two arguments.",
             "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource.",
             "arguments": [arg("resourceUri", "URI of the resource to embed")]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image."},
            {"name": "test_input_required_result_prompt",
             "description": "Asks the user for context (elicitation) before it is built."},
        ]})
    }

    /// `prompts/get`.
    fn prompt(&self, params: &Value) -> Answer {
        let name = str_arg(params, "name").unwrap_or_default();
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let now =
            |messages: Result<Value, RpcError>| {
                Answer::Now(messages.map(
                    |m| json!({"description": format!("fixture prompt {name}"), "messages": m}),
                ))
            };
        match name {
            "test_simple_prompt" => now(Ok(json!([text_message(
                "This is a simple prompt for testing."
            )]))),
            "test_prompt_with_arguments" => now((|| {
                let a1 = required_str(&args, "arg1", name)?;
                let a2 = required_str(&args, "arg2", name)?;
                Ok(json!([text_message(&format!(
                    "Prompt with arguments: arg1='{a1}', arg2='{a2}'"
                ))]))
            })()),
            "test_prompt_with_embedded_resource" => now((|| {
                let uri = required_str(&args, "resourceUri", name)?;
                Ok(json!([
                    {"role": "user", "content": {"type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."}}},
                    text_message("Please process the embedded resource above."),
                ]))
            })()),
            "test_prompt_with_image" => now(Ok(json!([
                {"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}},
                text_message("Please analyze the image above."),
            ]))),
            "test_input_required_result_prompt" => Answer::Asking(Box::new(|asker: Asker| {
                Box::pin(async move {
                    let a = asker(
                        None,
                        "elicitation/create".into(),
                        elicitation(
                            "What context should the prompt use?",
                            json!({"context": {"type": "string"}}),
                            &["context"],
                        ),
                    )
                    .await?;
                    let context = a
                        .pointer("/content/context")
                        .and_then(Value::as_str)
                        .unwrap_or("none given");
                    Ok(
                        json!({"description": "a prompt built from the user's context",
                        "messages": [text_message(&format!("Answer with this context in mind: {context}"))]}),
                    )
                })
            })),
            _ => now(Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown prompt: {name}"),
            ))),
        }
    }

    /// `completion/complete`.
    fn complete(&self, params: &Value) -> Result<Value, RpcError> {
        let r = params.get("ref").cloned().unwrap_or_default();
        let arg = str_arg(params.get("argument").unwrap_or(&Value::Null), "name").unwrap_or("");
        let value = params
            .pointer("/argument/value")
            .and_then(Value::as_str)
            .unwrap_or("");
        let candidates: &[&str] = match (str_arg(&r, "type"), arg) {
            (Some("ref/prompt"), _) => match str_arg(&r, "name") {
                Some("test_prompt_with_arguments") => match arg {
                    "arg1" => &["paris", "park", "party", "test", "testing"],
                    "arg2" => &["world", "wonder", "test"],
                    _ => &[],
                },
                Some("test_prompt_with_embedded_resource") => {
                    &["test://static-text", "test://static-binary", WATCHED]
                }
                Some(n) if self.prompt_names().contains(&n) => &[],
                other => {
                    return Err(RpcError::new(
                        INVALID_PARAMS,
                        format!("Unknown prompt: {}", other.unwrap_or("")),
                    ))
                }
            },
            (Some("ref/resource"), "id") => &["1", "2", "3", "123"],
            (Some("ref/resource"), _) => &[],
            _ => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    "Unknown completion reference",
                ))
            }
        };
        let values: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| c.starts_with(value))
            .collect();
        Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    fn prompt_names(&self) -> Vec<&'static str> {
        vec![
            "test_simple_prompt",
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image",
            "test_input_required_result_prompt",
        ]
    }

    /// Answer a request for the content, or `None` if it is not one.
    pub(crate) fn answer(&self, method: &str, params: &Value, peer: &mut Peer) -> Option<Answer> {
        let uri = || required_str(params, "uri", method).map(str::to_string);
        let done = |r| Some(Answer::Now(r));
        match method {
            "resources/list" => done(Ok(self.resources())),
            "resources/templates/list" => done(Ok(json!({"resourceTemplates": [
                {"uriTemplate": "test://template/{id}/data", "name": "template-data",
                 "title": "Template data", "description": "JSON data for any id.",
                 "mimeType": "application/json"},
            ]}))),
            "resources/read" => done(uri().and_then(|u| self.read(&u))),
            "resources/subscribe" => done(uri().and_then(|u| {
                if !self.exists(&u) {
                    return Err(not_found(&u));
                }
                peer.subscriptions.insert(u);
                Ok(json!({}))
            })),
            "resources/unsubscribe" => done(uri().map(|u| {
                peer.subscriptions.remove(&u);
                json!({})
            })),
            "prompts/list" => done(Ok(self.prompts())),
            "prompts/get" => Some(self.prompt(params)),
            "completion/complete" => done(self.complete(params)),
            "logging/setLevel" => done(match str_arg(params, "level") {
                Some(l) if level_rank(l).is_some() => {
                    peer.level = Some(l.to_string());
                    Ok(json!({}))
                }
                other => Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("Invalid log level {other:?}; one of {}", LEVELS.join(", ")),
                )),
            }),
            _ => None,
        }
    }

    /// The watched resource changed: a new version, announced to its subscribers.
    fn touch(&self, uri: &str) -> Vec<Broadcast> {
        if uri == WATCHED {
            self.watched_version.fetch_add(1, Ordering::Relaxed);
        }
        vec![Broadcast::Subscribers {
            uri: uri.to_string(),
            message: jsonrpc::notification("notifications/resources/updated", json!({"uri": uri})),
        }]
    }
}

/// `elicitation/create` params for a form of these properties.
fn elicitation(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}})
}

fn sampling(text: &str, max_tokens: u32) -> Value {
    json!({"messages": [text_message(text)], "maxTokens": max_tokens})
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

/// The text of a `sampling/createMessage` answer.
fn sampled(a: &Value) -> &str {
    a.pointer("/content/text")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A minimal WAV file: 8 kHz, mono, 8-bit, a few samples of silence.
fn wav() -> String {
    let samples = [0x80u8; 16];
    let mut b = Vec::with_capacity(44 + samples.len());
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + samples.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    b.extend_from_slice(&1u16.to_le_bytes()); // PCM
    b.extend_from_slice(&1u16.to_le_bytes()); // mono
    b.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    b.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    b.extend_from_slice(&1u16.to_le_bytes()); // block align
    b.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    b.extend_from_slice(&samples);
    B64.encode(b)
}

fn image() -> Value {
    json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})
}

fn sleep_ms(ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(ms))
}

/// The tools the conformance scenarios call, by the names they call them.
pub(crate) fn tools(content: &Arc<Content>) -> Vec<Tool> {
    let c = content.clone();
    vec![
        Tool::new("test_simple_text")
            .description("Returns a simple text.")
            .script(|_| async { Ok(text("This is a simple text response for testing.")) }),
        Tool::new("test_image_content")
            .description("Returns an image (a 1x1 PNG).")
            .script(|_| async { Ok(json!({"content": [image()]})) }),
        Tool::new("test_audio_content")
            .description("Returns a short WAV clip.")
            .script(|_| async {
                Ok(json!({"content": [{"type": "audio", "data": wav(), "mimeType": "audio/wav"}]}))
            }),
        Tool::new("test_embedded_resource")
            .description("Returns an embedded text resource.")
            .script(|_| async {
                Ok(json!({"content": [{"type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain",
                    "text": "This is an embedded resource content."}}]}))
            }),
        Tool::new("test_multiple_content_types")
            .description("Returns text, an image and an embedded resource.")
            .script(|_| async {
                Ok(json!({"content": [
                    {"type": "text", "text": "Multiple content types test:"},
                    image(),
                    {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                        "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}},
                ]}))
            }),
        Tool::new("test_tool_with_logging")
            .description("Logs three messages (info) while it works.")
            .script(|cx| async move {
                cx.log("info", "Tool execution started");
                sleep_ms(50).await;
                cx.log("info", "Tool processing data");
                sleep_ms(50).await;
                cx.log("info", "Tool execution completed");
                Ok(text("Logged three messages."))
            }),
        Tool::new("test_error_handling")
            .description("Always fails with a tool error (isError).")
            .tool_error()
            .reply(|_| "This tool intentionally returns an error for testing".into()),
        Tool::new("test_tool_with_progress")
            .description("Reports progress 0, 50 and 100 of 100.")
            .script(|cx| async move {
                for (i, p) in [0, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        sleep_ms(50).await;
                    }
                    cx.progress(p, 100, &format!("{p}% done"));
                }
                Ok(text("Progress reported."))
            }),
        Tool::new("test_sampling")
            .description("Asks the client's LLM (sampling) to answer `prompt`.")
            .schema(json!({"type": "object", "properties": {"prompt": {"type": "string",
                "description": "The prompt to send to the LLM"}}, "required": ["prompt"]}))
            .script(|cx| async move {
                let prompt = str_arg(&cx.args, "prompt").unwrap_or("Hello").to_string();
                let a = cx.ask("sampling/createMessage", sampling(&prompt, 100)).await?;
                Ok(text(format!("LLM response: {}", sampled(&a))))
            }),
        Tool::new("test_elicitation")
            .description("Asks the user (elicitation) for a username and an email.")
            .schema(json!({"type": "object", "properties": {"message": {"type": "string",
                "description": "The message to show the user"}}, "required": ["message"]}))
            .script(|cx| async move {
                let message = str_arg(&cx.args, "message").unwrap_or("Who are you?").to_string();
                let a = cx
                    .ask(
                        "elicitation/create",
                        elicitation(
                            &message,
                            json!({
                                "username": {"type": "string", "description": "User's response"},
                                "email": {"type": "string", "description": "User's email address"},
                            }),
                            &["username", "email"],
                        ),
                    )
                    .await?;
                Ok(text(format!("User response: action={}, content={}", a["action"], a["content"])))
            }),
        Tool::new("test_elicitation_sep1034_defaults")
            .description("Asks the user (elicitation) with defaults for every primitive type.")
            .script(|cx| async move {
                let a = cx
                    .ask(
                        "elicitation/create",
                        elicitation(
                            "Please review your details.",
                            json!({
                                "name": {"type": "string", "default": "John Doe"},
                                "age": {"type": "integer", "default": 30},
                                "score": {"type": "number", "default": 95.5},
                                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                                "verified": {"type": "boolean", "default": true},
                            }),
                            &[],
                        ),
                    )
                    .await?;
                Ok(text(format!("Elicitation completed: action={}, content={}", a["action"], a["content"])))
            }),
        Tool::new("test_elicitation_sep1330_enums")
            .description("Asks the user (elicitation) with every kind of enum field.")
            .script(|cx| async move {
                let choices = |titles: [&str; 3]| -> Value {
                    titles.iter().enumerate()
                        .map(|(i, t)| json!({"const": format!("value{}", i + 1), "title": t}))
                        .collect()
                };
                let a = cx
                    .ask(
                        "elicitation/create",
                        elicitation(
                            "Pick some options.",
                            json!({
                                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                                "titledSingle": {"type": "string",
                                    "oneOf": choices(["First Option", "Second Option", "Third Option"])},
                                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                                "untitledMulti": {"type": "array",
                                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                                "titledMulti": {"type": "array",
                                    "items": {"anyOf": choices(["First Choice", "Second Choice", "Third Choice"])}},
                            }),
                            &[],
                        ),
                    )
                    .await?;
                Ok(text(format!("Elicitation completed: action={}, content={}", a["action"], a["content"])))
            }),
        Tool::new("json_schema_2020_12_tool")
            .description("Tool with JSON Schema 2020-12 features")
            .schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"},
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false,
            }))
            .script(|cx| async move { Ok(text(format!("contact saved: {}", cx.args))) }),
        Tool::new("test_reconnection")
            .description("Closes its response stream mid-call and answers after the client resumes it (SSE polling).")
            .script(|cx| async move {
                sleep_ms(100).await;
                let closed = cx.close_stream();
                sleep_ms(500).await;
                Ok(text(if closed {
                    "Answered after the stream was closed and resumed."
                } else {
                    "Answered (this transport has no stream to close)."
                }))
            }),
        Tool::new("test_custom_header")
            .description("Echoes `region`, which 2026-07-28 clients also send as the Mcp-Param-Region header.")
            .schema(json!({"type": "object", "properties": {"region": {"type": "string",
                "description": "A region name", "x-mcp-header": "Region"}}, "required": ["region"]}))
            .script(|cx| async move {
                Ok(text(format!("region: {}", str_arg(&cx.args, "region").unwrap_or(""))))
            }),
        Tool::new("test_update_resource")
            .description("Changes a resource (default the watched one) and notifies its subscribers.")
            .schema(json!({"type": "object", "properties": {"uri": {"type": "string", "default": WATCHED}}}))
            .broadcast(move |a| c.touch(str_arg(a, "uri").unwrap_or(WATCHED)))
            .script(|cx| async move {
                Ok(text(format!("updated {}", str_arg(&cx.args, "uri").unwrap_or(WATCHED))))
            }),
        // Tools that ask the client the legacy way (requests on the call's stream);
        // the 2026-07-28 input-required-result scenarios reach them through a bridge
        // that turns those requests into InputRequiredResult rounds.
        Tool::new("test_input_required_result_elicitation")
            .description("Asks the user's name (elicitation), then greets them.")
            .script(|cx| async move {
                // The request is named: through tasklift its inputRequests key is "user_name".
                let a = cx
                    .ask_named(
                        "user_name",
                        "elicitation/create",
                        elicitation("What is your name?", json!({"name": {"type": "string"}}), &["name"]),
                    )
                    .await?;
                Ok(text(format!("Hello, {}!", a.pointer("/content/name").and_then(Value::as_str).unwrap_or("stranger"))))
            }),
        Tool::new("test_input_required_result_sampling")
            .description("Asks the client's LLM (sampling) for the capital of France.")
            .script(|cx| async move {
                let a = cx
                    .ask("sampling/createMessage", sampling("What is the capital of France?", 100))
                    .await?;
                Ok(text(format!("The LLM said: {}", sampled(&a))))
            }),
        Tool::new("test_input_required_result_list_roots")
            .description("Asks the client for its roots (roots/list) and lists them.")
            .script(|cx| async move {
                let a = cx.ask("roots/list", json!({})).await?;
                let roots: Vec<&str> = a["roots"]
                    .as_array()
                    .map(|r| r.iter().filter_map(|r| r["uri"].as_str()).collect())
                    .unwrap_or_default();
                Ok(text(format!("Client roots: {}", roots.join(", "))))
            }),
        confirming(
            "test_input_required_result_request_state",
            "Asks for a confirmation (elicitation); answers state-ok once given.",
            "state-ok: ",
        ),
        confirming(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation (elicitation), then answers.",
            "",
        ),
        Tool::new("test_input_required_result_multiple_inputs")
            .description("Asks three things at once: a name (elicitation), a greeting (sampling) and the roots.")
            .script(|cx| async move {
                let answers = cx
                    .ask_all(vec![
                        ("elicitation/create", elicitation("What is your name?", json!({"name": {"type": "string"}}), &["name"])),
                        ("sampling/createMessage", sampling("Generate a greeting", 50)),
                        ("roots/list", json!({})),
                    ])
                    .await;
                let [name, greeting, roots] = <[_; 3]>::try_from(answers).expect("three asked");
                let (name, greeting, roots) = (name?, greeting?, roots?);
                Ok(text(format!(
                    "{} {} ({} roots)",
                    sampled(&greeting),
                    name.pointer("/content/name").and_then(Value::as_str).unwrap_or("stranger"),
                    roots["roots"].as_array().map_or(0, Vec::len)
                )))
            }),
        Tool::new("test_input_required_result_multi_round")
            .description("Asks a name, then (once answered) a favourite colour, then answers.")
            .script(|cx| async move {
                let a = cx
                    .ask(
                        "elicitation/create",
                        elicitation("Step 1: What is your name?", json!({"name": {"type": "string"}}), &["name"]),
                    )
                    .await?;
                let b = cx
                    .ask(
                        "elicitation/create",
                        elicitation("Step 2: What is your favorite color?", json!({"color": {"type": "string"}}), &["color"]),
                    )
                    .await?;
                Ok(text(format!(
                    "{} likes {}",
                    a.pointer("/content/name").and_then(Value::as_str).unwrap_or("someone"),
                    b.pointer("/content/color").and_then(Value::as_str).unwrap_or("no colour")
                )))
            }),
        Tool::new("test_input_required_result_capabilities")
            .description("Asks an LLM (sampling) and the user (elicitation) at once; makes do with whatever the client can answer.")
            .script(|cx| async move {
                let answers = cx
                    .ask_all(vec![
                        ("sampling/createMessage", sampling("Suggest a project name", 20)),
                        ("elicitation/create", elicitation("Name your project", json!({"name": {"type": "string"}}), &["name"])),
                    ])
                    .await;
                let said: Vec<String> = answers
                    .iter()
                    .map(|a| match a {
                        Ok(v) => v.to_string(),
                        Err(e) => format!("not asked ({})", e.message),
                    })
                    .collect();
                Ok(text(format!("sampling: {}; elicitation: {}", said[0], said[1])))
            }),
    ]
}

/// A tool that asks for a confirmation (elicitation) and answers `{prefix}confirmed=…`.
fn confirming(name: &str, description: &str, prefix: &'static str) -> Tool {
    Tool::new(name)
        .description(description)
        .script(move |cx| async move {
            let a = cx
                .ask(
                    "elicitation/create",
                    elicitation(
                        "Please confirm",
                        json!({"ok": {"type": "boolean"}}),
                        &["ok"],
                    ),
                )
                .await?;
            Ok(text(format!(
                "{prefix}confirmed={}",
                a.pointer("/content/ok").unwrap_or(&Value::Null)
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_filter_messages() {
        let mut p = Peer::default();
        let msg = |l: &str| {
            jsonrpc::notification("notifications/message", json!({"level": l, "data": "x"}))
        };
        assert!(p.wants(&msg("debug")), "no level set: everything");
        p.level = Some("warning".into());
        assert!(!p.wants(&msg("info")));
        assert!(p.wants(&msg("error")));
        assert!(p.wants(&jsonrpc::notification("notifications/progress", json!({}))));
    }

    #[test]
    fn resources_templates_and_not_found() {
        let c = Content::default();
        let r = c.read("test://template/123/data").unwrap();
        assert!(r["contents"][0]["text"].as_str().unwrap().contains("123"));
        let e = c.read("test://nope").unwrap_err();
        assert_eq!(
            (e.code, e.data),
            (INVALID_PARAMS, Some(json!({"uri": "test://nope"})))
        );
        assert!(template_id("test://template//data").is_none());
    }

    #[test]
    fn completion_filters_by_prefix() {
        let c = Content::default();
        let r = c
            .complete(
                &json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
                "argument": {"name": "arg1", "value": "par"}}),
            )
            .unwrap();
        assert_eq!(r["completion"]["values"], json!(["paris", "park", "party"]));
        assert!(c
            .complete(&json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a", "value": ""}}))
            .is_err());
    }

    #[test]
    fn subscriptions_and_levels_are_per_peer() {
        let c = Content::default();
        let mut p = Peer::default();
        let ok = |a: Option<Answer>| match a {
            Some(Answer::Now(r)) => r,
            _ => panic!("answered at once"),
        };
        assert!(ok(c.answer("resources/subscribe", &json!({"uri": WATCHED}), &mut p)).is_ok());
        assert!(p.subscriptions.contains(WATCHED));
        assert!(ok(c.answer(
            "resources/subscribe",
            &json!({"uri": "test://nope"}),
            &mut p
        ))
        .is_err());
        assert!(ok(c.answer("logging/setLevel", &json!({"level": "loud"}), &mut p)).is_err());
        assert!(ok(c.answer("logging/setLevel", &json!({"level": "error"}), &mut p)).is_ok());
        assert_eq!(p.level.as_deref(), Some("error"));
        assert!(c.answer("tools/list", &json!({}), &mut p).is_none());
    }
}
