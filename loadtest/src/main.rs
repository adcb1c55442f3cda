//! `tidemark-load`: a black-box load generator for MCP Streamable HTTP servers (issue 5).
//!
//! It speaks only the wire protocol, over raw sockets, and imports nothing from the server, so
//! tidemark and the rmcp peer (`loadtest/peer-rmcp`) are measured the same way.
//!
//! Module map (a module may use the ones below it):
//! - `main`: flags, scenario set-up, the run report's printing and writing.
//! - `report`, `plot`: medians over repeated runs, markdown, SVG percentile plots.
//! - `scenario/`: `calls` (ping, echo, stream, modern), `modern` (its request and the watch on
//!   the server), `sessions`, `streams` (N live streams at once), `resume`, `migration`,
//!   `fault`, `flow`.
//! - `engine`: one epoll loop per load thread, closed-loop and fixed-rate schedules.
//! - `client`: blocking connections for set-up and the step-by-step scenarios.
//! - `stats`: histograms, counters, the progress line, `RunReport`.
//! - `wire`, `sse`, `jsonrpc`: HTTP/1.1, `text/event-stream` and JSON-RPC on the wire.
//! - `procfs`: the server's pid, RSS and CPU time.
//! - `stdio_direct`: `stdio-direct`, calls straight to a stdio MCP server (no HTTP), the baseline
//!   of the bridge comparison (`scripts/bridge-compare.sh`).

mod client;
mod engine;
mod jsonrpc;
mod plot;
mod procfs;
mod report;
mod scenario;
mod sse;
mod stats;
mod stdio_direct;
mod tls;
mod wire;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::client::Session;
use crate::engine::{EngineConfig, ThreadResult, Workload};
use crate::scenario::flow::Flow;
use crate::scenario::migration::{ConnectionMode, ResumeWith};
use crate::stats::{Live, RunReport, Series};
use crate::wire::{PostTemplate, Target};

#[derive(Parser, Debug)]
#[command(
    name = "tidemark-load",
    version,
    about = "Load generator for MCP Streamable HTTP servers (tidemark, rmcp, ...)",
    after_help = "Examples:\n  tidemark-load echo --url http://127.0.0.1:8080/mcp --connections 64 --duration 10s\n  \
                  tidemark-load echo --url URL --rate 50000 --json echo.json --plot echo.svg\n  \
                  tidemark-load modern --url URL --connections 64 --rss --metrics-url METRICS_URL\n  \
                  tidemark-load migration --url URL --connections 4 --duration 5s\n  \
                  tidemark-load fault --url URL --calls 2000 --seed 7\n  \
                  tidemark-load report --markdown table.md --ratio tidemark/rmcp runs/*.json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Baseline: JSON-RPC `ping` on established sessions (the bare HTTP path of a server).
    Ping(PingArgs),
    /// `tools/call echo` on established sessions: calls/s and latency.
    Echo(EchoArgs),
    /// `tools/call echo` as stateless 2026-07-28 requests: no initialize, no session, on
    /// keep-alive connections; calls/s and latency, optionally the server's RSS and sessions.
    Modern(ModernArgs),
    /// `tools/call slow_counter` with many steps and no delay: events/s and responses/s.
    Stream(StreamArgs),
    /// Cut a stream after k events, resume with GET + Last-Event-ID: latency by events buffered.
    Resume(ResumeArgs),
    /// Cut a running call; resume directly (a) or re-POST, take the 409, resume (b).
    Migration(MigrationArgs),
    /// Randomized fault test: calls cut at random points, recovered at random; nothing may be
    /// lost, duplicated or executed twice.
    Fault(FaultArgs),
    /// Hold N live streams at once (`slow_counter` calls, E stamped events/s each): every event
    /// once and in order, delivery latency (server emit → client read), server RSS and CPU.
    Streams(StreamsArgs),
    /// Open K idle sessions and report the server's RSS per session.
    Sessions(SessionsArgs),
    /// Baseline without HTTP: spawn a stdio MCP server (--command) and time sequential
    /// `tools/call echo` over its stdin/stdout (one call in flight).
    StdioDirect(StdioDirectArgs),
    /// Fold --json files of repeated runs into medians, a markdown table and a plot.
    Report(ReportArgs),
    /// Draw the latency curves of --json files into one SVG.
    Plot(PlotArgs),
    /// Summarise criterion results (target/criterion) as a markdown table.
    Criterion(CriterionArgs),
}

/// A duration flag: `5s`, `500ms`, `2m`, or plain seconds.
#[derive(Clone, Copy, Debug)]
struct Dur(Duration);

