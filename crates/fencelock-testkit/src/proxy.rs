//! A TCP proxy on loopback that a test puts between a client and a server to lose replies
//! and cut connections on demand.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::TestkitError;

/// One proxied connection: both sockets (to shut them down) and whether the server's bytes
/// on it are dropped.
struct Link {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    swallow: Arc<AtomicBool>,
}

/// What the proxy's threads share.
#[derive(Default)]
struct Shared {
    links: Mutex<Vec<Link>>,
    stopping: AtomicBool,
    refusing: AtomicBool,
    accepted: AtomicU64,
    refused: AtomicU64,
    swallowed: AtomicU64,
    to_server: Arc<AtomicU64>,
    /// The delay of every chunk forwarded from now on, either way (µs).
    latency_us: AtomicU64,
}

impl Shared {
    fn links(&self) -> std::sync::MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a connection whose pump ended.
    fn closed(&self, id: u64) {
        self.links().retain(|l| l.id != id);
    }
}

/// A TCP proxy on 127.0.0.1 in front of one server on 127.0.0.1, run by threads of the test
/// process.
///
/// Each connection a client opens to [`port`](Self::port) is forwarded to the server on a
/// connection of its own. The test can make the server's replies vanish on the connections
/// open now ([`swallow_replies`](Self::swallow_replies): the requests still reach the server,
/// its answers are read and dropped), and close them ([`cut`](Self::cut)), as a network that
/// fails after a request was sent would. Connections opened afterwards are forwarded
/// normally, so a client that reconnects gets through. The proxy stops (and closes every
/// connection) when the handle drops.
pub struct TcpProxy {
    port: u16,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TcpProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpProxy")
            .field("port", &self.port)
            .field("upstream", &self.upstream)
            .field("accepted", &self.accepted())
            .finish_non_exhaustive()
    }
}

impl TcpProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to 127.0.0.1:`server_port`.
    pub fn start(server_port: u16) -> Result<Self, TestkitError> {
        Self::start_to(SocketAddr::from(([127, 0, 0, 1], server_port)))
    }

    /// Starts a proxy on a free port of 127.0.0.1 that forwards to `upstream` (e.g. a
    /// server in a [`PrivateNet`](crate::PrivateNet) namespace).
    pub fn start_to(upstream: SocketAddr) -> Result<Self, TestkitError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accept = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn({
                let shared = shared.clone();
                move || accept_loop(&listener, upstream, &shared)
            })?;
        Ok(Self {
            port,
            upstream,
            shared,
            accept: Some(accept),
        })
    }

    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT` of the proxy, as ZooKeeper clients take it.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// From now on, every chunk read from either side is written to the other `latency`
    /// later, in order (a userspace stand-in for `tc netem delay`, on both directions: a
    /// round trip takes twice `latency` more). Zero forwards at once again.
    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(us, Ordering::SeqCst);
    }

    /// The delay set by [`set_latency`](Self::set_latency).
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.shared.latency_us.load(Ordering::SeqCst))
    }

    /// How many connections the proxy has forwarded so far (a reconnection adds one; a
    /// refused one does not).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// How many connections the proxy has closed unforwarded so far, while
    /// [`refuse_new`](Self::refuse_new) was set.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// How many bytes from the server the proxy has dropped so far.
    pub fn swallowed(&self) -> u64 {
        self.shared.swallowed.load(Ordering::SeqCst)
    }

    /// How many bytes the proxy has forwarded from clients to the server so far (to see that
    /// a request went out).
    pub fn forwarded_to_server(&self) -> u64 {
        self.shared.to_server.load(Ordering::SeqCst)
    }

    /// From now on, the server's bytes on every connection open now are read and dropped:
    /// requests still reach the server, the client hears nothing back. Connections opened
    /// later are not affected. Returns how many connections this applies to.
    pub fn swallow_replies(&self) -> usize {
        let links = self.shared.links();
        for link in links.iter() {
            link.swallow.store(true, Ordering::SeqCst);
        }
        links.len()
    }

    /// While `refuse` is set, a new connection is closed as soon as it is accepted, without
    /// reaching the server: with [`cut`](Self::cut), the client is cut off from the server
    /// (a partition) until this is unset.
    pub fn refuse_new(&self, refuse: bool) {
        self.shared.refusing.store(refuse, Ordering::SeqCst);
    }

    /// Closes every connection open now, on both sides (the client reads the end of its
    /// stream; the server sees its client go). New connections are still accepted and
    /// forwarded. Returns how many connections were cut.
    pub fn cut(&self) -> usize {
        let links: Vec<Link> = self.shared.links().drain(..).collect();
        for link in &links {
            let _ = link.client.shutdown(Shutdown::Both);
            let _ = link.server.shutdown(Shutdown::Both);
        }
        links.len()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        self.cut();
    }
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.refusing.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            shared.refused.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
        let Ok(server) = TcpStream::connect(upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let swallow = Arc::new(AtomicBool::new(false));
        let streams = (|| {
            Ok::<_, std::io::Error>((
                client.try_clone()?,
                client.try_clone()?,
                server.try_clone()?,
                server.try_clone()?,
            ))
        })();
        let Ok((client_read, client_write, server_read, server_write)) = streams else {
            continue;
        };
        shared.links().push(Link {
            id,
            client,
            server,
            swallow: swallow.clone(),
        });
        let up = shared.clone();
        let _ = std::thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || {
                let forwarded = up.to_server.clone();
                pump(client_read, server_write, None, forwarded, &up.latency_us);
                up.closed(id);
            });
        let down = shared.clone();
        let _ = std::thread::Builder::new()
            .name("proxy-down".into())
            .spawn(move || {
                let counter = &down.swallowed;
                pump(
                    server_read,
                    client_write,
                    Some((&swallow, counter)),
                    Arc::default(),
                    &down.latency_us,
                );
                down.closed(id);
            });
    }
}

/// Copies `from` to `to` until either side closes; while `swallow` is set, reads and drops
/// (counting what it dropped). Each chunk goes to a writer thread with the time it is due
/// (now + the proxy's latency), so that a delay never reorders the stream. Closes both at
/// the end.
fn pump(
    mut from: TcpStream,
    to: TcpStream,
    swallow: Option<(&AtomicBool, &AtomicU64)>,
    forwarded: Arc<AtomicU64>,
    latency_us: &AtomicU64,
) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = {
        let to = match to.try_clone() {
            Ok(to) => to,
            Err(_) => return,
        };
        std::thread::Builder::new()
            .name("proxy-write".into())
            .spawn(move || deliver(&rx, to, &forwarded))
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((flag, dropped)) = swallow {
            if flag.load(Ordering::SeqCst) {
                dropped.fetch_add(n as u64, Ordering::SeqCst);
                continue;
            }
        }
        let due = Instant::now() + Duration::from_micros(latency_us.load(Ordering::SeqCst));
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    if let Ok(writer) = writer {
        let _ = writer.join();
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Writes each chunk when it is due, in the order read; on a write error, closes `to` so
/// that the reader's side ends too.
fn deliver(rx: &mpsc::Receiver<(Instant, Vec<u8>)>, mut to: TcpStream, forwarded: &AtomicU64) {
    for (due, chunk) in rx {
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        if to.write_all(&chunk).is_err() {
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        forwarded.fetch_add(chunk.len() as u64, Ordering::SeqCst);
    }
}
