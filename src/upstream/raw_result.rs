//! An upstream's plain answer kept as the bytes it came in ([`RawResult`]), and
//! the decision whether an answer is one: from a scan of its bytes where that
//! decides, else from `serde_json` reading its top and its result's.

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use tasklift_protocol::jsonrpc::Outcome;
use tasklift_protocol::scan::{Layout, Member};

/// A modern upstream's successful answer, kept as the bytes it came in: a result
/// object whose `_meta` (if any) has no related-task entry and whose `resultType`
/// is `complete` (or none). Such a
/// result is what tasklift passes on unchanged, so it is never parsed into a
/// `Value` on its way to a synchronous caller: the response is the result's bytes
/// behind the caller's id, with `resultType` added when the upstream left it out.
pub struct RawResult {
    body: Bytes,
    /// Where the result object is in `body`.
    start: usize,
    end: usize,
    /// Where the response's id is in `body`, if it has one.
    id: Option<(usize, usize)>,
    /// It says `"resultType": "complete"` itself.
    complete: bool,
}

impl std::fmt::Debug for RawResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawResult")
            .field("bytes", &(self.end - self.start))
            .finish()
    }
}

/// The top of an answer, borrowed: what decides whether it passes as bytes.
#[derive(Deserialize)]
struct AnswerTop<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<IgnoredAny>,
    method: Option<IgnoredAny>,
}

/// The top of a result, borrowed.
#[derive(Deserialize)]
struct ResultTop<'a> {
    #[serde(borrow, rename = "resultType")]
    result_type: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "_meta")]
    meta: Option<MetaTop>,
}

/// The one `_meta` entry tasklift removes from a result (`finalize_result`): an
/// upstream's related-task, which names a task of the upstream's own. SDK servers
/// put `_meta` (their serverInfo) on every result, so the rest passes.
#[derive(Deserialize)]
struct MetaTop {
    #[serde(rename = "io.modelcontextprotocol/related-task")]
    related_task: Option<IgnoredAny>,
}

/// The `_meta` key of an upstream's related-task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Where an answer's result and its id lie, and whether it says `complete`.
type Found = (usize, usize, Option<(usize, usize)>, bool);

/// Where a scanned answer's result and id lie and whether it says `complete`,
/// when the scan alone decides that it passes as bytes: no `error` or `method`,
/// an object `result` whose `resultType` (if any) is `"complete"` as written,
/// and no related-task in its `_meta`. `None`: `serde_json` decides
/// ([`RawResult::scan`]).
fn passable(text: &str, layout: &Layout) -> Option<Found> {
    let name = |m: &Member| &text[m.name.0..m.name.1];
    let value = |m: &Member| &text[m.value.0..m.value.1];
    let (mut id, mut result) = (None, None);
    for m in &layout.top.members {
        match name(m) {
            "error" | "method" => return None,
            "id" if value(m) == "null" => return None,
            "id" => id = Some(m.value),
            "result" => result = Some(m.value),
            _ => {}
        }
    }
    let result = result?;
    let inner = layout.params.as_ref().filter(|o| o.span == result)?;
    let mut complete = false;
    for m in &inner.members {
        match name(m) {
            "resultType" if value(m) == r#""complete""# => complete = true,
            "resultType" => return None,
            "_meta" => {
                let meta = layout.meta.as_ref().filter(|o| o.span == m.value)?;
                if meta.members.iter().any(|e| name(e) == RELATED_TASK) {
                    return None;
                }
            }
            _ => {}
        }
    }
    Some((result.0, result.1, id, complete))
}

/// [`passable`], decided by `serde_json` reading the answer's top and its
/// result's.
fn parsed_passable(text: &str) -> Option<Found> {
    let top: AnswerTop = serde_json::from_str(text).ok()?;
    if top.error.is_some() || top.method.is_some() {
        return None;
    }
    let result = top.result?.get();
    if !result.starts_with('{') {
        return None;
    }
    let inner: ResultTop = serde_json::from_str(result).ok()?;
    let complete = match inner.result_type.as_deref() {
        _ if inner.meta.is_some_and(|m| m.related_task.is_some()) => return None,
        None => false,
        Some("complete") => true,
        Some(_) => return None,
    };
    let at = |r: &str| r.as_ptr() as usize - text.as_ptr() as usize;
    let start = at(result);
    let id = top.id.map(|i| (at(i.get()), at(i.get()) + i.get().len()));
    Some((start, start + result.len(), id, complete))
}

