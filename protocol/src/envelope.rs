//! A message's top level, read straight from its bytes.
//!
//! Parsing a body into a `serde_json::Value` first builds its top-level object
//! (a map node, an allocated key for each member, the `"2.0"` string), which
//! [`Request::from_value`](crate::jsonrpc::Request::from_value) then takes apart
//! again. [`Envelope::from_slice`] reads the four members a request has as they
//! come (from [`scan`]'s layout when it is sure of the body), reads the rest only
//! to refuse what `serde_json` refuses in them, and leaves the checks to
//! [`Request::from_envelope`](crate::jsonrpc::Request::from_envelope): the same
//! request, and the same refusals, as parsing the object and reading it.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::params::Params;
use crate::scan::{scan, Layout};

/// What a body's top level holds: the members a JSON-RPC request has, each as it
/// came (unchecked). A repeated member counts by its last value, as in a
/// `serde_json` object; members of other names are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Envelope {
    /// False when the body is JSON but not an object (a batch, a scalar).
    pub object: bool,
    pub jsonrpc: Option<Value>,
    pub id: Option<Value>,
    pub method: Option<Value>,
    pub params: Option<ParamsIn>,
}

/// A message's `params` as it came: an object read from the body's text is kept
/// as [`Params`]; anything else (a value already parsed, `null`, an array) as a
/// value, for the request's checks to refuse or take.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamsIn {
    /// An object, read from the body's text.
    Object(Params),
    /// Any params of a parsed message, and any that are not an object.
    Value(Value),
}

impl ParamsIn {
    /// The params as a value.
    pub fn into_value(self) -> Value {
        match self {
            ParamsIn::Object(p) => Value::Object(p.into_map()),
            ParamsIn::Value(v) => v,
        }
    }
}

impl Envelope {
    /// Read a body; an error only when it is not JSON (as `serde_json::from_slice`).
    /// A body [`scan`] is sure of is read from its layout, its params kept as
    /// their text; any other by `serde_json`, its params parsed. A body that is
    /// not UTF-8 is no JSON: parsing it gives the parser's own error (skipping
    /// members would not look inside their strings).
    pub fn from_slice(body: &[u8]) -> serde_json::Result<Self> {
        let Ok(text) = std::str::from_utf8(body) else {
            return serde_json::from_slice::<Value>(body).map(Self::from_value);
        };
        if let Some(e) = scan(text).and_then(|layout| Self::from_layout(text, &layout)) {
            return Ok(e);
        }
        serde_json::from_str(text)
    }

    /// The envelope of a scanned body.
    fn from_layout(body: &str, layout: &Layout) -> Option<Self> {
        let mut e = Envelope {
            object: true,
            ..Envelope::default()
        };
        for m in &layout.top.members {
            let text = &body[m.value.0..m.value.1];
            let slot = match &body[m.name.0..m.name.1] {
                "jsonrpc" => &mut e.jsonrpc,
                "id" => &mut e.id,
                "method" => &mut e.method,
                "params" => {
                    let object = layout.params.as_ref().is_some_and(|p| p.span == m.value);
                    e.params = Some(match object {
                        true => ParamsIn::Object(Params::from_layout(body, layout)?),
                        false => ParamsIn::Value(small_value(text)?),
                    });
                    continue;
                }
                _ => continue,
            };
            *slot = Some(small_value(text)?);
        }
        Some(e)
    }

    /// The envelope of a message already parsed.
    pub fn from_value(v: Value) -> Self {
        let Value::Object(mut o) = v else {
            return Self::default();
        };
        Self {
            object: true,
            jsonrpc: o.remove("jsonrpc"),
            id: o.remove("id"),
            method: o.remove("method"),
            params: o.remove("params").map(ParamsIn::Value),
        }
    }

    /// The method, when it is a string.
    pub fn method(&self) -> Option<&str> {
        self.method.as_ref().and_then(Value::as_str)
    }

    /// The message as an object again, of the members it had (`null` for a body
    /// that was not an object).
    pub fn into_value(self) -> Value {
        if !self.object {
            return Value::Null;
        }
        let mut o = Map::new();
        let members = [
            ("jsonrpc", self.jsonrpc),
            ("id", self.id),
            ("method", self.method),
            ("params", self.params.map(ParamsIn::into_value)),
        ];
        for (k, v) in members {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        }
        Value::Object(o)
    }
}

impl<'de> de::Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TopLevel)
    }
}

/// A small value of a scanned body (an id, a method): a string without escapes
/// taken as it is, anything else parsed.
fn small_value(text: &str) -> Option<Value> {
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(plain) if !plain.contains('\\') => Some(Value::String(plain.to_string())),
        _ => serde_json::from_str(text).ok(),
    }
}

