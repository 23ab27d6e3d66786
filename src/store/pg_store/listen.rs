//! Hearing the other replicas: `LISTEN` on a connection of its own, and the
//! [`Change`]s it hands the engine.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{chain, PgStore, CHANNEL};

/// What a replica hears from the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Another replica changed this task (or left answers for it).
    Task(String),
    /// The listening connection was (re)established: notifications may have been
    /// missed, so everything running here should be checked.
    Resync,
}

impl PgStore {
    /// What other replicas changed (once; `None` after the first call).
    pub fn take_changes(&self) -> Option<mpsc::Receiver<Change>> {
        self.changes.lock().ok().and_then(|mut c| c.take())
    }
}

/// Listen for other replicas' changes on a connection of its own, reconnecting
/// after a second when it drops (and asking for a resync each time it is up).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    me: String,
    tx: mpsc::Sender<Change>,
) {
    let mut warned = false;
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut conn)) => {
                let sql = format!("LISTEN {CHANNEL}");
                let listen = client.batch_execute(&sql);
                tokio::pin!(listen);
                let mut listening = false;
                loop {
                    tokio::select! {
                        r = &mut listen, if !listening => {
                            if let Err(e) = r {
                                tracing::warn!(error = %chain(&e), "could not LISTEN for other replicas' changes");
                                break;
                            }
                            listening = true;
                            if warned {
                                tracing::info!("listening for other replicas' changes again");
                            }
                            warned = false;
                            if tx.send(Change::Resync).await.is_err() {
                                return;
                            }
                        }
                        m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                let Some((from, id)) = n.payload().split_once(' ') else { continue };
                                if from != me && tx.send(Change::Task(id.to_string())).await.is_err() {
                                    return;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %chain(&e), "the listening connection to the task store failed");
                                break;
                            }
                            None => break,
                        }
                    }
                }
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %chain(&e), "cannot reach the task store to listen for other replicas' changes; retrying");
                    warned = true;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
