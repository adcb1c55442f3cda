//! `fault --path modern`: the randomized fault test on 2026-07-28 keyed calls (CONTRACT §5,
//! tidemark's `Idempotency-Key` extension). Each call is one `slow_counter` execution under a
//! key of its own, stateless (no session: `_meta` and the `Mcp-*` headers name the era); its
//! connections are cut at random points as in `fault` (`fault::plan_cut`), and every cut is
//! recovered the only way this era has: the same call re-issued with a new JSON-RPC id (and
//! progress token) and the same key. One call in `DUPLICATE_EVERY` also has a concurrent
//! duplicate: a second request with the key, sent at the same moment on its own connection and
//! read to its end (re-issued after a `409 -31004`, never cut).
//!
//! The checks. The era has no event ids, so each response is checked on its own: the progress
//! values it carries must be 1, 2, … in order (a retry is given the execution's progress from
//! the first value, under its own token), and a result must follow the last of them; a value
//! skipped is *lost*, one repeated *duplicated*, one after the result *out of order*. Every
//! result a call receives (its own requests' and its duplicate's) must report the same counter
//! value: two values are two executions (`results_disagree`). A call is complete when a
//! response carrying its result ended normally (for a call with a duplicate: both callers).
//! Globally, as in `fault` (`main::fault`): the execution counter up by exactly the number of
//! calls, the results' counter values distinct and in range.
//!
//! Owns: the keyed request, its callers and the per-response checks. Shares with `fault`: the
//! random choices, the cut and the exchange, the worker loop and the report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use serde_json::Value;

use crate::client::{Conn, Session};
use crate::scenario::fault::{
    self, CallReport, Carried, Completed, Exchange, Msg, Rng, Settings, Unanswered, ATTEMPTS_MAX,
    CALL_ID_BASE, HELD_BACKOFF, SLOW_CALL,
};
use crate::scenario::resume::add;
use crate::wire::{BodyKind, Head, PostTemplate, MODERN_PROTOCOL_VERSION};

/// JSON-RPC ids of call `c` are `CALL_ID_BASE + c * IDS_PER_CALL + n`: `n` < `ATTEMPTS_MAX`
/// for the call's own requests, from `DUPLICATE_IDS` for its duplicate's.
const IDS_PER_CALL: u64 = 128;
const DUPLICATE_IDS: u64 = 64;
const _: () = assert!((ATTEMPTS_MAX as u64) <= DUPLICATE_IDS);
const _: () = assert!(DUPLICATE_IDS + ATTEMPTS_MAX as u64 <= IDS_PER_CALL);
/// One call in this many has a concurrent duplicate.
const DUPLICATE_EVERY: u64 = 4;

