//! Server-Sent Events: an incremental parser for upstream streams and the encoder
//! for tasklift's own streams. No I/O.

/// Incremental SSE parser: feed bytes, take complete `data` payloads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes not yet forming a complete line.
    buf: Vec<u8>,
    /// The data of the event being read: its `data:` lines, joined by `\n`.
    data: String,
    /// Whether the current event had any data line.
    has_data: bool,
    /// The id of the last complete event (`id:`), for resuming with `Last-Event-ID`.
    pub last_event_id: Option<String>,
    /// The id of the event being read; it counts once the event is complete.
    pending_id: Option<String>,
    /// The reconnection delay the server asked for (`retry:`), in milliseconds.
    pub retry_ms: Option<u64>,
}

impl SseParser {
    /// Feed a chunk; returns the data of every event completed by it. Lines are
    /// read where they lie (in the chunk itself when no partial line is waiting),
    /// and only a trailing partial line is kept.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        let joined;
        let input: &[u8] = if self.buf.is_empty() {
            chunk
        } else {
            self.buf.extend_from_slice(chunk);
            joined = std::mem::take(&mut self.buf);
            &joined
        };
        let mut start = 0;
        while let Some(n) = memchr::memchr(b'\n', &input[start..]) {
            let line = &input[start..start + n];
            start += n + 1;
            self.line(line.strip_suffix(b"\r").unwrap_or(line), &mut events);
        }
        self.buf = input[start..].to_vec();
        events
    }

    /// One complete line, without its line ending.
    fn line(&mut self, line: &[u8], events: &mut Vec<String>) {
        // UTF-8 (checked a word at a time) as it is; anything else made whole.
        let line = match std::str::from_utf8(line) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        if line.is_empty() {
            if let Some(id) = self.pending_id.take() {
                self.last_event_id = Some(id);
            }
            if std::mem::take(&mut self.has_data) {
                events.push(std::mem::take(&mut self.data));
            }
        } else if let Some(rest) = line.strip_prefix("data:") {
            self.data_line(rest);
        } else if let Some(rest) = line.strip_prefix("id:") {
            let id = rest.strip_prefix(' ').unwrap_or(rest);
            // An id containing NUL is ignored, as the SSE standard says.
            if !id.contains('\0') {
                self.pending_id = Some(id.to_string());
            }
        } else if let Some(rest) = line.strip_prefix("retry:") {
            if let Ok(ms) = rest.trim().parse() {
                self.retry_ms = Some(ms);
            }
        }
        // comments (":") and event: carry nothing tasklift needs.
    }

    fn data_line(&mut self, rest: &str) {
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        self.has_data = true;
    }

    /// At end of stream: the last event if it was not terminated by a blank line.
    pub fn finish(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest);
            if let Some(d) = line.trim_end_matches('\r').strip_prefix("data:") {
                self.data_line(d);
            }
        }
        std::mem::take(&mut self.has_data).then(|| std::mem::take(&mut self.data))
    }
}

/// Encode one SSE event carrying a JSON message.
pub fn encode_event(json: &str) -> String {
    let mut s = String::with_capacity(json.len() + 16);
    s.push_str("event: message\n");
    for line in json.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    s
}

/// Encode one SSE event with an id: a JSON message, or (with `json` empty) a
/// priming event that only carries the id and the reconnection delay.
pub fn encode_tagged(id: &str, json: Option<&str>, retry_ms: Option<u64>) -> String {
    let mut s = String::with_capacity(json.map_or(0, str::len) + 48);
    s.push_str("id: ");
    s.push_str(id);
    s.push('\n');
    if let Some(ms) = retry_ms {
        s.push_str(&format!("retry: {ms}\n"));
    }
    match json {
        Some(json) => {
            s.push_str("event: message\n");
            for line in json.split('\n') {
                s.push_str("data: ");
                s.push_str(line);
                s.push('\n');
            }
        }
        None => s.push_str("data: \n"),
    }
    s.push('\n');
    s
}

/// An SSE comment used as a keep-alive.
pub const KEEPALIVE: &str = ": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_chunks_and_crlf() {
        let mut p = SseParser::default();
        assert!(p.feed(b"event: message\r\nda").is_empty());
        let ev = p.feed(b"ta: {\"a\":1}\r\n\r\n: comment\n\ndata: x\ndata: y\n\n");
        assert_eq!(ev, vec!["{\"a\":1}".to_string(), "x\ny".to_string()]);
    }

    #[test]
    fn lines_split_anywhere_even_inside_a_character_come_out_whole() {
        let text = "id: 7\nretry: 250\ndata: {\"é\":1}\ndata: two\n\ndata: \n\n";
        for cut in 0..text.len() {
            for cut2 in cut..text.len() {
                let mut p = SseParser::default();
                let b = text.as_bytes();
                let mut ev = p.feed(&b[..cut]);
                ev.extend(p.feed(&b[cut..cut2]));
                ev.extend(p.feed(&b[cut2..]));
                assert_eq!(
                    ev,
                    vec!["{\"é\":1}\ntwo".to_string(), String::new()],
                    "{cut} {cut2}"
                );
                assert_eq!(p.last_event_id.as_deref(), Some("7"));
                assert_eq!(p.retry_ms, Some(250));
                assert_eq!(p.finish(), None);
            }
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let mut p = SseParser::default();
        assert_eq!(
            p.feed(b"data: a\xffb\n\ndata: d\xc3\xa9j\xc3\xa0\n\n"),
            vec!["a\u{fffd}b", "d\u{e9}j\u{e0}"]
        );
    }

    #[test]
    fn finish_returns_unterminated_event() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: last").is_empty());
        assert_eq!(p.finish().as_deref(), Some("last"));
    }

    #[test]
    fn remembers_ids_and_retry() {
        let mut p = SseParser::default();
        let ev = p.feed(encode_tagged("s1_0", None, Some(500)).as_bytes());
        assert_eq!(ev, vec![String::new()]);
        assert_eq!(p.last_event_id.as_deref(), Some("s1_0"));
        assert_eq!(p.retry_ms, Some(500));
        let ev = p.feed(encode_tagged("s1_1", Some("{}"), None).as_bytes());
        assert_eq!(ev, vec!["{}".to_string()]);
        assert_eq!(p.last_event_id.as_deref(), Some("s1_1"));
    }

    #[test]
    fn an_event_cut_short_does_not_move_the_resumption_point() {
        let mut p = SseParser::default();
        p.feed(b"id: 6\ndata: {}\n\nid: 7\ndata: {\"partial");
        assert_eq!(p.last_event_id.as_deref(), Some("6"));
        p.finish();
        assert_eq!(
            p.last_event_id.as_deref(),
            Some("6"),
            "event 7 never arrived whole: resume after 6"
        );
    }

    #[test]
    fn encodes_round_trip() {
        let mut p = SseParser::default();
        assert_eq!(
            p.feed(encode_event("{\"x\":\"a\nb\"}").as_bytes()),
            vec!["{\"x\":\"a\nb\"}"]
        );
    }
}