impl std::str::FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Dur, String> {
        let s = s.trim();
        let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = s.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = s.strip_suffix('m') {
            (n, 60.0)
        } else {
            (s, 1.0)
        };
        let value: f64 = number.trim().parse().map_err(|_| format!("not a duration: {s}"))?;
        if !(value >= 0.0 && value.is_finite()) {
            return Err(format!("not a duration: {s}"));
        }
        Ok(Dur(Duration::from_secs_f64(value * scale)))
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

#[derive(Args, Debug, Clone, Serialize)]
struct Common {
    /// The MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/mcp")]
    url: String,
    /// A bearer token sent as `Authorization: Bearer` on every request (a server with
    /// `--auth-tokens`). Never printed: the config line and the JSON report leave it out.
    #[arg(long)]
    #[serde(skip)]
    bearer_token: Option<String>,
    /// Name of the server under test in reports and plots (e.g. tidemark, rmcp).
    #[arg(long, default_value = "server")]
    label: String,
    /// Load threads (engine scenarios); pin them with taskset.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connections (engine scenarios: across all threads; resume/migration/fault: worker
    /// threads). Default: 64 for ping/echo/stream, 16 for sessions and fault, 4 for
    /// resume/migration.
    #[arg(long)]
    connections: Option<usize>,
    /// Sessions the connections share (default: one per connection; 64 for fault, where fewer
    /// sessions than workers means shared sessions). For `sessions`: K, the number of idle
    /// sessions to open (default 10000).
    #[arg(long)]
    sessions: Option<usize>,
    /// Requests in flight per connection (HTTP/1.1 pipelining; engine scenarios).
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Measurement window after the warm-up (for `sessions`: an upper bound, default 300s).
    #[arg(long)]
    duration: Option<Dur>,
    /// Warm-up before measuring (default 1s; 0 for `sessions`).
    #[arg(long)]
    warmup: Option<Dur>,
    /// Fixed rate, operations per second across all threads (open loop, latency measured from
    /// the schedule: corrected for coordinated omission). Without it: closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Stop after this many operations (ping/echo/stream), or at the end of --duration,
    /// whichever comes first. With --warmup 0 every operation is measured (callgrind.sh).
    #[arg(long)]
    requests: Option<u64>,
    /// A request without a complete answer after this long counts as a timeout.
    #[arg(long, default_value = "10s")]
    timeout: Dur,
    /// Write the run report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write an HDR percentile plot of the run's latencies as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
    /// PEM file of the CA that signed an https:// server's certificate (trusted alone).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Every operation on a new connection, closed after its answer (engine scenarios, with
    /// --pipeline 1): measures connection set-up, a TLS handshake on https://.
    #[arg(long)]
    new_connection: bool,
    /// With --rate: sleep in epoll until each due time instead of spinning through its last
    /// millisecond. Sends go out up to ~1 ms late (charged to their latency), and the load
    /// thread mostly sleeps: for several load processes beside the server (scripts/soak.sh).
    #[arg(long)]
    coarse_pacing: bool,
}

#[derive(Args, Debug)]
struct PingArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct EchoArgs {
    #[command(flatten)]
    common: Common,
    /// Length of the echoed text.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
    /// The tool called with `{text}`: another name for an echo, e.g. a bridged upstream's
    /// `up__echo` beside the built-in one (scripts/soak.sh).
    #[arg(long, default_value = "echo")]
    tool: String,
}

#[derive(Args, Debug)]
struct ModernArgs {
    #[command(flatten)]
    common: Common,
    /// Length of the echoed text.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
    /// Sample the server's RSS over the run (every --rss-every; the process listening on the
    /// URL's port, or --server-pid).
    #[arg(long)]
    rss: bool,
    /// The server's pid for --rss (default: the process listening on the URL's port).
    #[arg(long)]
    server_pid: Option<u32>,
    #[arg(long, default_value = "1s")]
    rss_every: Dur,
    /// The server's Prometheus endpoint (tidemark `--metrics-listen`): sessions active after the
    /// run, and sessions created, modern requests and connections over it (`server.*`); any
    /// session created fails the run.
    #[arg(long)]
    metrics_url: Option<String>,
}

#[derive(Args, Debug)]
struct StreamArgs {
    #[command(flatten)]
    common: Common,
    /// Progress notifications per call.
    #[arg(long, default_value_t = 100)]
    steps: u32,
}

#[derive(Args, Debug)]
struct ResumeArgs {
    #[command(flatten)]
    common: Common,
    /// Events left buffered at the server when the client resumes (cycled per iteration).
    /// `--cut-after` + each value must stay within the demo tool's 1000 steps.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,500")]
    buffered: Vec<u64>,
    /// Message events the client reads before it cuts the stream.
    #[arg(long, default_value_t = 1)]
    cut_after: u64,
    /// How to cut: close (FIN) or reset (RST).
    #[arg(long, value_enum, default_value = "fin")]
    cut: CutHow,
}

#[derive(Args, Debug)]
struct MigrationArgs {
    #[command(flatten)]
    common: Common,
    /// Progress notifications of each `slow_counter` call.
    #[arg(long, default_value_t = 8)]
    steps: u64,
    /// Pause per step (ms), so the call is still running at the cut.
    #[arg(long, default_value_t = 1)]
    delay_ms: u64,
    /// Message events the client reads before it cuts the stream.
    #[arg(long, default_value_t = 4)]
    cut_after: u64,
    #[arg(long, value_enum, default_value = "fin")]
    cut: CutHow,
    /// In (b), resume from the 409's hint or from the client's own last event id.
    #[arg(long, value_enum, default_value = "hint")]
    resume_with: ResumeWith,
    /// The connection of the recovery: the worker's kept-alive spare, a fresh one per cut, or
    /// both alternating in one run (each reported on its own).
    #[arg(long, value_enum, default_value = "both")]
    connection: ConnectionMode,
}

#[derive(Args, Debug)]
struct FaultArgs {
    #[command(flatten)]
    common: Common,
    /// Calls to run; each is one `slow_counter` execution the server must perform exactly once.
    /// `--connections` workers (default 16) run them over `--sessions` sessions (default 64).
    #[arg(long, default_value_t = 2000)]
    calls: u64,
    /// Index of the first call: with the same --seed, `--first-call C --calls 1` reruns call C's
    /// random choices alone (a failure's reproduction).
    #[arg(long, default_value_t = 0)]
    first_call: u64,
    /// Seed of the random choices (default: from the clock; printed in the config line).
    #[arg(long)]
    seed: Option<u64>,
    /// Most cuts per call (each call draws 1..=max; 0: no cuts).
    #[arg(long, default_value_t = 3)]
    max_cuts: u32,
    /// Progress notifications of each `slow_counter` call (1..=1000).
    #[arg(long, default_value_t = 8)]
    steps: u64,
    /// Pause per step (ms); a comma list is drawn from per call. 0: the whole answer is written
    /// at once (cuts land after it was sent); > 0: the call is still running at the cut.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    delay_ms: Vec<u64>,
    /// Print the traces of up to this many failed calls, and of as many calls that passed but
    /// were held too long or slow (stderr).
    #[arg(long, default_value_t = 5)]
    traces: usize,
    /// Write every call's trace (each request, its cut, every event id received) to FILE.
    #[arg(long, value_name = "FILE")]
    trace_file: Option<PathBuf>,
    /// The server's Prometheus endpoint (tidemark `--metrics-listen`): how its migration
    /// counters changed over the run is reported as `server.*`.
    #[arg(long)]
    metrics_url: Option<String>,
    /// Two workers per session calling at once, with calls that may be identical (same method
    /// and params, new ids): a 409 -31001 matched by params to the other caller's stream is
    /// answered by re-sending with a fresh Idempotency-Key. Sessions: --connections / 2.
    #[arg(long)]
    concurrent_callers: bool,
    /// Which calls: `legacy` (sessions, built-in `slow_counter`), `modern` (2026-07-28
    /// stateless keyed calls), `bridge-stdio` / `bridge-http` (legacy calls through tidemark's
    /// `--upstream` to the stdio fixture / to an HTTP upstream behind --proxy-listen).
    #[arg(long, value_enum, default_value = "legacy")]
    path: FaultPath,
    /// Bridged paths: one call in N gets an upstream fault mid-call (stdio: its child is
    /// killed; HTTP: the proxy cuts every upstream connection); 0: none.
    #[arg(long, default_value_t = 8)]
    upstream_fault_every: u64,
    /// `bridge-http`: where the cutting proxy listens (tidemark's `--upstream` points here).
    #[arg(long)]
    proxy_listen: Option<std::net::SocketAddr>,
    /// `bridge-http`: the upstream the proxy forwards to (HOST:PORT).
    #[arg(long)]
    proxy_to: Option<std::net::SocketAddr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum FaultPath {
    Legacy,
    Modern,
    BridgeStdio,
    BridgeHttp,
}

#[derive(Args, Debug)]
struct StdioDirectArgs {
    /// Of the common flags only --label, --duration, --warmup, --requests (calls, warm-up
    /// included), --timeout (per call: the server is killed), --json, --plot and --quiet apply.
    #[command(flatten)]
    common: Common,
    /// The stdio server: program and arguments, split on whitespace (as in tidemark's
    /// `--upstream 'stdio:COMMAND ARGS…'`), e.g. `target/release/tidemark-stdio-echo`.
    #[arg(long)]
    command: String,
    /// Length of the echoed text.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
}

#[derive(Args, Debug)]
struct StreamsArgs {
    /// Of the common flags --sessions (default: one per stream), --threads, --duration (the
    /// measured window, default 10s), --warmup (after the ramp, default 1s), --timeout (added to
    /// a call's length), --json, --plot, --quiet and --label apply.
    #[command(flatten)]
    common: Common,
    /// Live streams held at once (one connection and one `slow_counter` call each).
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// Events per second each stream receives (the call's `delay_ms` is 1000 / E, whole ms).
    #[arg(long, default_value_t = 10.0)]
    events_per_s: f64,
    /// The calls start spread evenly over this long, so their events are not in lock-step.
    #[arg(long, default_value = "1s")]
    ramp: Dur,
    /// The server's pid for RSS and CPU (default: the process listening on the URL's port).
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(Args, Debug)]
struct SessionsArgs {
    #[command(flatten)]
    common: Common,
    /// The server's pid (default: the process listening on the URL's port).
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum, Serialize)]
enum CutHow {
    Fin,
    Rst,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// Run reports written by --json.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write the markdown table here (it is printed on stdout too).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write the medians as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one SVG with each group's median run.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[arg(long, default_value = "tidemark-load")]
    title: String,
    /// Add a ratio table between two labels, e.g. `tidemark/rmcp`, or between two scenarios of
    /// each label, e.g. `modern/echo`. May be given more than once.
    #[arg(long)]
    ratio: Vec<String>,
    /// Exit 1 when any run failed its correctness checks.
    #[arg(long)]
    strict: bool,
}

#[derive(Args, Debug)]
struct CriterionArgs {
    /// criterion's output directory.
    #[arg(long, default_value = "target/criterion")]
    dir: PathBuf,
    /// Write the table here too.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PlotArgs {
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "latency by percentile")]
    title: String,
}

