//! One upstream's circuit breaker on one core (`--upstream-breaker-failures`,
//! `--upstream-breaker-pause-ms`): after N consecutive failed tool calls the upstream is not
//! called for a pause (calls fail fast with -32603 naming it), then one half-open probe call
//! goes through: its success closes the breaker, its failure opens it again for a pause.
//!
//! Per core, like every other state of the bridge (thread-per-core: `Cell`s, no lock, no
//! atomic; each core learns on its own that an upstream is down, at most N calls each).
//! Called by: the bridge's `call_tool` (`admit` before contacting the upstream, `record` with
//! the outcome). Never: sleeps, or decides what a failure is (the bridge does: `is_failure`).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::provider::ProviderError;
use crate::wire::Code;

/// Where the breaker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Calls go through; `failures` counts the consecutive failed ones.
    Closed,
    /// Calls fail fast until `until`; the first call after it is the probe.
    Open { until: Instant },
    /// The probe is running; other calls fail fast until it ends.
    HalfOpen,
}

/// What `admit` decided for one call.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admission {
    /// The breaker is closed: call the upstream.
    Pass,
    /// The pause is over: this call is the one probe (its outcome decides).
    Probe,
    /// Fail fast: the breaker is open (`retry_in` until the probe may go) or a probe runs.
    Reject { retry_in: Duration },
}

/// What `record` did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Transition {
    /// Nothing changed state.
    None,
    /// The breaker opened (N failures in a row, or a failed probe).
    Opened,
    /// A probe (or any call) succeeded while the breaker was not closed.
    Closed,
}

/// One upstream's breaker on one core.
#[derive(Debug)]
pub(super) struct Breaker {
    failures_max: u32,
    pause: Duration,
    failures: Cell<u32>,
    state: Cell<State>,
}

impl Breaker {
    /// A closed breaker that opens after `failures_max` (≥ 1) failures for `pause`.
    pub(super) fn new(failures_max: u32, pause: Duration) -> Breaker {
        assert!(failures_max >= 1, "invariant: Config::validate refuses 0");
        Breaker { failures_max, pause, failures: Cell::new(0), state: Cell::new(State::Closed) }
    }

    /// The consecutive failures that open it (`--upstream-breaker-failures`).
    pub(super) fn failures_max(&self) -> u32 {
        self.failures_max
    }

    /// Whether a call at `now` may reach the upstream. The clock is read only while the breaker
    /// is open: a closed one (nearly every call) needs no time (issue 43 item 1: each
    /// read is ~60 instructions of a bridged call's ~31 k).
    pub(super) fn admit(&self, now: impl FnOnce() -> Instant) -> Admission {
        match self.state.get() {
            State::Closed => Admission::Pass,
            State::Open { until } => {
                let now = now();
                if now < until {
                    return Admission::Reject { retry_in: until - now };
                }
                self.state.set(State::HalfOpen);
                Admission::Probe
            }
            State::HalfOpen => Admission::Reject { retry_in: Duration::ZERO },
        }
    }

    /// The outcome of an admitted call at `now`: `failed` (see `is_failure`) or not. The clock
    /// is read only when the breaker opens.
    pub(super) fn record(&self, failed: bool, now: impl FnOnce() -> Instant) -> Transition {
        let state = self.state.get();
        if !failed {
            self.failures.set(0);
            self.state.set(State::Closed);
            return if state == State::Closed { Transition::None } else { Transition::Closed };
        }
        match state {
            State::Closed => {
                let failures = self.failures.get().saturating_add(1);
                self.failures.set(failures);
                if failures < self.failures_max {
                    return Transition::None;
                }
                self.state.set(State::Open { until: now() + self.pause });
                Transition::Opened
            }
            State::HalfOpen => {
                self.state.set(State::Open { until: now() + self.pause });
                Transition::Opened
            }
            // A call admitted before the breaker opened, failing late: already counted open.
            State::Open { .. } => Transition::None,
        }
    }

