//! Answering a server's input requests at the terminal: an `elicitation/create` form
//! becomes one prompt per field of its `requestedSchema` (string, number, integer,
//! boolean, single and multi-select enums, with defaults), then a review step
//! (send, edit, decline, cancel). `roots/list` is answered with no roots; anything
//! else (sampling) cannot be answered here.

use std::future::Future;

use serde_json::{json, Map, Value};

/// Where prompts go and answers come from.
pub(crate) trait Terminal {
    /// Show a line.
    fn say(&mut self, text: &str);
    /// Show `prompt` and read a line (without its newline); `None` at end of input.
    fn ask(&mut self, prompt: &str) -> impl Future<Output = Option<String>>;
}

/// Answers for every request, keyed as they were, or why some request cannot be
/// answered (then nothing is asked).
pub(crate) async fn answer_all(
    requests: &Map<String, Value>,
    server: &str,
    term: &mut impl Terminal,
) -> Result<Map<String, Value>, String> {
    for request in requests.values() {
        let method = request["method"].as_str().unwrap_or("(no method)");
        match method {
            "elicitation/create" | "roots/list" => {}
            "sampling/createMessage" => {
                return Err("the server asks for an LLM completion (sampling/createMessage), which tasklift call cannot provide".into())
            }
            other => {
                return Err(format!(
                    "the server asks for {other}, which tasklift call cannot answer"
                ))
            }
        }
    }
    let mut answers = Map::new();
    for (key, request) in requests {
        let answer = match request["method"].as_str() {
            Some("roots/list") => {
                term.say(&format!(
                    "The server at {server} asks for the client's roots (roots/list): tasklift call shares none, answering with an empty list."
                ));
                json!({"roots": []})
            }
            _ => elicit(&request["params"], server, term).await,
        };
        answers.insert(key.clone(), answer);
    }
    Ok(answers)
}

/// Ask the user for an `elicitation/create`; the `ElicitResult`.
pub(crate) async fn elicit(params: &Value, server: &str, term: &mut impl Terminal) -> Value {
    let message = params["message"].as_str().unwrap_or("(no message)");
    match params["mode"].as_str().unwrap_or("form") {
        "form" => form(params, message, server, term).await,
        "url" => {
            let url = params["url"].as_str().unwrap_or("(no URL)");
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_string))
                .unwrap_or_else(|| "unknown host".into());
            term.say("");
            term.say(&format!("The server at {server} asks you to open a URL:"));
            term.say(&format!("  {message}"));
            term.say(&format!("  {url}   (host: {host})"));
            loop {
                let Some(line) = term
                    .ask("Open it yourself, then: [a]ccept, [d]ecline, [c]ancel: ")
                    .await
                else {
                    return json!({"action": "cancel"});
                };
                match line.trim().to_ascii_lowercase().as_str() {
                    "a" | "accept" | "y" | "yes" => return json!({"action": "accept"}),
                    "d" | "decline" | "n" | "no" => return json!({"action": "decline"}),
                    "c" | "cancel" => return json!({"action": "cancel"}),
                    _ => term.say("  type a, d or c"),
                }
            }
        }
        other => {
            term.say(&format!(
                "The server at {server} asks for input in mode {other:?}, which tasklift call does not know: declining."
            ));
            json!({"action": "decline"})
        }
    }
}