/// The top level's visitor: an object's four members; anything else is parsed
/// and dropped (skipping it would not check its numbers' range).
struct TopLevel;

/// A top-level member's name.
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Other,
}

impl<'de> de::Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Member;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Member, E> {
                Ok(match s {
                    "jsonrpc" => Member::Jsonrpc,
                    "id" => Member::Id,
                    "method" => Member::Method,
                    "params" => Member::Params,
                    _ => Member::Other,
                })
            }
        }
        d.deserialize_identifier(Name)
    }
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Envelope, A::Error> {
        let mut e = Envelope {
            object: true,
            ..Envelope::default()
        };
        while let Some(member) = m.next_key::<Member>()? {
            let slot = match member {
                Member::Jsonrpc => &mut e.jsonrpc,
                Member::Id => &mut e.id,
                Member::Method => &mut e.method,
                Member::Params => {
                    e.params = Some(ParamsIn::Value(m.next_value()?));
                    continue;
                }
                Member::Other => {
                    m.next_value::<Value>()?;
                    continue;
                }
            };
            *slot = Some(m.next_value()?);
        }
        Ok(e)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Envelope, A::Error> {
        while s.next_element::<Value>()?.is_some() {}
        Ok(Envelope::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Envelope, E> {
        Ok(Envelope::default())
    }
}

#[cfg(test)]
mod tests {
    use super::Envelope;
    use crate::jsonrpc::Request;
    use serde_json::{json, Value};

    /// The same request or refusal, read from the bytes or from the parsed value.
    fn both(body: &str) -> (Result<String, String>, Result<String, String>) {
        let show = |r: Result<Request, crate::jsonrpc::RpcError>| {
            r.map(|q| format!("{:?} {} {:?}", q.id, q.method, q.params))
                .map_err(|e| e.message)
        };
        let direct = Envelope::from_slice(body.as_bytes()).map(Request::from_envelope);
        let parsed = serde_json::from_slice::<Value>(body.as_bytes()).map(Request::from_value);
        match (direct, parsed) {
            (Ok(a), Ok(b)) => (show(a), show(b)),
            (Err(_), Err(_)) => (Err("not JSON".into()), Err("not JSON".into())),
            (a, b) => panic!("one parsed, one did not: {:?} / {:?}", a.is_ok(), b.is_ok()),
        }
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused_with_the_parsers_own_error() {
        for body in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\xff\"}"[..],
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":\"\xc3\"}}"[..],
            &b"\xef\xbb"[..],
            &b"[{\"jsonrpc\":\"2.0\",\"\xff\xff\":1,\"method\":\"ping\"}]"[..],
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"x\":\"\xff\"}"[..],
        ] {
            let direct = Envelope::from_slice(body).expect_err("not UTF-8");
            let parsed = serde_json::from_slice::<Value>(body).expect_err("not UTF-8");
            assert_eq!(direct.to_string(), parsed.to_string());
        }
        // Non-ASCII text that is UTF-8 reads as it is.
        let e = Envelope::from_slice("{\"method\":\"d\u{e9}j\u{e0}\"}".as_bytes()).expect("UTF-8");
        assert_eq!(e.method(), Some("d\u{e9}j\u{e0}"));
    }

    #[test]
    fn a_body_read_directly_is_the_request_the_parsed_object_is() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,2]}}}"#,
            r#"{"method":"ping","jsonrpc":"2.0","id":"s","extra":{"deep":[{}]},"params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m","method":"n"}"#,
            r#"{"jsonrpc":"2.0","\u006dethod":"escaped","id":7}"#,
            r#"{"jsonrpc":"2.0","method":"notify"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":3}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
            r#""a string""#,
            "12",
            "null",
            "true",
            r#"{"jsonrpc":"2.0","id":1,"method":"m"} trailing"#,
            r#"{"t":{"x":5.55003E555},"jsonrpc":"2.0","id":1,"method":"m"}"#,
            r#"[1e999]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"k":1E2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m""#,
            "",
        ];
        for body in bodies {
            let (direct, parsed) = both(body);
            assert_eq!(direct, parsed, "{body}");
        }
    }

    #[test]
    fn an_envelope_becomes_the_object_it_came_from() {
        let v = json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"a": 1}});
        let e = Envelope::from_slice(v.to_string().as_bytes()).expect("JSON");
        assert_eq!(e.method(), Some("initialize"));
        assert_eq!(e.into_value(), v);
        assert_eq!(
            Envelope::from_slice(b"[1]").expect("JSON").into_value(),
            Value::Null
        );
    }
}
