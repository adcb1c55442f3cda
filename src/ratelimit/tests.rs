//! The bucket math on a fake clock (nanoseconds passed in): the burst exactly, the wait, the
//! refill, the per-core share, which limits a request meets, and the table at its maximum.

use super::*;

const SEC: u64 = 1_000_000_000;

fn limits(flags: &[&str], threads: u16, max: usize) -> Limits {
    let rate_limits = flags.iter().map(|f| RateLimit::parse(f).expect("valid flag")).collect();
    let cfg = Config { rate_limits, rate_buckets_per_core_max: max, ..Config::default() };
    Limits::new(&cfg, threads)
}

fn peer(last: u8) -> Client<'static> {
    Client::Peer(Some(IpAddr::from([10, 0, 0, last])))
}

#[test]
fn a_burst_passes_exactly_then_one_interval_is_waited() {
    // Goal: burst N passes at one instant, N+1 is refused with the wait until one token is
    // back, and passes at exactly that time (not a nanosecond earlier).
    let mut l = limits(&["client=2/s/3"], 1, 16);
    let t0 = 5 * SEC;
    for _ in 0..3 {
        assert_eq!(l.admit(t0, peer(1), None), Ok(()));
    }
    let denied = l.admit(t0, peer(1), None).expect_err("the fourth is over the burst");
    assert_eq!((denied.kind, denied.cause, denied.rule), (Kind::Client, Cause::Over, 0));
    assert_eq!(denied.wait_ns, SEC / 2, "one token comes back every half second");
    assert_eq!((denied.retry_after_secs(), denied.retry_after_ms()), (1, 500));
    assert!(l.admit(t0 + SEC / 2 - 1, peer(1), None).is_err(), "a nanosecond early");
    assert_eq!(l.admit(t0 + SEC / 2, peer(1), None), Ok(()));
    assert!(l.admit(t0 + SEC / 2, peer(1), None).is_err(), "that token is spent");
    // A refused request took nothing: after a long idle the whole burst is back, no more.
    let later = t0 + 60 * SEC;
    for _ in 0..3 {
        assert_eq!(l.admit(later, peer(1), None), Ok(()));
    }
    assert!(l.admit(later, peer(1), None).is_err());
}

#[test]
fn clients_are_counted_apart_and_subjects_apart_from_peers() {
    // Goal: one client over its limit leaves another's bucket alone.
    let mut l = limits(&["client=1/s/1"], 1, 16);
    assert_eq!(l.admit(0, peer(1), None), Ok(()));
    assert!(l.admit(0, peer(1), None).is_err());
    assert_eq!(l.admit(0, peer(2), None), Ok(()));
    assert_eq!(l.admit(0, Client::Subject("alice"), None), Ok(()));
    assert!(l.admit(0, Client::Subject("alice"), None).is_err());
    assert_eq!(l.admit(0, Client::Subject("bob"), None), Ok(()));
}

#[test]
fn each_core_takes_its_share_of_rate_and_burst() {
    // Goal: on one of 4 cores, 8/s with a burst of 6 is 2/s with a burst of ceil(6/4) = 2.
    let mut l = limits(&["client=8/s/6"], 4, 16);
    assert_eq!(l.admit(0, peer(1), None), Ok(()));
    assert_eq!(l.admit(0, peer(1), None), Ok(()));
    let denied = l.admit(0, peer(1), None).expect_err("the core's burst is 2");
    assert_eq!(denied.wait_ns, SEC / 2, "the core's rate is 2/s");
    // A burst smaller than the cores still lets one request through on each.
    let mut l = limits(&["client=1/s/1"], 4, 16);
    assert_eq!(l.admit(0, peer(1), None), Ok(()));
    assert_eq!(l.admit(0, peer(1), None).expect_err("one").wait_ns, 4 * SEC);
}

