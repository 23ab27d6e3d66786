//! Wiring: open the store, recover orphaned tasks, build upstreams, bind the
//! listeners (the front door and, if configured, the admin listener), and start the
//! background loops. Shutdown order (`Running::shutdown`):
//! 1. stop accepting and end `subscriptions/listen` streams with their completion
//!    response; calls in progress and running tasks get `server.shutdown_grace` to
//!    finish; then open calls are dropped (cancelled upstream) and running tasks are
//!    cancelled upstream and marked `failed` (the proxy shut down); the admin
//!    listener closes;
//! 2. stop the sweeper, the session reaper and the webhook worker (events not yet
//!    delivered stay in the store's outbox and are sent after the restart);
//! 3. close legacy upstream sessions (DELETE) and stop stdio children (stdin closed,
//!    then SIGTERM, then SIGKILL);
//! 4. flush the store.

use crate::hashing::FastMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::auth::{load_or_create_key, Authenticator};
use crate::config::{Config, Transport};
use crate::dispatch::Mount;
use crate::front::{self, State};
use crate::store::space::DiskSpace;
use crate::store::{Change, Outbox, PgStore, SledStore, StoreError, TaskStore};
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

/// Start tasklift with a validated configuration: open the store, build the
/// engine, the upstreams and their mounts, bind the listeners, then spawn the
/// front door, the admin listener and the background loops.
pub async fn start(cfg: Config) -> Result<Running, StartError> {
    let started = std::time::Instant::now();
    let Opened {
        store,
        key,
        kind,
        outbox,
    } = open_store(&cfg).await?;
    // Detach without a principal, a container's default of 0.0.0.0 with auth none:
    // say what they mean (check-config says the same).
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    let metrics = Arc::new(crate::observe::metrics::Metrics::for_upstreams(
        cfg.upstreams.iter().map(|u| u.name.as_str()),
    ));
    let (tracer, exporter) = tracer(&cfg.telemetry, &metrics)?;
    let engine = build_engine(&cfg, &store, &key, &kind, &metrics, &tracer);
    engine.recover().await?;
    let (mounts, upstreams) = mount_upstreams(&cfg)?;
    let (listener, addr) = bind(cfg.server.listen).await?;
    let admin_listener = match cfg.admin.listen {
        Some(at) => Some(bind(at).await?),
        None => None,
    };
    let (shutdown, rx) = watch::channel(false);
    let hooks = outbox.map(|outbox| {
        let stats = Arc::new(crate::webhooks::WebhookStats::default());
        let (store, outbox) = (store.clone(), outbox);
        Arc::new(crate::webhooks::Webhooks {
            store,
            outbox,
            stats,
        })
    });
    if let Some(h) = &hooks {
        metrics.watch_webhooks(h.clone());
    }
    let (state, legacy) = front_state(&cfg, mounts, &engine, metrics, store, key);
    let server = spawn_front_door(&cfg, listener, addr, &state, &rx)?;
    let admin_addr = admin_listener.as_ref().map(|(_, a)| *a);
    let admin = admin_listener.map(|(l, _)| spawn_admin(&cfg, l, &state, (started, &hooks), &rx));
    let mut background = background_loops(&cfg, &engine, kind, &upstreams, state, legacy, &rx);
    if let Some(h) = &hooks {
        let worker = crate::webhooks::run(
            h.store.clone(),
            h.outbox.clone(),
            h.stats.clone(),
            rx.clone(),
        );
        background.push(tokio::spawn(worker));
    }
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

/// The task store as opened, with the key credentials are hashed with.
struct Opened {
    store: Arc<dyn TaskStore>,
    key: Vec<u8>,
    kind: StoreKind,
    /// The webhook destinations' outbox, when `[[webhooks]]` names any.
    outbox: Option<Arc<Outbox>>,
}

/// What only one kind of store brings to the wiring.
enum StoreKind {
    /// PostgreSQL, shared by replicas: what the others announce, and whether the
    /// database refuses writes for lack of space.
    Shared {
        pg: Arc<PgStore>,
        changes: Option<mpsc::Receiver<Change>>,
    },
    /// The embedded store's free space, against store.min_free_bytes, which the
    /// store tells of writes refused for lack of space.
    Embedded {
        space: Arc<DiskSpace>,
        store: SledStore,
    },
}

/// PostgreSQL when `store.url` is set, else the embedded store in `store.data_dir`.
async fn open_store(cfg: &Config) -> Result<Opened, StartError> {
    match &cfg.store.url {
        Some(url) => open_shared(cfg, url).await,
        None => open_embedded(cfg),
    }
}

/// The shared PostgreSQL store. Replicas must hash credentials alike, so the key
/// lives in the database (unless `auth.hash_key` sets it).
async fn open_shared(cfg: &Config, url: &str) -> Result<Opened, StartError> {
    let pg = PgStore::connect(
        url,
        cfg.store.pool_size,
        cfg.store.lease,
        cfg.store.ca_file.as_deref(),
    )
    .await?;
    let key = match &cfg.auth.hash_key {
        Some(k) => k.as_bytes().to_vec(),
        None => pg.hash_key().await?,
    };
    tracing::info!(replica = pg.replica(), lease = ?cfg.store.lease, "using the shared PostgreSQL task store");
    let changes = pg.take_changes();
    let outbox = outbox_of(cfg);
    let pg = Arc::new(match &outbox {
        Some(o) => pg.with_outbox(o.clone()),
        None => pg,
    });
    Ok(Opened {
        store: pg.clone(),
        key,
        kind: StoreKind::Shared { pg, changes },
        outbox,
    })
}

/// The webhook destinations' outbox, when `[[webhooks]]` names any.
fn outbox_of(cfg: &Config) -> Option<Arc<Outbox>> {
    (!cfg.webhooks.is_empty()).then(|| Arc::new(Outbox::new(cfg.webhooks.clone())))
}

/// The embedded sled store, watched for free space, and the key kept beside it.
fn open_embedded(cfg: &Config) -> Result<Opened, StartError> {
    let space = DiskSpace::new(&cfg.store.data_dir, cfg.store.min_free_bytes);
    let mut store =
        SledStore::open(&cfg.store.data_dir, cfg.store.large_result_bytes)?.watched(space.clone());
    let outbox = outbox_of(cfg);
    if let Some(o) = &outbox {
        store = store.with_outbox(o.clone())?;
    }
    let key = match &cfg.auth.hash_key {
        Some(k) => k.as_bytes().to_vec(),
        None => load_or_create_key(&cfg.store.data_dir).map_err(|source| StartError::Key {
            dir: cfg.store.data_dir.display().to_string(),
            source,
        })?,
    };
    Ok(Opened {
        store: Arc::new(store.clone()),
        key,
        kind: StoreKind::Embedded { space, store },
        outbox,
    })
}

/// The engine, with everything it is given once: limits, metrics, tracer, the
/// shared `requestState` key of a shared store, and the store's space.
fn build_engine(
    cfg: &Config,
    store: &Arc<dyn TaskStore>,
    key: &[u8],
    kind: &StoreKind,
    metrics: &Arc<crate::observe::metrics::Metrics>,
    tracer: &crate::observe::spans::Tracer,
) -> Arc<Engine> {
    let disk = match kind {
        StoreKind::Shared { pg, .. } => pg.space(),
        StoreKind::Embedded { space, .. } => space.clone(),
    };
    Engine::new(
        store.clone(),
        EngineSettings {
            limits: cfg.limits.clone(),
            metrics: metrics.clone(),
            shared_state_key: cfg.store.url.is_some().then(|| key.to_vec()),
            disk: Some(disk),
            max_wait: cfg.tasks.max_wait,
            tracer: tracer.clone(),
            ..EngineSettings::new(
                cfg.tasks.expired_grace,
                cfg.server.keepalive_interval,
                crate::front::errors::written,
            )
        },
    )
}

/// Mounts by path, and every upstream (each stopped at shutdown).
type Mounted = (FastMap<String, Mount>, Vec<Arc<dyn Upstream>>);

/// Each configured upstream, built for its transport and mounted at its path.
fn mount_upstreams(cfg: &Config) -> Result<Mounted, StartError> {
    let mut mounts = FastMap::default();
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
    Ok((mounts, upstreams))
}

/// A listener bound at `at`, and the address it got (useful with port 0).
async fn bind(at: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_err = |source| StartError::Bind { addr: at, source };
    let listener = TcpListener::bind(at).await.map_err(bind_err)?;
    let bound = listener.local_addr().map_err(bind_err)?;
    Ok((listener, bound))
}

/// What every front-door handler shares, and the 2025-era door it hands legacy
/// clients to (with the store, which keeps their sessions across restarts).
fn front_state(
    cfg: &Config,
    mounts: FastMap<String, Mount>,
    engine: &Arc<Engine>,
    metrics: Arc<crate::observe::metrics::Metrics>,
    store: Arc<dyn TaskStore>,
    key: Vec<u8>,
) -> (Arc<State>, Arc<front::legacy::Legacy>) {
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
    (state, legacy)
}

/// The front door's workers (`server.workers`), each serving from the one socket.
fn spawn_front_door(
    cfg: &Config,
    listener: TcpListener,
    addr: SocketAddr,
    state: &Arc<State>,
    rx: &watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    let (state, rx) = (state.clone(), rx.clone());
    let workers = crate::workers::spawn(listener, cfg.server.workers, rx.clone(), move |l| {
        front::serve(l, state.clone(), rx.clone())
    })
    .map_err(|source| StartError::Bind { addr, source })?;
    Ok(tokio::spawn(workers))
}

/// The admin listener: status page (with the webhook destinations, when
/// configured), `/metrics`, `/healthz`, `/readyz`.
fn spawn_admin(
    cfg: &Config,
    listener: TcpListener,
    state: &Arc<State>,
    (started, hooks): (std::time::Instant, &Option<Arc<crate::webhooks::Webhooks>>),
    rx: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let hosts = Arc::new(cfg.admin.allowed_hosts.clone());
    tokio::spawn(crate::admin::serve(
        listener,
        state.clone(),
        hosts,
        started,
        hooks.clone(),
        rx.clone(),
    ))
}

/// The loops that run until shutdown, in the order shutdown awaits them: the
/// sweeper, the store's own, idle upstream sessions closed, and the legacy
/// session reaper, which at shutdown closes every session (with its upstream
/// session) before the upstreams stop.
fn background_loops(
    cfg: &Config,
    engine: &Arc<Engine>,
    kind: StoreKind,
    upstreams: &[Arc<dyn Upstream>],
    state: Arc<State>,
    legacy: Arc<front::legacy::Legacy>,
    rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut background = vec![tokio::spawn(sweeper::run(
        engine.clone(),
        cfg.tasks.sweep_interval,
        rx.clone(),
    ))];
    background.extend(store_loops(kind, engine, rx));
    background.push(close_idle_upstream_sessions(cfg, upstreams, rx));
    background.push(tokio::spawn(front::legacy::run_reaper(
        state,
        legacy,
        rx.clone(),
    )));
    background
}

/// The store's own loops: its free space measured (or, for PostgreSQL, a refusing
/// database probed), and what other replicas announce.
fn store_loops(
    kind: StoreKind,
    engine: &Arc<Engine>,
    rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let every = crate::store::space::MEASURE_EVERY;
    match kind {
        StoreKind::Shared { pg, changes } => {
            let mut loops = vec![tokio::spawn(pg.watch_space(every, rx.clone()))];
            if let Some(changes) = changes {
                loops.push(tokio::spawn(crate::tasks::replicas::run(
                    engine.clone(),
                    changes,
                    rx.clone(),
                )));
            }
            loops
        }
        StoreKind::Embedded { space, store } => vec![tokio::spawn(crate::store::space::watch(
            space,
            every,
            rx.clone(),
            Some(store),
        ))],
    }
}

/// Upstream sessions idle past their `session_idle` closed, checked twice as often
/// as the shortest of them (at least every half second).
fn close_idle_upstream_sessions(
    cfg: &Config,
    upstreams: &[Arc<dyn Upstream>],
    rx: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let idle_every = cfg
        .upstreams
        .iter()
        .map(|u| u.session_idle)
        .min()
        .unwrap_or_default()
        .max(std::time::Duration::from_secs(1))
        / 2;
    let reaped = upstreams.to_vec();
    let mut rx = rx.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(idle_every);
        loop {
            tokio::select! {
                _ = tick.tick() => for u in &reaped { u.close_idle(false).await },
                _ = rx.changed() => return,
            }
        }
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
