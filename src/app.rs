//! Wiring: open the store, recover orphaned tasks, build upstreams, bind the
//! listeners (the front door and, if configured, the admin listener), and start the
//! background loops. Shutdown order (`Running::shutdown`):
//! 1. stop accepting and end `subscriptions/listen` streams with their completion
//!    response; calls in progress and running tasks get `server.shutdown_grace` to
//!    finish; then open calls are dropped (cancelled upstream) and running tasks are
//!    cancelled upstream and marked `failed` (the proxy shut down); the admin
//!    listener closes;
//! 2. stop the sweeper and the session reaper;
//! 3. close legacy upstream sessions (DELETE) and stop stdio children (stdin closed,
//!    then SIGTERM, then SIGKILL);
//! 4. flush the store.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{load_or_create_key, Authenticator};
use crate::config::{Config, Transport};
use crate::dispatch::Mount;
use crate::front::{self, State};
use crate::store::{PgStore, SledStore, StoreError, TaskStore};
use crate::tasks::{sweeper, Engine, EngineSettings};
use crate::upstream::stdio::StdioUpstream;
use crate::upstream::streamable_http::HttpUpstream;
use crate::upstream::{Upstream, UpstreamError};

/// Why tasklift could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened or recovered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The principal key could not be read or written.
    #[error("cannot read or create the principal key in {dir}: {source}")]
    Key {
        /// Data directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// An upstream could not be set up.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The trace exporter could not be set up.
    #[error("telemetry: {0}")]
    Telemetry(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A started tasklift.
pub struct Running {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// The admin listener's bound address, when `[admin] listen` is set.
    pub admin_addr: Option<SocketAddr>,
    /// The engine (tests and operator tools read it).
    pub engine: Arc<Engine>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    admin: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
    upstreams: Vec<Arc<dyn Upstream>>,
    /// How long calls and tasks may take to finish at shutdown.
    grace: std::time::Duration,
    /// Spans, sent to the collector at the end of shutdown.
    tracer: crate::observe::spans::Tracer,
    exporter: Option<JoinHandle<()>>,
}

/// Start tasklift with a validated configuration.
pub async fn start(cfg: Config) -> Result<Running, StartError> {
    let started = std::time::Instant::now();
    // The embedded store's free space, against store.min_free_bytes, which
    // the store tells of writes refused for lack of space.
    let mut sled_space = None;
    let (store, key, changes, pg): (Arc<dyn TaskStore>, _, _, _) = match &cfg.store.url {
        Some(url) => {
            let pg = PgStore::connect(
                url,
                cfg.store.pool_size,
                cfg.store.lease,
                cfg.store.ca_file.as_deref(),
            )
            .await?;
            // Replicas must hash credentials alike, so the key lives in the database.
            let key = match &cfg.auth.hash_key {
                Some(k) => k.as_bytes().to_vec(),
                None => pg.hash_key().await?,
            };
            tracing::info!(replica = pg.replica(), lease = ?cfg.store.lease, "using the shared PostgreSQL task store");
            let changes = pg.take_changes();
            let pg = Arc::new(pg);
            (pg.clone(), key, changes, Some(pg))
        }
        None => {
            let space =
                crate::store::space::DiskSpace::new(&cfg.store.data_dir, cfg.store.min_free_bytes);
            let store = SledStore::open(&cfg.store.data_dir, cfg.store.large_result_bytes)?
                .watched(space.clone());
            sled_space = Some((space, store.clone()));
            let key = match &cfg.auth.hash_key {
                Some(k) => k.as_bytes().to_vec(),
                None => {
                    load_or_create_key(&cfg.store.data_dir).map_err(|source| StartError::Key {
                        dir: cfg.store.data_dir.display().to_string(),
                        source,
                    })?
                }
            };
            (Arc::new(store), key, None, None)
        }
    };
    // Detach without a principal, a container's default of 0.0.0.0 with auth none:
    // say what they mean (check-config says the same).
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    let metrics = Arc::new(crate::observe::metrics::Metrics::default());
    let (tracer, exporter) = tracer(&cfg.telemetry, &metrics)?;
    // The embedded store's free space, against store.min_free_bytes; for
    // PostgreSQL, whether the database refuses writes for lack of space.
    let disk = match (&pg, &sled_space) {
        (Some(pg), _) => Some(pg.space()),
        (None, Some((space, _))) => Some(space.clone()),
        (None, None) => None,
    };
    let engine = Engine::new(
        store.clone(),
        EngineSettings {
            limits: cfg.limits.clone(),
            metrics: metrics.clone(),
            shared_state_key: cfg.store.url.is_some().then(|| key.clone()),
            disk: disk.clone(),
            max_wait: cfg.tasks.max_wait,
            tracer: tracer.clone(),
            ..EngineSettings::new(cfg.tasks.expired_grace, cfg.server.keepalive_interval)
        },
    );
    engine.recover().await?;

    let mut mounts = HashMap::new();
    let mut upstreams: Vec<Arc<dyn Upstream>> = Vec::new();
    for u in &cfg.upstreams {
        let up: Arc<dyn Upstream> = match &u.transport {
            Transport::Http { .. } => Arc::new(HttpUpstream::new(u.clone(), cfg.server.workers)?),
            Transport::Stdio(_) => Arc::new(StdioUpstream::start(u.clone())?),
        };
        upstreams.push(up.clone());
        tracing::info!(upstream = %u.name, at = %u.location(), path = %u.path, "mounted upstream");
        mounts.insert(
            u.path.clone(),
            Mount {
                cfg: u.clone(),
                upstream: up,
                tools: Default::default(),
            },
        );
    }
    let listener = TcpListener::bind(cfg.server.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: cfg.server.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: cfg.server.listen,
        source,
    })?;
    let admin_listener = match cfg.admin.listen {
        Some(at) => {
            let bind_err = |source| StartError::Bind { addr: at, source };
            let l = TcpListener::bind(at).await.map_err(bind_err)?;
            let bound = l.local_addr().map_err(bind_err)?;
            Some((l, bound))
        }
        None => None,
    };
    let (shutdown, rx) = watch::channel(false);
    let legacy = Arc::new(front::legacy::Legacy::new(
        cfg.legacy.clone(),
        mounts.keys(),
        Some(store),
    ));
    let state = Arc::new(State {
        mounts,
        engine: engine.clone(),
        metrics,
        auth: Authenticator::new(cfg.auth.mode.clone(), key),
        cfg: cfg.server.clone(),
        legacy: legacy.clone(),
        lenient: Default::default(),
    });
    let server = {
        let (state, rx) = (state.clone(), rx.clone());
        let workers = crate::workers::spawn(listener, cfg.server.workers, rx.clone(), move |l| {
            front::serve(l, state.clone(), rx.clone())
        })
        .map_err(|source| StartError::Bind { addr, source })?;
        tokio::spawn(workers)
    };
    let admin_addr = admin_listener.as_ref().map(|(_, a)| *a);
    let admin = admin_listener.map(|(l, _)| {
        let hosts = Arc::new(cfg.admin.allowed_hosts.clone());
        tokio::spawn(crate::admin::serve(
            l,
            state.clone(),
            hosts,
            started,
            rx.clone(),
        ))
    });
    let mut background = vec![tokio::spawn(sweeper::run(
        engine.clone(),
        cfg.tasks.sweep_interval,
        rx.clone(),
    ))];
    let every = crate::store::space::MEASURE_EVERY;
    match (pg, sled_space) {
        (Some(pg), _) => background.push(tokio::spawn(pg.watch_space(every, rx.clone()))),
        (None, Some((space, store))) => background.push(tokio::spawn(crate::store::space::watch(
            space,
            every,
            rx.clone(),
            Some(store),
        ))),
        (None, None) => {}
    }
    if let Some(changes) = changes {
        background.push(tokio::spawn(crate::tasks::replicas::run(
            engine.clone(),
            changes,
            rx.clone(),
        )));
    }
    let idle_every = cfg
        .upstreams
        .iter()
        .map(|u| u.session_idle)
        .min()
        .unwrap_or_default()
        .max(std::time::Duration::from_secs(1))
        / 2;
    let reaped = upstreams.clone();
    let mut rx2 = rx.clone();
    background.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(idle_every);
        loop {
            tokio::select! {
                _ = tick.tick() => for u in &reaped { u.close_idle(false).await },
                _ = rx2.changed() => return,
            }
        }
    }));
    // Legacy client sessions: close idle ones; at shutdown, close them all (with
    // their upstream sessions) before the upstreams stop.
    background.push(tokio::spawn(front::legacy::run_reaper(
        state,
        legacy,
        rx.clone(),
    )));
    if let Some(a) = admin_addr {
        tracing::info!(listen = %a, "admin listener (status page, /metrics) is serving");
    }
    tracing::info!(listen = %addr, "tasklift is serving");
    Ok(Running {
        addr,
        admin_addr,
        engine,
        shutdown,
        server,
        admin,
        background,
        upstreams,
        grace: cfg.server.shutdown_grace,
        tracer,
        exporter,
    })
}

