//! The call's result on stdout: `finish` prints it (as JSON with `--json`) and picks
//! the exit code from `isError`; `render_result` is the text people read.

use std::io::Write;

use serde_json::{json, Value};

use super::exit::{EXIT_FAILED, EXIT_OK};
use super::terminal::Cx;

/// Print the result; its exit code.
pub(super) fn finish(cx: &Cx, result: &Value) -> u8 {
    let is_error = result["isError"] == json!(true);
    let mut out = std::io::stdout().lock();
    if cx.json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        );
    } else {
        let _ = write!(out, "{}", render_result(result));
    }
    let _ = out.flush();
    if is_error {
        eprintln!("tasklift call: {} reported an error (isError)", cx.tool);
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// A tool result for people: text as it is, other content summarised, structured
/// content as JSON when there is nothing else.
pub fn render_result(result: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        if !s.ends_with('\n') {
            out.push('\n');
        }
    };
    let content = result["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for c in content {
        match c["type"].as_str() {
            Some("text") => line(c["text"].as_str().unwrap_or("")),
            Some(kind @ ("image" | "audio")) => line(&format!(
                "[{kind}: {}, {} bytes of base64]",
                c["mimeType"].as_str().unwrap_or("?"),
                c["data"].as_str().map_or(0, str::len)
            )),
            Some("resource_link") => line(&format!(
                "[resource link: {}{}]",
                c["uri"].as_str().unwrap_or("?"),
                c["name"]
                    .as_str()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            )),
            Some("resource") => match c["resource"]["text"].as_str() {
                Some(t) => line(t),
                None => line(&format!(
                    "[resource: {}, {}]",
                    c["resource"]["uri"].as_str().unwrap_or("?"),
                    c["resource"]["mimeType"].as_str().unwrap_or("binary")
                )),
            },
            _ => line(&c.to_string()),
        }
    }
    if content.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            line(&serde_json::to_string_pretty(s).unwrap_or_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_as_text() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
        ]});
        assert_eq!(
            render_result(&r),
            "hello\n[image: image/png, 4 bytes of base64]\n[resource link: file:///x (x)]\n"
        );
        let r = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(render_result(&r), "{\n  \"n\": 1\n}\n");
    }
}
