//! A request's header fields as a short list, in the order they are set.
//!
//! A request to an upstream carries a handful of fields (content type, accept,
//! the MCP headers, a session, the configured and forwarded ones), built once and
//! written once. A `HeaderMap` hashes every name it is given, to find it again
//! in constant time; here nothing is looked up more than once or twice, so the
//! fields are a list: `insert` replaces earlier values of the name as the map's
//! does, by comparing names (a standard name compares as a small integer).

use http::{HeaderMap, HeaderName, HeaderValue};

/// Header fields in the order they were set.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Fields(Vec<(HeaderName, HeaderValue)>);

impl Fields {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    /// `name` set to `value` alone: any earlier value of it goes.
    pub(super) fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        if self.contains(&name) {
            self.0.retain(|(n, _)| *n != name);
        }
        self.0.push((name, value));
    }

    /// One more value of `name`, after any it has.
    pub(super) fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.push((name, value));
    }

    pub(super) fn contains(&self, name: &HeaderName) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    /// The fields as a map (the HTTP/2 client takes one), each name's values in
    /// the order they were set.
    pub(super) fn into_map(self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.0.len());
        for (n, v) in self.0 {
            map.append(n, v);
        }
        map
    }

    /// Room for no more than the fields it holds: a slow call keeps its
    /// request's fields (for a retry) as long as it runs.
    pub(super) fn fitted(mut self) -> Self {
        self.0.shrink_to_fit();
        self
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
}
