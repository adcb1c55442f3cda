//! The admin listener (`--metrics-listen`): `GET /metrics` (Prometheus text, every core's
//! counters, gauges and histograms merged, and the process-wide upstream children), `GET
//! /status` (the same exposition rendered as an HTML page by `status`, which reloads itself;
//! its figures rendered at most once per `STATUS_RENDER_EVERY` and served from that copy),
//! `GET /healthz` (200 while the process runs), `GET /readyz` (200 while serving, 503 once a
//! drain began, so a load balancer stops sending before the listeners close); 404 for any
//! other path, 405 for another method.
//!
//! Off the worker cores: one acceptor thread and one short-lived thread per connection, at most
//! `ADMIN_CONNECTIONS_MAX` at once (over it: 503, closed). A connection has
//! `ADMIN_IO_TIMEOUT_MS` to deliver its request head (a deadline, not per read) and each write
//! as long, so idle or slow connections never delay a scrape (the single blocking loop before
//! served one connection at a time: 20 idle connections held a scrape for 40 s). One request
//! per connection (`Connection: close`), as Prometheus and probes expect.
//!
//! Called by `server` at start. Never: blocks a worker, writes a counter, or changes the
//! lifecycle (it only reads it).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{ADMIN_CONNECTIONS_MAX, ADMIN_HEAD_BYTES_MAX, ADMIN_IO_TIMEOUT_MS};
use crate::metrics::CoreMetrics;
use crate::runtime::{Lifecycle, Phase};
use crate::status::{DrainState, Facts, RecentRefusals, Samples};
use crate::status::{STATUS_REFRESH_SECS, STATUS_RENDER_EVERY};
use crate::upstream::ProcessCount;
use crate::wire::Status;

/// The status page's `Content-Security-Policy`: nothing may load, not even from the admin
/// listener itself; only the page's own inline style sheet applies.
const STATUS_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; \
                          form-action 'none'; frame-ancestors 'none'";

/// Stack of a connection thread: it parses one request line and renders the counters.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;

/// Pause after a failed accept (e.g. out of file descriptors), so the acceptor does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// How long a connection refused over the cap stays open after its 503 and FIN, so the
/// request it sent meanwhile does not turn our close into a reset that destroys the 503. Closed
/// at a later accept; at most `ADMIN_CONNECTIONS_MAX` are kept.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// What the admin threads share.
struct Admin {
    metrics: Vec<Arc<CoreMetrics>>,
    /// The upstream children of every core (`tidemark_upstream_children`).
    children: Arc<ProcessCount>,
    life: Arc<Lifecycle>,
    /// Connections being served (their threads alive); at most `ADMIN_CONNECTIONS_MAX`.
    active: AtomicUsize,
    /// What `/status` shows that is not a metric.
    about: About,
    /// The durable mirror thread's figures (`--durable`).
    durable: Option<Arc<crate::metrics::DurableStats>>,
    /// Refusal counts sampled at `/status` loads ("recent" on the page). The crate's one lock:
    /// only admin connection threads take it, never a worker core (what the lint guards), and
    /// only while a page load compares and pushes one sample.
    #[allow(clippy::disallowed_types, reason = "admin threads only, never a worker core")]
    recent: std::sync::Mutex<RecentRefusals>,
    /// The page's figures last rendered, and when (`STATUS_RENDER_EVERY`). Held while a page
    /// renders, so loads that arrive meanwhile wait for that rendering instead of making their
    /// own; taken before `recent`, never after it.
    #[allow(clippy::disallowed_types, reason = "admin threads only, never a worker core")]
    rendered: std::sync::Mutex<Option<(Instant, Arc<str>)>>,
}

/// The facts of this process the status page shows beside the metrics, fixed at start.
pub(crate) struct About {
    pub(crate) node_id: u8,
    /// The workers' I/O driver (`uring` or `epoll`).
    pub(crate) driver: &'static str,
    /// `--core-buffer-bytes`.
    pub(crate) core_buffer_bytes: u64,
    /// The upstreams' labels, in `--upstream` order.
    pub(crate) upstreams: Vec<String>,
    pub(crate) started: Instant,
}

