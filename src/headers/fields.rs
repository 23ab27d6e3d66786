//! Header fields as a short list, in the order they came or were set.
//!
//! A request carries a handful of fields: at the front door, what an MCP
//! client sends (host, content type, accept, length, the MCP headers); to an
//! upstream, what tasklift sets (content type, accept, the MCP headers, a
//! session, the configured and forwarded ones). A `HeaderMap` hashes every name
//! it is given, to find it again in constant time, and building one cost about
//! 2,000 instructions for a front-door request; here a name is looked up a few
//! times at most, so the fields are a list and a lookup compares names (a
//! standard name compares as a small integer). `insert` replaces earlier values
//! of the name as the map's does.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Header fields in the order they were set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(Vec<(HeaderName, HeaderValue)>);

/// A name a field is looked up by: a `HeaderName`, or its text in any case.
pub trait Name {
    /// Whether `name` is this one.
    fn names(&self, name: &HeaderName) -> bool;
}

impl Name for HeaderName {
    fn names(&self, name: &HeaderName) -> bool {
        self == name
    }
}

impl Name for &HeaderName {
    fn names(&self, name: &HeaderName) -> bool {
        *self == name
    }
}

impl Name for &str {
    fn names(&self, name: &HeaderName) -> bool {
        name.as_str().eq_ignore_ascii_case(self)
    }
}

impl Fields {
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    pub fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    /// `name` set to `value` alone: any earlier value of it goes.
    pub fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        if self.contains(&name) {
            self.0.retain(|(n, _)| *n != name);
        }
        self.0.push((name, value));
    }

    /// One more value of `name`, after any it has.
    pub fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.push((name, value));
    }

    pub fn contains(&self, name: impl Name) -> bool {
        self.0.iter().any(|(n, _)| name.names(n))
    }

    /// The first value of `name`, as `HeaderMap::get` answers.
    pub fn get(&self, name: impl Name) -> Option<&HeaderValue> {
        self.0.iter().find(|(n, _)| name.names(n)).map(|(_, v)| v)
    }

    /// Every value of `name`, in order.
    pub fn get_all(&self, name: impl Name) -> impl Iterator<Item = &HeaderValue> {
        self.0
            .iter()
            .filter(move |(n, _)| name.names(n))
            .map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    /// Each field's name (a name with several values, once per value).
    pub fn names(&self) -> impl Iterator<Item = &HeaderName> {
        self.0.iter().map(|(n, _)| n)
    }

    /// The fields as a map (the HTTP/2 client takes one), each name's values in
    /// the order they were set.
    pub fn into_map(self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.0.len());
        for (n, v) in self.0 {
            map.append(n, v);
        }
        map
    }

    /// Room for no more than the fields it holds: a slow call keeps its
    /// request's fields (for a retry) as long as it runs.
    pub fn fitted(mut self) -> Self {
        self.0.shrink_to_fit();
        self
    }
}

/// A map's fields, each name's values in the map's order (a request hyper read).
impl From<HeaderMap> for Fields {
    fn from(map: HeaderMap) -> Self {
        let mut fields = Vec::with_capacity(map.len());
        // The map names a field before its first value only.
        let mut name = None;
        for (n, value) in map {
            if n.is_some() {
                name = n;
            }
            if let Some(n) = &name {
                fields.push((n.clone(), value));
            }
        }
        Self(fields)
    }
}

impl FromIterator<(HeaderName, HeaderValue)> for Fields {
    fn from_iter<I: IntoIterator<Item = (HeaderName, HeaderValue)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};

    fn value(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    /// Built the way a request's fields are, the list and a `HeaderMap` hold
    /// the same values for every name.
    #[test]
    fn insert_and_append_keep_what_a_header_map_keeps() {
        let custom = HeaderName::from_static("mcp-param-region");
        let steps: [(bool, HeaderName, &'static str); 7] = [
            (true, CONTENT_TYPE, "application/json"),
            (true, ACCEPT, "application/json"),
            (false, custom.clone(), "eu"),
            (false, custom.clone(), "us"),
            (true, AUTHORIZATION, "Bearer a"),
            (true, ACCEPT, "text/event-stream"),
            (true, AUTHORIZATION, "Bearer b"),
        ];
        let (mut fields, mut map) = (Fields::default(), HeaderMap::new());
        for (insert, name, v) in steps {
            match insert {
                true => {
                    fields.insert(name.clone(), value(v));
                    map.insert(name, value(v));
                }
                false => {
                    fields.append(name.clone(), value(v));
                    map.append(name, value(v));
                }
            }
        }
        assert_eq!(fields.len(), map.len());
        for name in map.keys() {
            let listed: Vec<_> = fields
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .collect();
            let mapped: Vec<_> = map.get_all(name).iter().collect();
            assert_eq!(listed, mapped, "{name}");
        }
        assert_eq!(fields.clone().into_map(), map);
        assert!(fields.contains(&custom) && !fields.contains(&http::header::HOST));
    }

    /// Read back, the list answers as the map does: the first value for `get`,
    /// every value in order for `get_all`, a name's text in any case; and a map
    /// turned into a list keeps each name's values in order.
    #[test]
    fn lookups_answer_as_a_header_map_does() {
        let mut map = HeaderMap::new();
        map.append(CONTENT_TYPE, value("application/json"));
        map.append("mcp-param-region", value("eu"));
        map.append(ACCEPT, value("text/event-stream"));
        map.append("mcp-param-region", value("us"));
        let fields = Fields::from(map.clone());
        assert_eq!(fields.len(), 4);
        for name in map.keys() {
            assert_eq!(fields.get(name), map.get(name), "{name}");
            let all: Vec<_> = fields.get_all(name).collect();
            let mapped: Vec<_> = map.get_all(name).iter().collect();
            assert_eq!(all, mapped, "{name}");
        }
        assert_eq!(fields.get("MCP-Param-Region"), Some(&value("eu")));
        assert_eq!(fields.get_all("mcp-param-region").count(), 2);
        assert_eq!(fields.get("Content-Type"), Some(&value("application/json")));
        assert!(fields.get(AUTHORIZATION).is_none() && !fields.contains("authorization"));
        assert_eq!(fields.into_map(), map);
    }
}
