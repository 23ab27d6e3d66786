//! A request's params, kept as the client's text until something needs the map.
//!
//! Parsing a `tools/call`'s params into a `serde_json::Map` (a node and an
//! allocated key for every member, at every depth), writing the map out again for
//! the upstream and dropping it was about 12k of the 74k instructions tasklift
//! spent on a proxied call, though tasklift reads only a few members: the tool's
//! `name`, whether a `task` is asked for, and a few `_meta` entries. [`Params`]
//! keeps the text as it came, notes where each top-level and `_meta` member lies
//! (one pass over the bytes), answers those reads from the text, and parses the
//! whole map only for a reader that asks for it ([`Deref`]) or an edit
//! ([`DerefMut`]). The request then goes upstream as the client wrote it, with
//! the `_meta` entries tasklift adds (its progress token) written in.
//!
//! The text is kept only when it means one thing to every reader: no member name
//! appears twice in one object at any depth (a `serde_json` map keeps the last,
//! another parser may keep the first, and tasklift must act on the name, task and
//! arguments the upstream sees), no member name has escapes (`"\u0061"` is `"a"`),
//! and no number is one `serde_json` would refuse (an exponent, 300 digits or
//! more). Any other params are parsed at once, as before.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::compact;
use crate::scan::{Layout, Span};

/// The `_meta` member's name.
const META: &str = "_meta";

/// A request's params (an object; absent params are an empty one).
pub struct Params {
    /// The map, parsed when something reads or edits the params as a whole.
    map: OnceLock<Map<String, Value>>,
    /// A summary of one `_meta` entry and the entry's key (`mcp::declared`'s
    /// bits of the clientCapabilities), computed once: several steps of a call
    /// ask. Forgotten when that entry is set or the map is edited.
    summary: OnceLock<(&'static str, u8)>,
    /// The client's text while nothing has edited the params through the map.
    raw: Option<Box<Raw>>,
}

/// The client's params text and where its members lie.
struct Raw {
    /// One JSON object, as the client wrote it.
    text: Box<str>,
    /// Top-level members, in order.
    top: Vec<Slot>,
    /// `_meta`'s members, in order (when `_meta` is an object).
    meta: Vec<Slot>,
    /// Where `_meta`'s opening brace is, when `_meta` is an object.
    meta_at: Option<usize>,
    /// `_meta` entries tasklift added, written first in `_meta` (none of them a
    /// name the client's `_meta` has).
    added: Vec<(String, Value)>,
}

/// One member: its name (without quotes) and its value, as ranges of the text.
#[derive(Clone)]
struct Slot {
    key: Span,
    value: Span,
    /// Whether the value is a string without escapes.
    plain: bool,
    /// The value, parsed the first time it is read (`_meta` entries): scanned
    /// text parses.
    parsed: OnceLock<Value>,
}

impl Params {
    /// Params read from the text of one JSON object: kept as text when
    /// [`scan`](crate::scan) is sure of it, else parsed as a map; an error when
    /// `serde_json` refuses it.
    pub fn from_text(text: &str) -> serde_json::Result<Self> {
        match crate::scan::scan_params(text).and_then(|l| Self::from_layout(text, &l)) {
            Some(p) => Ok(p),
            None => serde_json::from_str::<Map<String, Value>>(text).map(Self::from),
        }
    }

    /// The params of a scanned body (`layout.params`, with its `_meta`), kept as
    /// their text; `_meta`'s values are parsed here, the rest where read.
    pub(crate) fn from_layout(body: &str, layout: &Layout) -> Option<Self> {
        let params = layout.params.as_ref()?;
        let start = params.span.0;
        let shift = |(a, b): Span| (a - start, b - start);
        let slots = |o: &crate::scan::Object| {
            o.members
                .iter()
                .map(|m| Slot {
                    key: shift(m.name),
                    value: shift(m.value),
                    plain: m.plain,
                    parsed: OnceLock::new(),
                })
                .collect::<Vec<_>>()
        };
        // `_meta`, when it is an object: the one the scan noted in these params.
        let meta = layout
            .meta
            .as_ref()
            .filter(|o| params.members.iter().any(|m| m.value == o.span));
        Some(Self {
            map: OnceLock::new(),
            summary: OnceLock::new(),
            raw: Some(Box::new(Raw {
                text: body[params.span.0..params.span.1].into(),
                top: slots(params),
                meta: meta.map(slots).unwrap_or_default(),
                meta_at: meta.map(|o| o.span.0 - start),
                added: Vec::new(),
            })),
        })
    }

