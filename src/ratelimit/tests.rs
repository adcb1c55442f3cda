//! The bucket math on a fake clock (nanoseconds passed in): the burst exactly, the wait, the
//! refill, the per-core share, which limits a request meets, the table at its maximum (its
//! shadow of evicted debts), and how an IPv6 peer is keyed by its prefix.

use super::*;

const SEC: u64 = 1_000_000_000;

fn limits(flags: &[&str], threads: u16, max: usize) -> Limits {
    let rate_limits = flags.iter().map(|f| RateLimit::parse(f).expect("valid flag")).collect();
    let cfg = {
        let mut edited = Config::default();
        edited.rate.limits = rate_limits;
        edited.rate.buckets_per_core_max = max;
        edited
    };
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
fn a_full_table_serves_a_new_client_and_keeps_the_evicted_debt() {
    // Goal: at `max` buckets a new client gets a bucket at once (the least full of the oldest
    // is evicted); the evicted client's debt is kept, so it is still over its limit when it
    // comes back, however many identities were made up meanwhile; and nobody is refused
    // longer than one interval of its limit.
    let mut l = limits(&["client=1/s/2"], 1, 4);
    for i in 0..4 {
        assert_eq!(l.admit(0, peer(i), None), Ok(()));
        assert_eq!(l.admit(0, peer(i), None), Ok(()), "both tokens of peer {i}");
        assert!(l.admit(0, peer(i), None).is_err(), "peer {i} is over");
    }
    assert_eq!(l.len(), 4);
    assert_eq!(l.admit(0, peer(9), None), Ok(()), "a new client is served at once");
    assert_eq!(l.len(), 4, "never past the maximum");
    // Peer 0, evicted for peer 9, is still over: its debt (full at 2 s) was kept.
    let denied = l.admit(0, peer(0), None).expect_err("an evicted client stays limited");
    assert_eq!((denied.cause, denied.wait_ns), (Cause::Shadowed, SEC));
    // A flood of made-up identities: each is served or waits at most one interval, and
    // peer 0 stays over (its own debt is never lowered by an eviction).
    for i in 10..250 {
        if let Err(d) = l.admit(SEC / 2, peer(i), None) {
            assert!(d.wait_ns <= SEC, "peer {i} waits {} ns", d.wait_ns);
        }
    }
    let denied = l.admit(SEC / 2, peer(0), None).expect_err("still over after the flood");
    assert!(denied.wait_ns >= SEC / 2 && denied.wait_ns <= SEC, "{denied:?}");
}

#[test]
fn an_inherited_debt_is_capped_at_one_interval_of_the_own_limit() {
    // Goal: a shadow entry may hold another limit's longer debt (a `tool:` bucket of 1/m);
    // a client bucket made from it waits at most its own interval (1 s), never 60 s.
    let mut l = limits(&["client=1/s/1", "tool:echo=1/m/1"], 1, 3);
    let mut t = 0;
    for i in 0..60 {
        t += SEC;
        let _ = l.admit(t, peer(i), Some(("echo", "demo")));
    }
    for i in 100..200 {
        if let Err(d) = l.admit(t, peer(i), None) {
            assert_eq!(d.kind, Kind::Client);
            assert!(d.wait_ns <= SEC, "peer {i} waits {} ns", d.wait_ns);
        }
    }
}

#[test]
fn a_request_never_evicts_a_bucket_it_holds() {
    // Goal: the table holds at least one request's buckets (3, whatever the flag says), and
    // the eviction skips the buckets the request already took: a call needing a second new
    // bucket never takes the first one's place, even when that one is the least full.
    let mut l = limits(&["client=1/s/10", "tool:echo=1/s/1", "upstream:demo=1/s/1"], 1, 1);
    assert_eq!(l.admit(0, peer(1), Some(("echo", "demo"))), Ok(()));
    assert_eq!(l.len(), 3, "three buckets despite a maximum of 1");
    let mut l = limits(&["client=1/s/10"], 1, 3);
    assert_eq!(l.admit(0, peer(0), None), Ok(()), "peer 0: full again at 1 s");
    for i in 1..3 {
        for _ in 0..5 {
            assert_eq!(l.admit(0, peer(i), None), Ok(()), "peer {i}: full again at 5 s");
        }
    }
    let key = l.key(0, Kind::Client, peer(9));
    let (least_full, _) = l.slot_for(l.key(0, Kind::Client, peer(3)), 0, 20 * SEC, &[]);
    assert_eq!(l.slots[least_full as usize].key, l.key(0, Kind::Client, peer(3)));
    let busy = [(least_full, SEC)];
    let (slot, made) = l.slot_for(key, 0, 20 * SEC, &busy);
    assert!(made && slot != least_full, "the request's own bucket was kept");
}

fn v6(text: &str) -> Client<'static> {
    Client::Peer(Some(text.parse().expect("an address")))
}