fn main() {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("tidemark-load: {e:#}");
            std::process::exit(2);
        }
    }
}

/// The target of `--url`, with `--tls-ca` set up for an https:// one.
fn target_of(common: &Common) -> anyhow::Result<Target> {
    if let Some(ca) = &common.tls_ca {
        tls::configure(ca)?;
    }
    Target::parse(&common.url)
}

/// Runs a command; `Ok(false)` when a run failed its checks.
fn run(command: Command) -> anyhow::Result<bool> {
    let report = match command {
        Command::Ping(a) => {
            calls(&a.common, "ping", jsonrpc::PING_BODY.to_owned(), None, serde_json::json!({}))?
        }
        Command::Echo(a) => {
            let body = jsonrpc::tool_echo_body(&a.tool, &"x".repeat(a.payload_bytes));
            calls(
                &a.common,
                "echo",
                body,
                None,
                serde_json::json!({ "payload_bytes": a.payload_bytes, "tool": a.tool }),
            )?
        }
        Command::Modern(a) => modern(&a)?,
        Command::Stream(a) => {
            let body = jsonrpc::slow_counter_body(u64::from(a.steps), 0);
            calls(
                &a.common,
                "stream",
                body,
                Some(a.steps),
                serde_json::json!({ "steps": a.steps }),
            )?
        }
        Command::Resume(a) => resume(&a)?,
        Command::Migration(a) => migration(&a)?,
        Command::Fault(a) => fault(&a)?,
        Command::Sessions(a) => sessions(&a)?,
        Command::Streams(a) => streams(&a)?,
        Command::StdioDirect(a) => stdio_direct(&a)?,
        Command::Report(a) => return report_command(&a),
        Command::Criterion(a) => {
            let md = report::criterion_table(&a.dir)?;
            if let Some(p) = &a.markdown {
                std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
            }
            print!("{md}");
            return Ok(true);
        }
        Command::Plot(a) => {
            let reports = report::load(&a.files)?;
            let curves = curves_of(&reports, true);
            std::fs::write(&a.out, plot::svg(&a.title, &curves))
                .with_context(|| format!("writing {}", a.out.display()))?;
            return Ok(true);
        }
    };
    Ok(report.ok)
}

