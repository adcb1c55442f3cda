//! The binary's edge: flags → `Config` (`cli`), logging, then `Server::run` with the built-in
//! tool sets the flags name. The only `anyhow` user.

use anyhow::Context;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let config = tidemark::Config::from_args()?;
    // --log-format and --log-level: a bad filter is the operator's mistake, said at once.
    tidemark::init_logging(&config).map_err(anyhow::Error::msg)?;
    tidemark::Server::new(config).run().context("tidemark")?;
    Ok(())
}