/// Where a passable result lies in an answer's text, and its id, and whether
/// it says it is complete: decided from a scan of the text where it can be,
/// else by serde_json.
fn find(text: &str) -> Option<Found> {
    tasklift_protocol::scan::scan_response(text)
        .and_then(|layout| passable(text, &layout))
        .or_else(|| parsed_passable(text))
}

impl RawResult {
    /// The answer's bytes as a passable result, or the bytes back when the answer
    /// needs the full parse (an error, a request, a related-task to filter out of
    /// `_meta`, another `resultType`, anything malformed).
    pub fn scan(body: Bytes) -> Result<Self, Bytes> {
        match std::str::from_utf8(&body).ok().and_then(find) {
            Some(found) => Ok(Self::at(body, found)),
            None => Err(body),
        }
    }

    /// [`RawResult::scan`] of an answer already read as text (an SSE event's
    /// data), not checked as UTF-8 again; the text back when it needs the full
    /// parse.
    pub fn scan_text(text: String) -> Result<Self, String> {
        match find(&text) {
            Some(found) => Ok(Self::at(Bytes::from(text), found)),
            None => Err(text),
        }
    }

    fn at(body: Bytes, (start, end, id, complete): Found) -> Self {
        Self {
            body,
            start,
            end,
            id,
            complete,
        }
    }

    /// The answer it was scanned from.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// Whether it is the response to `id`.
    pub fn id_is(&self, id: &Value) -> bool {
        self.id.is_some_and(|(a, b)| {
            let text = &self.body[a..b];
            // tasklift's own upstream ids are whole numbers: one written in
            // digits alone is read as one, without parsing a `Value`.
            if let Some(n) = id.as_u64() {
                if text.len() <= 19 && !text.is_empty() && text.iter().all(u8::is_ascii_digit) {
                    let plain = text.len() == 1 || text[0] != b'0';
                    let read = text.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
                    return plain && read == n;
                }
            }
            serde_json::from_slice::<Value>(text).is_ok_and(|v| &v == id)
        })
    }

    /// The result as a value, `resultType` included.
    pub fn value(&self) -> Value {
        let mut r: Value = serde_json::from_slice(&self.body[self.start..self.end])
            .expect("scanned as a JSON object");
        tasklift_protocol::mcp::mark_complete(&mut r);
        r
    }

    /// The result as an outcome, `resultType` included.
    pub fn outcome(&self) -> Outcome {
        Ok(self.value())
    }