    /// Whether the params are still the client's text (nothing edited the map).
    pub fn is_text(&self) -> bool {
        self.raw.is_some()
    }

    /// Whether the params have a top-level member `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        match &self.raw {
            Some(r) => r.top(key).is_some(),
            None => self.map().contains_key(key),
        }
    }

    /// A top-level string member (none when absent or not a string).
    pub fn str(&self, key: &str) -> Option<&str> {
        if let Some(r) = &self.raw {
            let slot = r.top(key)?;
            if let Some(s) = r.plain_str(slot) {
                return Some(s);
            }
        }
        self.map().get(key).and_then(Value::as_str)
    }

    /// A `_meta` entry (none when absent or `_meta` is not an object); read from
    /// the text without parsing the rest.
    pub fn meta_value(&self, key: &str) -> Option<&Value> {
        match &self.raw {
            Some(r) => {
                if let Some((_, v)) = r.added.iter().find(|(k, _)| k == key) {
                    return Some(v);
                }
                let slot = r.meta(key)?;
                Some(slot.parsed.get_or_init(|| {
                    let text = &r.text[slot.value.0..slot.value.1];
                    serde_json::from_str(text).unwrap_or_default()
                }))
            }
            None => self.map().get(META)?.as_object()?.get(key),
        }
    }

    /// `compute`'s summary of the `_meta` entry `key`, computed once until that
    /// entry is set or the map edited (for `mcp::declared`). Only one entry is
    /// summarized: another key's is computed each time.
    pub(crate) fn meta_summary(&self, key: &'static str, compute: impl FnOnce(&Self) -> u8) -> u8 {
        match self.summary.get() {
            Some((k, v)) if *k == key => *v,
            Some(_) => compute(self),
            None => self.summary.get_or_init(|| (key, compute(self))).1,
        }
    }

    /// Whether a `_meta` entry is an object, read from the text's first byte
    /// while the params are kept as text (scanned text: `{` opens an object).
    pub fn meta_is_object(&self, key: &str) -> bool {
        match self.meta_text(key) {
            Some(text) => text.starts_with('{'),
            None => self.meta_value(key).is_some_and(Value::is_object),
        }
    }

    /// A `_meta` entry as the client's text, while the params are kept as text
    /// and the entry is the client's (not one tasklift added).
    pub fn meta_text(&self, key: &str) -> Option<&str> {
        let r = self.raw.as_deref()?;
        if r.added.iter().any(|(k, _)| k == key) {
            return None;
        }
        r.meta(key).map(|slot| &r.text[slot.value.0..slot.value.1])
    }

    /// A `_meta` entry that is a string (none when absent or not a string), read
    /// from the text without parsing it when it has no escapes.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        if let Some(r) = &self.raw {
            if let Some(s) = r.meta(key).and_then(|slot| r.plain_str(slot)) {
                return Some(s);
            }
        }
        self.meta_value(key).and_then(Value::as_str)
    }

    /// Whether the params have a `_meta` that is an object.
    pub fn has_meta_object(&self) -> bool {
        match &self.raw {
            Some(r) => r.meta_at.is_some() || !r.added.is_empty(),
            None => self.map().get(META).is_some_and(Value::is_object),
        }
    }

    /// Set a `_meta` entry (creating `_meta`, or replacing one that is not an
    /// object, as [`meta_mut`] does). An entry the client's text does
    /// not have is noted beside the text; any other edit parses the map.
    pub fn insert_meta(&mut self, key: &str, value: Value) {
        if self.summary.get().is_some_and(|(k, _)| *k == key) {
            self.summary = OnceLock::new();
        }
        if let Some(r) = self.raw.as_deref_mut().filter(|_| self.map.get().is_none()) {
            let meta_ok = r.meta_at.is_some() || r.top(META).is_none();
            if meta_ok && r.meta(key).is_none() {
                match r.added.iter_mut().find(|(k, _)| k == key) {
                    Some(slot) => slot.1 = value,
                    None => r.added.push((key.to_string(), value)),
                }
                return;
            }
        }
        meta_mut(self).insert(key.to_string(), value);
    }

    /// The params as compact JSON, appended to `out`: the client's text (with
    /// tasklift's `_meta` entries written in) while it is kept, else the map as
    /// `serde_json` writes it.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self.unread() {
            Some(r) => r.write(out),
            None => compact::write_map(out, self.map()),
        }
    }

    /// The params as compact JSON without the `_meta` entries named in `drop`,
    /// and without a `_meta` they leave empty (a legacy upstream's request: its
    /// session holds those fields), appended to `out`.
    pub fn write_without_meta(&self, out: &mut Vec<u8>, drop: &[&str]) {
        match self.unread() {
            Some(r) => r.write_without_meta(out, drop),
            None => write_map_without_meta(out, self.map(), drop),
        }
    }

    /// The client's text, when nothing has read the params as a map. Once a
    /// reader has (the arguments, say, read as `serde_json` reads them: the last
    /// of a repeated name), the map goes upstream: what tasklift read is what the
    /// upstream gets.
    fn unread(&self) -> Option<&Raw> {
        self.raw.as_deref().filter(|_| self.map.get().is_none())
    }

    /// The params as a map.
    pub fn into_map(mut self) -> Map<String, Value> {
        self.owned();
        self.map.take().expect("owned parses the map")
    }

    /// The map, parsed on first use.
    fn map(&self) -> &Map<String, Value> {
        self.map.get_or_init(|| {
            let r = self.raw.as_deref().expect("params are text or a map");
            // Scanned text parses throughout (`scan`).
            let mut map: Map<String, Value> = serde_json::from_str(&r.text).unwrap_or_default();
            if !r.added.is_empty() {
                let meta = meta_mut(&mut map);
                for (k, v) in &r.added {
                    meta.insert(k.clone(), v.clone());
                }
            }
            map
        })
    }

    /// The map, for an edit: the text is no longer the params.
    fn owned(&mut self) -> &mut Map<String, Value> {
        self.map();
        self.raw = None;
        self.summary = OnceLock::new();
        self.map.get_mut().expect("just parsed")
    }
}

