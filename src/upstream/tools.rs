//! What an upstream says its tools are, learned from the `tools/list` results
//! tasklift relays (or, for a tool not seen yet, by reading the upstream's
//! `tools/list` itself): each tool's `x-mcp-header` parameters (SEP-2243, checked
//! at the front door by `front::params`) and its 2025-era `execution.taskSupport`
//! ([`TaskSupport`]: a tool a legacy upstream runs only as its own task is called
//! through [`super::task_bridge`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{CallContext, Upstream};
use tasklift_protocol::jsonrpc::Request;

/// A tool not in the catalog triggers a new `tools/list` at most this often.
const RELEARN: Duration = Duration::from_secs(5);
/// Longest wait for the upstream's `tools/list`; past it the call is not checked.
const LEARN_TIMEOUT: Duration = Duration::from_secs(5);
/// Most `tools/list` pages read.
const MAX_PAGES: usize = 20;

/// One annotated parameter: where it sits in `arguments`, and its header name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Annotated {
    /// Keys from `arguments` down to the value.
    pub(crate) path: Vec<String>,
    /// The header name after `Mcp-Param-` (lower case).
    pub(crate) header: String,
}

/// How a tool may run as a 2025-11-25 task, as its upstream lists it
/// (`execution.taskSupport`; absent means forbidden).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// `"forbidden"` or absent: a plain call.
    #[default]
    Forbidden,
    /// `"optional"`: either.
    Optional,
    /// `"required"`: only as a task (`params.task`); a plain call is refused.
    Required,
}

impl TaskSupport {
    /// What a `tools/list` entry declares.
    pub fn of(tool: &Value) -> Self {
        match tool
            .get("execution")
            .and_then(|e| e.get("taskSupport"))
            .and_then(Value::as_str)
        {
            Some("required") => Self::Required,
            Some("optional") => Self::Optional,
            _ => Self::Forbidden,
        }
    }
}

/// What is known of one tool.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    /// Its `x-mcp-header` parameters.
    pub(crate) headers: Vec<Annotated>,
    /// Its task support as the upstream lists it.
    task_support: TaskSupport,
}

impl Known {
    fn of(tool: &Value) -> Self {
        Self {
            headers: tool.get("inputSchema").map(annotations).unwrap_or_default(),
            task_support: TaskSupport::of(tool),
        }
    }
}

/// Tools by name, and when tasklift last asked the upstream.
type Learned = (Option<Instant>, HashMap<String, Known>);

/// What tasklift learned of one upstream's tools from its `tools/list`: their
/// `x-mcp-header` annotations and their 2025-era task support. Clones share it.
#[derive(Default, Clone)]
pub struct ToolCatalog {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    learned: std::sync::RwLock<Option<Learned>>,
    fetching: tokio::sync::Mutex<()>,
}

