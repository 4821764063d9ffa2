//! The byte bridge: copies bytes between a KubeVirt stream and a local reader and writer (a
//! TCP connection, stdin/stdout) with backpressure, answering virt-api's pings and counting
//! bytes and connections in a session's [`Counters`]; and [`Supervisor::start_bridge`], a
//! session made of one such bridge.

use std::sync::atomic::Ordering;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::{Counters, SessionKind, Supervisor};
use crate::stream::VmiStream;

/// What a session is about: the member it reaches, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct About {
    /// Namespace of the member.
    pub namespace: String,
    /// The member.
    pub member: String,
    /// What the session is for.
    pub kind: SessionKind,
    /// What it reaches on the member (`port 22`, …).
    pub target: String,
}

impl Supervisor {
    /// Starts a session that bridges one already-opened stream to a reader and a writer
    /// (e.g. stdin/stdout for `port-forward --stdio`), and ends with it.
    pub fn start_bridge<R, W>(&self, ws: VmiStream, local: (R, W), about: About) -> u32
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (rd, wr) = local;
        let id = self.register(
            &about.namespace,
            &about.member,
            about.kind,
            about.target,
            None,
        );
        let (counters, _) = self.shared(id);
        let this = self.downgrade();
        let task = tokio::spawn(async move {
            bridge(ws, rd, wr, &counters).await;
            this.end(id, "the stream ended");
        });
        self.add_task(id, task);
        id
    }
}

/// Size of one read from the local side, in bytes (one websocket frame at most).
const CHUNK: usize = 32 * 1024;

/// Copies bytes between a KubeVirt stream and a local reader/writer until either side ends
/// (as virtctl does: the first direction to finish ends the connection; what the local side
/// sent before it ended is delivered first). Binary frames carry the bytes; text frames are
/// ignored; pings are answered with pongs. A local read is never cancelled midway (stdin's
/// blocking read would lose its bytes): reads feed a bounded queue the websocket writer
/// drains, which is also where pongs go.
pub async fn bridge<R, W>(ws: VmiStream, mut rd: R, mut wr: W, counters: &Counters)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let _open = counters.opened();
    let (mut sink, mut frames) = ws.split();
    let (data_tx, mut data_rx) = mpsc::channel::<bytes::Bytes>(4);
    let (pongs, mut pending_pongs) = mpsc::channel::<bytes::Bytes>(4);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if data_tx
                        .send(bytes::Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    let writer = async {
        loop {
            tokio::select! {
                biased;
                data = data_rx.recv() => match data {
                    Some(data) => {
                        let n = data.len() as u64;
                        if sink.send(Message::Binary(data)).await.is_err() {
                            break;
                        }
                        counters.bytes_out.fetch_add(n, Ordering::Relaxed);
                    }
                    None => break,
                },
                Some(payload) = pending_pongs.recv() => {
                    if sink.send(Message::Pong(payload)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.close().await;
    };
    let upstream = async {
        tokio::join!(reader, writer);
    };
    let downstream = async {
        while let Some(frame) = frames.next().await {
            match frame {
                Ok(Message::Binary(data)) => {
                    // Flushed at once: a writer such as stdout buffers until a newline.
                    if wr.write_all(&data).await.is_err() || wr.flush().await.is_err() {
                        break;
                    }
                    counters
                        .bytes_in
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                Ok(Message::Ping(payload)) => {
                    let _ = pongs.try_send(payload);
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = wr.flush().await;
        let _ = wr.shutdown().await;
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
