//! `x-mcp-header` annotations learned from an upstream's `tools/list` result
//! (`ToolCatalog::observe`), then a `tools/call` checked against them
//! (`front::params::check`). Input: a `tools/list` response as one JSON line, then
//! `name: value` header lines, a blank line, and the call's JSON body.
#![no_main]

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tasklift::front::params;
use tasklift::upstream::tools::ToolCatalog;
use tasklift::upstream::{CallContext, Era, Upstream, UpstreamCall, UpstreamError, UpstreamFuture};
use tasklift_fuzz::headers_and_body;
use tasklift_protocol::jsonrpc::{Outcome, Request};

/// An upstream that is never reachable (learning from it fails at once).
struct Nowhere;

fn down<'a, T: 'a>() -> UpstreamFuture<'a, T> {
    Box::pin(async {
        Err(UpstreamError::Unreachable {
            name: "fuzz".into(),
            message: "no upstream".into(),
        })
    })
}

impl Upstream for Nowhere {
    fn name(&self) -> &str {
        "fuzz"
    }
    fn era<'a>(&'a self, _: &'a CallContext) -> UpstreamFuture<'a, Era> {
        down()
    }
    fn call<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, UpstreamCall> {
        down()
    }
    fn notify<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, ()> {
        down()
    }
    fn discover<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, Outcome> {
        down()
    }
    fn close_idle<'a>(&'a self, _: bool) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

fuzz_target!(|data: &[u8]| {
    let (list, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(p) => (&data[..p], &data[p + 1..]),
        None => (data, &[][..]),
    };
    let th = ToolCatalog::default();
    if let Ok(v) = serde_json::from_slice::<Value>(list) {
        th.observe(&v);
    }
    let (h, body) = headers_and_body(rest);
    let Some(Ok(req)) = serde_json::from_slice(body).ok().map(Request::from_value) else {
        return;
    };
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    });
    let _ = rt.block_on(params::check(
        &th,
        &Nowhere,
        &h,
        &req,
        &CallContext::default(),
    ));
});
