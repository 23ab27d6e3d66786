//! A request body read in one pass over its bytes, for where its members lie.
//!
//! `serde_json` reads a body through its visitor machinery: every member and
//! value is a call through `deserialize_any`, skipped values included. A proxied
//! `tools/call` needs only where the top-level members, the params' members and
//! `_meta`'s lie, and that the whole body is JSON. [`scan`] checks the body's
//! syntax here, noting those places, in a few instructions a byte.
//!
//! It is sound one way only: a body it accepts is one `serde_json` reads, to the
//! same members. Anything it is not sure of (a repeated or escaped member name
//! where it notes places, a number with an exponent or of 300 digits, a `\u`
//! escape of a surrogate not in a pair, nesting past 100, any syntax error) it
//! leaves to `serde_json`, which reads the body as before and gives its own
//! errors.

/// A range of the body.
pub type Span = (usize, usize);

/// One member of an object: its name without the quotes, and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member {
    pub name: Span,
    pub value: Span,
    /// Whether the value is a string without escapes.
    pub plain: bool,
}

/// An object whose members were noted: where it lies, and its members in order.
#[derive(Debug, Default, PartialEq)]
pub struct Object {
    pub span: Span,
    pub members: Vec<Member>,
}

/// Where a body's members lie: the top level's, the params' (a response's
/// result, with [`scan_response`]) when an object, and their `_meta`'s when an
/// object.
#[derive(Debug, Default, PartialEq)]
pub struct Layout {
    pub top: Object,
    pub params: Option<Object>,
    pub meta: Option<Object>,
}

/// How deep the scan follows nesting (`serde_json` reads 128 levels).
const MAX_DEPTH: usize = 100;

/// Digits a number may have here (`serde_json` refuses past about 309).
const MAX_DIGITS: usize = 300;

/// The body's layout, when it is a JSON object the scan is sure of; `None`
/// leaves the body to `serde_json`.
pub fn scan(body: &str) -> Option<Layout> {
    scan_as(body, Role::Top, b"params")
}

/// A response's layout: its `result`'s members in `params`, their `_meta`'s in
/// `meta`.
pub fn scan_response(body: &str) -> Option<Layout> {
    scan_as(body, Role::Top, b"result")
}

/// The layout of a params object's text alone (`params` and `meta` noted).
pub fn scan_params(text: &str) -> Option<Layout> {
    scan_as(text, Role::Params, b"params")
}

/// Calls `each(name, value)` with each member of the object `text`, in order:
/// the name as written, the value's text. `None` (after any calls) when the
/// scan is not sure of the object or a name has escapes: the caller then reads
/// it with `serde_json`. A repeated name is passed each time; `serde_json`
/// keeps the last.
pub fn each_member<'a>(text: &'a str, mut each: impl FnMut(&'a str, &'a str)) -> Option<()> {
    Scan::whole(text, b"", |s| {
        s.members(|s, name, escaped| {
            let at = s.i;
            s.value()?;
            (!escaped).then(|| each(&text[name.0..name.1], &text[at..s.i]))
        })
    })
}

fn scan_as(body: &str, role: Role, inner: &'static [u8]) -> Option<Layout> {
    Scan::whole(body, inner, |s| {
        s.object(role)?;
        Some(std::mem::take(&mut s.layout))
    })
}

/// Whose members an object's are, for the layout.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Top,
    Params,
    Meta,
    Other,
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    /// The top-level member whose members are noted (`params`, `result`).
    inner: &'static [u8],
    layout: Layout,
}