#[test]
fn tool_and_upstream_limits_meet_only_their_calls() {
    // Goal: `tool:NAME` limits that tool per client, `upstream:NAME` all clients' calls
    // into it together; other tools and other requests pass; a refusal takes no token.
    let mut l = limits(&["tool:echo=1/s/1", "upstream:up=1/s/2"], 1, 16);
    assert!(l.names_calls);
    assert_eq!(l.admit(0, peer(1), Some(("echo", "demo"))), Ok(()));
    let denied = l.admit(0, peer(1), Some(("echo", "demo"))).expect_err("tool over");
    assert_eq!((denied.kind, l.scope_text(denied.rule)), (Kind::Tool, "tool:echo"));
    assert_eq!(l.admit(0, peer(1), Some(("add", "demo"))), Ok(()), "another tool");
    assert_eq!(l.admit(0, peer(1), None), Ok(()), "not a call");
    assert_eq!(l.admit(0, peer(2), Some(("echo", "demo"))), Ok(()), "another client");
    assert_eq!(l.admit(0, peer(1), Some(("up__a", "up"))), Ok(()));
    assert_eq!(l.admit(0, peer(2), Some(("up__b", "up"))), Ok(()));
    let denied = l.admit(0, peer(3), Some(("up__a", "up"))).expect_err("the upstream's 2");
    assert_eq!((denied.kind, l.scope_text(denied.rule)), (Kind::Upstream, "upstream:up"));
}

#[test]
fn a_refusal_by_one_limit_takes_no_token_of_another() {
    // Goal: client and tool limits together: the tool's refusal leaves the client's bucket.
    let mut l = limits(&["client=1/s/2", "tool:echo=1/s/1"], 1, 16);
    assert_eq!(l.admit(0, peer(1), Some(("echo", "demo"))), Ok(()));
    let denied = l.admit(0, peer(1), Some(("echo", "demo"))).expect_err("tool over");
    assert_eq!(denied.kind, Kind::Tool);
    assert_eq!(l.admit(0, peer(1), None), Ok(()), "the client's second token is still there");
    assert_eq!(l.admit(0, peer(1), None).expect_err("now empty").kind, Kind::Client);
}

#[test]
fn the_table_at_its_maximum_evicts_only_full_buckets() {
    // Goal: at `max` buckets a new client replaces a full (idle) one; while the oldest are
    // not full a new client is refused (TableFull, with the wait until one is), and no
    // number of new identities refills a throttled client's bucket.
    let mut l = limits(&["client=1/s/1"], 1, 4);
    for i in 0..4 {
        assert_eq!(l.admit(0, peer(i), None), Ok(()));
    }
    assert_eq!(l.len(), 4);
    let denied = l.admit(0, peer(9), None).expect_err("no full bucket to evict");
    assert_eq!((denied.cause, denied.wait_ns), (Cause::TableFull, SEC));
    // Peer 0 is over; a flood of new identities leaves it over.
    for i in 10..200 {
        assert!(l.admit(SEC / 2, peer(i), None).is_err());
    }
    assert_eq!(l.admit(SEC / 2, peer(0), None).expect_err("still over").cause, Cause::Over);
    // At one second every bucket is full again: new clients take their places.
    assert_eq!(l.admit(SEC, peer(9), None), Ok(()));
    assert_eq!(l.len(), 4, "never past the maximum");
    assert_eq!(l.admit(SEC, peer(10), None), Ok(()));
    // Peer 9's bucket, the most recently used, was kept: it is empty, not made anew.
    assert!(l.admit(SEC, peer(9), None).is_err(), "peer 9's own bucket is kept and empty");
}

#[test]
fn the_lru_list_stays_consistent_under_touches_and_evictions() {
    // Goal: the intrusive list links every slot once, oldest to newest, after any sequence.
    let mut l = limits(&["client=1000/s/1000"], 1, 8);
    let mut t = 0;
    for round in 0..50u8 {
        t += SEC;
        for i in 0..(round % 11) {
            let _ = l.admit(t, peer(i.wrapping_mul(7) % 13), None);
        }
        let mut seen = 0usize;
        let (mut at, mut previous) = (l.oldest, NONE);
        while at != NONE {
            assert_eq!(l.slots[at as usize].older, previous);
            assert_eq!(l.index.get(&l.slots[at as usize].key), Some(&at));
            previous = at;
            at = l.slots[at as usize].newer;
            seen += 1;
        }
        assert_eq!(previous, l.newest);
        assert_eq!((seen, l.index.len()), (l.slots.len(), l.slots.len()));
        assert!(l.slots.len() <= 8);
    }
}
