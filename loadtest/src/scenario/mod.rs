//! The scenarios of issue 5. Each file owns one: what it sends, what it checks, what it reports.
//! `calls`, `sessions` and `streams` (many live streams at once, issue 43) are
//! `engine::Workload`s (throughput; `modern` is `calls` with stateless requests and a watch on
//! the server); `resume`, `migration` and `fault` (issue 11 §8; `fault_modern` and
//! `fault_bridge` its 2026-07-28 and bridged paths) are step-by-step flows on blocking
//! connections (`client`), one worker thread per connection.

pub mod calls;
pub mod fault;
pub mod fault_bridge;
pub mod fault_modern;
pub mod flow;
pub mod migration;
pub mod modern;
pub mod resume;
pub mod sessions;
pub mod streams;
