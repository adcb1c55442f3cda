//! The tasks extension's state (`io.modelcontextprotocol/tasks`, SEP-2663): one core's tasks,
//! each a durable record of a detached `tools/call` — its status, its pending input requests,
//! and its final result or JSON-RPC error — kept for a retention time after creation.
//!
//! Owns: task ids, the per-core `TaskStore` (bounded by a count, a retention time and a byte
//! budget), the status machine (`working` ⇄ `input_required` → `completed` | `failed` |
//! `cancelled`), the `Task` wire objects (`CreateTaskResult`, `DetailedTask`), the cancel signal
//! a running tool observes, and the input requests a running task waits on (`tasks/update`).
//! Called by: the stateless path (`modern`) for `tools/call` (create, then run the tool through
//! `drive`), `tasks/get`, `tasks/update` and `tasks/cancel`.
//! Never: touches sockets or HTTP, decides whether a call becomes a task (the caller does, from
//! the client's per-request capabilities and the tool), or holds a `RefCell` borrow across an
//! `.await`.
//!
//! # Where tasks live: per core, reached by hand-off
//!
//! Connections land on any core (SO_REUSEPORT), so a `tasks/get` may arrive on a core other
//! than the one that created the task. Two designs answer it:
//!
//! - a process-wide store behind a lock: every core reads and writes it; the running tool (a
//!   `!Send` future on its core) must then be reached from other cores for cancellation and
//!   for `tasks/update`'s answers, i.e. cross-thread wakers and `Send` state everywhere;
//! - a store per core, with the owner core written into the task id (as session ids do), and a
//!   request for another core's task handed to that core with the connection (`runtime::handoff`,
//!   the path legacy sessions already take).
//!
//! We take the second. The tool, its task record, its cancel signal and its input slots then
//! live on one thread: `Rc`/`Cell`, no lock, no atomic, local wakes (the crate's rule:
//! `clippy.toml` disallows `std::sync::Mutex`, "cross-core traffic goes through handoff").
//! SEP-2663 §"Routing Headers" makes clients send `Mcp-Name: <taskId>` precisely so a task's
//! requests can be routed to the instance holding it; the owner core is the first four hex
//! digits, so routing needs no lookup. The cost is one hand-off when a poll lands on another
//! core (not a hot path: clients poll at `pollIntervalMs`).
//!
//! # Limits (per core; constants and flags in `config`)
//!
//! | constant | flag | when hit |
//! | --- | --- | --- |
//! | `TASKS_PER_CORE_MAX` | `--max-tasks-per-core` | no new task (`create` is `Full`; the caller runs the call synchronously) |
//! | `TASK_RETENTION_SECS` | `--task-retention-secs` | the task is deleted (a running tool is cancelled); `tasks/*` then get -32602 |
//! | `TASK_BYTES_PER_CORE` | `--task-bytes-per-core` | a result that does not fit fails the task with -32603 instead |
//! | `TASK_INPUT_REQUESTS_MAX` | `--max-task-input-requests` | the tool's next input request fails |
//!
//! `TASK_POLL_INTERVAL_MS` (`--task-poll-interval-ms`) is a hint, not a bound. The retention is
//! the `ttlMs` we announce: SEP-2663 lets a server drop a task once `createdAt + ttlMs` passed
//! and forbids it earlier, so a task is never evicted to make room (the count bound refuses
//! new tasks instead). Tasks live in memory: a restart (or the drain's end) loses them.
//!
//! # Files (imports run down this list only; no two files import each other)
//!
//! - `store.rs`: `TaskStore`, the live tasks of one core: creation against the count bound,
//!   expiry at the end of the retention, and the `tasks/get|update|cancel` operations.
//! - `handle.rs`: `TaskHandle`, the running side of one task (complete, fail, input requests,
//!   the cancel signal), the byte budget it draws on, and `drive`, the runner.
//! - `task.rs`: one task's record and status machine, its wire objects and timestamps (a
//!   failed task's JSON-RPC error object is `wire::error_object`'s).
//! - `id.rs`: `TaskId`, minted, parsed, naming its owner core.
//! - `limits.rs`: `TaskLimits`, read from `Config`.
//! - `error.rs`: `TaskError`.
//! - `extension.rs`: the extension's id, the per-request declaration and the -32021 `data`
//!   (used by none of the above).
//!
//! This file declares them and re-exports what the rest of the crate names
//! (`modern::task_call`, `runtime`, `endpoint`); it holds no code of its own.

mod error;
mod extension;
mod handle;
mod id;
mod limits;
mod store;
mod task;

pub(crate) use error::TaskError;
pub(crate) use extension::{declared, missing_capability_data, EXTENSION_ID};
pub(crate) use handle::{drive, TaskHandle};
pub(crate) use limits::TaskLimits;
pub(crate) use store::TaskStore;