impl<'a> Scan<'a> {
    /// What `read` makes of `text` from its `{`, when `text` is that one
    /// object with nothing but whitespace around it.
    fn whole<R>(
        text: &'a str,
        inner: &'static [u8],
        read: impl FnOnce(&mut Self) -> Option<R>,
    ) -> Option<R> {
        let mut s = Scan {
            b: text.as_bytes(),
            i: 0,
            depth: 0,
            inner,
            layout: Layout::default(),
        };
        s.ws();
        if s.peek() != Some(b'{') {
            return None;
        }
        let read = read(&mut s)?;
        s.ws();
        (s.i == s.b.len()).then_some(read)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// The members of an object at `{`, through its `}`: `member` reads each
    /// value, given the name's range and whether the name has escapes.
    fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, Span, bool) -> Option<()>,
    ) -> Option<()> {
        self.enter()?;
        self.ws();
        if self.eat(b'}').is_none() {
            loop {
                self.ws();
                let (name, escaped) = self.string()?;
                self.ws();
                self.eat(b':')?;
                self.ws();
                member(self, name, escaped)?;
                self.ws();
                if self.eat(b',').is_none() {
                    self.eat(b'}')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// An object at `{`; its members noted when `role` is one the layout keeps.
    fn object(&mut self, role: Role) -> Option<()> {
        let start = self.i;
        if role == Role::Other {
            return self.members(|s, _, _| s.value().map(drop));
        }
        let mut members = Vec::with_capacity(8);
        self.members(|s, name, escaped| {
            if escaped {
                return None;
            }
            let at = s.i;
            let inner = match (role, &s.b[name.0..name.1]) {
                (Role::Top, n) if n == s.inner => Role::Params,
                (Role::Params, b"_meta") => Role::Meta,
                _ => Role::Other,
            };
            let plain = if inner != Role::Other && s.peek() == Some(b'{') {
                s.object(inner)?;
                false
            } else {
                s.value()?
            };
            let b = s.b;
            let name_is = |m: &Member| {
                m.name.1 - m.name.0 == name.1 - name.0 && b[m.name.0..m.name.1] == b[name.0..name.1]
            };
            if members.iter().any(name_is) {
                return None;
            }
            members.push(Member {
                name,
                value: (at, s.i),
                plain,
            });
            Some(())
        })?;
        let object = Object {
            span: (start, self.i),
            members,
        };
        match role {
            Role::Top => self.layout.top = object,
            Role::Params => self.layout.params = Some(object),
            Role::Meta => self.layout.meta = Some(object),
            Role::Other => {}
        }
        Some(())
    }

    fn enter(&mut self) -> Option<()> {
        self.i += 1;
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// A value; `true` when it is a string without escapes.
    fn value(&mut self) -> Option<bool> {
        match self.peek()? {
            b'"' => return self.string().map(|(_, escaped)| !escaped),
            b'{' => self.object(Role::Other),
            b'[' => self.array(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
        .map(|()| false)
    }

    fn array(&mut self) -> Option<()> {
        self.enter()?;
        self.ws();
        if self.eat(b']').is_none() {
            loop {
                self.ws();
                self.value()?;
                self.ws();
                if self.eat(b',').is_none() {
                    self.eat(b']')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end) == Some(word)).then(|| self.i = end)
    }

    /// `-?(0|[1-9][0-9]*)(.[0-9]+)?`; an exponent is left to `serde_json`.
    fn number(&mut self) -> Option<()> {
        let start = self.i;
        let digits = |s: &mut Self| {
            let from = s.i;
            while matches!(s.peek(), Some(b'0'..=b'9')) {
                s.i += 1;
            }
            s.i > from
        };
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.eat(b'.').is_some() && !digits(self) {
            return None;
        }
        let fine = !matches!(self.peek(), Some(b'e' | b'E')) && self.i - start < MAX_DIGITS;
        fine.then_some(())
    }

    /// A string at its opening quote: the range of its text, and whether it has
    /// escapes.
    fn string(&mut self) -> Option<(Span, bool)> {
        self.eat(b'"')?;
        let b = self.b;
        let start = self.i;
        let mut escaped = false;
        loop {
            let at = special_at(b, self.i)?;
            match b[at] {
                b'"' => {
                    self.i = at + 1;
                    return Some(((start, at), escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.i = at;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// An escape at its backslash: one of `"\/bfnrt`, or `\u` and four hex
    /// digits, a surrogate only as the first of a pair followed by the second.
    fn escape(&mut self) -> Option<()> {
        match *self.b.get(self.i + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                self.i += 2;
                Some(())
            }
            b'u' => match self.hex(self.i + 2)? {
                0xD800..=0xDBFF => {
                    let low = (self.b.get(self.i + 6..self.i + 8) == Some(b"\\u"))
                        .then(|| self.hex(self.i + 8))??;
                    (0xDC00..=0xDFFF).contains(&low).then(|| self.i += 12)
                }
                0xDC00..=0xDFFF => None,
                _ => {
                    self.i += 6;
                    Some(())
                }
            },
            _ => None,
        }
    }

    fn hex(&self, at: usize) -> Option<u32> {
        let digits = self.b.get(at..at + 4)?;
        digits.iter().try_fold(0, |n, &c| {
            let d = (c as char).to_digit(16)?;
            Some(n * 16 + d)
        })
    }
}

/// Where the first byte from `at` on that a string cannot hold as it is lies
/// (`"`, `\`, or a control character): eight bytes at a time, then the last
/// few one by one.
fn special_at(b: &[u8], mut at: usize) -> Option<usize> {
    while let Some(word) = b.get(at..at + 8) {
        let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let found = crate::compact::escape_bytes(word);
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = b.get(at..)?;
    let found = tail
        .iter()
        .position(|&c| c < 0x20 || c == b'"' || c == b'\\');
    found.map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(body: &str, s: Span) -> &str {
        &body[s.0..s.1]
    }

    #[test]
    fn notes_where_the_members_lie() {
        let body = r#" { "jsonrpc" : "2.0", "id":7,"method":"tools/call","params":{"name":"t\"x","arguments":{"a":[1,-2.5,{"b":null}],"a":true},"_meta":{"k":"v","n":{"x":[]}}},"extra":[] } "#;
        let l = scan(body).expect("scanned");
        let names: Vec<&str> = l.top.members.iter().map(|m| text(body, m.name)).collect();
        assert_eq!(names, ["jsonrpc", "id", "method", "params", "extra"]);
        assert_eq!(text(body, l.top.members[0].value), r#""2.0""#);
        assert_eq!(text(body, l.top.members[1].value), "7");
        let params = l.params.expect("params");
        assert_eq!(text(body, params.span), text(body, l.top.members[3].value));
        assert_eq!(text(body, params.members[0].value), r#""t\"x""#);
        assert_eq!(
            text(body, params.members[1].value),
            r#"{"a":[1,-2.5,{"b":null}],"a":true}"#
        );
        let meta = l.meta.expect("meta");
        assert_eq!(text(body, meta.span), r#"{"k":"v","n":{"x":[]}}"#);
        assert_eq!(text(body, meta.members[1].value), r#"{"x":[]}"#);
    }

    #[test]
    fn finds_a_string_end_at_every_offset() {
        // A string's end, escape or control character at each place within and
        // across the eight-byte words, and in the last few bytes of the body.
        for len in 0..40 {
            for at in 0..=len {
                for special in ["", "\\\"", "\\n", "\u{1}", "\u{e9}"] {
                    let mut inner = "x".repeat(len);
                    inner.insert_str(at, special);
                    for pad in ["", "      ", "\t\t\t\t\t\t\t\t\t"] {
                        let body = format!(r#"{{"k":"{inner}"}}{pad}"#);
                        let parsed = serde_json::from_str::<serde_json::Value>(&body);
                        let layout = scan(&body);
                        assert_eq!(layout.is_some(), parsed.is_ok(), "{body:?}");
                        if let Some(l) = layout {
                            let value = text(&body, l.top.members[0].value);
                            assert_eq!(value, format!(r#""{inner}""#));
                            let plain = !special.starts_with('\\');
                            assert_eq!(l.top.members[0].plain, plain, "{body:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn accepts_only_what_serde_json_reads() {
        let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(99), "]".repeat(99));
        let too_deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(100), "]".repeat(100));
        let long = format!(r#"{{"a":{}}}"#, "1".repeat(300));
        let bodies: &[(&str, bool)] = &[
            (r#"{}"#, true),
            (r#"{"a":"\u00e9\ud83d\ude00\n\/"}"#, true),
            (r#"{"a":0.5,"b":-0,"c":[true,false,null]}"#, true),
            (&deep, true),
            (&too_deep, false),
            (&long, false),
            (r#"{"a":1e5}"#, false),
            (r#"{"a":01}"#, false),
            (r#"{"a":1.}"#, false),
            (r#"{"a":-}"#, false),
            (r#"{"a":"\ud800"}"#, false),
            (r#"{"a":"\udc00"}"#, false),
            (r#"{"a":"\ud800\u0041"}"#, false),
            (r#"{"a":"\x"}"#, false),
            ("{\"a\":\"tab\there\"}", false),
            (r#"{"a":1,}"#, false),
            (r#"{"a" 1}"#, false),
            (r#"{"a":tru}"#, false),
            (r#"{"a":1} x"#, false),
            (r#"[{"a":1}]"#, false),
            (r#"{"id":1,"id":2}"#, false),
            (r#"{"params":{"name":1,"name":2}}"#, false),
            (r#"{"params":{"_meta":{"k":1,"k":2}}}"#, false),
            (r#"{"params":{"arguments":{"k":1,"k":2}}}"#, true),
            (r#"{"\u0069d":1}"#, false),
            (r#"{"params":{"arguments":{"\u0069d":1}}}"#, true),
            ("{\"a\":\"\u{e9}\u{1F600}\"}", true),
            ("{\u{a0}}", false),
        ];
        for (body, sure) in bodies {
            assert_eq!(scan(body).is_some(), *sure, "{body}");
            if *sure {
                serde_json::from_str::<serde_json::Value>(body).expect("serde_json reads it");
            }
        }
    }
}