impl Raw {
    fn find<'a>(&self, slots: &'a [Slot], key: &str) -> Option<&'a Slot> {
        let (text, key) = (self.text.as_bytes(), key.as_bytes());
        slots
            .iter()
            .find(|s| s.key.1 - s.key.0 == key.len() && text[s.key.0..s.key.1] == *key)
    }

    fn top(&self, key: &str) -> Option<&Slot> {
        self.find(&self.top, key)
    }

    fn meta(&self, key: &str) -> Option<&Slot> {
        self.find(&self.meta, key)
    }

    /// A string value without escapes, borrowed from the text.
    fn plain_str(&self, slot: &Slot) -> Option<&str> {
        slot.plain
            .then(|| self.text.get(slot.value.0 + 1..slot.value.1 - 1))
            .flatten()
    }

    fn write(&self, out: &mut Vec<u8>) {
        let text = self.text.as_bytes();
        if self.added.is_empty() {
            out.extend_from_slice(text);
            return;
        }
        let added = self.added.iter().map(|(k, v)| (k, v));
        match self.meta_at {
            Some(at) => {
                out.extend_from_slice(&text[..at]);
                write_entries(out, added);
                // Back over the closing brace: the client's entries follow.
                out.pop();
                if !self.meta.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(&text[at + 1..]);
            }
            None => {
                let end = text.len() - 1;
                out.extend_from_slice(&text[..end]);
                if !self.top.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(br#""_meta":"#);
                write_entries(out, added);
                out.push(b'}');
            }
        }
    }

    fn write_without_meta(&self, out: &mut Vec<u8>, drop: &[&str]) {
        let text = &self.text;
        let name = |s: &Slot| &text[s.key.0..s.key.1];
        // A member as it came: its quoted name, the colon, its value.
        let member = |s: &Slot| &text.as_bytes()[s.key.0 - 1..s.value.1];
        let added = || {
            self.added
                .iter()
                .filter(|(k, _)| !drop.contains(&k.as_str()))
        };
        let kept = || self.meta.iter().filter(|s| !drop.contains(&name(s)));
        let write_meta = |out: &mut Vec<u8>| {
            out.extend_from_slice(br#""_meta":{"#);
            let mut first = true;
            for (k, v) in added() {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                compact::write_str(out, k);
                out.push(b':');
                compact::write_value(out, v);
            }
            for s in kept() {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                out.extend_from_slice(member(s));
            }
            out.push(b'}');
        };
        let has_meta = added().next().is_some() || kept().next().is_some();
        out.push(b'{');
        let mut first = true;
        let mut meta_seen = false;
        for s in &self.top {
            let is_meta = self.meta_at.is_some() && name(s) == META;
            if is_meta && !has_meta {
                continue;
            }
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            if is_meta {
                meta_seen = true;
                write_meta(out);
            } else {
                out.extend_from_slice(member(s));
            }
        }
        if !meta_seen && added().next().is_some() {
            if !first {
                out.push(b',');
            }
            write_meta(out);
        }
        out.push(b'}');
    }
}

/// The `_meta` object of a params map, created if absent (replacing a `_meta`
/// that is not an object).
pub fn meta_mut(params: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let m = params
        .entry(META)
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("just made an object")
}

/// [`Params::write_without_meta`] for params that are a map.
fn write_map_without_meta(out: &mut Vec<u8>, params: &Map<String, Value>, drop: &[&str]) {
    fn kept<'a>(meta: &'a Map<String, Value>, drop: &[&str]) -> Vec<(&'a String, &'a Value)> {
        meta.iter()
            .filter(|(k, _)| !drop.contains(&k.as_str()))
            .collect()
    }
    out.push(b'{');
    let mut first = true;
    for (k, v) in params {
        let meta = match v {
            Value::Object(meta) if k == META => Some(kept(meta, drop)),
            _ => None,
        };
        if meta.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        compact::write_str(out, k);
        out.push(b':');
        match meta {
            Some(meta) => write_entries(out, meta),
            None => compact::write_value(out, v),
        }
    }
    out.push(b'}');
}

