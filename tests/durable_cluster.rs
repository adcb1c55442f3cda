//! The durable mirror on a Redis Cluster, black-box against real `redis-server`s
//! (`--durable redis+cluster://…`, `--durable-replicas 1`, CONTRACT §10, issue 41 item 2):
//! three primaries with a replica each (`redis-cli --cluster create`), sessions spread over
//! every shard, a primary SIGKILLed and its replica promoted, the node's mirror writes resumed
//! on the promoted replica (a failover counted), and the node SIGKILLed and its sessions
//! adopted by a peer through the cluster: no acknowledged event lost; then a paused owner's
//! session adopted across shards (the lease's claims), the owner resumed writing nothing more.
//!
//! Needs Debian's `redis-server` (and its `redis-cli`) on PATH: skipped loudly without it, unless
//! `TIDEMARK_REQUIRE_REDIS=1` (the README's test command sets it).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::redis::{free_port, have_redis, scratch_dir, store_key, Redis};
use support::*;

/// `cluster-node-timeout`: a dead primary is failed over by its replica in about twice this.
const NODE_TIMEOUT_MS: &str = "1000";
/// Sessions opened: spread over three shards by their ids, every shard holds some (the
/// chance that one holds none is 3 × (2/3)^24 ≈ 2e-4, and the test says so if it happens).
const SESSIONS: usize = 24;
/// Progress steps of each call.
const STEPS: u64 = 3;

/// Six cluster-enabled servers made three primaries with a replica each (or three alone).
struct Cluster {
    /// The nodes' `nodes.conf` files and RDB files (one per cluster: the tests run at once).
    dir: std::path::PathBuf,
    nodes: Vec<Redis>,
    /// Each node's cluster bus port.
    buses: Vec<u16>,
}

/// Cluster node `index` on `port`, its cluster bus on `bus` (given: the default, `port` + 10000,
/// is past 65535 for an ephemeral port above 55535).
fn cluster_node(dir: &std::path::Path, index: usize, port: u16, bus: u16) -> Redis {
    let conf = dir.join(format!("nodes-{index}.conf"));
    let conf = conf.to_str().expect("utf-8 path").to_owned();
    Redis::start_on(
        port,
        &[],
        &[
            // A replica's RDB file lands here, not in the test's working directory.
            "--dir",
            dir.to_str().expect("utf-8 path"),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &conf,
            "--cluster-port",
            &bus.to_string(),
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
        ],
    )
}

impl Cluster {
    /// Three primaries with `replicas` (0 or 1) each.
    fn create(replicas: usize) -> Cluster {
        let count = 3 * (1 + replicas);
        let dir = scratch_dir();
        let buses: Vec<u16> = (0..count).map(|_| free_port()).collect();
        let nodes: Vec<Redis> =
            (0..count).map(|i| cluster_node(&dir, i, free_port(), buses[i])).collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(
            ["--cluster-replicas", &replicas.to_string(), "--cluster-yes"].map(String::from),
        );
        let out = Command::new("redis-cli").args(&args).output().expect("redis-cli");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let cluster = Cluster { dir, nodes, buses };
        wait_until(Duration::from_secs(30), "the cluster ok, every replica in sync", || {
            cluster
                .nodes
                .iter()
                .all(|n| n.command("CLUSTER INFO").is_some_and(|i| i.contains("cluster_state:ok")))
                && cluster.replica_count() == 3 * replicas
        });
        cluster
    }

    /// `ROLE` of node `i` (`*3|$6|master|…` or `*5|$5|slave|$9|127.0.0.1|:PORT|…`).
    fn role(&self, i: usize) -> String {
        self.nodes[i].command("ROLE").unwrap_or_default()
    }

    fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.role(i).contains("master")).collect()
    }

    /// Replicas whose link to their primary is up.
    fn replica_count(&self) -> usize {
        (0..self.nodes.len()).filter(|&i| self.role(i).contains("|connected|")).count()
    }

    /// The replica of primary `p`.
    fn replica_of(&self, p: usize) -> usize {
        let port = format!("|:{}|", self.nodes[p].port);
        (0..self.nodes.len())
            .find(|&i| self.role(i).contains("slave") && self.role(i).contains(&port))
            .expect("each primary has a replica")
    }

    /// The primary holding session `sid`'s keys and what `line` answers there (`KEY` in it: the
    /// session's record).
    fn on_session(&self, sid: &str, line: &str) -> Option<(usize, String)> {
        self.on_key(&store_key("tm:s:", sid), line)
    }

    /// The primary holding `key` and what `line` answers there (`KEY` in it: `key`).
    fn on_key(&self, key: &str, line: &str) -> Option<(usize, String)> {
        self.primaries().into_iter().find_map(|p| {
            let answer = self.nodes[p].command(&line.replace("KEY", key))?;
            (!answer.starts_with("-MOVED")).then_some((p, answer))
        })
    }
}

