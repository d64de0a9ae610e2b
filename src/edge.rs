//! The edge every listener pinfleet opens stands behind (effects, the
//! outermost layer): the gateway's API and console and a delivery's alert
//! receiver alike. It accepts TCP (and TLS) connections under limits no
//! stranger can exhaust, then hands each to hyper with the router.
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
//! a body? its caller is asked of the gate from the headers first: a
//!    │ stranger may send a few KiB (a sign-in form), a caller up to the
//!    │ body limit, each under the bytes-in-flight budgets (503 Retry-After)
//!    ▼
//! the router (the API and the console) behind a panic catcher: a panic
//! answers 500 and releases all its request held (drop guards); an
//! authenticated request marks its connection as worth keeping and names
//! its holder (identity::CONNECTION_TRUST); a holder past its share of
//! the connections is answered 429 with Retry-After and closed
//! ```
//!
//! A connection counts against its holder from its first request whose
//! headers name one (the gate is asked before anything else is done for
//! it), not from the end of that request: a holder's long first requests
//! hold no more than its share. Every request has a deadline, from its
//! headers to the last byte of its answer ([`Limits::request_time`]; an
//! event stream [`Limits::stream_time`]): a handler past it is answered
//! 503, and an answer not written by then (a peer that never reads: an
//! HTTP/2 window kept at zero) ends its connection. An answer's bytes are
//! held against its caller until written ([`Limits::answer_per_holder`]).
//! What keeps a connection open is requests, never bytes: an HTTP/2 PING
//! keeps nothing.
//!
//! What one connection can make the gateway hold is bounded by
//! construction: HTTP/1 buffers and HTTP/2 windows are small, HTTP/2
//! streams per connection are few, and a body is read only within the
//! budgets. So the listener's memory is at most about
//! `connections × PER_CONNECTION_BYTES + bodies_in_flight` (the README's
//! table of budgets).
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;

/// The identity a TLS client certificate carries (subject CN and O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// A certificate's subject as the API server reads it: CN the user, O the groups.
pub fn peer_identity(der: &[u8]) -> Option<PeerCertificate> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let common_name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let organizations = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
    Some(PeerCertificate { common_name, organizations })
}

/// The largest request body any route reads: a workload is a few KiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// What the listener knows of a connection's caller: whether a request on
/// it was authenticated, and who first was (the holder its budgets count).
#[derive(Debug, Default)]
pub struct ConnectionState {
    pub trusted: std::sync::atomic::AtomicBool,
    /// The first authenticated caller's user and team.
    pub holder: std::sync::OnceLock<Holder>,
}

/// Whom a connection is counted against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub user: String,
    /// The caller's first team (none for an admin or a caller without one).
    pub team: Option<String>,
}

impl ConnectionState {
    /// A request on the connection was authenticated as `user` of `team`.
    pub fn trust(&self, user: &str, team: Option<&str>) {
        self.trusted.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.holder.set(Holder { user: user.to_string(), team: team.map(str::to_string) });
    }

    pub fn is_trusted(&self) -> bool {
        self.trusted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

tokio::task_local! {
    /// The connection a request came on: set by the listener around each
    /// request, marked once a request on it is authenticated.
    pub static CONNECTION_TRUST: std::sync::Arc<ConnectionState>;
}

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
    /// Connections one user may hold at once; past it each answer is 429.
    pub per_user: usize,
    /// Connections one team's users may hold at once.
    pub per_team: usize,
    /// The most a request without credentials may send (a sign-in form).
    pub stranger_body: usize,
    /// Bytes of request bodies buffered at once, in all.
    pub bodies_in_flight: usize,
    /// Bytes of request bodies buffered at once for one user.
    pub body_per_holder: usize,
    /// Bytes strangers' requests hold at once (their headers and bodies),
    /// in all: a pool apart, so strangers never take an authenticated
    /// caller's room.
    pub strangers_in_flight: usize,
    /// The same for one stranger's address.
    pub stranger_per_peer: usize,
    /// HTTP/2 streams (requests) in progress on one connection.
    pub h2_streams: u32,
    /// A request, from its headers to the last byte of its answer.
    pub request_time: Duration,
    /// The same for an event stream (a console tab's live updates; the
    /// browser opens it again when it ends).
    pub stream_time: Duration,
    /// Bytes of answers held until written, in all.
    pub answers_in_flight: usize,
    /// The same for one holder (a user, or a stranger's address).
    pub answer_per_holder: usize,
    /// The same for one team's users together.
    pub answer_per_team: usize,
}

/// The most one connection's buffers hold besides the bodies being read:
/// the HTTP/2 connection window (the peer may send no more unread), the
/// HTTP/1 read buffer and TLS's records, rounded up.
pub const PER_CONNECTION_BYTES: usize = 192 * 1024;
/// HTTP/2's flow-control windows: what a peer may send before the
/// gateway reads it.
const H2_STREAM_WINDOW: u32 = 32 * 1024;
const H2_CONNECTION_WINDOW: u32 = 64 * 1024;
/// HTTP/1's read buffer (headers and what is pipelined behind them).
const H1_BUFFER: usize = 32 * 1024;
/// A header block's largest size (as for HTTP/1's buffer).
const MAX_HEADER_LIST: u32 = 16 * 1024;

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
            // A user runs a CLI, a tab or two and a CI job: 64 is plenty;
            // a team's users together a quarter of the listener.
            per_user: 64,
            per_team: 1024,
            // A sign-in form is a token: a few KiB.
            stranger_body: 16 * 1024,
            // 64 bodies of the largest size at once; a holder 4 of them.
            bodies_in_flight: 64 << 20,
            body_per_holder: 4 << 20,
            // Sign-in forms: hundreds at once, a NAT'd office's dozens.
            strangers_in_flight: 8 << 20,
            stranger_per_peer: 512 << 10,
            // A CLI sends one request at a time; a tab a handful.
            h2_streams: 16,
            // The slowest route (a dry run verifying an image's
            // provenance, 10 s a registry call) ends well within it.
            request_time: Duration::from_secs(60),
            stream_time: Duration::from_secs(600),
            // The largest view (a queue of thousands) is a few MiB; as
            // for bodies, a holder a few, everyone 64 MiB.
            answers_in_flight: 64 << 20,
            answer_per_holder: 8 << 20,
            // A team's users together a quarter of it, as for connections.
            answer_per_team: 16 << 20,
        }
    }
}

