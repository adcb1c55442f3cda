//! The binary's edge: flags → `Config` (`cli`), logging, then `Server::run` with the built-in
//! tool sets the flags name; or, as `tidemark connect URL …`, the client-side bridge
//! (`tidemark::connect`). The only `anyhow` user.

use anyhow::Context;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // A subcommand only by position, so no server flag can be mistaken for it.
    if std::env::args_os().nth(1).is_some_and(|a| a == "connect") {
        return tidemark::connect(std::env::args_os().skip(1)).map_err(anyhow::Error::msg);
    }
    let config = tidemark::Config::from_args()?;
    // --log-format and --log-level: a bad filter is the operator's mistake, said at once.
    tidemark::init_logging(&config).map_err(anyhow::Error::msg)?;
    tidemark::Server::new(config).run().context("tidemark")?;
    Ok(())
}
