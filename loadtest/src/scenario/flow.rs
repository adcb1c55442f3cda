//! Shared steps of `resume` and `migration`: start a `slow_counter` call, cut its stream after k
//! events, resume it with `GET` + `Last-Event-ID`, and count what arrived.
//!
//! Owns: the cut (FIN or RST), the resume read (time to the final response, then whether the
//! stream ends), the lost/duplicate arithmetic, worker threads and their pacing.
//! Never: decides what a scenario reports; the callers own their counters.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::client::{Conn, ReadEnd, Session};
use crate::jsonrpc::{self, Message};
use crate::wire::{self, Target};

/// How long a resumed stream may stay open after its final response before we call it
/// "not ended" (the server should end a completed stream right after replaying it).
const END_AFTER_FINAL: Duration = Duration::from_millis(250);

/// One worker's view of the server.
#[derive(Clone, Debug)]
pub struct Flow {
    pub target: Target,
    pub session: Session,
    pub timeout: Duration,
    /// Cut with RST (SO_LINGER 0) instead of FIN.
    pub reset: bool,
}

/// What the client held when it cut the stream.
#[derive(Debug)]
pub struct Cut {
    /// The last event id it processed (the `Last-Event-ID` a careful client resumes from).
    pub last_id: String,
    pub progress: Vec<f64>,
    /// Ids of every event it processed, so a resume from an earlier cursor (the server's
    /// conservative 409 hint) can tell events it already holds from duplicates.
    pub ids: std::collections::HashSet<Vec<u8>>,
    pub at: Instant,
}

/// What a resume (or any SSE answer read to its end) delivered.
#[derive(Debug, Default)]
pub struct Delivered {
    pub status: u16,
    pub progress: Vec<f64>,
    /// The event id of each entry of `progress`.
    pub progress_ids: Vec<Vec<u8>>,
    /// Final JSON-RPC responses seen (1 is right).
    pub finals: u32,
    /// Text of the (first) final result.
    pub result: Option<String>,
    /// A final JSON-RPC error instead: code and message.
    pub error: Option<(i64, String)>,
    pub final_at: Option<Instant>,
    /// The response ended after its final message (within `END_AFTER_FINAL`).
    pub ended: bool,
    /// Body of a non-SSE answer.
    pub body: Vec<u8>,
    pub last_event_id_hint: Option<String>,
    pub resumable: bool,
}

impl Flow {
    pub fn connect(&self) -> anyhow::Result<Conn> {
        Conn::connect(&self.target, self.timeout)
    }

    /// Sends `request` (a `slow_counter` call with a progress token) and reads its SSE answer
    /// until `cut_after` message events were processed, then cuts the connection.
    pub fn post_and_cut(
        &self,
        mut conn: Conn,
        request: &[u8],
        cut_after: u64,
    ) -> anyhow::Result<Cut> {
        conn.send(request)?;
        let mut seen = 0u64;
        let mut last_id = String::new();
        let mut progress = Vec::new();
        let mut ids = std::collections::HashSet::new();
        let end = conn.read(|ev| {
            if !ev.data.is_empty() {
                seen += 1;
                ids.insert(ev.id.to_vec());
                if let Some(Message::Progress(p)) = jsonrpc::parse(ev.data) {
                    progress.push(p);
                }
            }
            last_id = String::from_utf8_lossy(ev.id).into_owned();
            seen >= cut_after && !ev.data.is_empty() || cut_after == 0
        })?;
        match end {
            ReadEnd::Stopped { head } if head.status == 200 => {
                let at = Instant::now();
                conn.cut(self.reset);
                Ok(Cut { last_id, progress, ids, at })
            }
            ReadEnd::Stopped { head } => bail!("the call answered HTTP {}", head.status),
            ReadEnd::Complete { head, .. } => {
                bail!("the call's answer (HTTP {}) ended before {cut_after} events", head.status)
            }
        }
    }

    pub fn get(&self, last_event_id: &str) -> Vec<u8> {
        wire::get_request(
            &self.target,
            &self.session.id,
            &self.session.version,
            Some(last_event_id),
        )
    }