/// The tracer tasklift records its spans with, and the exporter sending them,
/// when `[telemetry] otlp_endpoint` is set.
#[cfg(feature = "otlp")]
fn tracer(
    cfg: &crate::config::TelemetryConfig,
    metrics: &Arc<crate::observe::metrics::Metrics>,
) -> Result<(crate::observe::spans::Tracer, Option<JoinHandle<()>>), StartError> {
    match crate::observe::otlp::start(cfg, metrics.clone()).map_err(StartError::Telemetry)? {
        Some((t, exporter)) => Ok((t, Some(exporter))),
        None => Ok((Default::default(), None)),
    }
}

/// Without the `otlp` feature nothing is exported; an endpoint that is set is
/// said to be ignored rather than silently dropped.
#[cfg(not(feature = "otlp"))]
fn tracer(
    cfg: &crate::config::TelemetryConfig,
    _: &Arc<crate::observe::metrics::Metrics>,
) -> Result<(crate::observe::spans::Tracer, Option<JoinHandle<()>>), StartError> {
    if let Some(e) = &cfg.endpoint {
        tracing::warn!(endpoint = %e, "telemetry.otlp_endpoint is set, but this tasklift was built without the otlp feature: no traces are exported");
    }
    Ok((Default::default(), None))
}

impl Running {
    /// Stop in the documented order.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.engine.close_streams();
        // Calls in progress and running tasks get the same grace period: the front
        // door drains within it (then drops what is still open, which cancels it
        // upstream), and tasks, including any a draining call became, must settle
        // by its end; the rest are cancelled and failed.
        let deadline = tokio::time::Instant::now() + self.grace;
        let _ = self.server.await;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let settled = self.engine.settled_within(left).await;
        if !settled {
            let n = self
                .engine
                .stop_all(std::time::Duration::from_secs(5))
                .await;
            tracing::warn!(tasks = n, grace = ?self.grace, "tasks still running after the grace period were cancelled upstream and failed");
        }
        if let Some(a) = self.admin {
            let _ = a.await;
        }
        for b in self.background {
            let _ = b.await;
        }
        for u in &self.upstreams {
            u.shutdown().await;
        }
        if let Err(e) = self.engine.flush().await {
            tracing::error!(error = %e, "final store flush failed");
        }
        // The spans of the last requests and tasks, then the exporter stops.
        if let Some(exporter) = self.exporter {
            self.tracer.flush(std::time::Duration::from_secs(5)).await;
            exporter.abort();
        }
        tracing::info!("tasklift stopped");
    }
}
