//! The listening side both servers share (agent mode's `/events`, chat mode's port):
//! a bounded number of connections at once, and a deadline for each connection's first
//! request head, so slow or silent clients cannot hold sockets and memory.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 512;

/// How long a new connection may take to send its first request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(15);

/// A listener that serves at most `MAX_CONNECTIONS` at once and drops a connection
/// whose first request head does not arrive within `HEAD_DEADLINE`.
pub(crate) struct GuardedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

impl GuardedListener {
    pub(crate) fn new(inner: TcpListener) -> GuardedListener {
        GuardedListener {
            inner,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = Guarded;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Guarded, std::net::SocketAddr) {
        // A slot first: at the cap, new connections wait in the backlog.
        let permit = loop {
            match self.slots.clone().acquire_owned().await {
                Ok(p) => break p,
                // The semaphore is never closed; yield and try again regardless.
                Err(_) => tokio::task::yield_now().await,
            }
        };
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    return (
                        Guarded {
                            io,
                            _slot: permit,
                            head: Some(HeadWatch::new()),
                        },
                        addr,
                    )
                }
                Err(e) => {
                    // Out of descriptors and the like: wait a little, never spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// Watches a connection until the end of its first request head (`\r\n\r\n`).
struct HeadWatch {
    deadline: Pin<Box<Sleep>>,
    /// The last bytes read, to find the blank line across reads.
    tail: [u8; 3],
}

impl HeadWatch {
    fn new() -> HeadWatch {
        HeadWatch {
            deadline: Box::pin(tokio::time::sleep(HEAD_DEADLINE)),
            tail: [0; 3],
        }
    }

    /// True once `bytes` completes the head.
    fn saw(&mut self, bytes: &[u8]) -> bool {
        let mut window = Vec::with_capacity(3 + bytes.len());
        window.extend_from_slice(&self.tail);
        window.extend_from_slice(bytes);
        let done = window.windows(4).any(|w| w == b"\r\n\r\n");
        let last = window
            .get(window.len().saturating_sub(3)..)
            .unwrap_or_default();
        let mut tail = [0u8; 3];
        for (t, b) in tail.iter_mut().rev().zip(last.iter().rev()) {
            *t = *b;
        }
        self.tail = tail;
        done
    }
}

/// A connection with a slot and, until its first head has arrived, a deadline.
pub(crate) struct Guarded {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
    head: Option<HeadWatch>,
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let Some(w) = me.head.as_mut() {
                    let new = buf.filled().get(before..).unwrap_or_default();
                    if w.saw(new) {
                        me.head = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let late = me
                    .head
                    .as_mut()
                    .is_some_and(|w| w.deadline.as_mut().poll(cx).is_ready());
                if late {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request head in time",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
