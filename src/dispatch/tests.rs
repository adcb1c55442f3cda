//! Goal: the registry routes tools by name across providers, caches `tools/list`, refreshes on
//! `tools_changed`, caps completions, and declares only capabilities some provider backs.
//! Method: registries over the built-in providers and small synthetic ones, no I/O.