impl Limits {
    /// A listener of figures and probes (/metrics, /healthz): a scraper and
    /// a kubelet hold a connection or two; nobody sends a body; strangers'
    /// unfinished headers hold little and are closed first.
    pub fn for_metrics() -> Limits {
        Limits {
            connections: 64,
            per_peer: 16,
            per_user: 16,
            per_team: 16,
            stranger_body: 0,
            strangers_in_flight: 256 << 10,
            stranger_per_peer: 64 << 10,
            h2_streams: 4,
            request_time: Duration::from_secs(10),
            ..Limits::default()
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
    limits.with_connections(limits.connections.min(room))
}

/// The least share of connections a team is cut to, and a user's (a
/// CLI, console tabs and CI jobs), never more than its team's.
const LEAST_TEAM_SHARE: usize = 4;
const LEAST_USER_SHARE: usize = 16;

impl Limits {
    /// `connections` in all, the per-address, per-user and per-team shares
    /// cut in the same proportion when it is lower (never below
    /// [`LEAST_TEAM_SHARE`] and [`LEAST_USER_SHARE`], never above what
    /// they were, a user's never above its team's): a cap lowered by a
    /// flag or the open-file limit keeps one user, or one team, from
    /// holding all of it.
    pub fn with_connections(self, connections: usize) -> Limits {
        let cut = |share: usize, least: usize| {
            if connections >= self.connections {
                return share;
            }
            let scaled = share.saturating_mul(connections).checked_div(self.connections).unwrap_or(share);
            scaled.max(least).min(share)
        };
        let per_team = cut(self.per_team, LEAST_TEAM_SHARE);
        Limits {
            connections,
            per_peer: self.per_peer.min(connections),
            per_user: cut(self.per_user, LEAST_USER_SHARE).min(per_team),
            per_team,
            ..self
        }
    }

    /// These limits as a stranger's request sees them: its pool, its address's share.
    fn for_strangers(&self) -> Limits {
        Limits { bodies_in_flight: self.strangers_in_flight, body_per_holder: self.stranger_per_peer, ..*self }
    }

    /// These limits as an answer's bytes see them (a [`BodyBudget`] of answers).
    fn for_answers(&self) -> Limits {
        Limits { bodies_in_flight: self.answers_in_flight, body_per_holder: self.answer_per_holder, ..*self }
    }

    /// The same for a team's users together (a pool of its own, each team a holder).
    fn for_team_answers(&self) -> Limits {
        Limits { bodies_in_flight: usize::MAX, body_per_holder: self.answer_per_team, ..*self }
    }
}

/// What a request's header block holds, as HTTP/2 counts it (name, value
/// and 32 bytes each): kept while the request lives, so counted in its
/// holder's budget with its body.
fn header_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .fold(0usize, |n, (k, v)| n.saturating_add(k.as_str().len()).saturating_add(v.len()).saturating_add(32))
}

/// The address a request came from, in its extensions (for a route's own
/// audit lines).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub IpAddr);

/// Where the edge's own refusals are written (the gateway's audit log):
/// every one, with the caller where it is known.
pub trait Audit: Send + Sync + 'static {
    fn refused(&self, holder: Option<&Holder>, peer: IpAddr, method: &str, path: &str, status: u16, why: &str);
    /// Says what a rate limit held back in a second now over; the edge
    /// calls it every second and at shutdown, so a flood's last count is
    /// written even when no later line comes.
    fn flush(&self) {}
}

/// Who a request is from, asked from its headers before its body is read
/// (the gateway's identity; the alert receiver's token).
pub trait Gate: Send + Sync + 'static {
    /// The authenticated principal, or none (a stranger).
    fn principal<'a>(&'a self, parts: &'a http::request::Parts) -> futures::future::BoxFuture<'a, Option<String>>;
}

/// Bytes of request bodies being read, in all and per holder: taken
/// before a body is read, given back when its request ends (a guard).
#[derive(Default)]
pub struct BodyBudget {
    held: Mutex<(usize, BTreeMap<String, usize>)>,
}

/// Bytes taken from a [`BodyBudget`], given back on drop (a panic too).
pub struct BodyBytes {
    budget: Arc<BodyBudget>,
    holder: String,
    bytes: usize,
}

impl BodyBudget {
    /// Takes `bytes` for `holder` if both the holder's and the total
    /// budget have room.
    pub fn take(self: &Arc<Self>, holder: &str, bytes: usize, limits: &Limits) -> Option<BodyBytes> {
        let mut h = self.held.lock().expect("body budget");
        let mine = h.1.get(holder).copied().unwrap_or(0);
        if h.0.saturating_add(bytes) > limits.bodies_in_flight || mine.saturating_add(bytes) > limits.body_per_holder {
            return None;
        }
        h.0 = h.0.saturating_add(bytes);
        h.1.insert(holder.to_string(), mine.saturating_add(bytes));
        Some(BodyBytes { budget: self.clone(), holder: holder.to_string(), bytes })
    }