/// Binds `addr` and serves it from threads of its own; returns the bound address (port 0
/// resolved).
pub(crate) fn start(
    addr: SocketAddr,
    metrics: Vec<Arc<CoreMetrics>>,
    children: Arc<ProcessCount>,
    life: Arc<Lifecycle>,
    about: About,
    durable: Option<Arc<crate::metrics::DurableStats>>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    #[allow(clippy::disallowed_types, reason = "admin threads only, never a worker core")]
    let (recent, rendered) =
        (std::sync::Mutex::new(RecentRefusals::default()), std::sync::Mutex::new(None));
    let admin = Arc::new(Admin {
        metrics,
        children,
        life,
        active: AtomicUsize::new(0),
        about,
        recent,
        rendered,
        durable,
    });
    std::thread::Builder::new()
        .name("tidemark-admin".into())
        .spawn(move || accept(listener, admin))?;
    Ok(bound)
}

/// Gives a connection slot back when its thread ends.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept(listener: TcpListener, admin: Arc<Admin>) {
    let timeout = Some(Duration::from_millis(ADMIN_IO_TIMEOUT_MS));
    let mut refused: VecDeque<(Instant, TcpStream)> = VecDeque::new();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else {
            std::thread::sleep(ACCEPT_RETRY);
            continue;
        };
        let now = Instant::now();
        while refused.front().is_some_and(|(at, _)| now.duration_since(*at) >= REFUSED_LINGER)
            || refused.len() >= ADMIN_CONNECTIONS_MAX
        {
            refused.pop_front();
        }
        let _ = conn.set_read_timeout(timeout);
        let _ = conn.set_write_timeout(timeout);
        if admin.active.fetch_add(1, Ordering::AcqRel) >= ADMIN_CONNECTIONS_MAX {
            admin.active.fetch_sub(1, Ordering::AcqRel);
            // A fresh socket's send buffer takes this small answer without blocking.
            respond(&mut conn, Status::ServiceUnavailable, &[], b"too many admin connections\n");
            refused.push_back((now, conn));
            continue;
        }
        let shared = admin.clone();
        let spawned = std::thread::Builder::new()
            .name("tidemark-admin-conn".into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                let _slot = Slot(&shared.active);
                serve(conn, &shared);
            });
        if spawned.is_err() {
            // The closure (and the connection) was dropped without running: close, free.
            admin.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// How reading a request head ended.
enum Head {
    /// The request line (method and target), the head complete.
    Line(String),
    /// Closed, failed or too slow: close without an answer.
    Gone,
    /// Larger than `ADMIN_HEAD_BYTES_MAX`: 431.
    TooLarge,
}

/// Serves one request on `conn`, then closes it.
fn serve(mut conn: TcpStream, admin: &Admin) {
    let line = match read_head(&mut conn) {
        Head::Line(line) => line,
        Head::Gone => return,
        Head::TooLarge => {
            respond(&mut conn, Status::HeaderFieldsTooLarge, &[], b"request head too large\n");
            return;
        }
    };
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or(target);
    let known = matches!(path, "/metrics" | "/status" | "/healthz" | "/readyz");
    if !known {
        let body = b"not found: /metrics, /status, /healthz, /readyz\n";
        respond(&mut conn, Status::NotFound, &[], body);
        return;
    }
    if method != "GET" {
        respond(
            &mut conn,
            Status::MethodNotAllowed,
            &[("Allow", "GET")],
            b"method not allowed: GET only\n",
        );
        return;
    }
    match path {
        "/metrics" => {
            let body = exposition(admin);
            let kind = ("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            respond(&mut conn, Status::Ok, &[kind], body.as_bytes());
        }
        "/status" => status_page(&mut conn, admin, target),
        "/readyz" if admin.life.phase() == Phase::Serving => {
            respond(&mut conn, Status::Ok, &[], b"ready\n");
        }
        "/readyz" => respond(&mut conn, Status::ServiceUnavailable, &[], b"draining\n"),
        _ => respond(&mut conn, Status::Ok, &[], b"ok\n"),
    }
}

/// The `/metrics` text: every core's families, then the process-wide upstream children.
fn exposition(admin: &Admin) -> String {
    let mut body = String::with_capacity(16 * 1024);
    CoreMetrics::render(&admin.metrics, &mut body);
    body.push_str("# HELP tidemark_upstream_children Live --upstream child processes (all cores), against --upstream-max-processes.\n");
    body.push_str("# TYPE tidemark_upstream_children gauge\n");
    body.push_str(&format!("tidemark_upstream_children {}\n", admin.children.live()));
    if let Some(durable) = &admin.durable {
        durable.render(&mut body);
    }
    body
}

/// Answers `/status`: the page around figures rendered from one `exposition` (the figures
/// `/metrics` answered at most `STATUS_RENDER_EVERY` ago); 400 for a `?refresh=` out of bounds.
fn status_page(conn: &mut TcpStream, admin: &Admin, target: &str) {
    let refresh_secs = match crate::status::refresh_query(target) {
        Ok(refresh) => refresh.unwrap_or(STATUS_REFRESH_SECS),
        Err(why) => {
            respond(conn, Status::BadRequest, &[], why.as_bytes());
            return;
        }
    };
    let sections = cached_sections(admin);
    let mut page = String::with_capacity(sections.len() + 2048);
    crate::status::wrap(refresh_secs, &sections, &mut page);
    let headers = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
        ("Content-Security-Policy", STATUS_CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
    ];
    respond(conn, Status::Ok, &headers, page.as_bytes());
}

/// The page's figures: the last rendering while it is younger than `STATUS_RENDER_EVERY`,
/// else a new one (rendered under the lock, so concurrent loads share it).
fn cached_sections(admin: &Admin) -> Arc<str> {
    // A poisoned lock only means a page thread panicked mid-update; the value is still whole.
    let mut rendered = admin.rendered.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if let Some((at, sections)) = rendered.as_ref() {
        if now.duration_since(*at) < STATUS_RENDER_EVERY {
            return sections.clone();
        }
    }
    let sections: Arc<str> = render_sections(admin, now).into();
    *rendered = Some((now, sections.clone()));
    sections
}

/// The page's figures as of `now`, from one `exposition`.
fn render_sections(admin: &Admin, now: Instant) -> String {
    let text = exposition(admin);
    let samples = Samples::parse(&text);
    let counts = crate::status::refusal_counts(&samples);
    let recent = admin.recent.lock().unwrap_or_else(|p| p.into_inner()).observe(now, &counts);
    let drain = match (admin.life.phase(), admin.life.deadline()) {
        (Phase::Serving, _) => DrainState::Serving,
        (Phase::Draining, deadline) => DrainState::Draining {
            left: deadline.map_or(Duration::ZERO, |d| d.saturating_duration_since(now)),
        },
        (Phase::Ending, _) => DrainState::Ending,
    };
    let about = &admin.about;
    let facts = Facts {
        version: env!("CARGO_PKG_VERSION"),
        node_id: about.node_id,
        driver: about.driver,
        uptime: now.duration_since(about.started),
        cores: admin.metrics.len(),
        core_buffer_bytes: about.core_buffer_bytes,
        drain,
        upstreams: &about.upstreams,
    };
    let mut sections = String::with_capacity(16 * 1024);
    crate::status::render_sections(&facts, &samples, &recent, &mut sections);
    sections
}

/// Reads until the end of the request head, within `ADMIN_IO_TIMEOUT_MS` of the start (a
/// deadline: a peer dripping bytes cannot hold the thread longer).
fn read_head(conn: &mut TcpStream) -> Head {
    let deadline = Instant::now() + Duration::from_millis(ADMIN_IO_TIMEOUT_MS);
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let line_end = head[..end].windows(2).position(|w| w == b"\r\n").unwrap_or(end);
            return Head::Line(String::from_utf8_lossy(&head[..line_end]).into_owned());
        }
        if head.len() > ADMIN_HEAD_BYTES_MAX {
            return Head::TooLarge;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            return Head::Gone;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Writes a whole `Connection: close` response (plain text unless `headers` say otherwise),
/// closes the sending side and discards what the peer already sent unread (closing over unread
/// bytes would answer with a reset that can destroy the response, RFC 9112 §9.6).
fn respond(conn: &mut TcpStream, status: Status, headers: &[(&str, &str)], body: &[u8]) {
    let mut out = Vec::with_capacity(160 + body.len());
    crate::http::write_status(&mut out, status.code());
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("Content-Type")) {
        out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
    }
    for (name, value) in headers {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    let _ = write!(out, "Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    out.extend_from_slice(body);
    let _ = conn.write_all(&out);
    let _ = conn.shutdown(Shutdown::Write);
    if conn.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 1024];
        for _ in 0..(ADMIN_HEAD_BYTES_MAX / sink.len() + 1) {
            if !matches!(conn.read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
    }
}
