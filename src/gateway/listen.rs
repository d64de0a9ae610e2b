//! The gateway's listener (effects, the outermost edge): accepts TCP (and
//! TLS) connections under limits no stranger can exhaust, then hands each
//! to hyper with the router.
//!
//! ```text
//! accept ─► over the cap (in all, or from this peer)? close the oldest
//!    │      stranger's connection (never authenticated: idle or not), else
//!    │      the oldest idle authenticated one (never one mid-request)
//!    ▼
//! TLS handshake (timeout) ─► HTTP/1 or 2 (header-read timeout)
//!    │ a request body arrives within its time, at its minimum rate, or 408
//!    │ a connection quiet for longer than the idle timeout is closed
//!    ▼
//! the router (the API and the console); an authenticated request marks
//! its connection as worth keeping (identity::CONNECTION_TRUST)
//! ```
//!
//! Strangers can only hold what no authenticated caller needs: however
//! many connections they open, from however many addresses, each new one
//! closes the oldest stranger's first, so a team's calls and open
//! live-update streams keep their connections.
//!
//! An accept error (`EMFILE` under a low `ulimit -n`, a connection reset
//! before it was taken) is logged and retried after a pause, never the
//! end of the server. The cap in all is kept below the process's open-file
//! limit, so the gateway's own clients (the host and member APIs) always
//! have descriptors left.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What one listener allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, in all (lowered to fit the open-file limit).
    pub connections: usize,
    /// Connections open at once from one address.
    pub per_peer: usize,
    /// A TLS handshake must finish within this.
    pub handshake: Duration,
    /// A request's headers must arrive within this.
    pub header_read: Duration,
    /// A connection with nothing read or written for this long is closed.
    pub idle: Duration,
    /// A request's whole body must arrive within this.
    pub body_time: Duration,
    /// After [`Limits::body_grace`], a body must keep arriving at this many
    /// bytes a second (a trickle holds nothing).
    pub body_min_rate: u64,
    pub body_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // A developer's CLI opens one connection per command and a
            // console tab two: thousands of users fit.
            connections: 4096,
            // A NAT'd office shares an address; a flood from one host
            // evicts its own connections first.
            per_peer: 256,
            // Slow mobile links finish a handshake in well under 10 s.
            handshake: Duration::from_secs(10),
            header_read: Duration::from_secs(10),
            // Above the console's 15 s event keep-alive: an open tab is never idle.
            idle: Duration::from_secs(60),
            // The largest body (1 MiB) at the minimum rate, with room.
            body_time: Duration::from_secs(30),
            // A slow mobile link sends tens of KiB a second.
            body_min_rate: 1024,
            body_grace: Duration::from_secs(5),
        }
    }
}

/// Descriptors kept free for everything the gateway opens itself.
const FD_RESERVE: usize = 64;

/// The cap in all that fits under the process's open-file limit, counting
/// what is open now.
pub fn fitted(limits: Limits) -> Limits {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let room = soft.saturating_sub(open).saturating_sub(FD_RESERVE).max(8);
    Limits { connections: limits.connections.min(room), per_peer: limits.per_peer.min(room), ..limits }
}

/// One open connection, as the cap sees it.
struct Entry {
    peer: IpAddr,
    /// Requests in flight (an authenticated connection serving one is never evicted).
    busy: Arc<AtomicUsize>,
    /// A request on it was authenticated.
    trusted: Arc<AtomicBool>,
    close: Arc<tokio::sync::Notify>,
}

/// Every open connection, oldest first (ids grow).
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

impl Table {
    /// Makes room for a connection from `peer`: when that peer is at its
    /// cap, closes one of its connections, then one of all when the
    /// listener is at its cap (see [`Table::evict`]). False: every
    /// connection is an authenticated one mid-request; the new one is refused.
    fn make_room(&mut self, peer: IpAddr, limits: &Limits) -> bool {
        let from_peer = self.open.values().filter(|e| e.peer == peer).count();
        if from_peer >= limits.per_peer && !self.evict(Some(peer)) {
            return false;
        }
        if self.open.len() >= limits.connections && !self.evict(None) {
            return false;
        }
        true
    }