    /// Bytes held now, in all.
    pub fn held(&self) -> usize {
        self.held.lock().expect("body budget").0
    }
}

impl BodyBytes {
    /// Takes `more` bytes for the same holder, under the same budgets
    /// (a chunked body reserves as it arrives); false when either is full.
    pub fn grow(&mut self, more: usize, limits: &Limits) -> bool {
        let mut h = self.budget.held.lock().expect("body budget");
        let mine = h.1.get(&self.holder).copied().unwrap_or(0);
        if h.0.saturating_add(more) > limits.bodies_in_flight || mine.saturating_add(more) > limits.body_per_holder {
            return false;
        }
        h.0 = h.0.saturating_add(more);
        h.1.insert(self.holder.clone(), mine.saturating_add(more));
        drop(h);
        self.bytes = self.bytes.saturating_add(more);
        true
    }
}

impl Drop for BodyBytes {
    fn drop(&mut self) {
        let mut h = self.budget.held.lock().expect("body budget");
        h.0 = h.0.saturating_sub(self.bytes);
        if let Some(n) = h.1.get_mut(&self.holder) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                h.1.remove(&self.holder);
            }
        }
    }
}

/// The requests in progress on one connection: how many (the eviction's
/// look), each one's deadline, and when one last started or ended. What
/// keeps a connection from being idle is requests, never bytes: an HTTP/2
/// PING, or a peer's window update, keeps nothing open.
struct Requests {
    busy: Arc<AtomicUsize>,
    deadlines: Mutex<BTreeMap<u64, Instant>>,
    next: AtomicU64,
    epoch: Instant,
    /// Milliseconds after `epoch` when a request last started or ended.
    last: AtomicU64,
}

impl Requests {
    fn new(busy: Arc<AtomicUsize>) -> Requests {
        Requests {
            busy,
            deadlines: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        self.last.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long since a request last started or ended.
    fn quiet(&self) -> Duration {
        self.epoch.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }

    /// Whether a request in progress is past its deadline by `grace`.
    fn overdue(&self, grace: Duration) -> bool {
        let now = Instant::now();
        self.deadlines
            .lock()
            .map(|d| d.values().any(|at| at.checked_add(grace).is_some_and(|at| at <= now)))
            .unwrap_or(false)
    }
}

/// A request in progress on a connection: counted, with its deadline,
/// from its headers until its answer's last byte is written (or the
/// answer is dropped), however it ends (an answer, a panic, a reset).
struct Busy {
    requests: Arc<Requests>,
    id: u64,
}

impl Busy {
    fn new(requests: &Arc<Requests>, deadline: Instant) -> Busy {
        requests.busy.fetch_add(1, Ordering::SeqCst);
        let id = requests.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut d) = requests.deadlines.lock() {
            d.insert(id, deadline);
        }
        requests.touch();
        Busy { requests: requests.clone(), id }
    }

    /// Moves its deadline (an event stream's is longer).
    fn until(&self, deadline: Instant) {
        if let Ok(mut d) = self.requests.deadlines.lock() {
            d.insert(self.id, deadline);
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut d) = self.requests.deadlines.lock() {
            d.remove(&self.id);
        }
        self.requests.busy.fetch_sub(1, Ordering::SeqCst);
        self.requests.touch();
    }
}

/// An answer's body, holding what its request counts (in progress, its
/// answer's bytes) until it ends or is dropped.
struct Tail<B> {
    inner: B,
    _busy: Option<Busy>,
    _held: Vec<BodyBytes>,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Tail<B> {
    type Data = B::Data;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request past its deadline has this long to have its 503 written
/// before its connection is ended.
const DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// A connection's place in the table, given up however its task ends.
struct Place {
    table: Arc<Mutex<Table>>,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut t) = self.table.lock() {
            t.remove(self.id);
        }
    }
}

/// One open connection, as the cap sees it.
struct Entry {
    peer: IpAddr,
    /// Requests in flight (an authenticated connection serving one is never evicted).
    busy: Arc<AtomicUsize>,
    /// A request on it was authenticated, and by whom first.
    state: Arc<ConnectionState>,
    close: Arc<tokio::sync::Notify>,
    /// Whether its holder is counted in the table's per-user and per-team counts.
    counted: bool,
}

impl Entry {
    fn trusted(&self) -> bool {
        self.state.is_trusted()
    }
}

/// Every open connection, oldest first (ids grow), and how many each
/// user and team holds: kept as connections are named and given up (the
/// place's drop guard, an eviction), so a request's share check is a look-up,
/// never a scan of every connection.
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
    /// Each user's and team's connections, by id (oldest first).
    users: std::collections::HashMap<String, std::collections::BTreeSet<u64>>,
    teams: std::collections::HashMap<String, std::collections::BTreeSet<u64>>,
}

type Held = std::collections::HashMap<String, std::collections::BTreeSet<u64>>;

fn count_up(counts: &mut Held, key: &str, id: u64) {
    counts.entry(key.to_string()).or_default().insert(id);
}

fn count_down(counts: &mut Held, key: &str, id: u64) {
    if let Some(ids) = counts.get_mut(key) {
        ids.remove(&id);
        if ids.is_empty() {
            counts.remove(key);
        }
    }
}

impl Table {
    /// A new connection (counted against its holder once admitted: [`Table::over_share`]).
    fn insert(&mut self, id: u64, entry: Entry) {
        self.open.insert(id, entry);
    }