    /// Sends `request` on `conn` and reads the answer: every message is timed and parsed, the
    /// final response's arrival noted, and the end of the stream awaited briefly.
    pub fn exchange(&self, conn: &mut Conn, request: &[u8]) -> anyhow::Result<Delivered> {
        conn.send(request)?;
        let mut out = Delivered::default();
        let first = conn.read(|ev| {
            if ev.data.is_empty() {
                return false;
            }
            let now = Instant::now();
            match jsonrpc::parse(ev.data) {
                Some(Message::Progress(p)) => {
                    out.progress.push(p);
                    out.progress_ids.push(ev.id.to_vec());
                }
                Some(Message::Result { text, .. }) => {
                    out.finals += 1;
                    out.result.get_or_insert(text);
                    out.final_at.get_or_insert(now);
                    return true;
                }
                Some(Message::Error { code, message, .. }) => {
                    out.finals += 1;
                    out.error.get_or_insert((code, message));
                    out.final_at.get_or_insert(now);
                    return true;
                }
                _ => {}
            }
            false
        })?;
        let head = match first {
            ReadEnd::Complete { head, body } => {
                out.ended = true;
                if !body.is_empty() {
                    out.final_at = Some(Instant::now());
                    match jsonrpc::parse(&body) {
                        Some(Message::Result { text, .. }) => {
                            out.finals += 1;
                            out.result = Some(text);
                        }
                        Some(Message::Error { code, message, .. }) => {
                            out.finals += 1;
                            out.error = Some((code, message));
                        }
                        _ => {}
                    }
                }
                out.body = body;
                head
            }
            ReadEnd::Stopped { head } => {
                conn.set_read_timeout(END_AFTER_FINAL)?;
                let rest = conn.read(|ev| {
                    if !ev.data.is_empty() {
                        match jsonrpc::parse(ev.data) {
                            Some(Message::Progress(p)) => {
                                out.progress.push(p);
                                out.progress_ids.push(ev.id.to_vec());
                            }
                            Some(Message::Result { .. } | Message::Error { .. }) => out.finals += 1,
                            _ => {}
                        }
                    }
                    false
                });
                conn.set_read_timeout(self.timeout)?;
                out.ended = matches!(rest, Ok(ReadEnd::Complete { .. }));
                head
            }
        };
        out.status = head.status;
        out.last_event_id_hint = head.last_event_id;
        out.resumable = head.resumable;
        Ok(out)
    }
}

/// Events lost and duplicated across the part before a cut and the part after, for a call
/// that sends `steps` progress notifications with distinct `progress` values.
pub fn lost_and_duplicated(steps: u64, before: &[f64], after: &[f64]) -> (u64, u64) {
    let all: Vec<i64> = before.iter().chain(after).map(|p| (p * 1e6).round() as i64).collect();
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    let distinct_count = distinct.len() as u64;
    (steps.saturating_sub(distinct_count), all.len() as u64 - distinct_count)
}

/// Paces iterations at a fixed rate when one is set.
pub struct Pace {
    next: Instant,
    interval: Option<Duration>,
}

impl Pace {
    pub fn new(per_second: Option<f64>, phase: f64) -> Pace {
        let interval = per_second.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        let offset = interval.map_or(Duration::ZERO, |i| i.mul_f64(phase));
        Pace { next: Instant::now() + offset, interval }
    }

    pub fn wait(&mut self) {
        if let Some(interval) = self.interval {
            let now = Instant::now();
            if self.next > now {
                std::thread::sleep(self.next - now);
            }
            self.next += interval;
        }
    }
}

/// Runs `work(worker_index)` on `n` threads and collects the results in order.
pub fn run_workers<R, F>(n: usize, work: F) -> anyhow::Result<Vec<R>>
where
    R: Send + 'static,
    F: Fn(usize) -> anyhow::Result<R> + Send + Sync + 'static,
{
    let work = std::sync::Arc::new(work);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let work = work.clone();
            std::thread::Builder::new()
                .name(format!("flow-{i}"))
                .spawn(move || work(i))
                .context("spawning a worker")
        })
        .collect::<anyhow::Result<_>>()?;
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_and_duplicated_counts() {
        assert_eq!(lost_and_duplicated(5, &[1.0, 2.0], &[3.0, 4.0, 5.0]), (0, 0));
        assert_eq!(lost_and_duplicated(5, &[1.0, 2.0], &[2.0, 3.0, 4.0, 5.0]), (0, 1));
        assert_eq!(lost_and_duplicated(5, &[1.0, 2.0], &[4.0, 5.0]), (1, 0));
        assert_eq!(lost_and_duplicated(3, &[], &[]), (3, 0));
    }
}