/// The annotated parameters of a tool's `inputSchema`, reachable through `properties`
/// only (anything else makes the annotation invalid, and it is not enforced).
fn annotations(schema: &Value) -> Vec<Annotated> {
    fn walk(node: &Value, path: &mut Vec<String>, out: &mut Vec<Annotated>) {
        let Some(props) = node.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (k, v) in props {
            path.push(k.clone());
            if let Some(h) = v.get("x-mcp-header").and_then(Value::as_str) {
                let token = !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if token {
                    out.push(Annotated {
                        path: path.clone(),
                        header: h.to_ascii_lowercase(),
                    });
                }
            }
            walk(v, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

impl ToolCatalog {
    /// What is known of the tool, and whether asking the upstream is allowed now.
    pub(crate) fn lookup(&self, tool: &str) -> (Option<Known>, bool) {
        let g = self.inner.learned.read().expect("lock");
        match g.as_ref() {
            Some((asked, tools)) => (
                tools.get(tool).cloned(),
                asked.is_none_or(|t| t.elapsed() > RELEARN),
            ),
            None => (None, true),
        }
    }

    /// Learn from a `tools/list` response (one page) as the upstream sent it, before
    /// it is rewritten for the client's era (see `dispatch`).
    pub fn observe(&self, msg: &Value) {
        let Some(tools) = msg
            .get("result")
            .and_then(|r| r.get("tools"))
            .and_then(Value::as_array)
        else {
            return;
        };
        let mut g = self.inner.learned.write().expect("lock");
        let (_, known) = g.get_or_insert_with(|| (None, HashMap::new()));
        for t in tools {
            if let Some(name) = t.get("name").and_then(Value::as_str) {
                known.insert(name.to_string(), Known::of(t));
            }
        }
    }

    /// The tool's task support as last listed, if it was; never asks the upstream.
    pub fn listed_task_support(&self, tool: &str) -> Option<TaskSupport> {
        let g = self.inner.learned.read().expect("lock");
        g.as_ref()?.1.get(tool).map(|k| k.task_support)
    }

    /// The tool's task support as its upstream lists it. A tool not seen yet makes
    /// tasklift read the upstream's `tools/list` (at most every few seconds); a tool
    /// the upstream does not list is taken as `Forbidden`.
    pub async fn task_support(
        &self,
        up: &dyn Upstream,
        req: &Request,
        ctx: &CallContext,
    ) -> TaskSupport {
        let tool = req.str_param("name").unwrap_or_default();
        if let Some(s) = self.listed_task_support(tool) {
            return s;
        }
        if !self.lookup(tool).1 {
            return TaskSupport::Forbidden;
        }
        let meta = req.meta().cloned().unwrap_or_default();
        self.learn(up, &meta, ctx).await;
        self.listed_task_support(tool).unwrap_or_default()
    }

    /// Read every page of the upstream's `tools/list` with the caller's `_meta`.
    pub(crate) async fn learn(
        &self,
        up: &dyn Upstream,
        meta: &Map<String, Value>,
        ctx: &CallContext,
    ) {
        let _one = self.inner.fetching.lock().await;
        // Another call may have asked while this one waited for the lock.
        if !self.lookup("").1 {
            return;
        }
        let mut tools = HashMap::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_PAGES {
            let mut params = Map::new();
            params.insert("_meta".into(), json!(meta));
            if let Some(c) = &cursor {
                params.insert("cursor".into(), c.clone());
            }
            let req = Request {
                id: Some(json!("tasklift-tool-headers")),
                method: "tools/list".into(),
                params: params.into(),
            };
            let asked = async {
                match up.call(&req, ctx).await {
                    Ok(call) => call.outcome(up.name()).await,
                    Err(e) => Err(e.to_rpc()),
                }
            };
            let outcome = match tokio::time::timeout(LEARN_TIMEOUT, asked).await {
                Ok(o) => o,
                Err(_) => {
                    tracing::debug!(
                        "the upstream's tools/list took too long; Mcp-Param headers not checked"
                    );
                    break;
                }
            };
            let page = match outcome {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "could not read tools/list for Mcp-Param checks");
                    break;
                }
            };
            for t in page
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = t.get("name").and_then(Value::as_str) {
                    tools.insert(name.to_string(), Known::of(t));
                }
            }
            cursor = page.get("nextCursor").filter(|c| !c.is_null()).cloned();
            if cursor.is_none() {
                break;
            }
        }
        let mut g = self.inner.learned.write().expect("lock");
        let (asked, known) = g.get_or_insert_with(|| (None, HashMap::new()));
        *asked = Some(Instant::now());
        known.extend(tools);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_found_through_properties_only() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"tier": {"type": "integer", "x-mcp-header": "Tier"}}},
            "list": {"type": "array", "items": {"properties": {"x": {"x-mcp-header": "X"}}}},
            "bad": {"type": "string", "x-mcp-header": "has space"},
        }});
        let a = annotations(&schema);
        assert_eq!(
            a,
            vec![
                Annotated {
                    path: vec!["opts".into(), "tier".into()],
                    header: "tier".into()
                },
                Annotated {
                    path: vec!["region".into()],
                    header: "region".into()
                },
            ]
        );
    }

    #[test]
    fn task_support_is_learned_from_each_listing() {
        let page = |support: Option<&str>| {
            let mut t = json!({"name": "job", "inputSchema": {"type": "object"}});
            if let Some(s) = support {
                t["execution"] = json!({"taskSupport": s});
            }
            json!({"result": {"tools": [t]}})
        };
        let th = ToolCatalog::default();
        assert_eq!(th.listed_task_support("job"), None);
        th.clone().observe(&page(Some("required")));
        assert_eq!(th.listed_task_support("job"), Some(TaskSupport::Required));
        th.observe(&page(None));
        assert_eq!(th.listed_task_support("job"), Some(TaskSupport::Forbidden));
        assert_eq!(
            TaskSupport::of(&json!({"execution": {"taskSupport": "optional"}})),
            TaskSupport::Optional
        );
    }
}
