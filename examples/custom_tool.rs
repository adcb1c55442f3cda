//! A complete program that embeds tidemark and serves one tool of its own, `reverse`
//! (`{text}` → the text reversed, by Unicode scalar values), with every guarantee tidemark
//! gives its built-in tools: resumable streams, the migration boundary, Idempotency-Key.
//!
//! It takes the `tidemark` binary's flags:
//!
//! ```sh
//! cargo run --release --example custom_tool -- --listen 127.0.0.1:8080
//! ```

use tidemark::{Annotations, CallContext, Config, LocalBoxFuture, Provider, ProviderError};
use tidemark::{ProviderResult, Server, ToolInfo, Value};

/// The provider: stateless, so one instance per core costs nothing.
struct Reverse;

impl Provider for Reverse {
    fn name(&self) -> &str {
        "reverse"
    }

    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
        let schema = tidemark::json!({
            "type": "object",
            "properties": { "text": { "type": "string", "description": "The text to reverse." } },
            "required": ["text"],
        });
        let reverse = ToolInfo::new("reverse", "Returns the text reversed.", schema)
            // Read-only: a client that retries a dropped call may simply run it again.
            .with_annotations(Annotations::read_only());
        Box::pin(async move { Ok(vec![reverse]) })
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        _cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
        Box::pin(async move {
            if name != "reverse" {
                return Err(ProviderError::NotFound(name.to_owned()));
            }
            let Some(text) = arguments.get("text").and_then(Value::as_str) else {
                return Err(ProviderError::InvalidParams("`text` must be a string".into()));
            };
            let reversed: String = text.chars().rev().collect();
            Ok(tidemark::json!({ "content": [{ "type": "text", "text": reversed }] }))
        })
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_args()?;
    Server::new(config).provider(|| Reverse).run()?;
    Ok(())
}