    /// Gives up connection `id`, and its holder's count with it.
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.open.remove(&id)?;
        if e.counted {
            if let Some(h) = e.state.holder.get() {
                count_down(&mut self.users, &h.user, id);
                if let Some(t) = &h.team {
                    count_down(&mut self.teams, t, id);
                }
            }
        }
        Some(e)
    }

    /// Counts connection `id` against its holder (admitted: its holder had
    /// room); the holder never changes after.
    fn count_holder(&mut self, id: u64) {
        let Some(e) = self.open.get_mut(&id) else { return };
        if e.counted {
            return;
        }
        let Some(h) = e.state.holder.get() else { return };
        e.counted = true;
        count_up(&mut self.users, &h.user, id);
        if let Some(t) = &h.team {
            count_up(&mut self.teams, t, id);
        }
    }

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
    /// stranger sending slowly holds nothing) of the address holding the
    /// most of them, else the oldest idle authenticated one.
    fn evict(&mut self, peer: Option<IpAddr>) -> bool {
        // Among strangers, the address holding the most goes first: a lone
        // newcomer (an honest caller not yet authenticated) outlives a
        // flood from elsewhere.
        let mut strangers: BTreeMap<IpAddr, usize> = BTreeMap::new();
        for e in self.open.values().filter(|e| !e.trusted()) {
            *strangers.entry(e.peer).or_default() += 1;
        }
        let most = strangers.values().copied().max().unwrap_or(0);
        let crowded = |e: &Entry| strangers.get(&e.peer).copied().unwrap_or(0) == most;
        let of_peer = |e: &Entry| peer.is_none_or(|p| e.peer == p);
        let stranger = self.open.iter().find(|(_, e)| of_peer(e) && !e.trusted() && (peer.is_some() || crowded(e)));
        let victim = stranger
            .or_else(|| self.open.iter().find(|(_, e)| of_peer(e) && e.busy.load(Ordering::SeqCst) == 0))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.remove(id)) {
            Some(e) => {
                e.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Whether connection `id` is past its holder's share. A connection is
    /// admitted against its holder once, when the holder is first known,
    /// if the holder's user and team have room then; admitted, it stays
    /// within the share for good (however many its holder or a teammate
    /// opens after it: the newcomers are refused, never an older one).
    fn over_share(&mut self, id: u64, limits: &Limits) -> Option<String> {
        let e = self.open.get(&id)?;
        let h = e.state.holder.get()?.clone();
        if e.counted {
            return None;
        }
        let users = self.users.get(&h.user).map_or(0, |s| s.len());
        if users >= limits.per_user {
            return Some(format!("{} holds {} connections (at most {})", h.user, users + 1, limits.per_user));
        }
        if let Some(team) = &h.team {
            let teams = self.teams.get(team).map_or(0, |s| s.len());
            if teams >= limits.per_team {
                return Some(format!("team {team} holds {} connections (at most {})", teams + 1, limits.per_team));
            }
        }
        self.count_holder(id);
        None
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown`; `tls`
/// wraps every connection when given.
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    gate: Option<Arc<dyn Gate>>,
    audit: Option<Arc<dyn Audit>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // A panic anywhere in a request answers 500 (the audit layer outside
    // notes it); the request's guards give back what it held.
    let app = app.layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked));
    let budget = Arc::new(BodyBudget::default());
    let strangers = Arc::new(BodyBudget::default());
    let answers = Answers::default();
    let limits = fitted(limits);
    tracing::info!(
        connections = limits.connections,
        per_peer = limits.per_peer,
        "listening on {}",
        listener.local_addr()?
    );
    let table = Arc::new(Mutex::new(Table::default()));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_warning: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = tick.tick() => {
                if let Some(a) = &audit {
                    a.flush();
                }
                continue;
            }
            _ = &mut shutdown => {
                if let Some(a) = &audit {
                    a.flush();
                }
                return Ok(());
            }
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
        let state = Arc::new(ConnectionState::default());
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
            t.insert(
                id,
                Entry { peer, busy: busy.clone(), state: state.clone(), close: close.clone(), counted: false },
            );
            id
        };
        let _ = stream.set_nodelay(true);
        let place = Place { table: table.clone(), id };
        let conn = Conn {
            app: app.clone(),
            gate: gate.clone(),
            audit: audit.clone(),
            budget: budget.clone(),
            strangers: strangers.clone(),
            answers: answers.clone(),
            table: table.clone(),
            close: close.clone(),
            id,
            peer,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let _place = place;
            let requests = Arc::new(Requests::new(busy));
            let conn = serve_connection(conn, stream, tls, requests.clone(), state, limits);
            // Closed when quiet (no request in progress, none started or
            // ended for the idle timeout), or when a request outlives its
            // deadline (an answer the peer does not read).
            let watch = async {
                let every = limits.idle.checked_div(4).unwrap_or(limits.idle).min(Duration::from_secs(2));
                loop {
                    tokio::time::sleep(every).await;
                    if requests.overdue(DEADLINE_GRACE) {
                        tracing::debug!("gateway: a request outlived its deadline; its connection is closed");
                        return;
                    }
                    if requests.busy.load(Ordering::SeqCst) == 0 && requests.quiet() >= limits.idle {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = conn => {}
                _ = close.notified() => {}
                _ = watch => {}
            }
        });
    }
}

/// Reads a request's body under the limits: whole within `body_time`,
/// and after `body_grace` at no less than `body_min_rate` bytes a second;
/// at most `most` bytes, each held in `held` before it is buffered (a
/// body of unannounced length grows its reservation as it arrives, by at
/// least [`BODY_STEP`]). The status to answer otherwise.
async fn read_body(
    mut body: hyper::body::Incoming,
    limits: &Limits,
    most: usize,
    held: &mut BodyBytes,
    deadline: Instant,
) -> Result<bytes::Bytes, (http::StatusCode, &'static str)> {
    use http_body_util::BodyExt as _;
    let start = Instant::now();
    let mut buf = bytes::BytesMut::new();
    loop {
        let allowed_by_rate = limits
            .body_grace
            .saturating_add(Duration::from_secs_f64(buf.len() as f64 / limits.body_min_rate.max(1) as f64));
        // Within its time, its rate, and the request's deadline.
        let left = allowed_by_rate
            .min(limits.body_time)
            .saturating_sub(start.elapsed())
            .min(deadline.saturating_duration_since(Instant::now()));
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
                    let after = buf.len().saturating_add(data.len());
                    if after > most {
                        return Err((http::StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large"));
                    }
                    if after > held.bytes {
                        let need = after.saturating_sub(held.bytes);
                        let step = need.max(BODY_STEP).min(most.saturating_sub(held.bytes));
                        if !held.grow(step, limits) {
                            return Err((
                                http::StatusCode::SERVICE_UNAVAILABLE,
                                "too many request bodies in flight; try again",
                            ));
                        }
                    }
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
}

/// How much more a body of unannounced length reserves at a time.
const BODY_STEP: usize = 16 * 1024;

/// A refusal the listener answers itself, closing the connection; a
/// budget that was full says when to come back.
fn closing(status: http::StatusCode, why: &str) -> http::Response<axum::body::Body> {
    let mut r = http::Response::new(axum::body::Body::from(format!("{{\"error\":{}}}\n", serde_json::json!(why))));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    if matches!(status, http::StatusCode::TOO_MANY_REQUESTS | http::StatusCode::SERVICE_UNAVAILABLE) {
        h.insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("2"));
    }
    r
}

/// A panic in a request: 500, said without its message (logged).
fn panicked(err: Box<dyn std::any::Any + Send + 'static>) -> http::Response<axum::body::Body> {
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    tracing::error!("gateway: a request panicked: {what}");
    let mut r = http::Response::new(axum::body::Body::from(
        "{\"error\":\"the gateway failed on this request; it was logged\"}\n",
    ));
    *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r.headers_mut().insert(PANICKED, http::HeaderValue::from_static("1"));
    r
}

/// What every request on one connection shares.
#[derive(Clone)]
struct Conn {
    app: Router,
    gate: Option<Arc<dyn Gate>>,
    audit: Option<Arc<dyn Audit>>,
    budget: Arc<BodyBudget>,
    /// Strangers' pool (headers and bodies), apart from `budget`.
    strangers: Arc<BodyBudget>,
    /// Answers' bytes held until written.
    answers: Answers,
    /// Ends the connection (its watcher closes it).
    close: Arc<tokio::sync::Notify>,
    table: Arc<Mutex<Table>>,
    id: u64,
    peer: IpAddr,
}

/// One request at the edge: its body read within the budgets (after the
/// gate, when there is one), then the router; a holder past its share is
/// answered 429 and the connection closed.
async fn handle(
    conn: Conn,
    req: http::Request<hyper::body::Incoming>,
    cert: Option<Arc<PeerCertificate>>,
    state: Arc<ConnectionState>,
    limits: Limits,
    deadline: Instant,
) -> http::Response<axum::body::Body> {
    use hyper::body::Body as _;
    let (mut parts, body) = req.into_parts();
    if let Some(p) = &cert {
        parts.extensions.insert(p.clone());
    }
    parts.extensions.insert(PeerAddr(conn.peer));
    let method = parts.method.to_string();
    let path: String = parts.uri.path().chars().take(256).collect();
    let refuse = |status: http::StatusCode, why: &str| {
        if let Some(a) = &conn.audit {
            a.refused(state.holder.get(), conn.peer, &method, &path, status.as_u16(), why);
        }
        closing(status, why)
    };
    // The length a body announces.
    let announced = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let has_body = !(body.is_end_stream() || announced == Some(0));
    // Who it is from, from the headers alone, before anything is done for
    // it: a connection counts against its holder from the first request
    // that names one, however long that request then takes; and a
    // stranger's body is never buffered whole.
    let principal = match &conn.gate {
        Some(g) if has_body || state.holder.get().is_none() => {
            CONNECTION_TRUST.scope(state.clone(), g.principal(&parts)).await
        }
        Some(_) => None,
        None => Some(String::new()),
    };
    // A body announced past the limit is refused before a byte of it is
    // read (its caller named in the audit when known).
    if announced.is_some_and(|n| n > BODY_LIMIT as u64) {
        return refuse(http::StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large");
    }
    // A holder past its share is not served on more connections.
    if let Some(why) = past_share(&conn, &limits) {
        return refuse(http::StatusCode::TOO_MANY_REQUESTS, &why);
    }
    let (mut held, mut head_held) = (None, None);
    let body = if !has_body {
        axum::body::Body::empty()
    } else {
        let (holder, most, budget, pool) = match principal {
            Some(p) => (format!("user:{p}"), BODY_LIMIT, &conn.budget, limits),
            None => (format!("peer:{}", conn.peer), limits.stranger_body, &conn.strangers, limits.for_strangers()),
        };
        if announced.is_some_and(|n| n > most as u64) {
            return refuse(
                http::StatusCode::UNAUTHORIZED,
                "authenticate before sending a body this large (a bearer token or a client certificate)",
            );
        }
        // The headers, held as long as the request, are reserved first;
        // then an announced length whole before a byte is read, or a
        // chunked body (no length) as its bytes arrive.
        let Some(head) = budget.take(&holder, header_bytes(&parts.headers), &pool) else {
            return refuse(http::StatusCode::SERVICE_UNAVAILABLE, "too many request bodies in flight; try again");
        };
        head_held = Some(head);
        let reserve = announced.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let cap = announced.map_or(most, |_| reserve.min(most));
        let Some(bytes) = budget.take(&holder, reserve, &pool) else {
            return refuse(http::StatusCode::SERVICE_UNAVAILABLE, "too many request bodies in flight; try again");
        };
        let bytes = held.insert(bytes);
        match read_body(body, &pool, cap, bytes, deadline).await {
            Ok(b) => axum::body::Body::from(b),
            Err((status, why)) => return refuse(status, why),
        }
    };
    let req = http::Request::from_parts(parts, body);
    let routed = CONNECTION_TRUST.scope(state.clone(), tower::ServiceExt::oneshot(conn.app.clone(), req));
    let r = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), routed).await;
    drop((held, head_held));
    let mut r = match r {
        Ok(Ok(r)) => r,
        Ok(Err(never)) => match never {},
        Err(_) => {
            let why = format!(
                "the request did not finish within its deadline ({}); try again",
                humantime::format_duration(limits.request_time)
            );
            return refuse(http::StatusCode::SERVICE_UNAVAILABLE, &why);
        }
    };
    if r.headers_mut().remove(PANICKED).is_some() {
        if let Some(a) = &conn.audit {
            a.refused(state.holder.get(), conn.peer, &method, &path, 500, "the request panicked (logged)");
        }
    }
    // The first request on a connection names its holder: past its share, its answer is 429.
    if let Some(why) = past_share(&conn, &limits) {
        return refuse(http::StatusCode::TOO_MANY_REQUESTS, &why);
    }
    // An answer's bytes are held against its caller until written: a peer
    // that asks and never reads holds no more than its share.
    let Some(size) = r.body().size_hint().exact().filter(|n| *n > 0) else { return r };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let unread = "too many answers are held for you unread; read them, or try again";
    let mut held = Vec::with_capacity(2);
    match state.holder.get() {
        Some(h) => {
            let Some(mine) = conn.answers.callers.take(&format!("user:{}", h.user), size, &limits.for_answers()) else {
                return refuse(http::StatusCode::SERVICE_UNAVAILABLE, unread);
            };
            held.push(mine);
            if let Some(team) = &h.team {
                let Some(ours) = conn.answers.teams.take(team, size, &limits.for_team_answers()) else {
                    return refuse(
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "too many answers are held for your team unread; read them, or try again",
                    );
                };
                held.push(ours);
            }
        }
        None => {
            let Some(theirs) =
                conn.answers.strangers.take(&format!("peer:{}", conn.peer), size, &limits.for_strangers())
            else {
                return refuse(http::StatusCode::SERVICE_UNAVAILABLE, unread);
            };
            held.push(theirs);
        }
    }
    r.map(|b| axum::body::Body::new(Tail { inner: b, _busy: None, _held: held }))
}

/// The pools an answer's bytes come from: callers', each team's, and
/// strangers' apart (as for bodies: strangers never take an authenticated
/// caller's room).
#[derive(Clone, Default)]
struct Answers {
    callers: Arc<BodyBudget>,
    teams: Arc<BodyBudget>,
    strangers: Arc<BodyBudget>,
}

/// Whether an answer is an event stream (a longer deadline).
fn is_event_stream(r: &http::Response<axum::body::Body>) -> bool {
    r.headers().get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// Why the connection's holder may not be served on it: it holds more
/// than its share of the listener (429, closing the connection: over
/// HTTP/1 by its `Connection: close`, over HTTP/2, where that header is no
/// word, once the answer has had a moment to leave).
fn past_share(conn: &Conn, limits: &Limits) -> Option<String> {
    let why = conn.table.lock().ok()?.over_share(conn.id, limits)?;
    tracing::warn!("gateway: {why}: a connection past its share answered 429 and closed");
    let close = conn.close.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        close.notify_one();
    });
    Some(format!("{why}; close some and try again"))
}

/// Marks an answer the panic catcher made (taken off before it leaves).
const PANICKED: &str = "x-pinfleet-panicked";

async fn serve_connection(
    conn: Conn,
    io: tokio::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    requests: Arc<Requests>,
    state: Arc<ConnectionState>,
    limits: Limits,
) {
    let counted = |cert: Option<Arc<PeerCertificate>>| {
        tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            // Counted from here to its answer's last byte however it ends.
            let deadline = Instant::now() + limits.request_time;
            let busy = Busy::new(&requests, deadline);
            let fut = handle(conn.clone(), req, cert.clone(), state.clone(), limits, deadline);
            async move {
                let r = fut.await;
                if is_event_stream(&r) {
                    busy.until(Instant::now() + limits.stream_time);
                }
                let r = r.map(|b| axum::body::Body::new(Tail { inner: b, _busy: Some(busy), _held: Vec::new() }));
                Ok::<_, std::convert::Infallible>(r)
            }
        })
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(H1_BUFFER);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(limits.h2_streams)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buf_size(H2_CONNECTION_WINDOW as usize)
        .max_pending_accept_reset_streams(Some(limits.h2_streams as usize))
        .max_local_error_reset_streams(Some(64));
    match tls {
        Some(acceptor) => {
            let Ok(Ok(stream)) = tokio::time::timeout(limits.handshake, acceptor.accept(io)).await else { return };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| peer_identity(c.as_ref()))
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
        let state = super::ConnectionState::default();
        state.trusted.store(true, Ordering::SeqCst);
        Entry {
            peer: peer.parse().unwrap(),
            busy: Arc::new(AtomicUsize::new(busy)),
            state: Arc::new(state),
            close: Arc::new(tokio::sync::Notify::new()),
            counted: false,
        }
    }

    #[test]
    fn a_new_connection_closes_the_oldest_idle_one_never_one_mid_request() {
        let limits = Limits { connections: 3, per_peer: 2, ..Limits::default() };
        let mut t = Table::default();
        t.insert(0, entry("10.0.0.1", 1));
        t.insert(1, entry("10.0.0.1", 0));
        t.insert(2, entry("10.0.0.2", 0));
        // 10.0.0.1 is at its cap: its oldest idle connection (1) goes, not 0 mid-request.
        assert!(t.make_room("10.0.0.1".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 2]);
        t.insert(3, entry("10.0.0.1", 0));
        // The listener is at its cap: the oldest idle of all (2) goes.
        assert!(t.make_room("10.0.0.3".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 3]);
        t.open.get_mut(&3).unwrap().busy.store(1, Ordering::SeqCst);
        t.insert(4, entry("10.0.0.3", 1));
        // Everything mid-request: the newcomer is refused.
        assert!(!t.make_room("10.0.0.4".parse().unwrap(), &limits));
        assert_eq!(t.open.len(), 3);
    }

    fn stranger(peer: &str, busy: usize) -> Entry {
        let e = entry(peer, busy);
        e.state.trusted.store(false, Ordering::SeqCst);
        e
    }

    /// Issue 48: strangers sending slowly (mid-request, never
    /// authenticated), from several addresses, are closed before any
    /// authenticated connection, idle or streaming; among strangers the oldest goes.
    #[test]
    fn strangers_go_first_whatever_they_are_doing_and_from_wherever() {
        let limits = Limits { connections: 4, per_peer: 3, ..Limits::default() };
        let mut t = Table::default();
        t.insert(0, entry("10.0.0.9", 0)); // a team's idle connection
        t.insert(1, stranger("10.0.0.1", 1)); // trickling a body
        t.insert(2, entry("10.0.0.9", 1)); // a team's open stream
        t.insert(3, stranger("10.0.0.2", 1));
        for (next, from) in [(4, "10.0.0.3"), (5, "10.0.0.4")] {
            assert!(t.make_room(from.parse().unwrap(), &limits));
            t.insert(next, stranger(from, 1));
        }
        // The strangers evicted one another, oldest first; the team kept both.
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 2, 4, 5]);
        // Only a team's connections left: its idle one goes, never its stream.
        t.remove(4);
        t.remove(5);
        t.insert(6, entry("10.0.0.9", 1));
        t.insert(7, entry("10.0.0.9", 1));
        assert!(t.make_room("10.0.0.5".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [2, 6, 7]);
    }

    #[test]
    fn the_cap_fits_under_the_open_file_limit() {
        let l = fitted(Limits { connections: usize::MAX, per_peer: usize::MAX, ..Limits::default() });
        assert!(l.connections < usize::MAX && l.connections >= 8, "{l:?}");
    }

    #[test]
    fn a_lower_cap_cuts_each_users_and_teams_share_with_it() {
        let d = Limits::default();
        assert_eq!(d.with_connections(d.connections), d, "the default cap keeps its shares");
        // A quarter of the cap for a team, as at the default; a user its 16.
        let l = d.with_connections(1024);
        assert_eq!((l.connections, l.per_peer, l.per_user, l.per_team), (1024, 256, 16, 256));
        // A small cap: no team, and so no user, holds more than a quarter.
        let l = d.with_connections(48);
        assert_eq!((l.per_peer, l.per_user, l.per_team), (48, 12, 12));
        // A higher cap never raises a share past what it was.
        let l = d.with_connections(1 << 20);
        assert_eq!((l.per_user, l.per_team), (d.per_user, d.per_team));
        let tiny = d.with_connections(2);
        assert_eq!((tiny.per_peer, tiny.per_user, tiny.per_team), (2, 4, 4));
    }

    #[test]
    fn a_strangers_headers_and_body_come_from_their_own_pool() {
        let limits = Limits::default();
        let s = limits.for_strangers();
        assert_eq!((s.bodies_in_flight, s.body_per_holder), (limits.strangers_in_flight, limits.stranger_per_peer));
        let (users, strangers) = (Arc::new(BodyBudget::default()), Arc::new(BodyBudget::default()));
        // Strangers from 16 addresses fill their pool ...
        let held: Vec<BodyBytes> =
            (0..16).map(|i| strangers.take(&format!("peer:10.0.0.{i}"), s.stranger_per_peer, &s).unwrap()).collect();
        assert!(strangers.take("peer:10.0.1.1", 1, &s).is_none(), "the strangers' pool is full");
        // ... and a user's body still fits.
        assert!(users.take("user:blue", BODY_LIMIT, &limits).is_some());
        drop(held);
        let mut h = http::HeaderMap::new();
        h.insert("x-a", http::HeaderValue::from_static("0123456789"));
        assert_eq!(header_bytes(&h), 3 + 10 + 32);
    }

    fn held_by(peer: &str, user: &str, team: &str) -> Entry {
        let e = entry(peer, 1);
        let _ = e.state.holder.set(super::Holder { user: user.into(), team: Some(team.into()) });
        e
    }

    #[test]
    fn a_holder_past_its_share_is_named_others_are_not() {
        let limits = Limits { per_user: 2, per_team: 3, ..Limits::default() };
        let mut t = Table::default();
        t.insert(0, held_by("10.0.0.1", "red-ci", "red"));
        t.insert(1, held_by("10.0.0.2", "red-ci", "red"));
        t.insert(2, held_by("10.0.0.3", "blue-dev", "blue"));
        for id in [0, 1, 2] {
            assert_eq!(t.over_share(id, &limits), None, "{id} admitted");
        }
        t.insert(3, held_by("10.0.0.1", "red-ci", "red"));
        assert_eq!(t.over_share(3, &limits).unwrap(), "red-ci holds 3 connections (at most 2)");
        t.remove(3);
        t.insert(4, held_by("10.0.0.1", "red-bot", "red"));
        t.insert(5, held_by("10.0.0.1", "red-bot2", "red"));
        assert_eq!(t.over_share(4, &limits), None);
        assert_eq!(t.over_share(5, &limits).unwrap(), "team red holds 4 connections (at most 3)");
        // Those admitted before stay within the share whatever came after.
        for id in [0, 1, 4] {
            assert_eq!(t.over_share(id, &limits), None, "{id} stays admitted");
        }
        // Blue, beside them, is within its share.
        assert_eq!(t.over_share(2, &limits), None);
        // A connection nobody authenticated on has no share to pass.
        t.insert(6, stranger("10.0.0.9", 1));
        assert_eq!(t.over_share(6, &limits), None);
        // The counts follow the connections given up: red's go back to nothing.
        for id in [0, 1, 4, 5] {
            t.remove(id);
        }
        assert_eq!((t.users.get("red-ci"), t.teams.get("red")), (None, None));
        assert_eq!(t.users.get("blue-dev").map(|s| s.len()), Some(1));
        // A holder named after its connection opened is counted when its share is asked.
        let late = stranger("10.0.0.4", 1);
        let state = late.state.clone();
        t.insert(7, late);
        assert_eq!(t.teams.get("red"), None);
        state.trust("red-ci", Some("red"));
        assert_eq!(t.over_share(7, &limits), None);
        assert_eq!(t.teams.get("red").map(|s| s.len()), Some(1));
        // An evicted connection gives its count back too (an idle one).
        t.open.get(&7).unwrap().busy.store(0, Ordering::SeqCst);
        assert!(t.make_room("10.0.0.4".parse().unwrap(), &Limits { per_peer: 1, ..limits }));
        assert_eq!((t.users.get("red-ci"), t.teams.get("red")), (None, None));
    }

    #[test]
    fn body_bytes_are_given_back_however_their_request_ends() {
        let limits = Limits { bodies_in_flight: 10, body_per_holder: 6, ..Limits::default() };
        let b = Arc::new(BodyBudget::default());
        let first = b.take("user:red", 4, &limits).unwrap();
        // Red's share is 6: 4 + 4 is refused, blue still fits.
        assert!(b.take("user:red", 4, &limits).is_none());
        let blue = b.take("user:blue", 6, &limits).unwrap();
        // The total is 10: nothing more for anyone.
        assert!(b.take("peer:10.0.0.9", 1, &limits).is_none());
        // A request that panics while holding bytes gives them back as it unwinds.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = first;
            panic!("a handler's bug");
        }));
        assert!(r.is_err());
        assert_eq!(b.held(), 6);
        drop(blue);
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn a_chunked_body_reserves_as_it_arrives_under_the_same_budgets() {
        let limits = Limits { bodies_in_flight: 100, body_per_holder: 60, ..Limits::default() };
        let b = Arc::new(BodyBudget::default());
        let mut chunked = b.take("user:red", 0, &limits).unwrap();
        assert_eq!(b.held(), 0, "nothing is held before a byte arrives");
        assert!(chunked.grow(40, &limits));
        assert_eq!(b.held(), 40);
        // Past red's share: refused, what it held stays held until it ends.
        assert!(!chunked.grow(30, &limits));
        let blue = b.take("user:blue", 60, &limits).unwrap();
        // Past the total: refused for red though within its share.
        assert!(!chunked.grow(1, &limits));
        drop(blue);
        assert!(chunked.grow(20, &limits));
        drop(chunked);
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn a_busy_count_and_a_table_place_survive_a_panic() {
        let busy = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Requests::new(busy.clone()));
        let table = Arc::new(Mutex::new(Table::default()));
        table.lock().unwrap().open.insert(7, entry("10.0.0.1", 0));
        let (r2, t2) = (requests.clone(), table.clone());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _place = Place { table: t2, id: 7 };
            let _busy = Busy::new(&r2, Instant::now() + Duration::from_secs(60));
            panic!("TimeDelta::seconds out of bounds");
        }));
        assert!(r.is_err());
        assert_eq!(busy.load(Ordering::SeqCst), 0);
        assert!(!requests.overdue(Duration::ZERO), "its deadline went with it");
        assert!(table.lock().unwrap().open.is_empty());
    }

    #[test]
    fn a_lone_stranger_outlives_a_flood_from_elsewhere() {
        let limits = Limits { connections: 4, per_peer: 4, ..Limits::default() };
        let mut t = Table::default();
        t.insert(0, stranger("10.0.0.7", 1)); // an honest caller, its first request under way
        t.insert(1, stranger("10.0.0.1", 1));
        t.insert(2, stranger("10.0.0.1", 1));
        t.insert(3, stranger("10.0.0.1", 1));
        assert!(t.make_room("10.0.0.1".parse().unwrap(), &limits));
        assert_eq!(t.open.keys().copied().collect::<Vec<_>>(), [0, 2, 3]);
    }
}
