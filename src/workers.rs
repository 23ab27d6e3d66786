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
//!
//! Which worker accepts a connection is a race between their event loops, and
//! a few busy keep-alive connections (an agent gateway's, or a load test's) can
//! end up three to one, one core saturated while the other idles. So the
//! workers count their open connections ([`Balance`]), and one that accepts a
//! connection while another serves fewer hands it to the one that serves
//! fewest, as Envoy's exact connection balance does (once per connection: a
//! socket moved between the workers' event loops).

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The front-door worker this thread is (0 on any thread that is not one of
/// [`spawn`]'s): upstreams index their per-worker connection pools with it.
pub fn current() -> usize {
    WORKER.with(Cell::get)
}

/// Name this thread as worker `worker`, as [`spawn`] does, for a test of what
/// the workers share.
#[cfg(test)]
pub(crate) fn name_this_thread_for_tests(worker: usize) {
    WORKER.with(|w| w.set(worker));
}

/// A connection accepted by one worker and handed to another, counted open
/// there.
struct Handed {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    open: Open,
}

/// The workers' open connections, and a way to hand a connection to each.
struct Balance {
    open: Box<[AtomicUsize]>,
    handoff: Box<[mpsc::UnboundedSender<Handed>]>,
}

impl Balance {
    /// A balance for `n` workers and each worker's inbox.
    fn new(n: usize) -> (Arc<Self>, Vec<mpsc::UnboundedReceiver<Handed>>) {
        let (handoff, inboxes): (Vec<_>, Vec<_>) =
            (0..n).map(|_| mpsc::unbounded_channel()).unzip();
        let balance = Balance {
            open: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            handoff: handoff.into(),
        };
        (Arc::new(balance), inboxes)
    }

    /// Where a connection accepted by `me` goes, counted open there: `me`,
    /// unless another worker serves fewer (then the one that serves fewest).
    fn place(self: &Arc<Self>, me: usize) -> Open {
        let mine = self.open[me].load(Ordering::Relaxed);
        let (least, fewest) = self
            .open
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .enumerate()
            .min_by_key(|&(_, n)| n)
            .unwrap_or((me, mine));
        self.count(if mine > fewest { least } else { me })
    }

    /// A connection counted open on `worker` until the [`Open`] is dropped.
    fn count(self: &Arc<Self>, worker: usize) -> Open {
        self.open[worker].fetch_add(1, Ordering::Relaxed);
        Open {
            balance: self.clone(),
            worker,
        }
    }
}

/// A connection counted open on a worker, until dropped.
pub struct Open {
    balance: Arc<Balance>,
    worker: usize,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.balance.open[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection a worker serves: the stream, its client's address, and (with
/// several workers) its place in the count.
pub type Accepted = (TcpStream, SocketAddr, Option<Open>);

/// Where one worker's connections come from: its listening socket and, when
/// several workers share it, the connections the others hand it.
pub struct Doorway {
    listener: TcpListener,
    share: Option<Share>,
}

/// One worker's part in the [`Balance`].
struct Share {
    me: usize,
    balance: Arc<Balance>,
    inbox: mpsc::UnboundedReceiver<Handed>,
}

impl From<TcpListener> for Doorway {
    /// A listener no other worker shares.
    fn from(listener: TcpListener) -> Self {
        Doorway {
            listener,
            share: None,
        }
    }
}

impl Doorway {
    /// The next connection this worker serves: accepted here and kept, or
    /// handed over by another worker. A connection accepted here that another
    /// worker should serve is handed to it, and the wait goes on.
    pub async fn next(&mut self) -> std::io::Result<Accepted> {
        let Some(share) = self.share.as_mut() else {
            let (stream, peer) = self.listener.accept().await?;
            return Ok((stream, peer, None));
        };
        loop {
            tokio::select! {
                r = self.listener.accept() => {
                    let (stream, peer) = r?;
                    if let Some(kept) = share.keep_or_hand(stream, peer)? {
                        return Ok(kept);
                    }
                }
                Some(h) = share.inbox.recv() => {
                    match TcpStream::from_std(h.stream) {
                        Ok(stream) => return Ok((stream, h.peer, Some(h.open))),
                        Err(e) => {
                            tracing::warn!(error = %e, client.addr = %h.peer, "a connection handed over by another worker could not be served");
                        }
                    }
                }
            }
        }
    }
}

impl Share {
    /// A connection this worker accepted: kept (counted open here), or handed
    /// to the worker [`Balance::place`] chose (`None`).
    fn keep_or_hand(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> std::io::Result<Option<Accepted>> {
        let open = self.balance.place(self.me);
        let to = open.worker;
        if to == self.me {
            return Ok(Some((stream, peer, Some(open))));
        }
        // An error here drops `open`, which uncounts it.
        let stream = stream.into_std()?;
        let Err(mpsc::error::SendError(h)) =
            self.balance.handoff[to].send(Handed { stream, peer, open })
        else {
            return Ok(None);
        };
        // That worker has stopped (shutdown): serve it here.
        drop(h.open);
        let here = self.balance.count(self.me);
        Ok(Some((TcpStream::from_std(h.stream)?, peer, Some(here))))
    }
}

/// Serve `listener` on `n` workers: `serve(doorway)` runs on the caller's
/// runtime for worker 0 (the returned future, to be spawned or awaited) and on
/// a thread of its own for each other worker, each doorway taking from the one
/// socket and balanced against the others'. The returned future ends when
/// every worker's `serve` has ended.
pub fn spawn<F, Fut>(
    listener: TcpListener,
    n: usize,
    shutdown: watch::Receiver<bool>,
    serve: F,
) -> std::io::Result<impl Future<Output = ()> + Send>
where
    F: Fn(Doorway) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut drained = Vec::new();
    let first = if n > 1 {
        let (balance, inboxes) = Balance::new(n);
        let mut inboxes = inboxes.into_iter();
        let mut share = |me: usize| Share {
            me,
            balance: balance.clone(),
            inbox: inboxes.next().expect("an inbox per worker"),
        };
        let first_share = share(0);
        let shared = listener.into_std()?;
        for worker in 1..n {
            let socket = shared.try_clone()?;
            let share = share(worker);
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
                            Ok(listener) => {
                                let share = Some(share);
                                serve(Doorway { listener, share }).await
                            }
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
        Doorway {
            listener: TcpListener::from_std(shared)?,
            share: Some(first_share),
        }
    } else {
        Doorway::from(listener)
    };
    let own = serve(first);
    Ok(async move {
        own.await;
        for d in drained {
            let _ = d.await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Two workers' doorways; every connection reaches worker 0's socket (worker
    /// 1's listens where nobody connects), as when the accept race goes one way.
    async fn two() -> (Doorway, Doorway, SocketAddr) {
        let (balance, inboxes) = Balance::new(2);
        let mut inboxes = inboxes.into_iter();
        let mut doorway = |me: usize, listener: TcpListener| Doorway {
            listener,
            share: Some(Share {
                me,
                balance: balance.clone(),
                inbox: inboxes.next().unwrap(),
            }),
        };
        let busy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = busy.local_addr().unwrap();
        let quiet = TcpListener::bind("127.0.0.1:0").await.unwrap();
        (doorway(0, busy), doorway(1, quiet), addr)
    }

    /// The first byte a client sends on `stream`, as the serving worker reads it.
    async fn first_byte(stream: &mut TcpStream) -> u8 {
        let mut b = [0u8; 1];
        stream.read_exact(&mut b).await.unwrap();
        b[0]
    }

    /// The next connection either worker serves, and which one.
    async fn served(w0: &mut Doorway, w1: &mut Doorway) -> (usize, Accepted) {
        let next = async {
            tokio::select! {
                a = w0.next() => (0, a.unwrap()),
                a = w1.next() => (1, a.unwrap()),
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("a worker serves the connection")
    }

    #[tokio::test]
    async fn connections_accepted_by_one_worker_are_spread_over_both() {
        let (mut w0, mut w1, addr) = two().await;
        let mut clients = Vec::new();
        let mut by = [Vec::new(), Vec::new()];
        for i in 0..6u8 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&[i]).await.unwrap();
            clients.push(c);
            // Worker 0 accepts each: it keeps one, hands the next over, and so on.
            let (worker, a) = served(&mut w0, &mut w1).await;
            assert_eq!(worker, usize::from(i % 2), "connection {i}");
            assert_eq!(a.2.as_ref().map(|o| o.worker), Some(worker));
            by[worker].push(a);
        }
        // Each socket works on the worker that serves it, with its client's address.
        for (stream, peer, _) in by.iter_mut().flatten() {
            let n = first_byte(stream).await;
            assert_eq!(*peer, clients[usize::from(n)].local_addr().unwrap());
        }
        let balance = by[0][0].2.as_ref().unwrap().balance.clone();
        let counts = || {
            balance
                .open
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(), [3, 3]);
        // Connections that close leave the count; the next goes where fewer are.
        by[1].truncate(1);
        assert_eq!(counts(), [3, 1]);
        let _c = TcpStream::connect(addr).await.unwrap();
        let (worker, _a) = served(&mut w0, &mut w1).await;
        assert_eq!(worker, 1);
        assert_eq!(counts(), [3, 2]);
        by[0].clear();
        let _d = TcpStream::connect(addr).await.unwrap();
        let (worker, _b) = served(&mut w0, &mut w1).await;
        assert_eq!(
            worker, 0,
            "kept where it was accepted: worker 0 serves fewer now"
        );
        assert_eq!(counts(), [1, 2]);
    }

    #[tokio::test]
    async fn a_connection_for_a_stopped_worker_is_served_where_it_was_accepted() {
        let (mut w0, w1, addr) = two().await;
        let _first = TcpStream::connect(addr).await.unwrap();
        let (_s, _, open) = w0.next().await.unwrap();
        assert_eq!(open.as_ref().map(|o| o.worker), Some(0));
        drop(w1); // worker 1 stopped: its inbox is gone
        let mut second = TcpStream::connect(addr).await.unwrap();
        second.write_all(b"x").await.unwrap();
        let (mut s, _, open) = w0.next().await.unwrap();
        assert_eq!(open.as_ref().map(|o| o.worker), Some(0), "kept, not lost");
        assert_eq!(first_byte(&mut s).await, b'x');
    }
}