    /// The probe ended with no verdict (cancelled, or its future dropped): the next call
    /// probes instead.
    pub(super) fn probe_abandoned(&self, now: Instant) {
        if self.state.get() == State::HalfOpen {
            self.state.set(State::Open { until: now });
        }
    }
}

/// Whether a call's outcome says the upstream is failing: no connection, a crash, a timeout,
/// an HTTP error (the bridge's own -32603 faults), or the upstream's own -32603. Not a failure:
/// a result (even `isError`), the client's doing (cancelled, its error to a server→client
/// request), or the upstream refusing the call's arguments (-32602 and other codes).
pub(super) fn is_failure<T>(outcome: &Result<T, ProviderError>) -> bool {
    match outcome {
        Ok(_) => false,
        Err(ProviderError::Rpc { code, .. }) => *code == Code::InternalError.value(),
        Err(ProviderError::Internal(_))
        | Err(ProviderError::Unavailable(_))
        | Err(ProviderError::Down { .. }) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSE: Duration = Duration::from_millis(100);

    #[test]
    fn opens_after_n_consecutive_failures_not_n_minus_one() {
        // Goal: N-1 failures leave it closed, the N-th opens it; a success in between resets.
        let t = Instant::now();
        let b = Breaker::new(3, PAUSE);
        assert_eq!(b.record(true, || t), Transition::None);
        assert_eq!(b.record(true, || t), Transition::None);
        assert_eq!(b.record(false, || t), Transition::None, "a success resets the count");
        assert_eq!(b.record(true, || t), Transition::None);
        assert_eq!(b.record(true, || t), Transition::None);
        assert_eq!(b.admit(|| t), Admission::Pass, "2 of 3: still closed");
        assert_eq!(b.record(true, || t), Transition::Opened);
        assert_eq!(b.admit(|| t), Admission::Reject { retry_in: PAUSE });
    }

    #[test]
    fn one_probe_after_the_pause_and_its_outcome_decides() {
        let t = Instant::now();
        let b = Breaker::new(1, PAUSE);
        assert_eq!(b.record(true, || t), Transition::Opened);
        assert!(matches!(b.admit(|| t + PAUSE / 2), Admission::Reject { .. }));
        assert_eq!(b.admit(|| t + PAUSE), Admission::Probe);
        assert_eq!(b.admit(|| t + PAUSE), Admission::Reject { retry_in: Duration::ZERO });
        assert_eq!(b.record(true, || t + PAUSE), Transition::Opened, "a failed probe re-opens");
        assert!(matches!(b.admit(|| t + PAUSE + PAUSE / 2), Admission::Reject { .. }));
        assert_eq!(b.admit(|| t + 2 * PAUSE), Admission::Probe);
        assert_eq!(b.record(false, || t + 2 * PAUSE), Transition::Closed);
        assert_eq!(b.admit(|| t + 2 * PAUSE), Admission::Pass);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let t = Instant::now();
        let b = Breaker::new(1, PAUSE);
        b.record(true, || t);
        assert_eq!(b.admit(|| t + PAUSE), Admission::Probe);
        b.probe_abandoned(t + PAUSE);
        assert_eq!(b.admit(|| t + PAUSE), Admission::Probe);
    }

    #[test]
    fn failures_are_the_upstreams_not_the_callers() {
        let rpc = |code: Code| -> Result<(), ProviderError> {
            Err(ProviderError::Rpc { code: code.value(), message: String::new(), data: None })
        };
        assert!(is_failure(&rpc(Code::InternalError)));
        assert!(!is_failure(&rpc(Code::InvalidParams)));
        assert!(!is_failure::<()>(&Err(ProviderError::Cancelled)));
        assert!(!is_failure(&Ok(serde_json::json!({ "isError": true }))));
        assert!(is_failure::<()>(&Err(ProviderError::Internal("x".into()))));
    }
}
