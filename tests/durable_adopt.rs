//! The durable mirror against a real `redis-server` (`--durable`, CONTRACT §10), black-box:
//! a node killed mid-call, two peers racing to adopt its session (one wins; the resume gets the
//! mirrored events after the cursor once, in order, then `-31006`; a re-POST never runs the
//! call again), and the per-core queue at its bound with the store stalled (records refused,
//! the session marked not durable, durable again once the store answers).
//!
//! Needs Debian's `redis-server` on PATH: skipped loudly without it, unless
//! `TIDEMARK_REQUIRE_REDIS=1` (the README's test command sets it), which makes that a failure.

mod support;

use std::time::{Duration, Instant};

use support::redis::{store_key, Redis};
use support::*;

fn node(redis: &Redis, id: &str, extra: &[&str]) -> Server {
    let url = redis.url();
    let mut args = vec![
        "--node-id",
        id,
        "--threads",
        "2",
        "--durable",
        &url,
        "--durable-lease-ms",
        "300",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    if !extra.contains(&"--tools") {
        args.extend_from_slice(&["--tools", "demo"]);
    }
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    // The mirror connects on its own thread: a test that stalls the store or times a write
    // must start once it is connected (before, records are dropped, not refused or written).
    let up = poll_until(Duration::from_secs(10), || {
        metric(&scrape(&server.metrics()), "tidemark_durable_up") == 1
    });
    assert!(up, "node {id}: the durable mirror connected");
    server
}

#[test]
fn a_dead_nodes_session_is_adopted_by_one_peer_which_replays_it_and_never_reruns_the_call() {
    // Goal: the issue's race ("two nodes racing to adopt one session → one wins") and what the
    // winner serves: the events after the client's cursor, once and in order, then -31006
    // naming the dead node; a re-POST of the call is refused (409), not run again.
    let Some(redis) = Redis::standalone() else { return };
    let first = node(&redis, "1", &[]);
    let sid = open_session(&first);
    let body = call(7, "slow_counter", r#"{"steps":40,"delay_ms":50}"#, true);
    let mut stream = call_stream(&first, &sid, &body, &[]);
    let mut cursor = String::new();
    for _ in 0..4 {
        cursor = stream.next_event().expect("an event before the cut").id.expect("an id");
    }
    // Let the mirror catch up with a few more events the client never reads.
    std::thread::sleep(Duration::from_millis(200));
    drop(stream);
    drop(first); // SIGKILL: the lease stops being renewed
    let (a, b) = (node(&redis, "2", &[]), node(&redis, "3", &[]));
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let resumes: Vec<(u16, Vec<Event>)> = std::thread::scope(|scope| {
        let racers: Vec<_> = [&a, &b]
            .into_iter()
            .map(|n| {
                let (sid, cursor) = (sid.clone(), cursor.clone());
                scope.spawn(move || {
                    let mut s = resume(n, &sid, &cursor);
                    let status = s.status;
                    (status, if status == 200 { s.rest() } else { Vec::new() })
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().expect("racer")).collect()
    });
    let winners: Vec<usize> = (0..2).filter(|&i| resumes[i].0 == 200).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one node adopts: {:?}",
        resumes.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    let loser = 1 - winners[0];
    assert!(
        matches!(resumes[loser].0, 404 | 503),
        "the loser answers as for another node's session: {}",
        resumes[loser].0
    );
    let events = &resumes[winners[0]].1;
    let (_, _, after) = split_event_id(&cursor).expect("cursor");
    let seqs = sequence_numbers(events);
    assert!(!seqs.is_empty(), "the resume replays something");
    assert_eq!(seqs[0], after + 1, "the replay starts right after the cursor");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gap-free and in order: {seqs:?}");
    let last = events.last().expect("final").json();
    assert_eq!(last["error"]["code"], -31006, "{last}");
    assert_eq!(last["error"]["data"]["node"], 1, "{last}");
    assert_eq!(last["id"], 7);
    let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
    assert!(
        progress.windows(2).all(|w| w[1] == w[0] + 1),
        "progress in order, none twice: {progress:?}"
    );
    let winner = [&a, &b][winners[0]];
    let again = post(winner, &[("Mcp-Session-Id", &sid)], &body);
    assert_eq!(again.status, 409, "a re-POST of the call is never run again: {}", again.text());
    let text = scrape(&winner.metrics());
    assert_eq!(metric(&text, "tidemark_durable_adoptions_total{outcome=\"adopted\"}"), 1);
    // Every key of the session has a time to live (the store is bounded like the node).
    for key in ["tm:s:", "tm:st:", "tm:ev:"].map(|prefix| store_key(prefix, &sid)) {
        let ttl = redis.command(&format!("PTTL {key}")).unwrap_or_default();
        let ms: i64 = ttl.trim_start_matches(':').parse().unwrap_or(-9);
        assert!(ms > 0, "{key} has a TTL: {ttl}");
    }
}

#[test]
fn a_client_that_read_events_the_store_never_held_still_gets_the_adopters_final() {
    // Goal: CONTRACT §10 ("a stream whose call was running ends with its mirrored result or
    // -31006") when the client is ahead of the store: it read events the dead node sent but
    // had not mirrored yet, so its cursor names an id the adopter never issued (the adopter's
    // own -31006 takes the next sequence number the store knows). Before the fix the resume
    // marked that final delivered unsent (200, nothing) and a re-POST was refused 409
    // id_reused: the client looped GET and re-POST (the durable stages' retry storm).
    // Method: the mirror lingers 100 ms before each batch while events come 10 ms apart, and
    // the node dies right after the client read its last event.
    let Some(redis) = Redis::standalone() else { return };
    let ahead = client_ahead_of_the_store(&redis);
    let (sid, body, cursor) = (&ahead.sid, &ahead.body, ahead.cursor());
    let peer = node(&redis, "2", &[]);
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let final_id = only_the_final_and_new(resume(&peer, sid, cursor), &ahead.read_ids);
    // A client that got the final and resumes from it gets nothing again (no duplicate).
    let mut after_final = resume(&peer, sid, &final_id);
    assert_eq!(after_final.status, 200, "a resume from the final's id");
    let again: Vec<String> = after_final.rest().iter().map(|e| e.data.clone()).collect();
    assert!(again.iter().all(String::is_empty), "nothing after the final: {again:?}");
    // The call is answered: a re-POST of it is refused, never run again.
    let again = post(&peer, &[("Mcp-Session-Id", sid)], body);
    assert_eq!(again.status, 409, "{}", again.text());
}

#[test]
fn a_cursor_past_the_store_of_the_first_dead_node_still_gets_the_final_after_a_second_adoption() {
    // Goal: the previous test's client ahead of the store, across two adoptions. It read
    // events node 1 never mirrored and did not resume on node 2, which adopted the session for
    // another request and ended the call with its -31006; node 2 dies too. Node 3 holds no
    // cut-off point for node 1's ids (node 2 knew it in memory only), so the cursor maps to
    // the stream's last event below node 2's first sequence number: the client gets node 2's
    // final, never 400 (before: `Last-Event-ID` refused, the call's outcome unreachable).
    let Some(redis) = Redis::standalone() else { return };
    let ahead = client_ahead_of_the_store(&redis);
    let sid = &ahead.sid;
    let second = node(&redis, "2", &[]);
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let adopted = post(&second, &[("Mcp-Session-Id", sid)], ping);
    // Node 2 adopted it: the ping is refused for the stream it now owes (held, then -31004).
    assert!(adopted.text().contains("owedStreams"), "node 2 adopts: {}", adopted.text());
    std::thread::sleep(Duration::from_millis(300)); // its image and final reach the store
    drop(second);
    let third = node(&redis, "3", &[]);
    std::thread::sleep(Duration::from_millis(400));
    only_the_final_and_new(resume(&third, sid, ahead.cursor()), &ahead.read_ids);
}

/// A client ahead of the store: it read 12 events of a `slow_counter` call (id 9) that node 1,
/// its mirror lingering 100 ms before each batch while events come 10 ms apart, had not all
/// mirrored when it was SIGKILLed right after.
struct Ahead {
    sid: String,
    body: String,
    read_ids: Vec<String>,
}

impl Ahead {
    /// The id of the last event the client read: its `Last-Event-ID`.
    fn cursor(&self) -> &str {
        self.read_ids.last().expect("a cursor")
    }
}

fn client_ahead_of_the_store(redis: &Redis) -> Ahead {
    let first = node(redis, "1", &["--durable-linger-us", "100000"]);
    let sid = open_session(&first);
    let body = call(9, "slow_counter", r#"{"steps":60,"delay_ms":10}"#, true);
    let mut stream = call_stream(&first, &sid, &body, &[]);
    let read_ids: Vec<String> =
        (0..12).map(|_| stream.next_event().expect("an event").id.expect("an id")).collect();
    drop(first); // SIGKILL: what the mirror still held back is lost with it
    drop(stream);
    let ahead = Ahead { sid, body, read_ids };
    let held = event_entries(redis, &ahead.sid);
    let (_, _, cursor_seq) = split_event_id(ahead.cursor()).expect("cursor");
    assert!(cursor_seq > held, "the client is ahead of the store: {held} held, {}", ahead.cursor());
    ahead
}

/// A resume that sends the call's `-31006` final and nothing the client already holds, under an
/// id new to it: an event id names one event in a session (MCP: unique across its streams), so
/// an adopter's final must not reuse an id the dead node gave an event the client read, or a
/// client that skips ids it holds never sees the final (the cluster stage's GET/re-POST loop:
/// the final replayed on every GET, skipped every time). The final's id.
fn only_the_final_and_new(mut resumed: SseStream, read_ids: &[String]) -> String {
    assert_eq!(resumed.status, 200, "the adopter resumes the stream");
    let events = resumed.rest();
    let last = events.last().expect("the final reaches the client").json();
    assert_eq!(last["error"]["code"], -31006, "{last}");
    assert_eq!(last["id"], 9, "{last}");
    let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
    assert!(progress.is_empty(), "nothing the client already holds comes again: {progress:?}");
    let final_id = events.last().and_then(|e| e.id.clone()).expect("the final has an id");
    assert!(
        !read_ids.contains(&final_id),
        "the final's id {final_id} names an event the client already read: {read_ids:?}"
    );
    final_id
}

#[test]
fn a_session_adopted_twice_serves_every_event_under_the_id_it_was_first_sent_with() {
    // Goal: an event id names one event for the session's whole life (MCP: unique across its
    // streams), across adoptions: each adopter's events take a tag of its own
    // (`Session::retag`) and the tags before it are mirrored with the session, so a second
    // adopter replays the first node's events and the first adopter's final under the ids the
    // client was given, and the dead nodes' cursors still resume.
    let Some(redis) = Redis::standalone() else { return };
    let first = node(&redis, "1", &[]);
    let sid = open_session(&first);
    let body = call(5, "slow_counter", r#"{"steps":40,"delay_ms":20}"#, true);
    let mut stream = call_stream(&first, &sid, &body, &[]);
    let opening = stream.next_event().expect("a first event").id.expect("an id");
    for _ in 0..3 {
        stream.next_event().expect("an event");
    }
    std::thread::sleep(Duration::from_millis(200)); // the mirror catches up
    drop(stream);
    drop(first);
    let second = node(&redis, "2", &[]);
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let mut resumed = resume(&second, &sid, &opening);
    assert_eq!(resumed.status, 200, "the first adopter resumes the stream");
    let sent: Vec<(Option<String>, String)> =
        resumed.rest().iter().map(|e| (e.id.clone(), e.data.clone())).collect();
    let final_id = sent.last().and_then(|(id, _)| id.clone()).expect("a final with an id");
    let tag = |id: &str| id.split('-').next().unwrap_or_default().to_owned();
    assert_ne!(tag(&final_id), tag(&opening), "the adopter's final carries a tag of its own");
    std::thread::sleep(Duration::from_millis(300)); // its image and final reach the store
    drop(second);
    let third = node(&redis, "3", &[]);
    std::thread::sleep(Duration::from_millis(400));
    let mut again = resume(&third, &sid, &opening);
    assert_eq!(again.status, 200, "the second adopter resumes from the first node's id");
    let replayed: Vec<(Option<String>, String)> =
        again.rest().iter().map(|e| (e.id.clone(), e.data.clone())).collect();
    assert_eq!(replayed, sent, "the same events under the same ids, the final included");
}

#[test]
fn at_its_queue_bound_a_stalled_store_makes_the_session_not_durable_until_it_answers() {
    // Goal: --durable-queue-records at its limit: with the store stalled (SIGSTOP) a call's
    // events overflow a 4-record queue: the worker never waits (the call ends on time), records
    // are refused and counted, the session is marked not durable; after SIGCONT the reaper
    // rewrites it whole and no session stays not durable.
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "1", &["--durable-queue-records", "4"]);
    let sid = open_session(&server);
    redis.signal("STOP");
    let began = Instant::now();
    // Idempotent calls (no write-ahead wait): about five records each, queued faster than the
    // stalled store takes them.
    for id in 1..=6 {
        let mut stream =
            call_stream(&server, &sid, &call(id, "echo", r#"{"text":"x"}"#, false), &[]);
        assert!(
            stream.receive_to_end(Duration::from_secs(5)),
            "call {id} ends with the store stalled"
        );
    }
    // A non-idempotent call of a session that is not durable starts at once, counted.
    let counted = call(9, "slow_counter", r#"{"steps":3,"delay_ms":0}"#, true);
    let mut stream = call_stream(&server, &sid, &counted, &[]);
    assert!(stream.receive_to_end(Duration::from_secs(5)), "the non-idempotent call ends too");
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "no worker waited on the store: {:?}",
        began.elapsed()
    );
    let text = scrape(&server.metrics());
    assert!(
        metric(&text, "tidemark_durable_records_refused_total") > 0,
        "records refused at the bound"
    );
    assert!(metric(&text, "tidemark_durable_sessions_marked_not_durable_total") >= 1);
    assert!(metric(&text, "tidemark_durable_write_ahead_unprotected_total") >= 1);
    assert!(
        metric(&text, "tidemark_durable_queue_records") <= 4,
        "the queue stays inside its bound"
    );
    redis.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(&server.metrics());
        if metric(&text, "tidemark_durable_up") == 1
            && metric(&text, "tidemark_durable_sessions_not_durable") == 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "the session became durable again:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let key = format!("HGET {} durable", store_key("tm:s:", &sid));
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis.command(&key).as_deref() != Some("$1|1") {
        assert!(
            Instant::now() < deadline,
            "the store holds the rewritten session: {:?}",
            redis.command(&key)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_store_that_connects_but_refuses_writes_is_retried_at_the_reconnect_pause_not_in_a_loop() {
    // Goal: Redis at `maxmemory` (noeviction) accepts connections and refuses every write
    // (-OOM). The mirror counts it down once per attempt and waits `RECONNECT_PAUSE_MS` (200 ms)
    // between attempts (before: connect, new epoch, refused lease, down, connect at once — a
    // busy loop on a worker's vCPU with two log lines per turn); it stays down (durable_up 0,
    // never 1 for a connection whose lease is refused) and the session is durable again once
    // the store takes writes.
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "1", &[]);
    let sid = open_session(&server);
    assert_eq!(redis.command("CONFIG SET maxmemory 1").as_deref(), Some("+OK"));
    assert!(
        poll_until(Duration::from_secs(5), || {
            metric(&scrape(&server.metrics()), "tidemark_durable_up") == 0
        }),
        "the refused lease takes the store down"
    );
    let errors = || metric(&scrape(&server.metrics()), "tidemark_durable_store_errors_total");
    let (before, began) = (errors(), Instant::now());
    let mut samples = 0;
    while began.elapsed() < Duration::from_secs(2) {
        let text = scrape(&server.metrics());
        assert_eq!(metric(&text, "tidemark_durable_up"), 0, "never up while writes are refused");
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let (attempts, window) = (errors() - before, began.elapsed());
    // One attempt per pause at most, plus the one under way at each end of the window.
    let bound = window.as_millis() as u64 / 200 + 2;
    assert!(attempts <= bound, "{attempts} failed attempts in {window:?} (at most {bound})");
    assert!(attempts >= 2, "it keeps trying: {attempts} attempts in {window:?}");
    assert!(samples > 10);
    assert_eq!(redis.command("CONFIG SET maxmemory 0").as_deref(), Some("+OK"));
    // (The store still says `durable 1` of the session: marking it not durable was refused too.)
    assert!(
        poll_until(Duration::from_secs(10), || {
            let text = scrape(&server.metrics());
            metric(&text, "tidemark_durable_up") == 1
                && metric(&text, "tidemark_durable_sessions_not_durable") == 0
        }),
        "up again, and the session rewritten whole, once the store takes writes"
    );
    let key = format!("HGET {} durable", store_key("tm:s:", &sid));
    assert_eq!(redis.command(&key).as_deref(), Some("$1|1"));
}

#[test]
fn a_non_idempotent_call_waits_for_its_record_at_most_the_write_ahead_bound() {
    // Goal: --durable-write-ahead-ms at its limit. With the store answering, a non-idempotent
    // call starts once its record is written (no unprotected count); with the store stalled
    // it starts after the bound (not before, not much later), unprotected and counted, and its
    // session is no longer durable.
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "1", &["--durable-write-ahead-ms", "400"]);
    let sid = open_session(&server);
    let body = |id| call(id, "slow_counter", r#"{"steps":1,"delay_ms":0}"#, true);
    let mut quick = call_stream(&server, &sid, &body(1), &[]);
    assert!(quick.receive_to_end(Duration::from_secs(5)));
    let text = scrape(&server.metrics());
    assert_eq!(
        metric(&text, "tidemark_durable_write_ahead_unprotected_total"),
        0,
        "written in time"
    );
    redis.signal("STOP");
    let began = Instant::now();
    let mut stalled = call_stream(&server, &sid, &body(2), &[]);
    assert!(stalled.receive_to_end(Duration::from_secs(5)), "the call ends with the store stalled");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(380), "it waited for the store first: {took:?}");
    assert!(took < Duration::from_millis(1_500), "at most about the bound: {took:?}");
    let text = scrape(&server.metrics());
    assert_eq!(metric(&text, "tidemark_durable_write_ahead_unprotected_total"), 1);
    assert!(metric(&text, "tidemark_durable_sessions_marked_not_durable_total") >= 1);
    redis.signal("CONT");
}

#[test]
fn a_dead_nodes_tasks_are_answered_by_a_peer_finished_or_failed_with_outcome_unknown() {
    // Goal: `tasks/get` reaching a peer after the task's node died gets the last mirrored
    // state: a finished task its result, a task that was still working a `failed` task whose
    // error is -31006 naming the dead node (never "not found", never left working forever).
    let Some(redis) = Redis::standalone() else { return };
    let first = Server::start(&[
        "--node-id",
        "1",
        "--tools",
        "conformance",
        "--durable",
        &redis.url(),
        "--durable-lease-ms",
        "300",
    ]);
    let create = |seconds: f64| {
        let (status, message) = modern_with_tasks(
            &first,
            "tools/call",
            serde_json::json!({ "name": "slow_compute", "arguments": { "seconds": seconds } }),
            &[],
        );
        assert_eq!(status, 200, "{message}");
        assert_eq!(message["result"]["resultType"], "task", "{message}");
        message["result"]["taskId"].as_str().expect("task id").to_owned()
    };
    let (done, working) = (create(0.3), create(60.0));
    let finished = poll_until(Duration::from_secs(10), || {
        let (_, m) =
            modern_with_tasks(&first, "tasks/get", serde_json::json!({ "taskId": done }), &[]);
        m["result"]["status"] == "completed"
    });
    assert!(finished, "the quick task completes on its own node");
    std::thread::sleep(Duration::from_millis(200)); // the mirror writes its last state
    drop(first);
    let peer = node(&redis, "2", &["--tools", "conformance"]);
    std::thread::sleep(Duration::from_millis(400)); // past the lease
    let (status, m) =
        modern_with_tasks(&peer, "tasks/get", serde_json::json!({ "taskId": done }), &[]);
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["result"]["status"], "completed", "{m}");
    assert!(m["result"]["result"].is_object(), "its result: {m}");
    let (status, m) =
        modern_with_tasks(&peer, "tasks/get", serde_json::json!({ "taskId": working }), &[]);
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["result"]["status"], "failed", "{m}");
    assert_eq!(m["result"]["error"]["code"], -31006, "{m}");
    assert_eq!(m["result"]["error"]["data"]["node"], 1, "{m}");
    // Another id: the working one with its last hex digit changed (to 1 when it was 0).
    let last = if working.ends_with('0') { '1' } else { '0' };
    let other = format!("{}{last}", &working[..working.len() - 1]);
    let (_, unknown) =
        modern_with_tasks(&peer, "tasks/get", serde_json::json!({ "taskId": other }), &[]);
    assert!(unknown.get("error").is_some(), "an unknown task is still unknown: {unknown}");
}

/// The sequence numbers of `events`' ids, in order.
fn sequence_numbers(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| e.id.as_deref().and_then(split_event_id))
        .map(|(_, _, seq)| seq)
        .collect()
}

/// Whether `server`'s mirror queues emptied within 5 s (the mirror took every queued record).
fn queues_drained(server: &Server) -> bool {
    poll_until(Duration::from_secs(5), || {
        metric(&scrape(&server.metrics()), "tidemark_durable_queue_records") == 0
    })
}

/// How many `tm:ev` entries session `sid` has in the store (`XLEN`).
fn event_entries(redis: &Redis, sid: &str) -> u64 {
    let answer = redis.command(&format!("XLEN {}", store_key("tm:ev:", sid))).unwrap_or_default();
    answer.trim_start_matches(':').parse().unwrap_or(0)
}

/// One call's 12 events (priming, 10 progress, result) queued while the store is stalled for
/// about 0.4 s (inside its 1 s answer bound, so it never counts as down), then written: the
/// `tm:ev` entries the session has once they all are.
fn entries_after_a_stall(extra: &[&str]) -> (u64, u64) {
    let Some(redis) = Redis::standalone() else { return (0, 0) };
    let server = node(&redis, "1", extra);
    let sid = open_session(&server);
    let body = call(1, "slow_counter", r#"{"steps":10,"delay_ms":30}"#, true);
    let mut stream = call_stream(&server, &sid, &body, &[]);
    let first = stream.next_event().expect("the call's first event");
    assert!(first.id.is_some(), "a ring event");
    redis.signal("STOP");
    let rest = stream.rest();
    std::thread::sleep(Duration::from_millis(50));
    // The records queued behind the stalled batch show in the queue gauges, whichever writer
    // drains them (read from the queues at the scrape, not published per batch).
    let text = scrape(&server.metrics());
    let (queued, bytes) = (
        metric(&text, "tidemark_durable_queue_records"),
        metric(&text, "tidemark_durable_queue_bytes"),
    );
    redis.signal("CONT");
    assert!(queued > 0 && bytes >= queued, "queued while stalled: {queued} records, {bytes} B");
    let events = 1 + rest.iter().filter(|e| e.id.is_some()).count() as u64;
    // Written once the queues are empty and the batch in flight answered (loopback: ms).
    let drained = queues_drained(&server);
    assert!(drained, "the mirror took every queued record");
    std::thread::sleep(Duration::from_millis(300));
    let text = scrape(&server.metrics());
    assert_eq!(metric(&text, "tidemark_durable_sessions_not_durable"), 0, "still durable");
    (event_entries(&redis, &sid), events)
}

#[test]
fn durable_batch_bytes_bounds_a_batch_and_a_full_batch_coalesces_each_sessions_events() {
    // Goal: --durable-batch-bytes at its limit. Method: the same stalled call twice. With the
    // default bounds the events queued during the stall are written in one batch, a session's
    // consecutive events coalesced into one `tm:ev` entry; with a 1-byte bound each batch
    // takes one record, so every event is an entry of its own.
    let (coalesced, events) = entries_after_a_stall(&[]);
    if events == 0 {
        return; // no redis-server here (Redis::start said why)
    }
    assert_eq!(events, 12, "priming, 10 progress, result");
    assert!(coalesced < events, "one batch coalesces: {coalesced} entries for {events} events");
    let (single, events) = entries_after_a_stall(&["--durable-batch-bytes", "1"]);
    assert_eq!(single, events, "a 1-byte batch bound writes one record per batch");
}

#[test]
fn with_each_core_writing_its_own_records_the_batch_bytes_bound_holds_through_a_stall() {
    // Goal: --durable-writer core (each worker writes its records over its own connection)
    // keeps --durable-batch-bytes at its limit and the session durable through a store stall
    // past the lease (the thread renews and checks the lease while the cores' records wait in
    // their queues). The whole file runs in this mode too with
    // TIDEMARK_TEST_DURABLE_WRITER=core (scripts/test.sh).
    let (coalesced, events) = entries_after_a_stall(&["--durable-writer", "core"]);
    if events == 0 {
        return; // no redis-server here (Redis::start said why)
    }
    assert_eq!(events, 12, "priming, 10 progress, result");
    assert!(coalesced < events, "one batch coalesces: {coalesced} entries for {events} events");
    let one_byte = ["--durable-writer", "core", "--durable-batch-bytes", "1"];
    let (single, events) = entries_after_a_stall(&one_byte);
    assert_eq!(single, events, "a 1-byte batch bound writes one record per batch");
}

/// Node 2's adoption of `sid` once node 1's 300 ms lease lapsed, resumed after `cursor`: the
/// events it replays, checked to start right after the cursor, gap-free and in order.
fn replay_on_a_peer(redis: &Redis, sid: &str, cursor: &str) -> Vec<Event> {
    let peer = node(redis, "2", &[]);
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let mut resumed = resume(&peer, sid, cursor);
    assert_eq!(resumed.status, 200, "the peer adopts the session");
    let replayed = resumed.rest();
    let (_, _, after) = split_event_id(cursor).expect("cursor");
    let seqs = sequence_numbers(&replayed);
    assert_eq!(seqs.first(), Some(&(after + 1)), "the replay starts right after the cursor");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gap-free and in order: {seqs:?}");
    replayed
}

/// A call's events queued while the store stalls, then a graceful stop (SIGTERM) with the
/// store answering again, then a peer's adoption: the peer's replay from the call's first
/// event, each event once and in order, ending with the call's result (not `-31006`).
fn tail_after_a_graceful_stop(writer: &str) {
    let Some(redis) = Redis::standalone() else { return };
    let mut first = node(&redis, "1", &["--durable-writer", writer]);
    let sid = open_session(&first);
    let body = call(3, "slow_counter", r#"{"steps":10,"delay_ms":10}"#, true);
    let mut stream = call_stream(&first, &sid, &body, &[]);
    let cursor = stream.next_event().expect("the call's first event").id.expect("an id");
    redis.signal("STOP");
    let events = stream.rest();
    assert_eq!(events.last().expect("final").json()["id"], 3, "the call finished");
    drop(stream);
    // Still queued (the store stalls, inside its 1 s answer bound and the 300 ms lease) as
    // the stop begins, and the drain (no call runs) ends before the store answers again.
    first.signal("TERM");
    std::thread::sleep(Duration::from_millis(100));
    redis.signal("CONT");
    let exit = first.exit_within(Duration::from_secs(10));
    assert!(exit.is_some_and(|status| status.success()), "a graceful stop: {exit:?}");
    let replayed = replay_on_a_peer(&redis, &sid, &cursor);
    let originals: Vec<String> = events.iter().map(|e| e.data.clone()).collect();
    let replays: Vec<String> = replayed.iter().map(|e| e.data.clone()).collect();
    assert_eq!(replays, originals, "the whole tail, the very bytes the node sent");
    let last = replayed.last().expect("final").json();
    assert!(last.get("result").is_some(), "the finished call's result, not -31006: {last}");
}

#[test]
fn a_graceful_stop_of_the_mirror_thread_writes_the_queued_tail_a_peer_then_replays_whole() {
    // Goal: with the thread's writer (--durable-writer thread) a graceful stop writes the
    // records still queued before the lease stops being renewed (`tail_after_a_graceful_stop`).
    tail_after_a_graceful_stop("thread");
}

#[test]
fn a_graceful_stop_with_each_core_writing_writes_the_queued_tail_a_peer_then_replays_whole() {
    // Goal: the same with --durable-writer core: each core's writer writes its queue after the
    // drain and before the process ends (`CoreTap::write_queued_at_stop`).
    tail_after_a_graceful_stop("core");
}

/// `TRIM_SLACK_ENTRIES` (src/durable/store.rs): `tm:ev` entries the ring no longer needs that a
/// session may keep in the store before they are trimmed.
const TRIM_SLACK_ENTRIES: u64 = 32;

#[test]
fn the_store_trims_events_the_ring_evicted_within_the_trim_slack_and_a_peer_replays_exactly() {
    // Goal: Redis memory follows the ring (issue 20: "bounded by the same limits as the
    // node's"), trimmed in steps of `TRIM_SLACK_ENTRIES` rather than at every eviction, and
    // the extra entries a peer reads do not change what it replays. Method: a 16-event ring,
    // 600 events written one per batch (so one entry each): the store never holds more than the
    // ring, the slack and the entry holding the ring's oldest event; then the node dies and a
    // peer resumes from a cursor inside the ring: exactly the events after it, once, in order.
    let Some(redis) = Redis::standalone() else { return };
    let ring = 16;
    let extra = ["--replay-events", "16", "--durable-batch-bytes", "1"];
    let first = node(&redis, "1", &extra);
    let sid = open_session(&first);
    for id in 1..=6 {
        let body = call(id, "slow_counter", r#"{"steps":98,"delay_ms":1}"#, true);
        let events = call_stream(&first, &sid, &body, &[]).rest();
        assert_eq!(events.last().expect("final").json()["id"], id, "call {id} finished");
    }
    let body = call(7, "slow_counter", r#"{"steps":40,"delay_ms":40}"#, true);
    let mut stream = call_stream(&first, &sid, &body, &[]);
    let mut cursor = String::new();
    for _ in 0..8 {
        cursor = stream.next_event().expect("an event before the cut").id.expect("an id");
    }
    let drained = queues_drained(&first);
    assert!(drained, "the mirror took every queued record");
    std::thread::sleep(Duration::from_millis(100));
    let entries = event_entries(&redis, &sid);
    assert!(
        (ring..=ring + TRIM_SLACK_ENTRIES + 1).contains(&entries),
        "{entries} tm:ev entries for a {ring}-event ring after 600 events"
    );
    drop(stream);
    drop(first);
    let peer = node(&redis, "2", &extra);
    std::thread::sleep(Duration::from_millis(400)); // past the 300 ms lease
    let mut resumed = resume(&peer, &sid, &cursor);
    assert_eq!(resumed.status, 200, "the peer adopts the session");
    let events = resumed.rest();
    let (_, _, after) = split_event_id(&cursor).expect("cursor");
    let seqs = sequence_numbers(&events);
    assert_eq!(seqs.first(), Some(&(after + 1)), "the replay starts right after the cursor");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gap-free and in order: {seqs:?}");
    let last = events.last().expect("final").json();
    assert_eq!(last["id"], 7, "{last}");
    assert_eq!(last["error"]["code"], -31006, "the running call's outcome is unknown: {last}");
}

#[test]
fn a_tools_burst_of_events_is_mirrored_as_a_few_gathered_records_and_a_peer_replays_it_exactly() {
    // Goal: the events a tool appends within one poll are queued as packed runs of at most
    // `RUN_EVENTS_MAX` (256) events, not one record each, and a peer reading those runs back
    // replays exactly what the ring held. Method: slow_counter with 600 steps and no delay (one
    // poll); the store's record count for the call stays small; then the node dies and a peer
    // resumes from a cursor in the middle of the burst: every later event, once, in order, then
    // the call's result (it finished before the crash).
    let Some(redis) = Redis::standalone() else { return };
    let first = node(&redis, "1", &[]);
    let sid = open_session(&first);
    let written = || metric(&scrape(&first.metrics()), "tidemark_durable_records_written_total");
    let drained = || queues_drained(&first);
    assert!(drained(), "the mirror took the session's first image");
    std::thread::sleep(Duration::from_millis(100));
    let before = written();
    let body = call(1, "slow_counter", r#"{"steps":600,"delay_ms":0}"#, true);
    let events = call_stream(&first, &sid, &body, &[]).rest();
    assert_eq!(events.len(), 602, "priming, 600 progress, result");
    assert!(drained(), "the mirror took every queued record");
    std::thread::sleep(Duration::from_millis(100));
    let records = written() - before;
    assert!(records <= 8, "{records} records for a 600-event burst (runs of 256, not one each)");
    let cursor = events[300].id.clone().expect("an id");
    drop(first);
    let replayed = replay_on_a_peer(&redis, &sid, &cursor);
    assert_eq!(replayed.len(), 301, "events 301..600 and the result");
    let originals: Vec<String> = events[301..].iter().map(|e| e.data.clone()).collect();
    let replays: Vec<String> = replayed.iter().map(|e| e.data.clone()).collect();
    assert_eq!(replays, originals, "the peer replays the very bytes the node sent");
    let last = replayed.last().expect("final").json();
    assert_eq!(last["id"], 1, "{last}");
    assert!(last.get("result").is_some(), "the finished call's result: {last}");
}

#[test]
fn a_stream_evicted_for_room_leaves_the_store_with_the_record_that_replaced_it() {
    // Goal: the removal a new stream's eviction causes travels with that stream's first record
    // (`Record::Event::gone`) and still reaches the store: the store holds exactly the streams
    // the session holds. Method: a 4-stream session, 12 calls one after the other (each settles
    // before the next opens, so each opening evicts the oldest).
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "1", &["--max-streams-per-session", "4"]);
    let sid = open_session(&server);
    for id in 1..=12 {
        let events = call_stream(&server, &sid, &call(id, "slow_counter", "{}", true), &[]).rest();
        assert_eq!(events.last().expect("final").json()["id"], id, "call {id} finished");
    }
    let drained = queues_drained(&server);
    assert!(drained, "the mirror took every queued record");
    std::thread::sleep(Duration::from_millis(100));
    let held = redis.command(&format!("HLEN {}", store_key("tm:st:", &sid))).unwrap_or_default();
    assert_eq!(held.trim(), ":4", "the store holds the session's 4 streams, no evicted one");
}

/// Batches the store acknowledged (`tidemark_durable_batches_total`) while `calls` calls of
/// `slow_counter` (`steps` events each, `delay_ms` apart) ran one after the other on `server`.
fn batches_during(server: &Server, calls: u64, steps: u64, delay_ms: u64) -> u64 {
    let sid = open_session(server);
    let before = metric(&scrape(&server.metrics()), "tidemark_durable_batches_total");
    for id in 1..=calls {
        let args = format!(r#"{{"steps":{steps},"delay_ms":{delay_ms}}}"#);
        let events = call_stream(server, &sid, &call(id, "slow_counter", &args, true), &[]).rest();
        assert_eq!(events.last().expect("final").json()["id"], id, "call {id} finished");
    }
    let drained = queues_drained(server);
    assert!(drained, "the mirror took every queued record");
    std::thread::sleep(Duration::from_millis(150));
    metric(&scrape(&server.metrics()), "tidemark_durable_batches_total") - before
}

#[test]
fn durable_linger_gathers_records_into_fewer_batches_and_a_waiting_call_cuts_it_short() {
    // Goal: --durable-linger-us at its limit (100000; one more is refused: the cli tests) and
    // at 0. Method: the same calls (their
    // 20 events 5 ms apart) on a node that writes at once and on one that lingers 100 ms:
    // at once, about a batch per event; lingering, a few per call. Each call is
    // non-idempotent, so it waits for its record (write-ahead, here at most 50 ms): with a
    // 100 ms linger it would wait out that bound unless the wait cuts the linger short, and
    // every one would be counted unprotected.
    let Some(redis) = Redis::standalone() else { return };
    let at_once = node(&redis, "1", &["--durable-linger-us", "0"]);
    let unlingered = batches_during(&at_once, 3, 20, 5);
    drop(at_once);
    let lingering =
        node(&redis, "2", &["--durable-linger-us", "100000", "--durable-write-ahead-ms", "50"]);
    let lingered = batches_during(&lingering, 3, 20, 5);
    // At once is "about a batch per event" on a quiet machine; on a loaded one the mirror
    // falls behind by more than 5 ms and events written at once share batches too (asking 45
    // for the three calls failed once beside the full suite), so the bound is half a batch
    // per event and twice the lingering count.
    assert!(unlingered >= 3 * 10, "{unlingered} batches for 60 events written at once");
    assert!(lingered <= 3 * 5, "{lingered} batches for 60 events with a 100 ms linger");
    assert!(unlingered >= 2 * lingered, "{unlingered} at once against {lingered} lingering");
    let text = scrape(&lingering.metrics());
    assert_eq!(
        metric(&text, "tidemark_durable_write_ahead_unprotected_total"),
        0,
        "every waiting call's record was written inside its 50 ms bound"
    );
    assert_eq!(metric(&text, "tidemark_durable_sessions_not_durable"), 0);
}

#[test]
fn a_forged_id_of_another_node_costs_one_store_lookup_a_second() {
    // Goal: issue 38's "every forged session id of another node costs one store command":
    // the same unknown id twice within `MISS_TTL` (1 s) asks the store once (the second is
    // answered from the core's negative cache, counted `cached_absent`), both 404; once the
    // second is over, it is asked again. Method: node 2 and an id of node 1 the store never
    // held; the adoption outcomes on /metrics count the store's answers.
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "2", &[]);
    let forged = format!("010000{}", "ab".repeat(16));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let outcomes = || {
        let text = scrape(&server.metrics());
        let count = |o: &str| {
            metric(&text, &format!("tidemark_durable_adoptions_total{{outcome=\"{o}\"}}"))
        };
        (count("absent"), count("cached_absent"))
    };
    for attempt in 0..5 {
        let (absent, cached) = outcomes();
        let started = Instant::now();
        // The miss is remembered from the store's answer, before the first 404 returns: a
        // second from here is a second after it (the lookup may take long on a loaded machine).
        let mut first_answered = started;
        for i in 0..2 {
            let r = post(&server, &[("Mcp-Session-Id", &forged)], ping);
            assert_eq!(r.status, 404, "{}", r.text());
            if i == 0 {
                first_answered = Instant::now();
            }
        }
        if started.elapsed() >= Duration::from_millis(800) {
            eprintln!("attempt {attempt}: two requests took {:?}; again", started.elapsed());
            std::thread::sleep(Duration::from_millis(1100));
            continue;
        }
        assert_eq!(outcomes(), (absent + 1, cached + 1), "one store lookup for two requests");
        // Elapsed time is what is tested here: the miss is forgotten after a second.
        std::thread::sleep(Duration::from_millis(1100).saturating_sub(first_answered.elapsed()));
        let r = post(&server, &[("Mcp-Session-Id", &forged)], ping);
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(outcomes(), (absent + 2, cached + 1), "asked again after a second");
        return;
    }
    panic!("no two requests within 800 ms in five attempts");
}

#[test]
fn a_forged_task_id_costs_one_store_lookup_a_second_per_core() {
    // Goal: the same rule for 2026-07-28 `tasks/get` of a task this node does not hold (each
    // was asked of the store): within `MISS_TTL` (1 s) an unknown id costs each core one store
    // lookup, whatever the number of requests, all not found; after the second, it is asked
    // again. A task request is served on the core that accepted its connection (no hand-off,
    // unlike a session id), so the bound is one lookup per core. Method: node 2 (two cores)
    // and a task id the store never held, six requests on fresh connections;
    // `tidemark_durable_task_lookups_total` counts the store's answers.
    const REQUESTS: u64 = 6;
    const CORES: u64 = 2;
    let Some(redis) = Redis::standalone() else { return };
    let server = node(&redis, "2", &[]);
    let forged = serde_json::json!({ "taskId": format!("01{}", "cd".repeat(16)) });
    let outcomes = || {
        let text = scrape(&server.metrics());
        let count = |o: &str| {
            metric(&text, &format!("tidemark_durable_task_lookups_total{{outcome=\"{o}\"}}"))
        };
        (count("absent"), count("cached_absent"))
    };
    let unknown = || {
        let (_, m) = modern_with_tasks(&server, "tasks/get", forged.clone(), &[]);
        assert!(m.get("error").is_some(), "a forged task id is unknown: {m}");
    };
    for attempt in 0..5 {
        let (absent, cached) = outcomes();
        let started = Instant::now();
        (0..REQUESTS).for_each(|_| unknown());
        if started.elapsed() >= Duration::from_millis(800) {
            eprintln!("attempt {attempt}: {REQUESTS} requests took {:?}; again", started.elapsed());
            std::thread::sleep(Duration::from_millis(1100));
            continue;
        }
        let (asked, answered) = outcomes();
        let (asked, answered) = (asked - absent, answered - cached);
        assert_eq!(asked + answered, REQUESTS, "every request counted once");
        assert!(asked <= CORES, "{asked} store lookups for {REQUESTS} requests on {CORES} cores");
        // Elapsed time is what is tested here: the miss is forgotten after a second.
        std::thread::sleep(Duration::from_millis(1100).saturating_sub(started.elapsed()));
        unknown();
        assert_eq!(outcomes().0, absent + asked + 1, "asked again after a second");
        return;
    }
    panic!("no {REQUESTS} requests within 800 ms in five attempts");
}

/// One racer's outcome: the status of its last resume and, when it adopted (200), the events
/// it served.
type RaceOutcome = (u16, Vec<Event>);

/// Resumes `sid` after `cursor` on `node` from the moment `go` opens until it adopts (200) or,
/// once another racer has (`won`), until it answers as for another node's session: a 503 says
/// the owner's (or the winner's) lease is alive, so it asks again every 10 ms meanwhile.
fn race_to_adopt(
    node: &Server,
    sid: &str,
    cursor: &str,
    go: &std::sync::Barrier,
    won: &std::sync::atomic::AtomicBool,
) -> RaceOutcome {
    use std::sync::atomic::Ordering;
    go.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = resume(node, sid, cursor);
        match s.status {
            200 => {
                won.store(true, Ordering::SeqCst);
                return (200, s.rest());
            }
            503 if !won.load(Ordering::SeqCst) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            status => return (status, Vec::new()),
        }
    }
}

/// Loops calls of `echo` on a session of its own on `node` until `stop`: load on a node
/// during the race. Returns how many calls it completed.
fn echo_load(node: &Server, stop: &std::sync::atomic::AtomicBool) -> u64 {
    let sid = open_session(node);
    let mut done = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let r = post(
            node,
            &[("Mcp-Session-Id", &sid)],
            &call(done + 1, "echo", r#"{"text":"x"}"#, false),
        );
        assert_eq!(r.status, 200, "load on a live node: {}", r.text());
        done += 1;
    }
    done
}

/// The race after the owner's pause, decided and checked: the paused owner, the two peers,
/// the session, the client's cursor and which peer adopted.
struct Race {
    owner: Server,
    peers: [Server; 2],
    sid: String,
    cursor: String,
    winner: usize,
}

/// Node 1 streams a session's call under load (three other streaming sessions), its client
/// reads 20 steps and stops reading; nodes 2 and 3 are up and loaded; node 1 is paused
/// (SIGSTOP) and both peers race for the session (`race_to_adopt`). Asserts one adopter, the
/// other answering as for another node's session, and every step once, in order, across the
/// cut, then -31006.
fn race_after_pause(redis: &Redis) -> Race {
    use std::sync::atomic::AtomicBool;
    use std::sync::Barrier;
    let owner = node(redis, "1", &[]);
    let peers = [node(redis, "2", &[]), node(redis, "3", &[])];
    for i in 0..3 {
        let sid = open_session(&owner);
        let body = call(100 + i, "slow_counter", r#"{"steps":400,"delay_ms":5}"#, true);
        let mut other = call_stream(&owner, &sid, &body, &[]);
        // Read on (it ends when the owner is killed): the owner's writer stays busy.
        std::thread::spawn(move || other.rest());
    }
    let sid = open_session(&owner);
    let body = call(7, "slow_counter", r#"{"steps":200,"delay_ms":10}"#, true);
    let mut stream = call_stream(&owner, &sid, &body, &[]);
    let mut cursor = read_priming(&mut stream, "owner");
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let ev = stream.next_event().expect("progress before the pause");
        cursor = ev.id.clone().expect("an id");
        seen.extend(progress_of(&ev));
    }
    // The client stops reading; the call streams on and the mirror keeps writing.
    std::thread::sleep(Duration::from_millis(150));
    let (stop, won, go) = (AtomicBool::new(false), AtomicBool::new(false), Barrier::new(2));
    let (outcomes, loads) = std::thread::scope(|scope| {
        let loads: Vec<_> = peers.each_ref().map(|n| scope.spawn(|| echo_load(n, &stop))).into();
        let stopping = SetOnDrop(&stop);
        owner.signal("STOP");
        let racers: Vec<_> = peers
            .each_ref()
            .map(|n| scope.spawn(|| race_to_adopt(n, &sid, &cursor, &go, &won)))
            .into();
        let outcomes: Vec<RaceOutcome> =
            racers.into_iter().map(|r| r.join().expect("racer")).collect();
        drop(stopping);
        let loads: Vec<u64> = loads.into_iter().map(|l| l.join().expect("load")).collect();
        (outcomes, loads)
    });
    drop(stream);
    let statuses: Vec<u16> = outcomes.iter().map(|o| o.0).collect();
    let winners: Vec<usize> = (0..2).filter(|&i| statuses[i] == 200).collect();
    assert_eq!(winners.len(), 1, "exactly one peer adopts: {statuses:?}");
    let winner = winners[0];
    assert!(
        matches!(statuses[1 - winner], 404 | 503),
        "the other as for another node's: {statuses:?}"
    );
    assert!(loads.iter().all(|&n| n > 0), "the peers served their own load: {loads:?}");
    let events = &outcomes[winner].1;
    let (_, _, after) = split_event_id(&cursor).expect("cursor");
    let seqs = sequence_numbers(events);
    assert_eq!(seqs.first(), Some(&(after + 1)), "the replay starts right after the cursor");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gap-free and in order: {seqs:?}");
    let last = events.last().expect("final").json();
    assert_eq!(last["error"]["code"], -31006, "{last}");
    assert_eq!(last["id"], 7, "{last}");
    seen.extend(events.iter().filter_map(progress_of));
    let want: Vec<u64> = (1..=seen.len() as u64).collect();
    assert_eq!(seen, want, "every step once, in order, across the cut");
    assert!(seen.len() > 20, "the replay carried steps the client had not read");
    let adopted = |n: &Server| {
        metric(&scrape(&n.metrics()), "tidemark_durable_adoptions_total{outcome=\"adopted\"}")
    };
    assert_eq!(peers.iter().map(adopted).sum::<u64>(), 1, "one adoption in all");
    Race { owner, peers, sid, cursor, winner }
}

#[test]
fn two_live_peers_race_to_adopt_a_paused_owners_streaming_session_one_adopts_nothing_lost_or_doubled(
) {
    // Goal (issue 38, fault tests): what the first race test did not try. Both peers are up
    // and loaded before the owner stops; the owner is paused (SIGSTOP), not killed, so its
    // lease expires while its process and sockets live; the session is streaming under load
    // when it stops; both peers ask for it from the same instant and again every 10 ms while
    // the lease is alive, so they meet the expiry together. Method: `race_after_pause`, whose
    // assertions are the goal's; then the owner is killed.
    let Some(redis) = Redis::standalone() else { return };
    let race = race_after_pause(&redis);
    race.owner.signal("KILL");
}

#[test]
fn a_paused_owner_that_resumes_after_its_session_was_adopted_writes_nothing_more_into_it() {
    // Goal: the owner of the race above is only paused; when it resumes (SIGCONT) after a peer
    // adopted its session, the store's copy of that session must stay the adopter's: no more
    // events of the old owner's call, which a later adopter would replay after the -31006
    // (on 8a39e1d: 1 entry became 136 within the 1.5 s). The batch the owner had sent as it
    // stopped may still land: at most one entry more.
    // Method: `race_after_pause`, the entries of `tm:ev:SID` counted, SIGCONT, 1.5 s (elapsed
    // time is what is tested: the old owner's mirror renews and writes within it), counted
    // again, and the adopter's replay from the same cursor compared.
    let Some(redis) = Redis::standalone() else { return };
    let race = race_after_pause(&redis);
    let entries = || redis.command(&format!("XLEN {}", store_key("tm:ev:", &race.sid)));
    let before = entries();
    race.owner.signal("CONT");
    std::thread::sleep(Duration::from_millis(1500));
    let owner = redis.command(&format!("HGET {} owner", store_key("tm:s:", &race.sid)));
    let winner_id = if race.winner == 0 { "2" } else { "3" };
    assert_eq!(owner, Some(format!("$1|{winner_id}")), "the adopter still owns it");
    let count = |reply: Option<String>| {
        reply.and_then(|r| r.trim_start_matches(':').parse::<u64>().ok()).expect("XLEN")
    };
    let (before, after) = (count(before), count(entries()));
    assert!(
        after <= before + 1,
        "the resumed old owner wrote into the adopted session: {before} -> {after}"
    );
    let owner_log = scrape(&race.owner.metrics());
    assert_eq!(metric(&owner_log, "tidemark_durable_up"), 1, "the resumed owner's mirror is up");
    let mut again = resume(&race.peers[race.winner], &race.sid, &race.cursor);
    assert_eq!(again.status, 200);
    let last = again.rest().last().expect("final").json();
    assert_eq!(last["error"]["code"], -31006, "{last}");
    race.owner.signal("KILL");
}
