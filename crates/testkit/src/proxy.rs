//! A TCP proxy the test controls, in front of a server (the fleet's PostgreSQL): a
//! partition of one worker from it. `cut` stops every byte both ways on the
//! connections open now and holds new ones unconnected (as a network that drops
//! packets would: nothing is refused, nothing answers); `heal` lets them flow again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub struct Proxy {
    pub port: u16,
    cut: Arc<(AtomicBool, Notify)>,
}

impl Proxy {
    /// Forwards 127.0.0.1:`port` to `target` (host:port).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new((AtomicBool::new(false), Notify::new()));
        let (c, target) = (cut.clone(), target.to_string());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (c, target) = (c.clone(), target.clone());
                tokio::spawn(async move {
                    flowing(&c).await;
                    let Ok(server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pump(cr, sw, c.clone()));
                    pump(sr, cw, c).await;
                });
            }
        });
        Proxy { port, cut }
    }

    pub fn cut(&self) {
        self.cut.0.store(true, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.0.store(false, Ordering::SeqCst);
        self.cut.1.notify_waiters();
    }
}

/// Returns once bytes may flow.
async fn flowing(c: &(AtomicBool, Notify)) {
    loop {
        let told = c.1.notified();
        if !c.0.load(Ordering::SeqCst) {
            return;
        }
        told.await;
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    c: Arc<(AtomicBool, Notify)>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        flowing(&c).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
