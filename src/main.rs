//! The binary's edge: flags → `Config` (`cli`), logging, then `Server::run` with the built-in
//! tool sets the flags name. The only `anyhow` user.

use anyhow::Context;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = tidemark::Config::from_args()?;
    tidemark::Server::new(config).run().context("tidemark")?;
    Ok(())
}
