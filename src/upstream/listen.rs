//! An upstream's change notifications for a `subscriptions/listen` stream
//! (`Listening`): which filter field a notification belongs to, and what a legacy
//! server's capabilities can honour.

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::call::Canceller;

/// An upstream's change notifications for one `subscriptions/listen` stream.
pub struct Listening {
    /// The filter fields the upstream agreed to honour.
    pub agreed: Map<String, Value>,
    /// Notifications as they arrive (full messages).
    pub events: mpsc::Receiver<Value>,
    /// Ends the upstream side when dropped.
    pub canceller: Canceller,
}

impl Listening {
    /// Nothing agreed, nothing to receive.
    pub fn none() -> Self {
        Self {
            agreed: Map::new(),
            events: mpsc::channel(1).1,
            canceller: Canceller::none(),
        }
    }
}

/// Which SubscriptionFilter field a change notification belongs to, and whether
/// `filter` asked for it.
pub fn notification_wanted(filter: &Map<String, Value>, n: &Value) -> bool {
    let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
    match n.get("method").and_then(Value::as_str) {
        Some("notifications/tools/list_changed") => flag("toolsListChanged"),
        Some("notifications/prompts/list_changed") => flag("promptsListChanged"),
        Some("notifications/resources/list_changed") => flag("resourcesListChanged"),
        Some("notifications/resources/updated") => {
            let uri = n.get("params").and_then(|p| p.get("uri"));
            filter
                .get("resourceSubscriptions")
                .and_then(Value::as_array)
                .is_some_and(|a| uri.is_some_and(|u| a.contains(u)))
        }
        _ => false,
    }
}

/// The part of `filter` a legacy server's capabilities can honour.
pub fn agreed_by_capabilities(caps: &Value, filter: &Map<String, Value>) -> Map<String, Value> {
    let cap = |a: &str, b: &str| {
        caps.get(a)
            .and_then(|c| c.get(b))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mut agreed = Map::new();
    for (field, (a, b)) in [
        ("toolsListChanged", ("tools", "listChanged")),
        ("promptsListChanged", ("prompts", "listChanged")),
        ("resourcesListChanged", ("resources", "listChanged")),
    ] {
        if filter.get(field).and_then(Value::as_bool) == Some(true) && cap(a, b) {
            agreed.insert(field.into(), json!(true));
        }
    }
    if let Some(uris) = filter
        .get("resourceSubscriptions")
        .filter(|_| cap("resources", "subscribe"))
    {
        agreed.insert("resourceSubscriptions".into(), uris.clone());
    }
    agreed
}
