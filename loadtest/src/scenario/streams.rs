//! `streams`: N live SSE streams held at once, each receiving E events/s for T seconds (issue 43
//! §2, "10 000 live streams").
//!
//! Owns: the `Workload` of one long `slow_counter` call per connection (`steps` notifications,
//! `delay_ms` apart, each stamped with its emit time by the server: the demo tool's `stamp`),
//! the per-event checks (every progress value once and in order: `lost`, `duplicated`,
//! `out_of_order`; a notification without a stamp is `unstamped`), the delivery latency from
//! the server's stamp to the client's read of the event (wall clock, the same machine), and the
//! watch on the server process (RSS and CPU ticks from `/proc`, sampled over the run).
//! Called by: `main` through `engine::run` (fixed rate: the N calls start spread over
//! `--ramp`, so their events do not fire in lock-step; one call per connection, then no more
//! work).
//! Never: counts an event toward the latency outside the measurement window.
//!
//! Why only POST streams: the session's standalone GET stream carries session-level messages,
//! and no built-in tool set emits one at a rate (tidemark's own list changes are coalesced;
//! `notifications/message` and resource updates come only from an upstream). A GET that
//! resumes a running call (Last-Event-ID) is written by the same ring and stream driver as the
//! POST stream measured here.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use memchr::memmem::Finder;

use crate::engine::{Answer, ConnState, Outcome, Step, Workload};
use crate::jsonrpc::{Classifier, Kind};
use crate::procfs;
use crate::stats::{self, ErrorKind};
use crate::wire::{Head, PostTemplate};

/// What one load thread saw, sent to `main` when its workload is dropped; `merge` adds them up.
#[derive(Debug)]
pub struct Tally {
    /// Delivery latency (ns) of events stamped inside the measurement window.
    pub delivery: Histogram<u64>,
    /// Events received inside the measurement window (by stamp), in order or not.
    pub events_in_window: u64,
    /// Progress values never received: skipped ones, and a call's missing tail.
    pub lost: i64,
    /// A progress value at or below one already received.
    pub duplicated: i64,
    /// A progress value past the next one expected (the skipped ones count as lost).
    pub out_of_order: i64,
    /// A progress notification without a decimal stamp in its message.
    pub unstamped: i64,
    /// A stamp later than the client's read: the clocks disagree (recorded as 0).
    pub stamp_after_read: i64,
    /// Calls answered with their result (whenever: they end after the window).
    pub completed: i64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            delivery: stats::new_histogram(),
            events_in_window: 0,
            lost: 0,
            duplicated: 0,
            out_of_order: 0,
            unstamped: 0,
            stamp_after_read: 0,
            completed: 0,
        }
    }
}

/// One load thread's live streams.
pub struct LiveStreams {
    templates: Vec<PostTemplate>,
    steps: u32,
    /// Streams left to open across all threads: each connection carries one call.
    budget: Arc<AtomicI64>,
    /// The measurement window in µs since the Unix epoch, the stamps' clock.
    window_us: (u64, u64),
    classifier: Classifier,
    progress: Finder<'static>,
    message: Finder<'static>,
    own: Tally,
    report_to: Sender<Tally>,
}

impl LiveStreams {
    pub fn new(
        templates: Vec<PostTemplate>,
        steps: u32,
        budget: Arc<AtomicI64>,
        window_us: (u64, u64),
        report_to: Sender<Tally>,
    ) -> LiveStreams {
        assert!(!templates.is_empty());
        LiveStreams {
            templates,
            steps,
            budget,
            window_us,
            classifier: Classifier::default(),
            progress: Finder::new(b"\"progress\":"),
            message: Finder::new(b"\"message\":\""),
            own: Tally::default(),
            report_to,
        }
    }

    /// One progress notification of `step`'s call, read at `read_us`.
    fn on_progress(&mut self, step: &mut Step, data: &[u8], read_us: u64) {
        let Some(value) = self.number_after(&self.progress, data) else {
            self.own.out_of_order += 1; // no progress value: cannot be placed in the order
            return;
        };
        let expected = u64::from(step.events) + 1;
        if value < expected {
            self.own.duplicated += 1;
        } else {
            if value > expected {
                self.own.out_of_order += 1;
                self.own.lost += (value - expected) as i64;
            }
            step.events = u32::try_from(value).unwrap_or(u32::MAX);
        }
        let Some(stamp) = self.number_after(&self.message, data) else {
            self.own.unstamped += 1;
            return;
        };
        if stamp < self.window_us.0 || stamp >= self.window_us.1 {
            return;
        }
        self.own.events_in_window += 1;
        if stamp > read_us {
            self.own.stamp_after_read += 1;
        }
        let latency = Duration::from_micros(read_us.saturating_sub(stamp));
        stats::record(&mut self.own.delivery, latency);
    }

    /// The integer right after `key` in `data`: a JSON number (`3`, or `3.0` as tidemark writes
    /// a progress value) or a string's digits. A fraction other than zeros is `None`.
    fn number_after(&self, key: &Finder<'_>, data: &[u8]) -> Option<u64> {
        let at = key.find(data)? + key.needle().len();
        let rest = &data[at..];
        let end = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        if rest.get(end) == Some(&b'.') {
            let fraction = rest[end + 1..].iter().take_while(|b| b.is_ascii_digit());
            if fraction.clone().next().is_none() || fraction.into_iter().any(|b| *b != b'0') {
                return None;
            }
        }
        std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
    }
}

/// Now, in µs since the Unix epoch (the server's stamps' clock).
pub fn unix_micros_now() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `at` (an `Instant` in the near future or past) on the Unix clock, in µs.
pub fn unix_micros_at(at: Instant) -> u64 {
    let (now, unix) = (Instant::now(), unix_micros_now());
    if at >= now {
        unix + u64::try_from(at.duration_since(now).as_micros()).unwrap_or(0)
    } else {
        unix.saturating_sub(u64::try_from(now.duration_since(at).as_micros()).unwrap_or(0))
    }
}