/// Runs call `index` (the session is unused: the era has none). A `fault::RunCall`.
pub(crate) fn run_call(
    s: &Settings,
    _session: &Session,
    index: u64,
    _completed: &Completed,
    slot: &mut Option<Conn>,
) -> CallReport {
    let started = Instant::now();
    let mut rng = Rng::for_call(s.seed, index);
    let delay = s.delays_ms[rng.below(s.delays_ms.len() as u64) as usize];
    let with_duplicate = rng.below(DUPLICATE_EVERY) == 0;
    let key = format!("fault-modern-{:016x}-{index}", s.seed);
    let template = keyed_request(s, &key, delay, index);
    let cuts = if s.max_cuts == 0 { 0 } else { 1 + rng.below(u64::from(s.max_cuts)) as u32 };
    let ids = CALL_ID_BASE + index * IDS_PER_CALL;
    let mut main = Caller::new(s, &template, "main", ids, cuts, rng);
    let mut duplicate = with_duplicate.then(|| {
        // Its own generator: its choices must not shift the main caller's.
        let rng = Rng::for_call(s.seed ^ 0x5EED_D0B1_E000_0000, index);
        Caller::new(s, &template, "duplicate", ids + DUPLICATE_IDS, 0, rng)
    });
    let (verdict, duplicate_verdict) = match duplicate.as_mut() {
        None => (main.run(slot), Ok(())),
        Some(dup) => std::thread::scope(|scope| {
            let other = scope.spawn(|| dup.run(&mut None));
            let verdict = main.run(slot);
            (verdict, other.join().unwrap_or_else(|_| Err("the duplicate panicked".into())))
        }),
    };
    let mut trace = String::new();
    let _ = writeln!(
        trace,
        "call {index} (seed {}): modern key {key} delay_ms {delay} steps {}{}",
        s.seed,
        s.steps,
        if with_duplicate { " with a concurrent duplicate" } else { "" }
    );
    let mut counters = BTreeMap::new();
    add(&mut counters, "calls", 1);
    add(&mut counters, "calls.keyed", 1);
    add(&mut counters, "calls.with_duplicate", i64::from(with_duplicate));
    add(&mut counters, &format!("calls.delay_ms_{delay}"), 1);
    let mut problems: Vec<String> = Vec::new();
    let mut results = Vec::new();
    for (caller, verdict) in std::iter::once((&mut main, verdict))
        .chain(duplicate.as_mut().map(|d| (d, duplicate_verdict)))
    {
        trace.push_str(&caller.trace);
        if let Err(e) = verdict {
            problems.push(format!("{}: {e}", caller.name));
        }
        for (k, v) in std::mem::take(&mut caller.counters) {
            add(&mut counters, &k, v);
        }
        results.extend(caller.results.iter().copied());
    }
    let complete = main.complete && duplicate.as_ref().is_none_or(|d| d.complete);
    let result = results.first().copied().flatten();
    let disagree = results.iter().filter(|r| **r != results[0]).count() as u64;
    let totals = [&main].into_iter().chain(duplicate.as_ref());
    let sum = |f: fn(&Tally) -> u64| totals.clone().map(|c| f(&c.tally)).sum::<u64>();
    let checks = [
        ("lost", sum(|t| t.lost)),
        ("duplicated", sum(|t| t.duplicated)),
        ("out_of_order", sum(|t| t.out_of_order)),
        ("bad_messages", sum(|t| t.bad)),
        ("timeouts", sum(|t| t.timeouts)),
        ("results_disagree", disagree),
        ("result_without_value", u64::from(complete && result.is_none())),
    ];
    for (name, n) in checks {
        add(&mut counters, name, n as i64);
        if n != 0 {
            problems.push(format!("{name} = {n}"));
        }
    }
    add(&mut counters, "completed", i64::from(complete));
    add(&mut counters, "incomplete", i64::from(!complete));
    let ok = problems.is_empty() && complete;
    add(&mut counters, "calls_failed", i64::from(!ok));
    let took = started.elapsed();
    let held = sum(|t| t.held);
    let note = ok && (held > 0 || took >= SLOW_CALL);
    add(&mut counters, "calls_slow", i64::from(took >= SLOW_CALL));
    add(&mut counters, "calls_held_too_long", i64::from(held > 0));
    if !ok {
        let _ = writeln!(trace, "  FAILED (call {index}): {}", problems.join("; "));
    } else if note {
        let _ = writeln!(
            trace,
            "  NOTE (call {index}): passed in {:.3}s, {held} answer(s) -31004",
            took.as_secs_f64()
        );
    }
    CallReport { ok, complete, note, result, counters, trace }
}

/// The keyed `slow_counter` call, `{id}` standing for the JSON-RPC id and the progress token.
/// `nonce` (ignored by the tool) makes every call's arguments its own.
fn keyed_request(s: &Settings, key: &str, delay: u64, index: u64) -> PostTemplate {
    let body = format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"method":"tools/call","params":{{"name":"slow_counter","#,
            r#""arguments":{{"steps":{steps},"delay_ms":{delay},"nonce":{index}}},"#,
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"{version}","#,
            r#""io.modelcontextprotocol/clientCapabilities":{{}},"#,
            r#""io.modelcontextprotocol/clientInfo":{{"name":"tidemark-load-fault","version":"1"}},"#,
            r#""progressToken":{{id}}}}}}}}"#
        ),
        steps = s.steps,
        delay = delay,
        index = index,
        version = MODERN_PROTOCOL_VERSION
    );
    PostTemplate::with_headers(
        &s.target,
        &[
            ("MCP-Protocol-Version", MODERN_PROTOCOL_VERSION),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "slow_counter"),
            ("Idempotency-Key", key),
        ],
        &body,
    )
}

/// One client sending a call's keyed request until a response with its result ends normally.
struct Caller<'a> {
    s: &'a Settings,
    template: &'a PostTemplate,
    name: &'static str,
    /// Its first JSON-RPC id; each request takes the next.
    first_id: u64,
    cuts_left: u32,
    rng: Rng,
    complete: bool,
    /// The counter value of every result received (`None`: a result without one).
    results: Vec<Option<u64>>,
    tally: Tally,
    counters: BTreeMap<String, i64>,
    trace: String,
}

