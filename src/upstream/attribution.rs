//! Which task or call a message from an upstream is about: the upstream task a
//! `tasks/*` request names (`upstream_task_of`), the task a request to the client
//! names (`related_task`), and the rule that places a request to the client with
//! no link of its own (`attribute`), or refuses it (`unattributed`).

use serde_json::Value;

use super::call::ServerRequest;
use tasklift_protocol::jsonrpc::{Request, RpcError};

/// The upstream task a `tasks/get`, `tasks/result` or `tasks/cancel` is about.
pub fn upstream_task_of(req: &Request) -> Option<&str> {
    matches!(
        req.method.as_str(),
        "tasks/get" | "tasks/result" | "tasks/cancel"
    )
    .then(|| req.str_param("taskId"))
    .flatten()
}

/// The task a server-to-client request says it belongs to (`related-task`).
pub fn related_task(params: &Value) -> Option<&str> {
    params
        .get("_meta")?
        .get("io.modelcontextprotocol/related-task")?
        .get("taskId")?
        .as_str()
}

/// Which call in flight a server-to-client request that arrived with no link of its
/// own belongs to (a stdio child's request, or one on a legacy session's GET stream).
/// `calls` are the calls on that session or child that may ask, each with the
/// upstream task it follows, if any. A request about a task (`related-task`) is
/// that task's follower's and no other's; one naming no task (2025-11-25 says a
/// task's requests MUST name it) is the only plain call's. `Err(n)`: it cannot be
/// proven, with `n` plain candidates; the caller refuses it ([`unattributed`]), as
/// guessing could show one caller's prompt to another and hand back their answer.
pub fn attribute<'a, K>(
    params: &Value,
    calls: impl IntoIterator<Item = (K, Option<&'a str>)>,
) -> Result<K, usize> {
    let related = related_task(params);
    let mut plain = None;
    let mut n = 0;
    for (k, task) in calls {
        match (related, task) {
            (Some(t), Some(f)) if t == f => return Ok(k),
            (None, None) => {
                n += 1;
                plain.get_or_insert(k);
            }
            _ => {}
        }
    }
    match plain {
        Some(k) if n == 1 => Ok(k),
        _ if related.is_some() => Err(0),
        _ => Err(n),
    }
}

/// Refuse a server-to-client request [`attribute`] could not place (`n` candidates),
/// saying why in the log and to the server.
pub fn unattributed(upstream: &str, req: ServerRequest, n: usize) {
    let method = req.method.clone();
    let why = if n == 0 {
        tracing::warn!(%upstream, %method, "the upstream asked the client something with no call in flight that it could belong to; refused");
        format!("no client is waiting to answer {method}")
    } else {
        tracing::warn!(%upstream, %method, calls = n,
            "the upstream asked the client something naming none of the calls in flight; refused (for stdio, set isolate_input)");
        format!("tasklift cannot tell which of the calls in flight this {method} belongs to, so it asks no client")
    };
    req.answer(Err(RpcError::new(
        tasklift_protocol::jsonrpc::METHOD_NOT_FOUND,
        why,
    )));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_goes_only_to_a_call_it_can_be_proven_to_belong_to() {
        let tagged = json!({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}});
        let plain = json!({});
        // Naming no task: the only call that follows none, or nobody.
        assert_eq!(attribute(&plain, [(1, None), (2, Some("t1"))]), Ok(1));
        assert_eq!(attribute(&plain, [(1, None), (2, None)]), Err(2));
        assert_eq!(attribute(&plain, [(2, Some("t1"))]), Err(0));
        // Naming a task: its follower, never a bystander.
        assert_eq!(attribute(&tagged, [(1, None), (2, Some("t1"))]), Ok(2));
        assert_eq!(attribute(&tagged, [(1, None)]), Err(0));
        assert_eq!(attribute(&tagged, [(1, None), (3, Some("t2"))]), Err(0));
    }
}