#[test]
fn ipv6_peers_are_one_client_per_prefix() {
    // Goal: at the default /64, two addresses of one /64 share a bucket and another /64 has
    // its own; at /128 every address is a client; at /1 the halves of the space are.
    let mut l = limits(&["client=1/s/1"], 1, 16);
    assert_eq!(l.admit(0, v6("2001:db8:1:2::1"), None), Ok(()));
    let denied = l.admit(0, v6("2001:db8:1:2:ffff:ffff:ffff:ffff"), None).expect_err("same /64");
    assert_eq!(denied.cause, Cause::Over);
    assert_eq!(l.admit(0, v6("2001:db8:1:3::1"), None), Ok(()), "the next /64");
    let cfg = |prefix| {
        let mut edited = Config::default();
        edited.rate.limits = vec![RateLimit::parse("client=1/s/1").expect("valid")];
        edited.rate.ipv6_prefix = prefix;
        edited
    };
    let mut l = Limits::new(&cfg(128), 1);
    assert_eq!(l.admit(0, v6("2001:db8::1"), None), Ok(()));
    assert_eq!(l.admit(0, v6("2001:db8::2"), None), Ok(()), "/128: each address");
    assert!(l.admit(0, v6("2001:db8::1"), None).is_err());
    let mut l = Limits::new(&cfg(1), 1);
    assert_eq!(l.admit(0, v6("::1"), None), Ok(()));
    assert!(l.admit(0, v6("7fff::1"), None).is_err(), "/1: the lower half is one client");
    assert_eq!(l.admit(0, v6("8000::1"), None), Ok(()), "/1: the upper half another");
}

#[test]
fn the_prefix_keeps_what_it_names_and_ipv4_counts_whole() {
    // Goal: `peer_key` zeroes exactly the bits past the prefix; an IPv4 address, and the
    // IPv4-mapped form a dual-stack listener reports, count as the whole IPv4 address (never
    // as the /64 of ::ffff:0:0/96, which would make every IPv4 client one).
    let ip = |t: &str| -> IpAddr { t.parse().expect("an address") };
    let a = ip("2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff");
    assert_eq!(peer_key(a, 64), ip("2001:db8:aaaa:bbbb::"));
    assert_eq!(peer_key(a, 128), a);
    assert_eq!(peer_key(a, 48), ip("2001:db8:aaaa::"));
    assert_eq!(peer_key(a, 1), ip("::"));
    assert_eq!(peer_key(ip("ffff::1"), 1), ip("8000::"));
    assert_eq!(peer_key(ip("::ffff:127.0.0.2"), 64), ip("127.0.0.2"));
    assert_eq!(peer_key(ip("10.1.2.3"), 1), ip("10.1.2.3"));
    let mut l = limits(&["client=1/s/1"], 1, 16);
    assert_eq!(l.admit(0, v6("::ffff:10.0.0.1"), None), Ok(()));
    assert!(l.admit(0, peer(1), None).is_err(), "the mapped form is the same client");
    assert_eq!(l.admit(0, v6("::ffff:10.0.0.2"), None), Ok(()), "another IPv4 client");
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