/// What went wrong in a response, or in all of a caller's.
#[derive(Default)]
struct Tally {
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    bad: u64,
    timeouts: u64,
    /// `409 -31004` answers: the first execution still ran after `--owed-wait-ms`.
    held: u64,
}

impl<'a> Caller<'a> {
    fn new(
        s: &'a Settings,
        template: &'a PostTemplate,
        name: &'static str,
        first_id: u64,
        cuts_left: u32,
        rng: Rng,
    ) -> Caller<'a> {
        Caller {
            s,
            template,
            name,
            first_id,
            cuts_left,
            rng,
            complete: false,
            results: Vec::new(),
            tally: Tally::default(),
            counters: BTreeMap::new(),
            trace: String::new(),
        }
    }

    fn count(&mut self, key: &str) {
        add(&mut self.counters, key, 1);
    }

    /// Sends the request (a new id each time) until the call is complete; `Err` says why not.
    fn run(&mut self, slot: &mut Option<Conn>) -> Result<(), String> {
        let mut connect_failures = 0u32;
        let mut attempt = 0u32;
        loop {
            if attempt == ATTEMPTS_MAX {
                return Err(format!("gave up after {ATTEMPTS_MAX} requests"));
            }
            let id = self.first_id + u64::from(attempt);
            attempt += 1;
            let plan = (self.cuts_left > 0 && (attempt == 1 || self.rng.coin()))
                .then(|| fault::plan_cut(&mut self.rng, self.s.steps));
            let _ = write!(self.trace, "  {} id {id}", self.name);
            if let Some((at, how)) = plan {
                let _ = write!(self.trace, " [cut {} {how:?}]", at.name());
            }
            let mut check = ResponseCheck::new(id, self.s.steps);
            let request = self.template.bytes(id);
            let exchange = fault::exchange(self.s, slot, &request, plan, |_, data| check.on(data));
            let _ = write!(self.trace, " →{}", check.text);
            self.absorb(&check);
            match exchange {
                Exchange::Complete { head, body } => {
                    if self.answer(&head, &body, &mut check)? {
                        self.complete = true;
                        return Ok(());
                    }
                }
                unanswered => {
                    // Every cut or drop is recovered by the next request: a new id, the key.
                    let tally = (&mut self.counters, &mut self.trace, &mut self.tally.timeouts);
                    match fault::after_unanswered(unanswered, plan, tally, &mut connect_failures) {
                        Unanswered::NoConnection => attempt -= 1,
                        Unanswered::GiveUp(e) => return Err(e),
                        Unanswered::Cut => {
                            self.cuts_left -= 1;
                            self.count("recover.reissue_new_id");
                        }
                        Unanswered::Dropped => self.count("recover.reissue_new_id"),
                    }
                }
            }
        }
    }

    /// A response's findings, added to the call's.
    fn absorb(&mut self, check: &ResponseCheck) {
        let (mine, its) = (&mut self.tally, &check.tally);
        mine.lost += its.lost;
        mine.duplicated += its.duplicated;
        mine.out_of_order += its.out_of_order;
        mine.bad += its.bad;
        if let Some(value) = check.result {
            self.results.push(value);
        }
    }

    /// A complete answer: `Ok(true)` when the call is done, `Ok(false)` to send it again.
    fn answer(
        &mut self,
        head: &Head,
        body: &[u8],
        check: &mut ResponseCheck,
    ) -> Result<bool, String> {
        let body_text = String::from_utf8_lossy(body).into_owned();
        if head.status == 200 && head.kind == BodyKind::Json {
            // A call answered without a stream: its one message is checked like an event.
            check.on(body);
            let _ = write!(self.trace, "{}", check.text);
            self.absorb(check);
        }
        let label = match head.kind {
            BodyKind::Sse => "sse",
            BodyKind::Json => "json",
            _ => "other",
        };
        self.count(&format!("answers.{}_{label}", head.status));
        if head.status == 200 {
            if let Some(error) = &check.error {
                let _ = writeln!(self.trace);
                return Err(format!("final error: {error}"));
            }
            if check.result.is_some() {
                let _ = writeln!(self.trace, " | done");
                return Ok(true);
            }
            let _ = writeln!(self.trace, " | ended without a result");
            self.count("ended_without_result");
            return Ok(false);
        }
        let code = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["error"]["code"].as_i64())
            .unwrap_or(0);
        self.count(&format!("answers.{}_{code}", head.status));
        let _ = writeln!(self.trace, " HTTP {} {code}", head.status);
        match (head.status, code) {
            (409, -31004) => {
                // The first execution still runs after --owed-wait-ms: ask again.
                self.tally.held += 1;
                std::thread::sleep(HELD_BACKOFF);
                Ok(false)
            }
            (503, _) => {
                // Every record of the key's core is still running: a documented refusal.
                std::thread::sleep(HELD_BACKOFF);
                Ok(false)
            }
            _ => Err(format!("answered HTTP {}: {body_text}", head.status)),
        }
    }
}