/// `--durable-claims-ttl-ms` of the nodes that wait for a replica: far under the 60 s default,
/// so a claim's time to live in the store shows the flag reached the script.
const CLAIMS_TTL_MS: u64 = 20_000;

fn node(id: &str, url: &str) -> Server {
    let ttl = CLAIMS_TTL_MS.to_string();
    node_with(id, url, &["--durable-replicas", "1", "--durable-claims-ttl-ms", &ttl])
}

fn node_with(id: &str, url: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--node-id", id, "--threads", "2", "--durable", url];
    args.extend([
        "--durable-lease-ms",
        "300",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tools",
        "demo",
    ]);
    args.extend(extra);
    let server = Server::start(&args);
    wait_until(Duration::from_secs(15), "the mirror connected to the cluster", || {
        metric(&scrape(&server.metrics()), "tidemark_durable_up") == 1
    });
    server
}

/// Starts a call of `STEPS` progress steps on `sid` and reads its first progress event: the
/// client's cursor (the call runs on to its result, which the client never reads).
fn start_call(server: &Server, sid: &str, id: u64) -> String {
    // Each call its own params: the same params again would be a retry of the first call, owed
    // to the client (refused 409).
    let args = format!(r#"{{"steps":{STEPS},"delay_ms":{}}}"#, 20 + id);
    let body = call(id, "slow_counter", &args, true);
    let mut stream = call_stream(server, sid, &body, &[]);
    loop {
        let event = stream.next_event().expect("a progress event");
        if progress_of(&event).is_some() {
            return event.id.expect("an id");
        }
    }
}

fn queues_drained(server: &Server) -> bool {
    let text = scrape(&server.metrics());
    metric(&text, "tidemark_durable_queue_records") == 0
}

/// Events a resume at `cursor` of call `id` lacks: the progress after the cursor's and the
/// result (0 when the peer replays the call's rest whole, in order, ending with its result).
fn lost_after(peer: &Server, sid: &str, cursor: &str, id: u64) -> u64 {
    let mut stream = resume(peer, sid, cursor);
    if stream.status != 200 {
        eprintln!("resume of {sid} at {cursor}: {}", stream.status);
        return STEPS;
    }
    let events = stream.rest();
    let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
    let expected: Vec<u64> = (2..=STEPS).collect();
    let results = events.iter().filter(|e| {
        let json = e.json();
        json["id"] == id && json.get("result").is_some()
    });
    let missing = expected.iter().filter(|p| !progress.contains(p)).count() as u64;
    let result_missing = u64::from(results.count() != 1);
    if missing + result_missing > 0 {
        eprintln!("{sid} call {id} at {cursor}: progress {progress:?}, {} events", events.len());
    }
    missing + result_missing
}

#[test]
fn sessions_on_every_shard_survive_a_primarys_death_and_a_nodes_death_with_nothing_acknowledged_lost(
) {
    // Goal: issue 41 item 2 against the real thing. Sessions spread over every shard, each a
    // call started and cut after its first progress event (it runs on to its result); a
    // primary SIGKILLed: its replica is promoted, the node finds it (a failover counted) and
    // writes on (as many sessions again, each a call); the killed server started again rejoins as the new primary's replica (with
    // --durable-replicas 1 a shard without a replica takes no batch); then the node is
    // SIGKILLed and a peer adopts every session through the cluster. Counted: acknowledged
    // events lost (each call's rest after the client's cursor, replayed by the peer) = 0.
    if !have_redis() {
        return;
    }
    let began = Instant::now();
    let mut cluster = Cluster::create(1);
    let seeds: Vec<String> =
        cluster.nodes[..2].iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    // A dead seed first: the next one is asked for the slot map.
    let url = format!("redis+cluster://127.0.0.1:{},{}", free_port(), seeds.join(","));
    let first = node("1", &url);
    let peer = node("2", &url);
    let sessions: Vec<String> = (0..SESSIONS).map(|_| open_session(&first)).collect();
    let mut cursors: Vec<(String, String, u64)> = Vec::new();
    for sid in &sessions {
        cursors.push((sid.clone(), start_call(&first, sid, 1), 1));
    }
    wait_until(Duration::from_secs(15), "every session durable", || {
        queues_drained(&first)
            && sessions.iter().all(|sid| {
                cluster.on_session(sid, "HGET KEY durable").is_some_and(|(_, d)| d == "$1|1")
            })
    });
    let mut held = vec![0usize; cluster.nodes.len()];
    for sid in &sessions {
        held[cluster.on_session(sid, "EXISTS KEY").expect("a shard").0] += 1;
    }
    let primaries = cluster.primaries();
    eprintln!("sessions per primary: {:?}", primaries.iter().map(|&p| held[p]).collect::<Vec<_>>());
    assert!(primaries.iter().all(|&p| held[p] > 0), "every shard holds sessions: {held:?}");

    let victim = primaries[0];
    let replica = cluster.replica_of(victim);
    let victim_port = cluster.nodes[victim].port;
    cluster.nodes[victim].kill();
    let killed = Instant::now();
    eprintln!("primary :{victim_port} SIGKILLed ({} sessions on it)", held[victim]);
    wait_until(Duration::from_secs(30), "its replica promoted", || {
        cluster.role(replica).contains("master")
    });
    let promoted = killed.elapsed();
    cluster.nodes[victim] = cluster_node(&cluster.dir, victim, victim_port, cluster.buses[victim]);
    wait_until(Duration::from_secs(30), "the node followed the failover", || {
        let text = scrape(&first.metrics());
        metric(&text, "tidemark_durable_failovers_total") >= 1
            && metric(&text, "tidemark_durable_up") == 1
            && cluster.replica_count() == 3
    });
    let followed = killed.elapsed();
    // Sessions of their own: a session that owes its client a call's result holds a new call.
    let after: Vec<String> = (0..SESSIONS).map(|_| open_session(&first)).collect();
    for sid in &after {
        cursors.push((sid.clone(), start_call(&first, sid, 2), 2));
    }
    // Every call has ended on the node (STEPS × 30 ms) and its records are in the store.
    std::thread::sleep(Duration::from_millis(300));
    wait_until(Duration::from_secs(20), "every session durable after the failover", || {
        queues_drained(&first)
            && sessions.iter().chain(&after).all(|sid| {
                cluster.on_session(sid, "HGET KEY durable").is_some_and(|(_, d)| d == "$1|1")
            })
    });
    let durable_again = killed.elapsed();
    let text = scrape(&first.metrics());
    let unreplicated = metric(&text, "tidemark_durable_batches_unreplicated_total");
    let store_errors = metric(&text, "tidemark_durable_store_errors_total");
    drop(first); // SIGKILL
    std::thread::sleep(Duration::from_millis(500)); // past the 300 ms lease
    let lost: u64 =
        cursors.iter().map(|(sid, cursor, id)| lost_after(&peer, sid, cursor, *id)).sum();
    let adopted =
        metric(&scrape(&peer.metrics()), "tidemark_durable_adoptions_total{outcome=\"adopted\"}");
    eprintln!(
        "replica promoted {promoted:?} after the kill, node writing on it {followed:?}, every \
         session durable {durable_again:?}; {unreplicated} unreplicated batches, {store_errors} \
         store errors meanwhile; node 1 SIGKILLed: {adopted} of {} sessions adopted, \
         {} calls resumed, {lost} acknowledged events lost; {:?} in all",
        2 * SESSIONS,
        cursors.len(),
        began.elapsed()
    );
    assert_eq!(adopted, 2 * SESSIONS as u64, "every session adopted by the peer");
    assert_eq!(lost, 0, "no acknowledged event lost");
    a_paused_owner_writes_nothing_into_its_adopted_session(&cluster, &url, &peer);
    let _ = std::fs::remove_dir_all(&cluster.dir);
}

/// The leases across shards (`keys::CLAIM_SCRIPT`, `RENEW_SCRIPT`): node 3 streams a call,
/// is SIGSTOPped past its lease, `peer` adopts its session through the cluster (the claim noted
/// on the lease's shard, the compare-and-set on the session's), node 3 is resumed: its next
/// renewal reads the claim and it writes nothing more into the session (the batch it had sent
/// as it stopped may land: at most one entry), which stays the adopter's.
fn a_paused_owner_writes_nothing_into_its_adopted_session(
    cluster: &Cluster,
    url: &str,
    peer: &Server,
) {
    let owner = node("3", url);
    let sid = open_session(&owner);
    let body = call(7, "slow_counter", r#"{"steps":200,"delay_ms":10}"#, true);
    let mut stream = call_stream(&owner, &sid, &body, &[]);
    let mut cursor = String::new();
    for _ in 0..20 {
        cursor = stream.next_event().expect("progress before the pause").id.expect("an id");
    }
    std::thread::sleep(Duration::from_millis(150));
    owner.signal("STOP");
    std::thread::sleep(Duration::from_millis(500)); // past the 300 ms lease
    let mut adopted = resume(peer, &sid, &cursor);
    assert_eq!(adopted.status, 200, "the peer adopts the paused owner's session");
    let last = adopted.rest().last().expect("a final").json();
    assert_eq!(last["error"]["code"], -31006, "{last}");
    let entries = || {
        let line = format!("XLEN {}", store_key("tm:ev:", &sid));
        let (_, xlen) = cluster.on_session(&sid, &line).expect("its shard");
        xlen.trim_start_matches(':').parse::<u64>().expect("XLEN")
    };
    let before = entries();
    let claims = cluster.on_key("tm:claims:{3}", "PTTL KEY").map(|(_, t)| t).unwrap_or_default();
    let claims_ttl: u64 = claims.trim_start_matches(':').parse().unwrap_or(0);
    eprintln!("the claim on node 3's session lives {claims_ttl} ms more");
    assert!(
        (1..=CLAIMS_TTL_MS).contains(&claims_ttl),
        "the claim noted with --durable-claims-ttl-ms {CLAIMS_TTL_MS}: PTTL {claims}"
    );
    owner.signal("CONT");
    std::thread::sleep(Duration::from_millis(1500));
    let after = entries();
    let held = cluster.on_session(&sid, "HGET KEY owner").map(|(_, o)| o);
    eprintln!("paused owner resumed: tm:ev entries {before} -> {after}, owner {held:?}");
    assert_eq!(held.as_deref(), Some("$1|2"), "the adopter still owns it");
    assert!(after <= before + 1, "the resumed owner wrote into the adopted session");
    drop(stream);
}

/// Adoption outcomes on `server`'s /metrics: (`absent`, `failed`).
fn lookups(server: &Server) -> (u64, u64) {
    let text = scrape(&server.metrics());
    let count =
        |o: &str| metric(&text, &format!("tidemark_durable_adoptions_total{{outcome=\"{o}\"}}"));
    (count("absent"), count("failed"))
}

#[test]
fn a_read_follows_moved_up_to_the_redirect_limit_and_past_it_the_lookup_fails_503() {
    // Goal: --durable-cluster-redirects-max at its limit against a real cluster. Three
    // primaries; a forged id of node 2 is asked of the store by node 1 (limit 0) and node 3
    // (limit 1), so each reader holds a slot map; then the slot of a second forged id moves to
    // another primary (`CLUSTER SETSLOT … NODE`): its old primary answers `MOVED`. Node 3
    // follows the one redirection (the store answers: absent, 404); node 1 may follow none:
    // its lookup fails (503, counted `failed`), the next one reads a fresh map and answers.
    if !have_redis() {
        return;
    }
    let cluster = Cluster::create(0);
    let url = format!("redis+cluster://127.0.0.1:{}", cluster.nodes[0].port);
    let strict = node_with("1", &url, &["--durable-cluster-redirects-max", "0"]);
    let one = node_with("3", &url, &["--durable-cluster-redirects-max", "1"]);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let forged = |n: u32| format!("020000{n:032x}");
    for server in [&strict, &one] {
        let r = post(server, &[("Mcp-Session-Id", &forged(0))], ping);
        assert_eq!(r.status, 404, "{}", r.text());
    }
    let moved = forged(1);
    let (from, _) = cluster.on_session(&moved, "EXISTS KEY").expect("its primary");
    let to = cluster.primaries().into_iter().find(|&p| p != from).expect("another primary");
    let slot = cluster.nodes[from].command(&format!("CLUSTER KEYSLOT {moved}")).expect("slot");
    let slot = slot.trim_start_matches(':');
    let id = cluster.nodes[to].command("CLUSTER MYID").expect("an id");
    let id = id.rsplit('|').next().expect("the id");
    for p in std::iter::once(to).chain(cluster.primaries().into_iter().filter(|&p| p != to)) {
        let set = cluster.nodes[p].command(&format!("CLUSTER SETSLOT {slot} NODE {id}"));
        assert_eq!(set.as_deref(), Some("+OK"), "slot {slot} set on :{}", cluster.nodes[p].port);
    }
    let answer = cluster.nodes[from].command(&format!("EXISTS {}", store_key("tm:s:", &moved)));
    assert!(answer.as_deref().is_some_and(|a| a.starts_with("-MOVED")), "{answer:?}");
    let (absent, failed) = lookups(&one);
    let r = post(&one, &[("Mcp-Session-Id", &moved)], ping);
    assert_eq!(r.status, 404, "limit 1 follows the MOVED: {}", r.text());
    assert_eq!(lookups(&one), (absent + 1, failed), "the store answered through the redirect");
    let (absent, failed) = lookups(&strict);
    let r = post(&strict, &[("Mcp-Session-Id", &moved)], ping);
    eprintln!("limit 0, a MOVED: {} {}", r.status, r.text());
    assert_eq!(r.status, 503, "limit 0 follows no redirection: {}", r.text());
    assert_eq!(lookups(&strict), (absent, failed + 1), "the lookup counted failed");
    let again = forged(2);
    let r = post(&strict, &[("Mcp-Session-Id", &again)], ping);
    assert_eq!(r.status, 404, "a fresh map after the failure: {}", r.text());
    let _ = std::fs::remove_dir_all(&cluster.dir);
}
