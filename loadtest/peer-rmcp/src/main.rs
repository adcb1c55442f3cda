//! `tidemark-peer-rmcp`: the comparison anchor for `tidemark-load` (issue 5).
//!
//! The same demo tools as tidemark's `--tools demo` (`echo`, `slow_counter`, `get_counter`), with
//! the same semantics, served by the official Rust MCP SDK: rmcp's `StreamableHttpService` with its
//! default configuration (legacy sessions, `LocalSessionManager`, SSE priming events, resumption
//! by `GET` + `Last-Event-ID`), mounted on axum 0.8 / tokio.
//!
//! TCP_NODELAY is set on every accepted socket: without it every SSE answer (written as several
//! small frames) waits ~40 ms on Nagle's algorithm and delayed ACKs, about 370 calls/s on this
//! machine, which would not be a fair anchor.
//!
//! The first stdout line has the same shape as tidemark's, so scripts find the URL the same way:
//! `rmcp-peer listening on http://127.0.0.1:PORT/mcp runtime=tokio threads=N tools=demo`.
//!
//! With `--modern-only` it is instead an upstream of the 2026-07-28 revision for
//! scripts/bridge.sh's `modern` stage: rmcp's stateless mode (`legacy_session_mode` off, the
//! per-request `_meta` and `MCP-Protocol-Version` required), `server/discover` offering only
//! 2026-07-28, and one more tool, `route`, whose two parameters declare `x-mcp-header`: rmcp
//! refuses a call of it whose `Mcp-Param-*` headers are missing or differ from the body (400
//! -32020), so tidemark in front must send them.
//!
//! Never: add behaviour rmcp does not have (no migration boundary, no dedup). The loadtest's
//! `migration` scenario is expected to count double executions against this server: that is
//! what the SDKs do today and what tidemark exists to fix.

use std::borrow::Cow;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use clap::Parser;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    Implementation, ProgressNotificationParam, ProtocolVersion, RequestMetaObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, Peer, RoleServer, ServerHandler};

/// Upper bound on `slow_counter.steps` (as tidemark's demo tools: larger is -32602).
const STEPS_MAX: u64 = 1000;
/// Upper bound on `slow_counter.delay_ms` (as tidemark's demo tools).
const DELAY_MS_MAX: u64 = 10_000;

/// Executions of `slow_counter` since start, across all sessions (the "global counter" whose
/// increments the loadtest's `migration` scenario uses to detect double executions).
static COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Parser, Debug)]
#[command(version, about = "rmcp streamable HTTP server with tidemark's demo tools")]
struct Args {
    /// Address to bind; port 0 picks a free port (printed on the first stdout line).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// tokio worker threads (multi-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Serve only MCP 2026-07-28, statelessly, with the `route` tool besides the demo set.
    #[arg(long)]
    modern_only: bool,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct RouteArgs {
    /// Mirrored into the `Mcp-Param-Region` header (SEP-2243).
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
    /// Mirrored into the `Mcp-Param-Flag` header.
    #[schemars(extend("x-mcp-header" = "Flag"))]
    flag: bool,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// Text to return unchanged.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SlowCounterArgs {
    /// Number of progress steps (one progress notification each when a token was sent).
    #[serde(default = "default_steps")]
    steps: u64,
    /// Pause before each step, in milliseconds (0: no pause).
    #[serde(default)]
    delay_ms: u64,
}

fn default_steps() -> u64 {
    5
}

#[derive(Clone)]
struct Demo {
    /// The demo tools, and `route` when modern-only (what `tool_handler` lists and calls).
    tool_router: ToolRouter<Self>,
    modern_only: bool,
}

#[tool_router(router = header_router)]
impl Demo {
    #[tool(
        description = "Answers its arguments; both are mirrored into Mcp-Param-* headers, which \
                       rmcp checks against the body.",
        annotations(read_only_hint = true)
    )]
    async fn route(&self, Parameters(RouteArgs { region, flag }): Parameters<RouteArgs>) -> String {
        format!("region={region} flag={flag}")
    }
}

#[tool_router]
impl Demo {
    fn new(modern_only: bool) -> Self {
        let tool_router = match modern_only {
            true => Self::tool_router() + Self::header_router(),
            false => Self::tool_router(),
        };
        Self { tool_router, modern_only }
    }

    #[tool(
        description = "Returns its text argument unchanged.",
        annotations(read_only_hint = true, idempotent_hint = true)
    )]
    async fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Increments the server-wide execution counter once, then sends `steps` \
                       progress notifications, waiting `delay_ms` before each, and returns the \
                       counter value after its own increment. Not idempotent: every execution counts.")]
    async fn slow_counter(
        &self,
        Parameters(args): Parameters<SlowCounterArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        if args.steps > STEPS_MAX || args.delay_ms > DELAY_MS_MAX {
            return Err(ErrorData::invalid_params("steps or delay_ms out of range", None));
        }
        let value = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
        let token = meta.get_progress_token();
        for step in 1..=args.steps {
            if args.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(args.delay_ms)).await;
            }
            if let Some(token) = &token {
                let param = ProgressNotificationParam::new(token.clone(), step as f64)
                    .with_total(args.steps as f64);
                // A closed stream is not an error of the tool: rmcp keeps the event for resume.
                let _ = client.notify_progress(param).await;
            }
        }
        Ok(value.to_string())
    }

    #[tool(description = "Returns the global counter as text.", annotations(read_only_hint = true))]
    async fn get_counter(&self) -> String {
        COUNTER.load(Ordering::Relaxed).to_string()
    }
}

// The router of this instance (with `route` when modern-only), not the macro's default
// `Self::tool_router()`.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tidemark-peer-rmcp", env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.modern_only {
            true => Cow::Borrowed(&[ProtocolVersion::V_2026_07_28]),
            false => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.threads > 0, "--threads must be at least 1");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let modern_only = args.modern_only;
    let config = match modern_only {
        true => StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_stateless_protocol_metadata_required(true),
        false => StreamableHttpServerConfig::default(),
    };
    let service = StreamableHttpService::new(
        move || Ok(Demo::new(modern_only)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("local_addr")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "rmcp-peer listening on http://{addr}/mcp runtime=tokio threads={} tools={}",
        args.threads,
        if modern_only { "demo,route era=2026-07-28" } else { "demo" }
    )?;
    stdout.flush()?;
    drop(stdout);
    let listener = listener.tap_io(|tcp| {
        // Best effort: a socket that refuses NODELAY still serves, only slower.
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving")
}