/// `{"k":v,...}`, compact.
fn write_entries<'a>(
    out: &mut Vec<u8>,
    entries: impl IntoIterator<Item = (&'a String, &'a Value)>,
) {
    out.push(b'{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        compact::write_str(out, k);
        out.push(b':');
        compact::write_value(out, v);
    }
    out.push(b'}');
}

impl FromIterator<(String, Value)> for Params {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Map::from_iter(iter).into()
    }
}

impl From<Map<String, Value>> for Params {
    fn from(map: Map<String, Value>) -> Self {
        Self {
            map: OnceLock::from(map),
            summary: OnceLock::new(),
            raw: None,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Map::new().into()
    }
}

impl Deref for Params {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.map()
    }
}

impl DerefMut for Params {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.owned()
    }
}

impl Clone for Params {
    fn clone(&self) -> Self {
        match &self.raw {
            // The map too, once parsed: a copy of params something has read
            // goes upstream as read, as the original does (`unread`).
            Some(r) => Self {
                map: self.map.clone(),
                summary: self.summary.clone(),
                raw: Some(Box::new(Raw {
                    text: r.text.clone(),
                    top: r.top.clone(),
                    meta: r.meta.clone(),
                    meta_at: r.meta_at,
                    added: r.added.clone(),
                })),
            },
            None => self.map().clone().into(),
        }
    }
}

impl PartialEq for Params {
    fn eq(&self, other: &Self) -> bool {
        self.map() == other.map()
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.map(), f)
    }
}

impl serde::Serialize for Params {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> Params {
        let p = Params::from_text(s).expect("parses");
        assert!(p.is_text(), "{s} is kept as text");
        p
    }