/// One response's messages, checked against `steps` progress values then one result.
struct ResponseCheck {
    id: u64,
    steps: u64,
    /// The progress value expected next (1 first).
    next: u64,
    result: Option<Option<u64>>,
    error: Option<String>,
    tally: Tally,
    text: String,
}

impl ResponseCheck {
    fn new(id: u64, steps: u64) -> ResponseCheck {
        ResponseCheck {
            id,
            steps,
            next: 1,
            result: None,
            error: None,
            tally: Tally::default(),
            text: String::new(),
        }
    }

    /// Checks one message; true when it is a final response.
    fn on(&mut self, data: &[u8]) -> bool {
        match fault::classify(data, self.id, self.steps) {
            Msg::Carried(Carried::Priming | Carried::Other(_)) => false,
            Msg::Carried(Carried::Progress(v)) => {
                let _ = write!(self.text, " {v}");
                if self.result.is_some() {
                    self.tally.out_of_order += 1;
                    let _ = write!(self.text, "[AFTER-RESULT]");
                } else if v < self.next {
                    self.tally.duplicated += 1;
                    let _ = write!(self.text, "[DUPLICATE]");
                } else {
                    if v > self.next {
                        self.tally.lost += v - self.next;
                        let _ = write!(self.text, "[{} SKIPPED]", v - self.next);
                    }
                    self.next = v + 1;
                }
                false
            }
            Msg::Carried(Carried::Result(value, _)) => {
                let _ = write!(self.text, " R={}", value.map_or("?".into(), |v| v.to_string()));
                if self.result.is_some() {
                    self.tally.duplicated += 1;
                    let _ = write!(self.text, "[SECOND-RESULT]");
                } else {
                    let missing = self.steps + 1 - self.next;
                    if missing > 0 {
                        self.tally.lost += missing;
                        let _ = write!(self.text, "[{missing} MISSING]");
                    }
                    self.result = Some(value);
                }
                true
            }
            Msg::Gap(text) | Msg::Error(text) => {
                let _ = write!(self.text, " ERROR");
                self.error.get_or_insert(text);
                true
            }
            // Another call's message on this call's stream: as wrong as a malformed one.
            Msg::Bad(text) | Msg::Foreign(text) => {
                let _ = write!(self.text, " BAD({text})");
                self.tally.bad += 1;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(id: u64, v: u64) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{id},"progress":{v},"total":3}}}}"#
        )
        .into_bytes()
    }

    fn result(id: u64, n: u64) -> Vec<u8> {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{n}"}}]}}}}"#)
            .into_bytes()
    }

    #[test]
    fn a_whole_response_passes_and_a_cut_prefix_loses_nothing() {
        let mut whole = ResponseCheck::new(5, 3);
        for v in 1..=3 {
            assert!(!whole.on(&progress(5, v)));
        }
        assert!(whole.on(&result(5, 9)));
        let t = &whole.tally;
        assert_eq!((t.lost, t.duplicated, t.out_of_order), (0, 0, 0));
        assert_eq!(whole.result, Some(Some(9)));
        let mut prefix = ResponseCheck::new(5, 3);
        prefix.on(&progress(5, 1));
        assert_eq!((prefix.tally.lost, prefix.result), (0, None));
    }

    #[test]
    fn skips_repeats_late_values_and_foreign_tokens_are_counted() {
        let mut check = ResponseCheck::new(5, 3);
        check.on(&progress(5, 2));
        check.on(&progress(5, 2));
        check.on(&result(5, 1));
        check.on(&progress(5, 3));
        check.on(&progress(6, 1));
        let t = &check.tally;
        assert_eq!((t.lost, t.duplicated, t.out_of_order, t.bad), (2, 1, 1, 1));
    }
}
