//! The retrofit case: tasklift in front of a 2025-11-25 server with sessions (the
//! baseline upstream with `--legacy`), answering `tools/call` as one JSON body and,
//! on a second upstream, as an SSE stream (the SDKs' default), each beside nginx in
//! front of the same upstream with a 2025-11-25 client (nginx forwards; it cannot
//! serve a 2026-07-28 client from a legacy server, so its client is the one the
//! server speaks to). tasklift is measured with a 2026-07-28 client (era
//! translation, tasklift's own session per caller) and with 2025-11-25 clients, one
//! session per connection.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::components::{find_nginx, start_nginx, start_upstream, Tasklift, Via};
use super::measure::Cpu;
use crate::loadgen::Workload;
use crate::plan::{
    skip, GET_THRESHOLD, LEGACY_DIRECT, LEGACY_NGINX, LEGACY_NGINX_SSE, LEGACY_TL, LEGACY_TL_2025,
    LEGACY_TL_SSE, MAIN_THRESHOLD,
};
use crate::procs::{self, Mem, Proc};
use crate::report::LogSummary;
use crate::wire::{self, Endpoint};
use crate::RunArgs;

/// One legacy upstream and what is in front of it.
struct Side {
    upstream: Proc,
    ep: Endpoint,
    nginx: Option<(Proc, Endpoint)>,
    tasklift: Tasklift,
}

/// The legacy upstreams, JSON and SSE, and the proxies in front of them.
pub(super) struct Legacy {
    json: Side,
    sse: Side,
    /// A 2026-07-28 client's `tools/call` of `fast`.
    modern: Arc<Workload>,
    /// A 2025-11-25 client's, on its connection's session.
    legacy: Arc<Workload>,
}

/// A closed-loop target: label, endpoint, whose CPU counts, and what to send.
pub(super) type Target<'a> = (&'static str, &'a Endpoint, Cpu, Arc<Workload>);

impl Side {
    async fn start(args: &RunArgs, bin: &Path, dir: &Path, sse: bool) -> anyhow::Result<Self> {
        let (tag, flags): (_, &[&str]) = match sse {
            false => ("legacy", &["--legacy"]),
            true => ("legacy-sse", &["--legacy", "--sse"]),
        };
        let (upstream, ep) = start_upstream(args, dir, tag, flags).await?;
        let mut nginx = None;
        if !skip(args, "nginx") {
            if let Some(nb) = find_nginx(args) {
                nginx = Some(start_nginx(&nb, &ep, dir).await?);
            }
        }
        let tasklift = Tasklift::start(
            bin,
            &Via::Legacy(&ep),
            tag,
            MAIN_THRESHOLD,
            &[("sleep", GET_THRESHOLD)],
            None,
        )
        .await?;
        eprintln!(
            "tasklift in front of the {tag} upstream on {}",
            tasklift.ep.url()
        );
        Ok(Self {
            upstream,
            ep,
            nginx,
            tasklift,
        })
    }
}

impl Legacy {
    /// Start both upstreams, nginx in front of each (unless skipped) and tasklift.
    pub(super) async fn start(args: &RunArgs, bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            json: Side::start(args, bin, dir, false).await?,
            sse: Side::start(args, bin, dir, true).await?,
            modern: Arc::new(Workload {
                requests: vec![wire::tool_call("fast", json!({}), true)],
                expect: b"\"text\":\"ok\"",
            }),
            legacy: Arc::new(Workload {
                requests: vec![wire::legacy_tool_call("fast", json!({}))],
                expect: b"\"text\":\"ok\"",
            }),
        })
    }

    /// This repetition's closed-loop targets, in report order.
    pub(super) fn targets(&mut self) -> anyhow::Result<Vec<Target<'_>>> {
        self.json.upstream.check_alive()?;
        self.sse.upstream.check_alive()?;
        // Each upstream's process (its CPU) and endpoint (its /stats).
        let json_up = (vec![self.json.upstream.pid()?], &self.json.ep);
        let sse_up = (vec![self.sse.upstream.pid()?], &self.sse.ep);
        let cpu = |proxy: Vec<u32>, (pids, ep): &(Vec<u32>, &Endpoint)| Cpu {
            proxy,
            upstream: pids.clone(),
            accepted_at: Some((*ep).clone()),
        };
        let mut t: Vec<Target<'_>> = vec![(
            LEGACY_DIRECT,
            &self.json.ep,
            cpu(Vec::new(), &json_up),
            self.legacy.clone(),
        )];
        if let Some((p, ep)) = &self.json.nginx {
            let c = cpu(procs::with_children(p.pid()?), &json_up);
            t.push((LEGACY_NGINX, ep, c, self.legacy.clone()));
        }
        let tl = vec![self.json.tasklift.pid()?];
        t.push((
            LEGACY_TL,
            &self.json.tasklift.ep,
            cpu(tl.clone(), &json_up),
            self.modern.clone(),
        ));
        t.push((
            LEGACY_TL_2025,
            &self.json.tasklift.ep,
            cpu(tl, &json_up),
            self.legacy.clone(),
        ));
        if let Some((p, ep)) = &self.sse.nginx {
            let c = cpu(procs::with_children(p.pid()?), &sse_up);
            t.push((LEGACY_NGINX_SSE, ep, c, self.legacy.clone()));
        }
        let tl = vec![self.sse.tasklift.pid()?];
        t.push((
            LEGACY_TL_SSE,
            &self.sse.tasklift.ep,
            cpu(tl, &sse_up),
            self.modern.clone(),
        ));
        Ok(t)
    }

    /// The JSON upstream's endpoint and pid (the peers go in front of it).
    pub(super) fn json_upstream(&self) -> anyhow::Result<(&Endpoint, u32)> {
        Ok((&self.json.ep, self.json.upstream.pid()?))
    }

    /// What nginx (master and workers summed, if it runs) and tasklift in front
    /// of the JSON upstream hold in memory now.
    pub(super) fn json_mem(&self) -> anyhow::Result<(Option<Mem>, Mem)> {
        let nginx = match &self.json.nginx {
            Some((p, _)) => {
                let mut sum = Mem::default();
                for pid in procs::with_children(p.pid()?) {
                    let m = procs::mem(pid)?;
                    sum.rss_kib += m.rss_kib;
                    sum.pss_kib += m.pss_kib;
                }
                Some(sum)
            }
            None => None,
        };
        Ok((nginx, procs::mem(self.json.tasklift.pid()?)?))
    }

    /// The tasklift logs, for the report.
    pub(super) fn logs(&self) -> Vec<LogSummary> {
        vec![
            self.json.tasklift.log_summary("legacy"),
            self.sse.tasklift.log_summary("legacy-sse"),
        ]
    }
}