    /// What the upstream would read: the params written out, parsed.
    fn written(p: &Params) -> Value {
        serde_json::from_slice(&bytes(p)).expect("written params are JSON")
    }

    /// A `_meta` entry's summary is computed once, forgotten when that entry is
    /// set or the map edited, and kept when another entry is set (tasklift's
    /// progress token).
    #[test]
    fn a_meta_summary_is_computed_once_until_its_entry_changes() {
        let computed = std::cell::Cell::new(0);
        let summary = |p: &Params| {
            p.meta_summary("caps", |p| {
                computed.set(computed.get() + 1);
                u8::from(p.meta_value("caps").is_some())
            })
        };
        let mut p = Params::from_text(r#"{"name":"t","_meta":{"caps":{}}}"#).unwrap();
        assert_eq!((summary(&p), summary(&p)), (1, 1));
        p.insert_meta("progressToken", json!(1));
        assert_eq!((summary(&p), computed.get()), (1, 1));
        p.insert_meta("caps", Value::Null);
        assert_eq!((summary(&p), computed.get()), (1, 2));
        meta_mut(&mut p).remove("caps");
        assert_eq!((summary(&p), computed.get()), (0, 3));
    }

    /// The params' bytes as they go upstream.
    fn bytes(p: &Params) -> Vec<u8> {
        let mut out = Vec::new();
        p.write(&mut out);
        out
    }

    #[test]
    fn reads_from_the_text_agree_with_the_map() {
        let bodies = [
            r#"{"name":"fast","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}"#,
            r#"{ "arguments" : { "name" : "inner", "_meta": {"x": 1} } , "name" : "spaced" , "_meta" : { "progressToken" : 7 , "k" : [1, {"a": "}"}] } }"#,
            r#"{"name":"esc\"aped \u00e9","task":{"ttl":5},"_meta":{"a":"\ud83d\ude00"}}"#,
            r#"{"name":7,"requestState":"s","_meta":{}}"#,
            r#"{}"#,
            r#"{"a":[[],{}],"b":"{[\"","c":-1.5,"d":null,"e":true}"#,
        ];
        for s in bodies {
            let p = text(s);
            let map: Map<String, Value> = serde_json::from_str(s).unwrap();
            for key in ["name", "requestState", "task", "arguments", "_meta", "x"] {
                assert_eq!(p.contains_key(key), map.contains_key(key), "{s} {key}");
                assert_eq!(
                    p.str(key),
                    map.get(key).and_then(Value::as_str),
                    "{s} {key}"
                );
            }
            let meta = map.get("_meta").and_then(Value::as_object);
            let copy = p.clone();
            for key in [
                "progressToken",
                "k",
                "x",
                "io.modelcontextprotocol/protocolVersion",
            ] {
                assert_eq!(
                    p.meta_value(key),
                    meta.and_then(|m| m.get(key)),
                    "{s} {key}"
                );
                assert_eq!(copy.meta_value(key), p.meta_value(key), "{s} {key}");
            }
            assert_eq!(p.has_meta_object(), meta.is_some(), "{s}");
            assert_eq!(written(&p), Value::Object(map.clone()), "{s}");
            assert_eq!(*p, map, "{s}");
            assert_eq!(p.clone().into_map(), map, "{s}");
        }
    }

    #[test]
    fn params_that_could_mean_two_things_are_parsed_at_once() {
        let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(110), "]".repeat(110));
        for s in [
            r#"{"name":"a","name":"b"}"#,
            r#"{"_meta":{"progressToken":1,"progressToken":2}}"#,
            r#"{"_meta":{},"_meta":{"a":1}}"#,
            r#"{"n\u0061me":"a","name":"b"}"#,
            r#"{"_meta":{"\u0061":1,"a":2}}"#,
            r#"{"arguments":{"x":1e3}}"#,
            &deep,
        ] {
            let p = Params::from_text(s).expect("parses");
            assert!(!p.is_text(), "{s}");
            let map: Map<String, Value> = serde_json::from_str(s).unwrap();
            assert_eq!(*p, map, "{s}");
            assert_eq!(written(&p), Value::Object(map), "{s}");
        }
        // Same names in different objects are no repetition; a `_meta` that is no
        // object is a member like any other.
        text(r#"{"name":"a","arguments":{"name":"b","x":{"name":"c"}},"_meta":{"name":1}}"#);
        for s in [
            r#"{"name":"t","_meta":"not an object"}"#,
            r#"{"_meta":[1,{"a":null}]}"#,
        ] {
            let p = text(s);
            assert!(!p.has_meta_object() && p.meta_value("a").is_none(), "{s}");
        }
        // What serde_json refuses to parse is refused, as parsing the map refuses it.
        for s in [
            r#"{"x":1e400}"#.to_string(),
            format!(r#"{{"x":{}}}"#, "9".repeat(400)),
            r#"{"x":"\ud800"}"#.to_string(),
            r#"{"x":"\udc00\ud800"}"#.to_string(),
            format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200)),
            r#"{"a":1"#.to_string(),
            r#"[1]"#.to_string(),
        ] {
            assert!(Params::from_text(&s).is_err(), "{s}");
        }
    }