/// What one field's prompt gave.
enum Field {
    Value(Value),
    Omit,
    /// `:decline` or `:cancel` (or end of input).
    Action(&'static str),
}

async fn form(params: &Value, message: &str, server: &str, term: &mut impl Terminal) -> Value {
    let schema = &params["requestedSchema"];
    let empty = Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Required fields first, each group in the schema's order.
    let mut fields: Vec<(&String, &Value)> = props.iter().collect();
    fields.sort_by_key(|(k, _)| !required.contains(&k.as_str()));
    term.say("");
    term.say(&format!("The server at {server} asks:"));
    term.say(&format!("  {message}"));
    if !fields.is_empty() {
        term.say("  (Enter keeps the [value] shown; type :decline or :cancel at any prompt)");
    }
    let mut content = Map::new();
    loop {
        let previous = std::mem::take(&mut content);
        for (name, field) in &fields {
            let req = required.contains(&name.as_str());
            match ask_field(name, field, req, previous.get(*name), term).await {
                Field::Value(v) => {
                    content.insert((*name).clone(), v);
                }
                Field::Omit => {}
                Field::Action(a) => return json!({"action": a}),
            }
        }
        let question = if fields.is_empty() {
            "Accept? [Y]es, [d]ecline, [c]ancel: ".to_string()
        } else {
            format!(
                "Send {}? [Y]es, [e]dit, [d]ecline, [c]ancel: ",
                Value::Object(content.clone())
            )
        };
        loop {
            let Some(line) = term.ask(&question).await else {
                return json!({"action": "cancel"});
            };
            match line.trim().to_ascii_lowercase().as_str() {
                "" | "y" | "yes" | "s" | "send" | "a" | "accept" => {
                    return json!({"action": "accept", "content": content})
                }
                "e" | "edit" if !fields.is_empty() => break,
                "d" | "decline" | "n" | "no" => return json!({"action": "decline"}),
                "c" | "cancel" => return json!({"action": "cancel"}),
                _ => term.say("  type y, e, d or c"),
            }
        }
    }
}

async fn ask_field(
    name: &str,
    schema: &Value,
    required: bool,
    previous: Option<&Value>,
    term: &mut impl Terminal,
) -> Field {
    let title = schema["title"].as_str().unwrap_or(name);
    if let Some(d) = schema["description"].as_str() {
        term.say(&format!("  {title}: {d}"));
    }
    let options = choices(schema).or_else(|| {
        (schema["type"] == "array")
            .then(|| choices(&schema["items"]))
            .flatten()
    });
    if let Some(options) = &options {
        let list: Vec<String> = options
            .iter()
            .enumerate()
            .map(|(i, (_, t))| format!("{}) {t}", i + 1))
            .collect();
        term.say(&format!("    {}", list.join("  ")));
    }
    let shown = previous.or(schema.get("default"));
    let mut prompt = format!("  {title} ({}", hint(schema));
    if required {
        prompt.push_str(", required");
    }
    prompt.push(')');
    if let Some(v) = shown {
        prompt.push_str(&format!(" [{}]", display(v)));
    }
    prompt.push_str(": ");
    loop {
        let Some(line) = term.ask(&prompt).await else {
            return Field::Action("cancel");
        };
        let text = line.trim();
        match text {
            ":decline" => return Field::Action("decline"),
            ":cancel" => return Field::Action("cancel"),
            "" => match shown {
                Some(v) => return Field::Value(v.clone()),
                None if required => term.say("    a value is required"),
                None => return Field::Omit,
            },
            _ => match parse_value(text, schema) {
                Ok(v) => return Field::Value(v),
                Err(e) => term.say(&format!("    {e}")),
            },
        }
    }
}

/// What to type, in a few words.
fn hint(schema: &Value) -> String {
    let ty = schema["type"].as_str().unwrap_or("text");
    match ty {
        "boolean" => "y/n".into(),
        "array" => "comma-separated choices".into(),
        _ if choices(schema).is_some() => "a number or a value".into(),
        "string" => match schema["format"].as_str() {
            Some(f) => format!("text, {f}"),
            None => "text".into(),
        },
        other => other.into(),
    }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "y".into(),
        Value::Bool(false) => "n".into(),
        Value::Array(a) => a.iter().map(display).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The values a field can take and their titles: `enum` (with the legacy
/// `enumNames`), or `oneOf`/`anyOf` of `{const, title}`.
fn choices(schema: &Value) -> Option<Vec<(Value, String)>> {
    if let Some(values) = schema["enum"].as_array() {
        let names = schema["enumNames"].as_array();
        return Some(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let title = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| display(v));
                    (v.clone(), title)
                })
                .collect(),
        );
    }
    let list = schema["oneOf"]
        .as_array()
        .or_else(|| schema["anyOf"].as_array())?;
    let out: Vec<(Value, String)> = list
        .iter()
        .filter_map(|o| {
            let c = o.get("const")?;
            let title = o["title"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| display(c));
            Some((c.clone(), title))
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// One choice: its number, its value or its title.
fn pick(text: &str, options: &[(Value, String)]) -> Result<Value, String> {
    if let Ok(n) = text.parse::<usize>() {
        if (1..=options.len()).contains(&n) {
            return Ok(options[n - 1].0.clone());
        }
    }
    options
        .iter()
        .find(|(v, t)| display(v) == text || t.eq_ignore_ascii_case(text))
        .or_else(|| {
            options
                .iter()
                .find(|(v, _)| display(v).eq_ignore_ascii_case(text))
        })
        .map(|(v, _)| v.clone())
        .ok_or_else(|| format!("{text:?} is not one of the choices (1-{})", options.len()))
}

/// The typed `text` as the field's value, checked against its schema.
pub(crate) fn parse_value(text: &str, schema: &Value) -> Result<Value, String> {
    if let Some(options) = choices(schema) {
        return pick(text, &options);
    }
    let num = |k: &str| schema[k].as_f64();
    let within = |x: f64| -> Result<(), String> {
        if let Some(min) = num("minimum").filter(|&m| x < m) {
            return Err(format!("at least {min}"));
        }
        if let Some(max) = num("maximum").filter(|&m| x > m) {
            return Err(format!("at most {max}"));
        }
        Ok(())
    };
    match schema["type"].as_str() {
        Some("boolean") => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" | "1" | "on" => Ok(json!(true)),
            "n" | "no" | "false" | "0" | "off" => Ok(json!(false)),
            _ => Err("type y or n".into()),
        },
        Some("integer") => {
            let n: i64 = text
                .parse()
                .map_err(|_| format!("{text:?} is not an integer"))?;
            within(n as f64)?;
            Ok(json!(n))
        }
        Some("number") => {
            if let Ok(n) = text.parse::<i64>() {
                within(n as f64)?;
                return Ok(json!(n));
            }
            let x: f64 = text
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or_else(|| format!("{text:?} is not a number"))?;
            within(x)?;
            Ok(json!(x))
        }
        Some("array") => {
            let options = choices(&schema["items"]);
            let mut out = Vec::new();
            for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let v = match &options {
                    Some(o) => pick(part, o)?,
                    None => Value::String(part.into()),
                };
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            let n = out.len() as u64;
            if let Some(min) = schema["minItems"].as_u64().filter(|&m| n < m) {
                return Err(format!("choose at least {min}"));
            }
            if let Some(max) = schema["maxItems"].as_u64().filter(|&m| n > m) {
                return Err(format!("choose at most {max}"));
            }
            Ok(Value::Array(out))
        }
        Some("string") => {
            let n = text.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64().filter(|&m| n < m) {
                return Err(format!("at least {min} characters"));
            }
            if let Some(max) = schema["maxLength"].as_u64().filter(|&m| n > m) {
                return Err(format!("at most {max} characters"));
            }
            Ok(Value::String(text.into()))
        }
        // Not a type forms use: JSON when it parses, else the text.
        _ => Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A terminal with typed lines ready.
    struct Scripted {
        lines: VecDeque<&'static str>,
        shown: Vec<String>,
    }

    impl Scripted {
        fn new(lines: &[&'static str]) -> Self {
            Self {
                lines: lines.iter().copied().collect(),
                shown: Vec::new(),
            }
        }
    }

    impl Terminal for Scripted {
        fn say(&mut self, text: &str) {
            self.shown.push(text.into());
        }
        async fn ask(&mut self, prompt: &str) -> Option<String> {
            self.shown.push(prompt.into());
            self.lines.pop_front().map(str::to_string)
        }
    }

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn values_are_parsed_by_type() {
        let b = json!({"type": "boolean"});
        assert_eq!(parse_value("Yes", &b).unwrap(), json!(true));
        assert_eq!(parse_value("n", &b).unwrap(), json!(false));
        assert!(parse_value("maybe", &b).is_err());
        let i = json!({"type": "integer", "minimum": 1, "maximum": 5});
        assert_eq!(parse_value("3", &i).unwrap(), json!(3));
        assert!(parse_value("9", &i).is_err());
        assert!(parse_value("2.5", &i).is_err());
        let n = json!({"type": "number"});
        assert_eq!(parse_value("30", &n).unwrap(), json!(30));
        assert_eq!(parse_value("2.5", &n).unwrap(), json!(2.5));
        assert!(parse_value("NaN", &n).is_err());
        let s = json!({"type": "string", "minLength": 2});
        assert!(parse_value("a", &s).is_err());
        assert_eq!(parse_value("ab", &s).unwrap(), json!("ab"));
        let e = json!({"type": "string", "enum": ["Red", "Green", "Blue"]});
        assert_eq!(parse_value("2", &e).unwrap(), json!("Green"));
        assert_eq!(parse_value("blue", &e).unwrap(), json!("Blue"));
        assert!(parse_value("4", &e).is_err());
        let titled = json!({"type": "string", "oneOf": [
            {"const": "#f00", "title": "Red"}, {"const": "#0f0", "title": "Green"}]});
        assert_eq!(parse_value("green", &titled).unwrap(), json!("#0f0"));
        let multi = json!({"type": "array", "maxItems": 2,
            "items": {"type": "string", "enum": ["a", "b", "c"]}});
        assert_eq!(parse_value("1, c, a", &multi).unwrap(), json!(["a", "c"]));
        assert!(parse_value("a,b,c", &multi).is_err());
    }

    #[test]
    fn a_form_is_filled_reviewed_and_sent() {
        let params = json!({"mode": "form", "message": "Who?", "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "default": 30},
                "colour": {"type": "string", "enum": ["red", "blue"]},
            },
            "required": ["name"]}});
        // name is asked first (required); empty age takes the default; colour is
        // left out; then edit: name kept, age changed; then send.
        let mut t = Scripted::new(&["", "Ada", "", "", "e", "", "41", "2", "y"]);
        let r = run(elicit(&params, "http://x/mcp", &mut t));
        assert_eq!(
            r,
            json!({"action": "accept", "content": {"name": "Ada", "age": 41, "colour": "blue"}})
        );
        assert!(t.shown.iter().any(|l| l.contains("a value is required")));
        assert!(t.shown.iter().any(|l| l.contains("http://x/mcp")));
        assert!(t.shown.iter().any(|l| l.contains("[Ada]")), "{:?}", t.shown);
    }

    #[test]
    fn decline_cancel_and_end_of_input() {
        let params = json!({"message": "Delete?", "requestedSchema": {"type": "object",
            "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}});
        let r = run(elicit(&params, "s", &mut Scripted::new(&[":decline"])));
        assert_eq!(r, json!({"action": "decline"}));
        let r = run(elicit(&params, "s", &mut Scripted::new(&["y", "c"])));
        assert_eq!(r, json!({"action": "cancel"}));
        let r = run(elicit(&params, "s", &mut Scripted::new(&[])));
        assert_eq!(r, json!({"action": "cancel"}));
        let url = json!({"mode": "url", "message": "Log in", "url": "https://auth.example.com/x"});
        let mut t = Scripted::new(&["a"]);
        assert_eq!(run(elicit(&url, "s", &mut t)), json!({"action": "accept"}));
        assert!(t.shown.iter().any(|l| l.contains("auth.example.com")));
    }

    #[test]
    fn sampling_cannot_be_answered_and_nothing_is_asked() {
        let requests = json!({
            "a": {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {}}},
            "b": {"method": "sampling/createMessage", "params": {}},
        });
        let mut t = Scripted::new(&["y"]);
        let e = run(answer_all(requests.as_object().unwrap(), "s", &mut t)).unwrap_err();
        assert!(e.contains("sampling/createMessage"), "{e}");
        assert!(t.shown.is_empty());
        let roots = json!({"r": {"method": "roots/list"}});
        let mut t = Scripted::new(&[]);
        let a = run(answer_all(roots.as_object().unwrap(), "s", &mut t)).unwrap();
        assert_eq!(Value::Object(a), json!({"r": {"roots": []}}));
    }
}
