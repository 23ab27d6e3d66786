//! Thread-per-core: the front door runs on `server.workers` threads, each with a
//! current-thread tokio runtime of its own, the way nginx runs its workers. Every
//! worker accepts from the one listening socket (a duplicate of its descriptor,
//! so a port in use still fails at start), answers its connections on its own
//! event loop, and calls HTTP upstreams over a connection pool of its own (see
//! [`current`]). A request, its upstream call and that connection's driver then
//! run on one thread: no wake-up crosses cores on the way through. With tokio's
//! work-stealing runtime on two cores, context switches and reschedule IPIs
//! (`finish_task_switch`, `irqentry_exit_to_user_mode`) were an eighth of
//! tasklift's CPU per proxied call in `perf` (docs/benchmarks).
//!
//! Worker 0 is the caller's runtime. The others are threads started here
//! (`tasklift-w1`, `tasklift-w2`, ... in `top -H`); each
//! keeps its runtime alive after its listener has drained, until the shutdown
//! sender is dropped (when tasklift has stopped): task drivers and upstream
//! connections it started run on it until then.

use std::cell::Cell;
use std::future::Future;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The front-door worker this thread is (0 on any thread that is not one of
/// [`spawn`]'s): upstreams index their per-worker connection pools with it.
pub fn current() -> usize {
    WORKER.with(Cell::get)
}

/// Serve `listener` on `n` workers: `serve(listener, worker)` runs on the
/// caller's runtime for worker 0 (the returned future, to be spawned or
/// awaited) and on a thread of its own for each other worker. The returned
/// future ends when every worker's `serve` has ended.
pub fn spawn<F, Fut>(
    listener: TcpListener,
    n: usize,
    shutdown: watch::Receiver<bool>,
    serve: F,
) -> std::io::Result<impl Future<Output = ()> + Send>
where
    F: Fn(TcpListener) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut drained = Vec::new();
    let first = if n > 1 {
        let shared = listener.into_std()?;
        for worker in 1..n {
            let socket = shared.try_clone()?;
            let (done, drained_rx) = oneshot::channel::<()>();
            let serve = serve.clone();
            let mut stopped = shutdown.clone();
            std::thread::Builder::new()
                .name(format!("tasklift-w{worker}"))
                .spawn(move || {
                    WORKER.with(|w| w.set(worker));
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            tracing::error!(worker, error = %e, "front-door worker could not start its runtime");
                            return;
                        }
                    };
                    rt.block_on(async move {
                        match TcpListener::from_std(socket) {
                            Ok(l) => serve(l).await,
                            Err(e) => {
                                tracing::error!(worker, error = %e, "front-door worker could not listen")
                            }
                        }
                        let _ = done.send(());
                        // Until tasklift has stopped (the sender is dropped).
                        while stopped.changed().await.is_ok() {}
                    });
                })?;
            drained.push(drained_rx);
        }
        TcpListener::from_std(shared)?
    } else {
        listener
    };
    let own = serve(first);
    Ok(async move {
        own.await;
        for d in drained {
            let _ = d.await;
        }
    })
}