    /// The JSON-RPC response to the caller's request `id`, as bytes.
    pub fn response(&self, id: Option<&Value>) -> Bytes {
        let result = &self.body[self.start..self.end];
        let mut out = Vec::with_capacity(result.len() + 64);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        serde_json::to_writer(&mut out, id.unwrap_or(&Value::Null)).expect("ids serialize");
        out.extend_from_slice(br#","result":"#);
        if self.complete {
            out.extend_from_slice(result);
        } else {
            out.extend_from_slice(br#"{"resultType":"complete""#);
            let rest = &result[1..];
            let first = rest.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'}') {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
        out.push(b'}');
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scan(s: &str) -> Option<RawResult> {
        RawResult::scan(Bytes::from(s.to_string())).ok()
    }

    fn response(s: &str, id: Value) -> Value {
        let r = scan(s).expect("passes as bytes");
        serde_json::from_slice(&r.response(Some(&id))).expect("a JSON response")
    }

    #[test]
    fn a_plain_result_passes_with_the_callers_id_and_result_type() {
        let up = r#"{"jsonrpc":"2.0","id":"tasklift-9","result":{"content":[{"type":"text","text":"ok \"quoted\" \u00e9"}],"isError":false}}"#;
        assert_eq!(
            response(up, json!(7)),
            json!({"jsonrpc": "2.0", "id": 7, "result": {
                "content": [{"type": "text", "text": "ok \"quoted\" é"}],
                "isError": false, "resultType": "complete"}})
        );
        let complete = r#"{"result": {"resultType": "complete", "x": [1, {"y": null}]}, "id": 3, "jsonrpc": "2.0"}"#;
        assert_eq!(
            response(complete, json!("a-b")),
            json!({"jsonrpc": "2.0", "id": "a-b", "result": {"resultType": "complete", "x": [1, {"y": null}]}})
        );
        for empty in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{ }}"#,
        ] {
            assert_eq!(
                response(empty, json!(1))["result"],
                json!({"resultType": "complete"}),
                "{empty}"
            );
        }
        // An SDK server's `_meta` (its serverInfo) passes untouched.
        let sdk = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"py","version":""}}}}"#;
        assert_eq!(
            response(sdk, json!(2))["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]
                ["name"],
            "py"
        );
        // The outcome, for readers that need the value, matches.
        let r = scan(up).unwrap();
        assert_eq!(r.outcome().unwrap()["resultType"], "complete");
        // The response's id, as JSON.
        assert!(r.id_is(&json!("tasklift-9")));
        assert!(!r.id_is(&json!("tasklift-90")) && !r.id_is(&json!(9)));
        assert!(scan(complete).unwrap().id_is(&json!(3)));
        assert!(!scan(r#"{"result":{}}"#).unwrap().id_is(&Value::Null));
    }

    /// A number id is matched as `serde_json` reads it, whether or not it is
    /// read from its digits alone: the call's own response is never mistaken
    /// for another's, nor missed.
    #[test]
    fn number_ids_match_as_serde_json_reads_them() {
        let ids = [
            "0",
            "3",
            "30",
            "7",
            "-3",
            "3.0",
            "3e0",
            "1844674407370955161",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "\"3\"",
            "null",
        ];
        let asked = [
            0u64,
            3,
            30,
            7,
            1844674407370955161,
            9999999999999999999,
            u64::MAX,
        ];
        for text in ids {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{text},"result":{{}}}}"#);
            let r = scan(&body).unwrap();
            let read: Value = serde_json::from_str(text).unwrap();
            for n in asked {
                assert_eq!(r.id_is(&json!(n)), read == json!(n), "{text} against {n}");
            }
        }
    }

    #[test]
    fn the_scan_decides_as_serde_json_does() {
        let answers = [
            r#"{"jsonrpc":"2.0","id":"tasklift-9","result":{"content":[{"type":"text","text":"ok"}]}}"#,
            r#" { "result" : { "resultType" : "complete" , "x" : [1, {"y": null}] } , "id" : 3 } "#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"py"}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":null}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":7}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"x":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}"#,
        ];
        let mut decided = 0;
        for a in answers {
            let by_scan = tasklift_protocol::scan::scan_response(a).and_then(|l| passable(a, &l));
            let by_serde = parsed_passable(a);
            if by_scan.is_some() {
                decided += 1;
                assert_eq!(by_scan, by_serde, "{a}");
            }
            // Whichever decides, the answer is what serde_json makes of it.
            let scanned = RawResult::scan(Bytes::from(a.to_string())).ok();
            assert_eq!(
                scanned.map(|r| (r.start, r.end, r.id, r.complete)),
                by_serde,
                "{a}"
            );
            // An SSE event's text is decided the same, and comes back whole.
            match RawResult::scan_text(a.to_string()) {
                Ok(r) => assert_eq!(Some((r.start, r.end, r.id, r.complete)), by_serde, "{a}"),
                Err(back) => assert!(by_serde.is_none() && back == a, "{a}"),
            }
        }
        assert!(decided >= 5, "the scan decided only {decided}");
    }

    #[test]
    fn anything_tasklift_must_look_into_gets_the_full_parse() {
        for body in [
            // An error, a request, no result.
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            // A related-task in `_meta` (filtered out), a `_meta` that is not an
            // object, another resultType (an upstream's task).
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"u"}},"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":7,"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
            // Not an object, a duplicate key, malformed, not UTF-8.
            r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"result":{"b":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","resultType":"task"}}"#,
        ] {
            assert!(scan(body).is_none(), "{body}");
        }
        let bad = Bytes::from_static(b"{\"result\":{\"a\":\"\xff\"}}");
        assert!(RawResult::scan(bad).is_err());
    }
}