fn report_command(a: &ReportArgs) -> anyhow::Result<bool> {
    let reports = report::load(&a.files)?;
    let groups = report::group(&reports);
    let ratios = a
        .ratio
        .iter()
        .map(|r| r.split_once('/').context("--ratio takes A/B"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let md = report::write_outputs(
        &groups,
        a.markdown.as_deref(),
        a.json.as_deref(),
        a.plot.as_deref(),
        &a.title,
        &ratios,
    )?;
    print!("{md}");
    Ok(!a.strict || groups.iter().all(|g| g.ok))
}

fn curves_of(reports: &[RunReport], with_label: bool) -> Vec<plot::Curve> {
    reports
        .iter()
        .flat_map(|r| {
            r.latency.iter().map(move |s| {
                let mut name = if with_label {
                    format!("{} {}", r.label, r.scenario)
                } else {
                    r.scenario.clone()
                };
                if s.name != r.scenario {
                    name = format!("{name} {}", s.name);
                }
                plot::Curve { name, points: s.curve.clone() }
            })
        })
        .collect()
}

/// Prints the config line, runs `body`, prints the table, writes --json and --plot.
fn finish(common: &Common, mut report: RunReport) -> anyhow::Result<RunReport> {
    for (k, v) in report.counters.clone() {
        if k.starts_with("errors.") && v != 0 {
            report.ok = false;
            report.failures.push(format!("{k} = {v}"));
        }
    }
    print!("{}", report.table());
    if let Some(path) = &common.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &common.plot {
        let title = format!("{} — {}", report.scenario, report.label);
        std::fs::write(path, plot::svg(&title, &curves_of(std::slice::from_ref(&report), false)))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

fn print_config(scenario: &str, config: &serde_json::Value) {
    println!("# tidemark-load {} {scenario} {config}", env!("CARGO_PKG_VERSION"));
}

fn config_json(common: &Common, extra: serde_json::Value) -> serde_json::Value {
    let mut config = serde_json::to_value(common).unwrap_or_default();
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    config
}

/// Start, end of warm-up, end of measurement.
fn window(common: &Common, duration: Duration, warmup: Duration) -> (Instant, Instant, Instant) {
    let start = Instant::now() + Duration::from_millis(100);
    let measure_from = start + warmup;
    let _ = common;
    (start, measure_from, measure_from + duration)
}

/// Runs `make(thread)` workloads on `--threads` engine threads over `connections` connections.
fn run_engine<W, F>(
    common: &Common,
    target: &Target,
    connections: usize,
    (start, measure_from, end): (Instant, Instant, Instant),
    make: F,
    progress: (&'static str, &'static str),
) -> anyhow::Result<ThreadResult>
where
    W: Workload + Send + 'static,
    F: Fn(usize) -> W,
{
    let threads = common.threads.clamp(1, connections.max(1));
    let lives: Vec<Arc<Live>> = (0..threads).map(|_| Arc::new(Live::default())).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let printer = (!common.quiet)
        .then(|| stats::spawn_progress(progress.0, progress.1, lives.clone(), stop.clone()));
    let mut handles = Vec::new();
    for (t, live) in lives.iter().enumerate() {
        let cfg = EngineConfig {
            target: target.clone(),
            thread_index: t,
            thread_count: threads,
            connections: connections / threads + usize::from(t < connections % threads),
            pipeline: if common.new_connection { 1 } else { common.pipeline.max(1) },
            rate: common.rate.filter(|r| *r > 0.0).map(|r| r / threads as f64),
            start,
            measure_from,
            end,
            timeout: common.timeout.0,
            new_connection: common.new_connection,
            coarse_pacing: common.coarse_pacing,
        };
        let workload = make(t);
        let live = live.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("load-{t}"))
                .spawn(move || engine::run(cfg, workload, live))?,
        );
    }
    let mut total: Option<ThreadResult> = None;
    let mut first_error = None;
    for h in handles {
        match h.join().map_err(|_| anyhow::anyhow!("a load thread panicked"))? {
            Ok(r) => match &mut total {
                None => total = Some(r),
                Some(t) => {
                    t.hist.add(&r.hist).expect("invariant: same histogram bounds");
                    t.done += r.done;
                    t.events += r.events;
                    t.errors.merge(&r.errors);
                    t.started += r.started;
                    t.backlog_max = t.backlog_max.max(r.backlog_max);
                    t.last_done = t.last_done.max(r.last_done);
                }
            },
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    total.context("no load threads")
}

fn open_sessions(target: &Target, count: usize, timeout: Duration) -> anyhow::Result<Vec<Session>> {
    let started = Instant::now();
    let sessions = client::open_sessions(target, count, timeout)?;
    eprintln!(
        "# opened {count} session(s) in {:.2}s, protocol version {}",
        started.elapsed().as_secs_f64(),
        sessions.first().map_or("?", |s| s.version.as_str())
    );
    Ok(sessions)
}

/// `ping`, `echo`, `stream`.
fn calls(
    common: &Common,
    scenario: &'static str,
    body: String,
    steps: Option<u32>,
    extra: serde_json::Value,
) -> anyhow::Result<RunReport> {
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let connections = common.connections.unwrap_or(64).max(1);
    let session_count = common.sessions.unwrap_or(connections).max(1);
    let duration = common.duration.map_or(Duration::from_secs(5), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    let config = config_json(common, extra);
    print_config(scenario, &config);
    let sessions = open_sessions(&target, session_count, common.timeout.0)?;
    let templates: Vec<PostTemplate> = sessions
        .iter()
        .map(|s| PostTemplate::new(&target, Some(&s.id), &s.version, &body))
        .collect();
    let win = window(common, duration, warmup);
    let report = run_calls(common, scenario, &target, config, templates, steps, win, None)?;
    finish(common, report)
}

/// The engine part of `calls` and `modern`: `templates` on `connections`, over `win`; the
/// report before `finish`.
#[allow(clippy::too_many_arguments)]
fn run_calls(
    common: &Common,
    scenario: &'static str,
    target: &Target,
    config: serde_json::Value,
    templates: Vec<PostTemplate>,
    steps: Option<u32>,
    win: (Instant, Instant, Instant),
    stateless: Option<Arc<scenario::calls::Stateless>>,
) -> anyhow::Result<RunReport> {
    let connections = common.connections.unwrap_or(64).max(1);
    let duration = win.2.duration_since(win.1);
    let unit = if scenario == "stream" { "responses" } else { "calls" };
    let budget =
        common.requests.map(|n| Arc::new(AtomicI64::new(i64::try_from(n).unwrap_or(i64::MAX))));
    let result = run_engine(
        common,
        target,
        connections,
        win,
        |_| {
            let calls = scenario::calls::Calls::new(templates.clone(), steps, budget.clone());
            match &stateless {
                Some(counts) => calls.stateless(counts.clone()),
                None => calls,
            }
        },
        (scenario, unit),
    )?;
    let mut report = RunReport::new(scenario, &common.label, &common.url, config);
    let mut measured = duration.as_secs_f64();
    if let (Some(_), Some(last)) = (common.requests, result.last_done) {
        // A request budget may end the run early: measure up to the last answer.
        measured = measured.min(last.saturating_duration_since(win.1).as_secs_f64()).max(1e-9);
    }
    report.measured_s = measured;
    let rate = result.done as f64 / measured;
    if scenario == "stream" {
        report.throughput.insert("responses_per_s".into(), rate);
        report.throughput.insert("events_per_s".into(), result.events as f64 / measured);
    } else {
        report.throughput.insert("calls_per_s".into(), rate);
    }
    report.latency.push(Series::from_histogram(scenario, &result.hist));
    result.errors.into_counters(&mut report.counters);
    if common.rate.is_some() {
        report.values.insert("backlog_max".into(), result.backlog_max as f64);
    }
    if let Some(counts) = &stateless {
        counts.add_counters(&mut report.counters);
    }
    Ok(report)
}

/// `modern`: stateless `tools/call echo`, no session; with `--rss` and `--metrics-url`, what the
/// server kept over the run.
fn modern(a: &ModernArgs) -> anyhow::Result<RunReport> {
    use scenario::modern;
    let common = &a.common;
    if common.sessions.is_some() {
        bail!("modern opens no sessions: --sessions does not apply");
    }
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let duration = common.duration.map_or(Duration::from_secs(5), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    let config = config_json(
        common,
        serde_json::json!({"payload_bytes": a.payload_bytes,
                           "protocol_version": wire::MODERN_PROTOCOL_VERSION,
                           "rss": a.rss || a.server_pid.is_some(), "rss_every": a.rss_every,
                           "metrics_url": a.metrics_url}),
    );
    print_config("modern", &config);
    let pid = match (a.server_pid, a.rss) {
        (Some(pid), _) => Some(pid),
        (None, true) => Some(procfs::listener_pid(target.addr.port())?),
        (None, false) => None,
    };
    let scrape = |when: &str| match &a.metrics_url {
        Some(url) => scenario::fault::scrape_metrics(url, common.timeout.0)
            .map(Some)
            .with_context(|| format!("reading the server's metrics {when} the run")),
        None => Ok(None),
    };
    let metrics_before = scrape("before")?;
    let rss_before = pid.map(procfs::rss_bytes).transpose()?;
    let sampler = pid.map(|pid| modern::RssSampler::start(pid, a.rss_every.0));
    let win = window(common, duration, warmup);
    let counts = Arc::new(scenario::calls::Stateless::default());
    let templates = vec![modern::template(&target, a.payload_bytes)];
    let run = run_calls(common, "modern", &target, config, templates, None, win, Some(counts));
    let samples = sampler.map(modern::RssSampler::finish);
    let mut report = run?;
    if let (Some(samples), Some(before)) = (&samples, rss_before) {
        eprintln!("{}", modern::rss_line(samples, win.1));
        modern::rss_values(samples, before, (win.1, win.2), &mut report.values);
    }
    report.counters.entry("answers_other".into()).or_insert(0);
    if let (Some(before), Some(after)) = (&metrics_before, scrape("after")?) {
        let get = |m: &std::collections::BTreeMap<String, f64>, k: &str| {
            m.get(k).copied().unwrap_or(0.0) as i64
        };
        for name in modern::SERVER_METRICS {
            let short = name.trim_start_matches("tidemark_");
            if name.ends_with("_total") {
                let delta = get(&after, name) - get(before, name);
                report.counters.insert(format!("server.{short}"), delta);
            } else {
                report.counters.insert(format!("server.{short}_before"), get(before, name));
                report.counters.insert(format!("server.{short}_after"), get(&after, name));
            }
        }
        report.require_zero("server.sessions_created_total");
    }
    finish(common, report)
}

fn flows(
    common: &Common,
    target: &Target,
    workers: usize,
    reset: bool,
) -> anyhow::Result<Vec<Flow>> {
    let count = common.sessions.unwrap_or(workers).max(1);
    Ok(open_sessions(target, count, common.timeout.0)?
        .into_iter()
        .map(|session| Flow { target: target.clone(), session, timeout: common.timeout.0, reset })
        .collect())
}

fn flow_progress(
    common: &Common,
    workers: usize,
    name: &'static str,
    unit: &'static str,
) -> (Vec<Arc<Live>>, Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>) {
    let lives: Vec<Arc<Live>> = (0..workers).map(|_| Arc::new(Live::default())).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let printer =
        (!common.quiet).then(|| stats::spawn_progress(name, unit, lives.clone(), stop.clone()));
    (lives, stop, printer)
}

fn resume(a: &ResumeArgs) -> anyhow::Result<RunReport> {
    let common = &a.common;
    if a.buffered.is_empty() {
        bail!("--buffered needs at least one value");
    }
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let workers = common.connections.unwrap_or(4).max(1);
    let duration = common.duration.map_or(Duration::from_secs(5), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    let config = config_json(
        common,
        serde_json::json!({"buffered": a.buffered, "cut_after": a.cut_after, "cut": a.cut}),
    );
    print_config("resume", &config);
    let flows = flows(common, &target, workers, matches!(a.cut, CutHow::Rst))?;
    let (_, measure_from, end) = window(common, duration, warmup);
    let (lives, stop, printer) = flow_progress(common, workers, "resume", "resumes");
    let settings = scenario::resume::Settings {
        buffered: a.buffered.clone(),
        cut_after: a.cut_after,
        measure_from,
        end,
        rate: common.rate,
    };
    let outcome = scenario::resume::run(flows, workers, settings, lives);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    let outcome = outcome?;
    let mut report = RunReport::new("resume", &common.label, &common.url, config);
    report.measured_s = duration.as_secs_f64();
    let recorded: u64 = outcome.hists.iter().map(|h| h.len()).sum();
    report.throughput.insert("resumes_per_s".into(), recorded as f64 / report.measured_s);
    for (b, h) in a.buffered.iter().zip(&outcome.hists) {
        report.latency.push(Series::from_histogram(&format!("buffered={b}"), h));
    }
    report.counters = outcome.counters;
    report.counters.entry("errors.iteration".into()).or_insert(0);
    for key in ["lost_events", "duplicate_events", "missing_final", "duplicate_final"] {
        report.counters.entry(key.into()).or_insert(0);
        report.require_zero(key);
    }
    if let Some(e) = &outcome.last_error {
        eprintln!("# last iteration error: {e}");
    }
    finish(common, report)
}

fn migration(a: &MigrationArgs) -> anyhow::Result<RunReport> {
    let common = &a.common;
    if a.cut_after == 0 || a.cut_after >= a.steps {
        bail!("--cut-after must be between 1 and --steps - 1");
    }
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let workers = common.connections.unwrap_or(4).max(1);
    let duration = common.duration.map_or(Duration::from_secs(5), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    let config = config_json(
        common,
        serde_json::json!({"steps": a.steps, "delay_ms": a.delay_ms, "cut_after": a.cut_after,
                           "cut": a.cut, "resume_with": a.resume_with,
                           "connection": a.connection}),
    );
    print_config("migration", &config);
    let flows = flows(common, &target, workers, matches!(a.cut, CutHow::Rst))?;
    let probe = flows[0].session.clone();
    let counter_before = client::get_counter(&target, &probe, 1, common.timeout.0)?;
    let (_, measure_from, end) = window(common, duration, warmup);
    let (lives, stop, printer) = flow_progress(common, workers, "migration", "recoveries");
    let settings = scenario::migration::Settings {
        connection: a.connection,
        steps: a.steps,
        delay_ms: a.delay_ms,
        cut_after: a.cut_after,
        resume_with: a.resume_with,
        measure_from,
        end,
        rate: common.rate,
    };
    let outcome = scenario::migration::run(flows, workers, settings, lives);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    let outcome = outcome?;
    // Let calls that were executed a second time finish before reading the counter.
    std::thread::sleep(Duration::from_millis(a.steps * a.delay_ms + 200));
    let counter_after = client::get_counter(&target, &probe, 2, common.timeout.0)?;
    let mut report = RunReport::new("migration", &common.label, &common.url, config);
    report.measured_s = duration.as_secs_f64();
    let recorded: u64 = outcome.modes.iter().map(|t| t.direct.len() + t.via_409.len()).sum();
    report.throughput.insert("recoveries_per_s".into(), recorded as f64 / report.measured_s);
    for t in &outcome.modes {
        migration_series(&mut report, t);
    }
    report.counters = outcome.counters;
    let executions = counter_after as i64 - counter_before as i64;
    let extra = executions - outcome.calls as i64;
    report.counters.insert("calls".into(), outcome.calls as i64);
    report.counters.insert("executions_by_counter".into(), executions);
    report.counters.insert("double_executions_by_counter".into(), extra.max(0));
    report.counters.insert("executions_missing_by_counter".into(), (-extra).max(0));
    let direct = report.counters.get("double_executions").copied().unwrap_or(0);
    report.counters.insert("double_executions".into(), direct.max(extra));
    report.counters.entry("errors.iteration".into()).or_insert(0);
    for key in
        ["lost_events", "duplicate_events", "double_executions", "missing_final", "duplicate_final"]
    {
        report.require_zero(key);
    }
    if let Some(e) = &outcome.last_error {
        eprintln!("# last iteration error: {e}");
    }
    finish(common, report)
}

/// One connection mode's series (a, b, the 409 round trip) and its b − a per percentile.
fn migration_series(report: &mut RunReport, t: &scenario::migration::Timings) {
    let mode = t.mode.name();
    let series = [
        (format!("a: cut→result, GET resume, {mode}"), &t.direct),
        (format!("b: cut→result, re-POST→409→GET, {mode}"), &t.via_409),
        (format!("added round trip (re-POST→409), {mode}"), &t.added),
    ];
    for (name, h) in series {
        report.latency.push(Series::from_histogram(&name, h));
    }
    if t.direct.is_empty() || t.via_409.is_empty() {
        return;
    }
    let key = mode.replace([' ', '-'], "_");
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
        let b = t.via_409.value_at_quantile(q) as f64;
        let a = t.direct.value_at_quantile(q) as f64;
        report.values.insert(format!("{key}.b_minus_a_{name}_us"), (b - a) / 1000.0);
    }
}

fn fault(a: &FaultArgs) -> anyhow::Result<RunReport> {
    use scenario::fault;
    let common = &a.common;
    if !(1..=1000).contains(&a.steps) {
        bail!("--steps must be 1..=1000 (the demo tool's limit)");
    }
    if a.delay_ms.is_empty() || a.delay_ms.iter().any(|d| *d > 10_000) {
        bail!("--delay-ms takes values 0..=10000");
    }
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let workers = common.connections.unwrap_or(16).max(1);
    // Concurrent callers: two workers per session. The modern path has no sessions (one opens
    // for the probe); a bridged stdio session is a child process, so by default one per worker.
    let session_count = if a.concurrent_callers {
        if !workers.is_multiple_of(2) || common.sessions.is_some() || a.path != FaultPath::Legacy {
            bail!("--concurrent-callers takes the legacy path, an even --connections and no --sessions");
        }
        workers / 2
    } else {
        match a.path {
            FaultPath::Modern => 1,
            FaultPath::BridgeStdio => common.sessions.unwrap_or(workers),
            _ => common.sessions.unwrap_or(64),
        }
        .max(1)
    };
    let seed = a.seed.unwrap_or_else(fault::clock_seed);
    let timeout = common.timeout.0;
    let config = config_json(
        common,
        serde_json::json!({"calls": a.calls, "first_call": a.first_call, "seed": seed,
                           "max_cuts": a.max_cuts, "steps": a.steps, "delay_ms": a.delay_ms,
                           "workers": workers, "sessions": session_count, "path": a.path,
                           "upstream_fault_every": a.upstream_fault_every,
                           "concurrent_callers": a.concurrent_callers}),
    );
    print_config("fault", &config);
    // Before any session: a bridged session's initialize goes through the proxy.
    let upstream = fault_upstream(a, &target, timeout)?;
    let sessions = fault::open_sessions(&target, session_count, timeout)?;
    let by_owner = fault::sessions_by_owner(&sessions);
    eprintln!(
        "# opened {session_count} session(s), protocol version {}, by owner: {}",
        sessions[0].version,
        by_owner.iter().map(|(k, v)| format!("{}={v}", &k[15..])).collect::<Vec<_>>().join(" ")
    );
    let probe = fault::open_sessions(&target, 1, timeout)?.remove(0);
    let scrape = |when: &str| match &a.metrics_url {
        Some(url) => fault::scrape_metrics(url, timeout)
            .map(Some)
            .with_context(|| format!("reading the server's metrics {when} the run")),
        None => Ok(None),
    };
    let metrics_before = scrape("before")?;
    let counter_before = client::get_counter(&target, &probe, 1, timeout)?;
    let (lives, stop, printer) = flow_progress(common, workers, "fault", "calls");
    let writer = a.trace_file.as_deref().map(fault::trace_writer).transpose()?;
    let settings = fault::Settings {
        target: target.clone(),
        timeout,
        calls: a.calls,
        first_call: a.first_call,
        seed,
        max_cuts: a.max_cuts,
        steps: a.steps,
        delays_ms: a.delay_ms.clone(),
        traces: a.traces,
        trace_to: writer.as_ref().map(|(tx, _)| tx.clone()),
        concurrent_callers: a.concurrent_callers,
        upstream: upstream.clone(),
    };
    let run_call: fault::RunCall = match a.path {
        FaultPath::Modern => scenario::fault_modern::run_call,
        _ => fault::legacy_call,
    };
    let started = Instant::now();
    let outcome = fault::run_with(sessions, workers, settings, lives, run_call);
    let elapsed = started.elapsed();
    if let Some((tx, handle)) = writer {
        drop(tx);
        let _ = handle.join();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    let outcome = outcome?;
    // A second execution, were there one, counts when it starts; give a late one time to start.
    std::thread::sleep(Duration::from_millis(200));
    // A new session: the first one sat idle for the whole run, and a run longer than the
    // server's --session-idle-secs (600 s) finds it expired. The counter is process-wide (the
    // stdio fixture's is a file), so any session reads it.
    let after = fault::open_sessions(&target, 1, timeout)?.remove(0);
    let counter_after = client::get_counter(&target, &after, 2, timeout)?;
    let metrics_after = scrape("after")?;
    let mut report = RunReport::new("fault", &common.label, &common.url, config);
    report.measured_s = elapsed.as_secs_f64();
    let completed = outcome.counters.get("completed").copied().unwrap_or(0);
    report.throughput.insert("calls_per_s".into(), completed as f64 / report.measured_s);
    report.latency.push(Series::from_histogram("call: first POST → complete", &outcome.latency));
    report.counters = outcome.counters;
    report.counters.extend(by_owner);
    let calls = a.calls as i64;
    let executions = counter_after as i64 - counter_before as i64;
    report.counters.insert("executions_by_counter".into(), executions);
    report.counters.insert("double_executions".into(), (executions - calls).max(0));
    // A bridged call whose upstream failed before its first progress value may never have
    // reached the upstream: it may be missing from the counter, never counted twice.
    let may_not_have_run =
        report.counters.get("upstream_failed_before_progress").copied().unwrap_or(0);
    report
        .counters
        .insert("executions_missing".into(), (calls - may_not_have_run - executions).max(0));
    // Each execution reports the counter after its own increment: distinct values in range.
    let mut values = outcome.results.clone();
    values.sort_unstable();
    let repeated = values.windows(2).filter(|w| w[0] == w[1]).count();
    let out_of_range =
        values.iter().filter(|v| **v <= counter_before || **v > counter_after).count();
    report.counters.insert("result_values_repeated".into(), repeated as i64);
    report.counters.insert("result_values_out_of_range".into(), out_of_range as i64);
    if let (Some(before), Some(after)) = (&metrics_before, &metrics_after) {
        for name in fault::SERVER_COUNTERS {
            let delta = after.get(name).unwrap_or(&0.0) - before.get(name).unwrap_or(&0.0);
            report.counters.insert(format!("server.{name}"), delta as i64);
        }
    }
    let incomplete = calls - completed;
    report.counters.insert("incomplete".into(), incomplete);
    report.values.insert("seed".into(), seed as f64);
    report.values.insert("elapsed_s".into(), elapsed.as_secs_f64());
    for key in [
        "lost",
        "gaps",
        "duplicated",
        "out_of_order",
        "double_executions",
        "executions_missing",
        "incomplete",
        "calls_failed",
        "id_reused",
        "foreign_events",
        "bad_messages",
        "hint_not_held",
        "hint_missing",
        "ran_again",
        "second_priming",
        "timeouts",
        "phantom_owed",
        "result_values_repeated",
        "result_values_out_of_range",
        "results_disagree",
    ] {
        report.counters.entry(key.into()).or_insert(0);
        report.require_zero(key);
    }
    for trace in outcome.notes.iter().chain(&outcome.failed) {
        eprint!("{trace}");
    }
    let get = |k: &str| report.counters.get(k).copied().unwrap_or(0);
    println!(
        "fault: seed={seed} calls={calls} completed={completed} lost={} duplicated={} \
         double_executions={} foreign_events={} incomplete={incomplete} failed_calls={} \
         cuts={} upstream_faults={} upstream_failed={} elapsed={:.1}s {}",
        get("lost") + get("gaps"),
        get("duplicated") + get("out_of_order"),
        get("double_executions") + get("results_disagree"),
        get("foreign_events"),
        get("calls_failed"),
        get("cuts"),
        get("upstream_faults.injected"),
        get("upstream_failed"),
        elapsed.as_secs_f64(),
        if report.ok { "OK" } else { "FAILED" }
    );
    finish(common, report)
}

/// The upstream faults of a bridged path (`None` for the others, or with --upstream-fault-every 0).
fn fault_upstream(
    a: &FaultArgs,
    target: &Target,
    timeout: Duration,
) -> anyhow::Result<Option<Arc<dyn scenario::fault::UpstreamFaults>>> {
    use scenario::fault_bridge::{CutProxy, HttpUpstreamCuts, StdioChildKills};
    let every = a.upstream_fault_every;
    Ok(match a.path {
        FaultPath::Legacy | FaultPath::Modern => None,
        FaultPath::BridgeStdio => {
            (every > 0).then(|| Arc::new(StdioChildKills::new(target.clone(), timeout, every)) as _)
        }
        FaultPath::BridgeHttp => {
            let (Some(listen), Some(to)) = (a.proxy_listen, a.proxy_to) else {
                bail!("--path bridge-http needs --proxy-listen and --proxy-to");
            };
            // The proxy carries every upstream request, faults or not.
            let proxy = CutProxy::start(listen, to)?;
            (every > 0).then(|| Arc::new(HttpUpstreamCuts::new(proxy, every)) as _)
        }
    })
}

fn sessions(a: &SessionsArgs) -> anyhow::Result<RunReport> {
    let common = &a.common;
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let count = common.sessions.unwrap_or(10_000);
    let connections = common.connections.unwrap_or(16).max(1);
    let cap = common.duration.map_or(Duration::from_secs(300), |d| d.0);
    let config = config_json(common, serde_json::json!({"server_pid": a.server_pid}));
    print_config("sessions", &config);
    let pid = match a.server_pid {
        Some(pid) => pid,
        None => procfs::listener_pid(target.addr.port())?,
    };
    let probe = open_sessions(&target, 1, common.timeout.0)?;
    let version = probe[0].version.clone();
    std::thread::sleep(Duration::from_millis(200));
    let rss_before = procfs::rss_bytes(pid)?;
    let remaining = Arc::new(AtomicI64::new(count as i64));
    let win = window(common, cap, Duration::ZERO);
    let result = run_engine(
        common,
        &target,
        connections,
        win,
        |_| scenario::sessions::OpenSessions::new(remaining.clone(), &target, &version),
        ("sessions", "sessions"),
    )?;
    let took = result.last_done.map_or(0.0, |t| t.duration_since(win.0).as_secs_f64());
    std::thread::sleep(Duration::from_secs(1));
    let rss_after = procfs::rss_bytes(pid)?;
    let mut report = RunReport::new("sessions", &common.label, &common.url, config);
    report.measured_s = took;
    report.throughput.insert("sessions_per_s".into(), result.done as f64 / took.max(1e-9));
    report.latency.push(Series::from_histogram("open (initialize + initialized)", &result.hist));
    report.values.insert("sessions_opened".into(), result.done as f64);
    report.values.insert("rss_before_bytes".into(), rss_before as f64);
    report.values.insert("rss_after_bytes".into(), rss_after as f64);
    let per = (rss_after as f64 - rss_before as f64) / (result.done.max(1) as f64);
    report.values.insert("rss_per_session_bytes".into(), per);
    report
        .values
        .insert("rss_gib_per_100k_sessions".into(), per * 100_000.0 / f64::from(1u32 << 30));
    result.errors.into_counters(&mut report.counters);
    finish(common, report)
}

/// `streams`: the calls' shape (steps, delay) from the rate and the window, checked against the
/// demo tool's limits.
fn stream_shape(a: &StreamsArgs, span: Duration) -> anyhow::Result<(u64, u64)> {
    if !(a.events_per_s > 0.0 && a.events_per_s <= 1000.0) {
        bail!("--events-per-s must be in (0, 1000]");
    }
    let delay_ms = (1000.0 / a.events_per_s).round() as u64;
    if delay_ms > 10_000 {
        bail!("--events-per-s below 0.1: the demo tool waits at most 10 s per step");
    }
    let steps = (span.as_secs_f64() * 1000.0 / delay_ms as f64).ceil() as u64;
    if steps > 1000 {
        bail!(
            "{steps} events per stream: the demo tool sends at most 1000 per call; lower \
             --events-per-s or --duration"
        );
    }
    Ok((steps, delay_ms))
}

/// Connections the `streams` sessions are opened over, round-robin: the server's cores each get
/// a share of the sessions (and so of the streams), as clients that each open their own do. Over
/// one connection every session lived on one core, which served all the streams while the
/// other only moved half of the connections to it (issue 43 §2: the hand-off inbox filled).
const STREAMS_SESSION_CONNECTIONS: usize = 32;

fn streams(a: &StreamsArgs) -> anyhow::Result<RunReport> {
    use scenario::streams::{unix_micros_at, LiveStreams, Tally, Watch};
    let common = &a.common;
    let target = Target { bearer: common.bearer_token.clone(), ..target_of(common)? };
    let count = a.streams.max(1);
    let duration = common.duration.map_or(Duration::from_secs(10), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    // Every call runs past the window's end, whenever in the ramp it started.
    let (steps, delay_ms) = stream_shape(a, a.ramp.0 + warmup + duration)?;
    let config = config_json(
        common,
        serde_json::json!({"streams": count, "events_per_s": a.events_per_s, "ramp": a.ramp,
                           "steps": steps, "delay_ms": delay_ms}),
    );
    print_config("streams", &config);
    let pid = match a.server_pid {
        Some(pid) => pid,
        None => procfs::listener_pid(target.addr.port())?,
    };
    let session_count = common.sessions.unwrap_or(count).max(1);
    let started = Instant::now();
    let sessions = client::open_sessions_spread(
        &target,
        session_count,
        STREAMS_SESSION_CONNECTIONS,
        common.timeout.0,
    )?;
    eprintln!(
        "# opened {session_count} session(s) over {STREAMS_SESSION_CONNECTIONS} connections in {:.2}s",
        started.elapsed().as_secs_f64()
    );
    let body = jsonrpc::stamped_slow_counter_body(steps, delay_ms);
    let templates: Vec<PostTemplate> = sessions
        .iter()
        .map(|s| PostTemplate::new(&target, Some(&s.id), &s.version, &body))
        .collect();
    // Fixed rate: the n-th call starts at n / rate, all N within the ramp; then no more work.
    let mut engine_flags = common.clone();
    engine_flags.rate = Some(count as f64 / a.ramp.0.as_secs_f64().max(1e-3));
    engine_flags.pipeline = 1;
    // A call's own length, twice over (a busy machine stretches every sleep), plus --timeout.
    engine_flags.timeout = Dur(Duration::from_millis(2 * steps * delay_ms) + common.timeout.0);
    // Every load thread connects all its streams before the schedule starts (~50 µs each on
    // loopback; a late start would fire the missed part of the ramp at once).
    let start =
        Instant::now() + Duration::from_millis(100) + Duration::from_micros(100) * count as u32;
    let measure_from = start + a.ramp.0 + warmup;
    let end = measure_from + duration;
    let window_us = (unix_micros_at(measure_from), unix_micros_at(end));
    let rss_before = procfs::rss_bytes(pid)?;
    let watch = Watch::start(pid, Duration::from_millis(250));
    let budget = Arc::new(AtomicI64::new(count as i64));
    let (report_to, reports) = std::sync::mpsc::channel();
    let result = run_engine(
        &engine_flags,
        &target,
        count,
        (start, start, end),
        |_| {
            LiveStreams::new(
                templates.clone(),
                steps as u32,
                budget.clone(),
                window_us,
                report_to.clone(),
            )
        },
        ("streams", "streams"),
    );
    let samples = watch.finish();
    let result = result?;
    drop(report_to);
    let mut tally = Tally::default();
    for part in reports.try_iter() {
        tally.merge(&part);
    }
    let mut report = RunReport::new("streams", &common.label, &common.url, config);
    report.measured_s = duration.as_secs_f64();
    report
        .throughput
        .insert("events_per_s".into(), tally.events_in_window as f64 / report.measured_s);
    report
        .latency
        .push(Series::from_histogram("delivery: server emit → client read", &tally.delivery));
    streams_values(&mut report, &samples, rss_before, (measure_from, end), count);
    streams_counters(&mut report, &tally, count, result.errors);
    streams_summary(&report, count, delay_ms, duration);
    finish(common, report)
}

/// The correctness counters of a `streams` run, and which must be 0.
fn streams_counters(
    report: &mut RunReport,
    tally: &scenario::streams::Tally,
    count: usize,
    errors: stats::Errors,
) {
    report.counters.insert("streams_completed".into(), tally.completed);
    report.counters.insert("streams_incomplete".into(), count as i64 - tally.completed);
    for (key, value) in [
        ("lost", tally.lost),
        ("duplicated", tally.duplicated),
        ("out_of_order", tally.out_of_order),
        ("unstamped", tally.unstamped),
        ("stamp_after_read", tally.stamp_after_read),
    ] {
        report.counters.insert(key.into(), value);
    }
    errors.into_counters(&mut report.counters);
    for key in ["lost", "duplicated", "out_of_order", "unstamped", "streams_incomplete"] {
        report.require_zero(key);
    }
}

/// The one-line summary of a `streams` run (scripts/streams.sh greps it).
fn streams_summary(report: &RunReport, count: usize, delay_ms: u64, duration: Duration) {
    let value = |k: &str| report.values.get(k).copied().unwrap_or(f64::NAN);
    let counter = |k: &str| report.counters.get(k).copied().unwrap_or(0);
    let d = &report.latency[0];
    println!(
        "streams: {count} × {:.1} events/s for {:.0}s: delivery p50 {:.0} µs p99 {:.0} µs \
         p99.9 {:.0} µs; server RSS max {:.1} MiB, CPU {:.2} cores; lost={} duplicated={} \
         out_of_order={} {}",
        1000.0 / delay_ms as f64,
        duration.as_secs_f64(),
        d.p50_us,
        d.p99_us,
        d.p999_us,
        value("server_rss_max_bytes") / f64::from(1u32 << 20),
        value("server_cpu_cores"),
        counter("lost"),
        counter("duplicated"),
        counter("out_of_order"),
        if report.ok { "OK" } else { "FAILED" }
    );
}

/// The server's RSS and CPU over the run into `report.values`.
fn streams_values(
    report: &mut RunReport,
    samples: &[scenario::streams::Sample],
    rss_before: u64,
    window: (Instant, Instant),
    count: usize,
) {
    let values = &mut report.values;
    values.insert("streams".into(), count as f64);
    values.insert("server_rss_before_bytes".into(), rss_before as f64);
    if let Some(max) = samples.iter().map(|s| s.rss_bytes).max() {
        values.insert("server_rss_max_bytes".into(), max as f64);
        let per = (max as f64 - rss_before as f64) / count as f64;
        values.insert("server_rss_per_stream_bytes".into(), per);
    }
    if let Some(cores) = scenario::streams::cpu_cores(samples, window) {
        values.insert("server_cpu_cores".into(), cores);
        let events = report.throughput.get("events_per_s").copied().unwrap_or(0.0);
        if events > 0.0 {
            values.insert("server_cpu_us_per_event".into(), cores * 1e6 / events);
        }
    }
}

fn stdio_direct(a: &StdioDirectArgs) -> anyhow::Result<RunReport> {
    let common = &a.common;
    let command: Vec<String> = a.command.split_whitespace().map(str::to_owned).collect();
    if command.is_empty() {
        bail!("--command is empty");
    }
    if common.rate.is_some() || common.connections.is_some_and(|c| c != 1) || common.pipeline != 1 {
        bail!("stdio-direct runs one call at a time: no --rate, --connections or --pipeline");
    }
    let duration = common.duration.map_or(Duration::from_secs(5), |d| d.0);
    let warmup = common.warmup.map_or(Duration::from_secs(1), |d| d.0);
    let config = config_json(
        common,
        serde_json::json!({"command": a.command, "payload_bytes": a.payload_bytes}),
    );
    print_config("echo", &config);
    let (_, measure_from, end) = window(common, duration, warmup);
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let printer = (!common.quiet)
        .then(|| stats::spawn_progress("stdio", "calls", vec![live.clone()], stop.clone()));
    let settings = stdio_direct::Settings {
        command,
        body: jsonrpc::echo_body(&"x".repeat(a.payload_bytes)),
        version: wire::PROTOCOL_VERSION.to_owned(),
        measure_from,
        end,
        requests: common.requests,
        timeout: common.timeout.0,
    };
    let outcome = stdio_direct::run(settings, live);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    let outcome = outcome?;
    eprintln!("# stdio server answered initialize with protocol version {}", outcome.version);
    if let Some(e) = &outcome.first_error {
        eprintln!("# first error: {e}");
    }
    let url = format!("stdio:{}", a.command);
    let mut report = RunReport::new("echo", &common.label, &url, config);
    let mut measured = duration.as_secs_f64();
    if let (Some(_), Some(last)) = (common.requests, outcome.last_done) {
        measured =
            measured.min(last.saturating_duration_since(measure_from).as_secs_f64()).max(1e-9);
    }
    report.measured_s = measured;
    report.throughput.insert("calls_per_s".into(), outcome.done as f64 / measured);
    report.latency.push(Series::from_histogram("echo", &outcome.hist));
    outcome.errors.into_counters(&mut report.counters);
    finish(common, report)
}