    /// The oldest connection never authenticated (whatever it is doing: a
    /// stranger sending slowly holds nothing), else the oldest idle
    /// authenticated one.
    fn evict(&mut self, peer: Option<IpAddr>) -> bool {
        let of_peer = |e: &Entry| peer.is_none_or(|p| e.peer == p);
        let stranger = self.open.iter().find(|(_, e)| of_peer(e) && !e.trusted.load(Ordering::SeqCst));
        let victim = stranger
            .or_else(|| self.open.iter().find(|(_, e)| of_peer(e) && e.busy.load(Ordering::SeqCst) == 0))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.open.remove(&id)) {
            Some(e) => {
                e.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A stream that notes when anything was last read or written.
struct Watched<T> {
    inner: T,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl<T> Watched<T> {
    fn touch(&self) {
        self.last.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown`; `tls`
/// wraps every connection when given.
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let limits = fitted(limits);
    tracing::info!(
        connections = limits.connections,
        per_peer = limits.per_peer,
        "gateway: listening on {}",
        listener.local_addr()?
    );
    let table = Arc::new(Mutex::new(Table::default()));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut shutdown => return Ok(()),
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE/ENFILE/ECONNABORTED: the listener stays; say so at
                // most once a second and give descriptors time to free.
                if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                    tracing::warn!("gateway: accepting a connection failed ({e}); retrying");
                    last_warning = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let peer = addr.ip();
        let busy = Arc::new(AtomicUsize::new(0));
        let trusted = Arc::new(AtomicBool::new(false));
        let close = Arc::new(tokio::sync::Notify::new());
        let id = {
            let mut t = table.lock().expect("connection table");
            if !t.make_room(peer, &limits) {
                // Every connection is mid-request: this one waits for none.
                drop(stream);
                continue;
            }
            let id = t.next;
            t.next = t.next.wrapping_add(1);
            t.open.insert(id, Entry { peer, busy: busy.clone(), trusted: trusted.clone(), close: close.clone() });
            id
        };
        let _ = stream.set_nodelay(true);
        let (app, tls, table) = (app.clone(), tls.clone(), table.clone());
        tokio::spawn(async move {
            let epoch = Instant::now();
            let last = Arc::new(AtomicU64::new(0));
            let io = Watched { inner: stream, last: last.clone(), epoch };
            let conn = serve_connection(app, io, tls, busy, trusted, limits);
            let idle = async {
                loop {
                    tokio::time::sleep(limits.idle.checked_div(4).unwrap_or(limits.idle)).await;
                    let quiet = epoch.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                    if quiet >= limits.idle {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = conn => {}
                _ = close.notified() => {}
                _ = idle => {}
            }
            table.lock().expect("connection table").open.remove(&id);
        });
    }
}

/// Reads a request's body under the limits: whole within `body_time`,
/// and after `body_grace` at no less than `body_min_rate` bytes a second;
/// at most [`super::guard::BODY_LIMIT`] bytes. The status to answer otherwise.
async fn read_body(
    mut body: hyper::body::Incoming,
    limits: &Limits,
) -> Result<bytes::Bytes, (http::StatusCode, &'static str)> {
    use http_body_util::BodyExt as _;
    let start = Instant::now();
    let mut buf = bytes::BytesMut::new();
    loop {
        let allowed_by_rate = limits
            .body_grace
            .saturating_add(Duration::from_secs_f64(buf.len() as f64 / limits.body_min_rate.max(1) as f64));
        let left = allowed_by_rate.min(limits.body_time).saturating_sub(start.elapsed());
        let slow = (http::StatusCode::REQUEST_TIMEOUT, "the request body arrived too slowly");
        if left.is_zero() {
            return Err(slow);
        }
        match tokio::time::timeout(left, body.frame()).await {
            Err(_) => return Err(slow),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(_))) => return Err((http::StatusCode::BAD_REQUEST, "the request body could not be read")),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if buf.len().saturating_add(data.len()) > super::guard::BODY_LIMIT {
                        return Err((http::StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large"));
                    }
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
}

/// A refusal the listener answers itself, closing the connection.
fn closing(status: http::StatusCode, why: &str) -> http::Response<axum::body::Body> {
    let mut r = http::Response::new(axum::body::Body::from(format!("{why}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    r
}

async fn serve_connection(
    app: Router,
    io: Watched<tokio::net::TcpStream>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    busy: Arc<AtomicUsize>,
    trusted: Arc<AtomicBool>,
    limits: Limits,
) {
    let counted = |peer: Option<Arc<super::identity::PeerCertificate>>| {
        let busy = busy.clone();
        let trusted = trusted.clone();
        tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let peer = peer.clone();
            let app = app.clone();
            let busy = busy.clone();
            let trusted = trusted.clone();
            busy.fetch_add(1, Ordering::SeqCst);
            async move {
                use hyper::body::Body as _;
                let (mut parts, body) = req.into_parts();
                if let Some(p) = &peer {
                    parts.extensions.insert(p.clone());
                }
                // A body announced past the limit is refused before a byte of it is read.
                let announced = parts
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                if announced.is_some_and(|n| n > super::guard::BODY_LIMIT as u64) {
                    busy.fetch_sub(1, Ordering::SeqCst);
                    return Ok(closing(http::StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large"));
                }
                let body = if body.is_end_stream() {
                    axum::body::Body::empty()
                } else {
                    match read_body(body, &limits).await {
                        Ok(b) => axum::body::Body::from(b),
                        Err((status, why)) => {
                            busy.fetch_sub(1, Ordering::SeqCst);
                            return Ok(closing(status, why));
                        }
                    }
                };
                let req = http::Request::from_parts(parts, body);
                let r = super::identity::CONNECTION_TRUST.scope(trusted, tower::ServiceExt::oneshot(app, req)).await;
                busy.fetch_sub(1, Ordering::SeqCst);
                r
            }
        })
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_read);
    match tls {
        Some(acceptor) => {
            let Ok(Ok(stream)) = tokio::time::timeout(limits.handshake, acceptor.accept(io)).await else { return };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| super::identity::peer_identity(c.as_ref()))
                .map(Arc::new);
            let svc = hyper_util::service::TowerToHyperService::new(counted(peer));
            let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
        }
        None => {
            let svc = hyper_util::service::TowerToHyperService::new(counted(None));
            let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(peer: &str, busy: usize) -> Entry {
        Entry {
            peer: peer.parse().unwrap(),
            busy: Arc::new(AtomicUsize::new(busy)),
            trusted: Arc::new(AtomicBool::new(true)),
            close: Arc::new(tokio::sync::Notify::new()),
        }
    }

    #[test]
    fn a_new_connection_closes_the_oldest_idle_one_never_one_mid_request() {
        let limits = Limits { connections: 3, per_peer: 2, ..Limits::default() };
        let mut t = Table::default();
        t.open.insert(0, entry("10.0.0.1", 1));
        t.open.insert(1, entry("10.0.0.1", 0));
        t.open.insert(2, entry("10.0.0.2", 0));
        // 10.0.0.1 is at its cap: its oldest idle connection (1) goes, not 0 mid-request.
        assert!(t.make_room("10.0.0.1".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 2]);
        t.open.insert(3, entry("10.0.0.1", 0));
        // The listener is at its cap: the oldest idle of all (2) goes.
        assert!(t.make_room("10.0.0.3".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 3]);
        t.open.get_mut(&3).unwrap().busy.store(1, Ordering::SeqCst);
        t.open.insert(4, entry("10.0.0.3", 1));
        // Everything mid-request: the newcomer is refused.
        assert!(!t.make_room("10.0.0.4".parse().unwrap(), &limits));
        assert_eq!(t.open.len(), 3);
    }

    fn stranger(peer: &str, busy: usize) -> Entry {
        let e = entry(peer, busy);
        e.trusted.store(false, Ordering::SeqCst);
        e
    }

    /// Issue 48: strangers sending slowly (mid-request, never
    /// authenticated), from several addresses, are closed before any
    /// authenticated connection, idle or streaming; among strangers the oldest goes.
    #[test]
    fn strangers_go_first_whatever_they_are_doing_and_from_wherever() {
        let limits = Limits { connections: 4, per_peer: 3, ..Limits::default() };
        let mut t = Table::default();
        t.open.insert(0, entry("10.0.0.9", 0)); // a team's idle connection
        t.open.insert(1, stranger("10.0.0.1", 1)); // trickling a body
        t.open.insert(2, entry("10.0.0.9", 1)); // a team's open stream
        t.open.insert(3, stranger("10.0.0.2", 1));
        for (next, from) in [(4, "10.0.0.3"), (5, "10.0.0.4")] {
            assert!(t.make_room(from.parse().unwrap(), &limits));
            t.open.insert(next, stranger(from, 1));
        }
        // The strangers evicted one another, oldest first; the team kept both.
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 2, 4, 5]);
        // Only a team's connections left: its idle one goes, never its stream.
        t.open.remove(&4);
        t.open.remove(&5);
        t.open.insert(6, entry("10.0.0.9", 1));
        t.open.insert(7, entry("10.0.0.9", 1));
        assert!(t.make_room("10.0.0.5".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [2, 6, 7]);
    }

    #[test]
    fn the_cap_fits_under_the_open_file_limit() {
        let l = fitted(Limits { connections: usize::MAX, per_peer: usize::MAX, ..Limits::default() });
        assert!(l.connections < usize::MAX && l.connections >= 8, "{l:?}");
    }
}