impl Drop for LiveStreams {
    fn drop(&mut self) {
        // `main` holds the receiver until every load thread has ended.
        let _ = self.report_to.send(std::mem::take(&mut self.own));
    }
}

impl Tally {
    /// Adds `other`'s counts and latencies to these.
    pub fn merge(&mut self, other: &Tally) {
        self.delivery.add(&other.delivery).expect("invariant: same histogram bounds");
        self.events_in_window += other.events_in_window;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.out_of_order += other.out_of_order;
        self.unstamped += other.unstamped;
        self.stamp_after_read += other.stamp_after_read;
        self.completed += other.completed;
    }
}

impl Workload for LiveStreams {
    fn begin(&mut self, conn: &mut ConnState, id: u64, out: &mut Vec<u8>) -> Option<Step> {
        if self.budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
            return None;
        }
        self.templates[conn.slot % self.templates.len()].write(id, out);
        Some(Step::new(0, id))
    }

    fn on_event(&mut self, step: &mut Step, data: &[u8]) {
        match self.classifier.kind(data) {
            Kind::Progress => self.on_progress(step, data, unix_micros_now()),
            Kind::Response { ok: false } => step.answer = Answer::Failed(ErrorKind::Rpc),
            Kind::Response { ok: true } => {
                step.answer = if self.classifier.id(data) == Some(step.id) {
                    Answer::Ok
                } else {
                    Answer::Failed(ErrorKind::WrongId)
                };
            }
            Kind::Other => {}
        }
    }

    fn on_response(
        &mut self,
        step: Step,
        head: &Head,
        _body: &[u8],
        _conn: &mut ConnState,
        _id: u64,
        _out: &mut Vec<u8>,
    ) -> Outcome {
        if head.status != 200 {
            return Outcome::Done(Err(ErrorKind::Status));
        }
        // The call's missing tail: values after the last one received.
        self.own.lost += i64::from(self.steps.saturating_sub(step.events));
        Outcome::Done(match step.answer {
            Answer::None => Err(ErrorKind::Incomplete),
            Answer::Failed(kind) => Err(kind),
            Answer::Ok => {
                self.own.completed += 1;
                Ok(step.events)
            }
        })
    }
}

/// The server process over the run: RSS and CPU ticks (user + system, every thread) sampled
/// every `every`.
pub struct Watch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

/// One sample of the server process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Instant,
    pub rss_bytes: u64,
    pub cpu_ticks: u64,
}

impl Watch {
    pub fn start(pid: u32, every: Duration) -> Watch {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let (Ok(rss_bytes), Ok(cpu_ticks)) =
                    (procfs::rss_bytes(pid), procfs::cpu_ticks(pid))
                {
                    samples.push(Sample { at: Instant::now(), rss_bytes, cpu_ticks });
                }
                std::thread::sleep(every);
            }
            samples
        });
        Watch { stop, handle }
    }

    pub fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The server's CPU over `[from, to]` as a share of one core (1.0 = one core busy), from the
/// samples nearest inside the window; `None` with fewer than two.
pub fn cpu_cores(samples: &[Sample], (from, to): (Instant, Instant)) -> Option<f64> {
    let inside: Vec<&Sample> = samples.iter().filter(|s| s.at >= from && s.at <= to).collect();
    let (first, last) = (inside.first()?, inside.last()?);
    let seconds = last.at.duration_since(first.at).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let ticks = last.cpu_ticks.saturating_sub(first.cpu_ticks) as f64;
    Some(ticks / procfs::CLOCK_TICKS_PER_S / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> LiveStreams {
        let target = crate::wire::Target::parse("http://127.0.0.1:1/mcp").expect("url");
        let template = PostTemplate::new(&target, None, "2025-11-25", "{}");
        LiveStreams::new(
            vec![template],
            3,
            Arc::new(AtomicI64::new(1)),
            (1_000, 2_000),
            std::sync::mpsc::channel().0,
        )
    }

    fn progress(value: &str, stamp: &str) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":7,"progress":{value},"total":3{stamp}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn events_once_and_in_order_pass_and_each_fault_is_counted() {
        // Goal: 1,2,3 in order is clean; a repeat is duplicated, a skip is out of order with
        // the skipped value lost; a missing stamp is unstamped. Method: feed events by hand.
        let mut s = streams();
        let mut step = Step::new(0, 7);
        for v in ["1", "2", "3"] {
            s.on_progress(&mut step, &progress(&format!("{v}.0"), r#","message":"1500""#), 1_600);
        }
        assert_eq!(step.events, 3);
        assert_eq!((s.own.lost, s.own.duplicated, s.own.out_of_order), (0, 0, 0));
        assert_eq!(s.own.events_in_window, 3);
        assert_eq!(s.own.delivery.value_at_quantile(0.5) / 1000, 100);

        let mut step = Step::new(0, 8);
        s.on_progress(&mut step, &progress("1", ""), 1_600);
        s.on_progress(&mut step, &progress("1", r#","message":"1500""#), 1_600);
        s.on_progress(&mut step, &progress("3", r#","message":"2500""#), 1_600);
        assert_eq!(s.own.unstamped, 1);
        assert_eq!(s.own.duplicated, 1);
        assert_eq!((s.own.out_of_order, s.own.lost), (1, 1));
        assert_eq!(s.own.events_in_window, 4, "the stamp 2500 is after the window");
        s.on_progress(&mut step, &progress("4.5", r#","message":"1500""#), 1_600);
        assert_eq!(s.own.out_of_order, 2, "a fractional progress cannot be placed");
    }
}