    /// Generated params: names that repeat, escapes, surrogates (paired and
    /// not), exponents, long digit runs, nesting, spacing.
    fn generated(seed: &mut u64, depth: u32, out: &mut String) {
        fn next(seed: &mut u64, n: u64) -> u64 {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed % n
        }
        const NAMES: [&str; 6] = [
            "name",
            "_meta",
            "arguments",
            "x",
            "progressToken",
            "n\\u0061me",
        ];
        const SCALARS: [&str; 14] = [
            "1",
            "-2.5",
            "1e3",
            "2E-400",
            "0.000001",
            "true",
            "null",
            r#""plain""#,
            r#""\u00e9t\u00e9""#,
            r#""\ud83d\ude00""#,
            r#""\ud800""#,
            r#""\udc00x""#,
            r#""3e5 id""#,
            r#""q\"uote\\""#,
        ];
        let kind = if depth > 3 { 2 } else { next(seed, 4) };
        let sp = if next(seed, 3) == 0 { " " } else { "" };
        match kind {
            0 => {
                out.push('{');
                for i in 0..next(seed, 4) {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!(
                        r#"{sp}"{}"{sp}:{sp}"#,
                        NAMES[next(seed, 6) as usize]
                    ));
                    generated(seed, depth + 1, out);
                }
                out.push_str(sp);
                out.push('}');
            }
            1 => {
                out.push('[');
                for i in 0..next(seed, 3) {
                    if i > 0 {
                        out.push(',');
                    }
                    generated(seed, depth + 1, out);
                }
                out.push(']');
            }
            _ if next(seed, 40) == 0 => out.push_str(&"7".repeat(320)),
            _ => out.push_str(SCALARS[next(seed, 14) as usize]),
        }
    }

    #[test]
    fn generated_params_read_as_serde_json_reads_them() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut kept = 0;
        for _ in 0..4000 {
            let mut s = String::new();
            // An object at the top: generate until one comes.
            while !s.starts_with('{') {
                s.clear();
                generated(&mut seed, 0, &mut s);
            }
            // The same params in a body, read by the front door's way and as a value.
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{s}}}"#);
            let show = |r: Result<crate::jsonrpc::Request, crate::jsonrpc::RpcError>| {
                r.map(|q| (q.id, q.method, (*q.params).clone()))
                    .map_err(|e| e.message)
            };
            let read = crate::envelope::Envelope::from_slice(body.as_bytes())
                .map(crate::jsonrpc::Request::from_envelope)
                .map(show);
            let value = serde_json::from_str::<Value>(&body)
                .map(crate::jsonrpc::Request::from_value)
                .map(show);
            match (read, value) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{body}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{body}: read {:?}, parsed {:?}", a.is_ok(), b.is_ok()),
            }
            let direct = Params::from_text(&s);
            let parsed = serde_json::from_str::<Map<String, Value>>(&s);
            let (p, map) = match (direct, parsed) {
                (Ok(p), Ok(map)) => (p, map),
                (Err(_), Err(_)) => continue,
                (d, m) => panic!("{s}: read {:?}, parsed {:?}", d.is_ok(), m.is_ok()),
            };
            kept += usize::from(p.is_text());
            for key in ["name", "x", "_meta"] {
                assert_eq!(p.str(key), map.get(key).and_then(Value::as_str), "{s}");
                assert_eq!(p.contains_key(key), map.contains_key(key), "{s}");
            }
            let meta = map.get("_meta").and_then(Value::as_object);
            for key in ["x", "progressToken", "name"] {
                assert_eq!(p.meta_value(key), meta.and_then(|m| m.get(key)), "{s}");
            }
            assert_eq!(written(&p), Value::Object(map.clone()), "{s}");
            assert_eq!(*p, map, "{s}");
            assert_eq!(written(&p), Value::Object(map), "{s}");
        }
        assert!(kept > 200, "only {kept} kept as text");
    }

    #[test]
    fn a_repetition_deeper_goes_upstream_as_tasklift_read_it() {
        let s = r#"{"name":"t","arguments":{"x":1,"y":2,"x":3}}"#;
        let p = text(s);
        // Read as a map: the last `x`, which is then what the upstream gets.
        assert_eq!(p["arguments"]["x"], 3);
        assert!(p.is_text());
        assert_eq!(
            written(&p),
            json!({"name": "t", "arguments": {"x": 3, "y": 2}})
        );
        assert_eq!(bytes(&p), serde_json::to_vec(&*p).unwrap());
        // A copy of params that were read goes upstream as read too.
        assert_eq!(bytes(&p.clone()), serde_json::to_vec(&*p).unwrap());
        // Not read: the client's text goes on as it came.
        assert_eq!(bytes(&text(s)), s.as_bytes());
    }

    #[test]
    fn added_meta_entries_are_written_in_and_read_back() {
        for (s, expected) in [
            (
                r#"{"name":"t","_meta":{"a":1}}"#,
                json!({"name": "t", "_meta": {"progressToken": "p", "a": 1}}),
            ),
            (
                r#"{"name":"t","_meta":{}}"#,
                json!({"name": "t", "_meta": {"progressToken": "p"}}),
            ),
            (
                r#"{"name":"t"}"#,
                json!({"name": "t", "_meta": {"progressToken": "p"}}),
            ),
            (r#"{}"#, json!({"_meta": {"progressToken": "p"}})),
        ] {
            let mut p = text(s);
            p.insert_meta("progressToken", json!("old"));
            p.insert_meta("progressToken", json!("p"));
            assert!(p.is_text(), "{s}");
            assert_eq!(p.meta_value("progressToken"), Some(&json!("p")));
            assert!(p.has_meta_object());
            assert_eq!(written(&p), expected, "{s}");
            assert_eq!(Value::Object(p.clone().into_map()), expected, "{s}");
            assert_eq!(Value::Object((*p).clone()), expected, "{s}");
        }
        // Replacing the client's own entry, or a `_meta` that is no object, edits the map.
        let mut p = text(r#"{"_meta":{"progressToken":1}}"#);
        p.insert_meta("progressToken", json!(2));
        assert!(!p.is_text());
        assert_eq!(written(&p), json!({"_meta": {"progressToken": 2}}));
        let mut p = Params::from_text(r#"{"_meta":3}"#).unwrap();
        p.insert_meta("progressToken", json!(2));
        assert_eq!(written(&p), json!({"_meta": {"progressToken": 2}}));
    }

    #[test]
    fn an_edit_through_the_map_is_what_goes_upstream() {
        let mut p = text(r#"{"name":"t","task":{},"_meta":{"a":1}}"#);
        p.insert_meta("progressToken", json!(1));
        p.remove("task");
        assert!(!p.is_text());
        assert!(!p.contains_key("task"));
        assert_eq!(
            written(&p),
            json!({"name": "t", "_meta": {"a": 1, "progressToken": 1}})
        );
        // Written as serde_json writes the map.
        assert_eq!(bytes(&p), serde_json::to_vec(&*p).unwrap());
    }
}
